"""``specmd run``, ``specmd replay`` and ``specmd config``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from specmd_sim.cli.app import app
from specmd_sim.cli.common import (
    CacheOpt,
    ConfigOpt,
    EvictionOpt,
    HardwareOpt,
    JsonOpt,
    ModelOpt,
    OutOpt,
    PrefetchOpt,
    SeedOpt,
    SetOpt,
    TraceOpt,
    console,
    load_config,
)
from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.units import format_bytes, format_seconds


def _progress_bar() -> Progress:
    """A transient progress bar on stderr, shown only on a terminal."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} passes"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def _execute(engine: str, cfg: SimConfig, out: Path | None, json_mode: bool) -> None:
    from specmd_sim import replay, simulate
    from specmd_sim.runs import default_run_dir, write_run
    from specmd_sim.scenario import build_scenario

    out_console = console(json_mode)
    scenario = build_scenario(cfg)
    with _progress_bar() as bar:
        task = bar.add_task(engine, total=scenario.num_passes)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done)

        result = (simulate if engine == "simulate" else replay)(scenario, progress)
    run_dir = out or default_run_dir(engine, cfg)
    files = write_run(run_dir, result)
    _summary(out_console, result)
    out_console.print(f"run folder: {run_dir}  ({', '.join(p.name for p in files.values())})")
    if json_mode:
        sys.stdout.write(json.dumps(result.to_dict()["metrics"], sort_keys=True) + "\n")


def _summary(out: Console, result: Any) -> None:
    m, inputs = result.metrics, result.inputs
    cfg = result.config
    table = Table(
        title=(
            f"{result.engine}: {inputs['model']} on {inputs['hardware']}"
            f"{'' if inputs.get('gpus', 1) == 1 else ' x' + str(inputs['gpus']) + ' GPUs'}, cache "
            f"{inputs['capacity_slots']} slots ({format_bytes(inputs['capacity_bytes'])}), "
            f"{cfg['eviction']['kind']} + {cfg['prefetch']['kind']}"
        ),
        show_header=True,
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    acc = m["accesses"] or 1
    rows = [
        ("accesses", f"{m['accesses']:,}"),
        ("hit rate", f"{m['hit_rate']:.2%}"),
        ("late hits", f"{m['late_hits']:,} ({m['late_hits'] / acc:.1%})"),
        ("misses compulsory / capacity / collision",
         f"{m['misses_compulsory']:,} / {m['misses_capacity']:,} / {m['misses_collision']:,}"),
        ("prefetch issued / used / wasted",
         f"{m['prefetch_issued']:,} / {m['prefetch_used']:,} / {m['prefetch_wasted']:,}"),
        ("bytes demand / prefetch",
         f"{format_bytes(m['bytes_demand'])} / {format_bytes(m['bytes_prefetch'])}"),
    ]  # fmt: skip
    for key, label in (
        ("ttft_s", "TTFT (mean)"),
        ("tpot_s", "TPOT"),
        ("stall_s", "stall (total)"),
        ("overlap_s", "transfer overlapped with compute"),
        ("makespan_s", "makespan"),
    ):
        if m.get(key) is not None:
            rows.append((label, format_seconds(m[key])))
    for prefix, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
        parts = [m.get(f"{prefix}_{k}_s") for k in ("compute", "stall", "other")]
        if None not in parts:
            rows.append((f"{label} = compute / stall / other",
                         " / ".join(format_seconds(x) for x in parts)))  # fmt: skip
    if m.get("throughput_tok_s") is not None:
        rows.append(("throughput", f"{m['throughput_tok_s']:.1f} tokens/s"))
    if result.hardware_grade:
        rows.append(("lowest hardware grade used", result.hardware_grade))
    for label, value in rows:
        table.add_row(label, value)
    out.print(table)
    gpus = result.per_gpu
    if len(gpus.get("gpu", [])) > 1:
        per_gpu = Table("GPU", "requests", "hit rate", "fetched", "stall", "TTFT", "TPOT")
        for i, gpu in enumerate(gpus["gpu"]):
            hit, ttft, tpot = gpus["hit_rate"][i], gpus["ttft_s"][i], gpus["tpot_s"][i]
            per_gpu.add_row(
                gpu,
                str(gpus["requests"][i]),
                "-" if hit is None else f"{hit:.2%}",
                format_bytes(gpus["bytes_fetched"][i]),
                format_seconds(gpus["stall_s"][i]),
                "-" if ttft is None else format_seconds(ttft),
                "-" if tpot is None else format_seconds(tpot),
            )
        out.print(per_gpu)
        idle = gpus["requests"].count(0)
        if idle:
            out.print(
                f"note: {idle} of {len(gpus['gpu'])} GPUs served no request (the run has "
                f"{sum(gpus['requests'])} requests)"
            )


def _engine_command(engine: str, doc: str) -> Any:
    """``specmd run`` and ``specmd replay`` take the same options and differ in the engine."""

    def command(
        config: ConfigOpt = None,
        model: ModelOpt = None,
        hardware: HardwareOpt = None,
        trace: TraceOpt = None,
        cache: CacheOpt = None,
        eviction: EvictionOpt = None,
        prefetch: PrefetchOpt = None,
        seed: SeedOpt = None,
        out: OutOpt = None,
        set_: SetOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        cfg = load_config(config, model, hardware, trace, cache, eviction, prefetch, seed, set_)
        _execute(engine, cfg, out, json_)

    command.__doc__ = doc
    return command


app.command("run")(
    _engine_command(
        "simulate",
        "Run the timing engine (defaults: OLMoE-shaped trace, h100-pcie, 5% cache, "
        "least-stale + top-k prefetch) and write a run folder.",
    )
)
app.command("replay")(
    _engine_command("replay", "Run the timing-free engine (hit rates and the miss taxonomy only).")
)


@app.command("config")
def show_config() -> None:
    """Print the default config as YAML (a starting point for --config)."""
    import yaml

    typer.echo(yaml.safe_dump(config_to_dict(SimConfig()), sort_keys=False), nl=False)
