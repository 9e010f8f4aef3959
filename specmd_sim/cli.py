"""The ``specmd`` command line: a thin typer layer over the API.

Errors a user can cause print one line ``error: ...`` on stderr and exit with code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from specmd_sim.config import SimConfig, apply_overrides, build_config, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.units import format_bytes, format_seconds

app = typer.Typer(
    name="specmd",
    help="Simulate MoE inference with expert offloading: caches, prefetchers, hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
hardware_app = typer.Typer(help="Hardware profiles.", no_args_is_help=True)
models_app = typer.Typer(help="The model catalog.", no_args_is_help=True)
trace_app = typer.Typer(help="Routing traces.", no_args_is_help=True)
policies_app = typer.Typer(help="Registered policies and predictors.", no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")
app.add_typer(trace_app, name="trace")
app.add_typer(policies_app, name="policies")

# --- shared run options --------------------------------------------------------------------

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="YAML config file (fields of SimConfig).")
]
ModelOpt = Annotated[str | None, typer.Option(help="Catalog model id (default: the trace's).")]
HardwareOpt = Annotated[str | None, typer.Option(help="Hardware profile id or YAML path.")]
TraceOpt = Annotated[str | None, typer.Option(help="Trace .npz path or bundled trace name.")]
CacheOpt = Annotated[
    str | None, typer.Option(help="Cache capacity: '5%', expert slots (51) or bytes ('0.6GiB').")
]
EvictionOpt = Annotated[str | None, typer.Option(help="Eviction policy kind.")]
PrefetchOpt = Annotated[str | None, typer.Option(help="Prefetch policy kind.")]
SeedOpt = Annotated[int | None, typer.Option(help="Seed of the run's random generator.")]
OutOpt = Annotated[
    Path | None, typer.Option(help="Run folder (default: runs/<engine>-<config hash>).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override any config field: KEY.PATH=VALUE (repeatable)."),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the metrics as one JSON object on stdout.")
]


def _load_config(
    config: Path | None,
    model: str | None,
    hardware: str | None,
    trace: str | None,
    cache: str | None,
    eviction: str | None,
    prefetch: str | None,
    seed: int | None,
    overrides: list[str] | None,
) -> SimConfig:
    data: dict[str, Any] = {}
    if config is not None:
        from specmd_sim.hardware.loader import load_yaml

        loaded = load_yaml(config, "config")
        if loaded is not None and not isinstance(loaded, dict):
            raise SpecmdError(f"config {config}: expected a mapping, got {type(loaded).__name__}")
        data = loaded or {}
    flags = {"model": model, "hardware": hardware, "trace": trace, "seed": seed}
    data.update({k: v for k, v in flags.items() if v is not None})
    if cache is not None:
        data.setdefault("cache", {})["capacity"] = cache
    if eviction is not None:
        data["eviction"] = {"kind": eviction}
    if prefetch is not None:
        data["prefetch"] = {"kind": prefetch}
    source = str(config) if config else "config"
    if overrides:  # on top of the full config, defaults included, so any field can be set
        data = apply_overrides(config_to_dict(build_config(data, source)), overrides)
    return build_config(data, source)


def _console(json_mode: bool = False) -> Console:
    """Where human output goes: stderr in --json mode; wide tables when not on a terminal."""
    stream = sys.stderr if json_mode else sys.stdout
    return Console(stderr=json_mode, highlight=False, width=None if stream.isatty() else 160)


def _progress_bar(console: Console) -> Progress:
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

    console = _console(json_mode)
    scenario = build_scenario(cfg)
    with _progress_bar(console) as bar:
        task = bar.add_task(engine, total=scenario.passes.num_passes)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done)

        result = (simulate if engine == "simulate" else replay)(scenario, progress)
    run_dir = out or default_run_dir(engine, cfg)
    files = write_run(run_dir, result)
    _summary(console, result)
    console.print(f"run folder: {run_dir}  ({', '.join(p.name for p in files.values())})")
    if json_mode:
        sys.stdout.write(json.dumps(result.to_dict()["metrics"], sort_keys=True) + "\n")


def _summary(console: Console, result: Any) -> None:
    m, inputs = result.metrics, result.inputs
    cfg = result.config
    table = Table(
        title=(
            f"{result.engine}: {inputs['model']} on {inputs['hardware']}, cache "
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
    if result.hardware_grade:
        rows.append(("lowest hardware grade used", result.hardware_grade))
    for label, value in rows:
        table.add_row(label, value)
    console.print(table)


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
        cfg = _load_config(config, model, hardware, trace, cache, eviction, prefetch, seed, set_)
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


# --- hardware ------------------------------------------------------------------------------


@hardware_app.command("list")
def hardware_list() -> None:
    """List the bundled profiles."""
    from specmd_sim.hardware import list_profiles, load_profile

    table = Table("id", "GPU", "HBM", "HBM bw", "BF16 dense", "host link")
    for pid in list_profiles():
        p = load_profile(pid)
        gpu = p.gpus[0]
        link = next((lk for lk in p.links if gpu.id in (lk.a, lk.b)), None)
        table.add_row(
            pid,
            gpu.name,
            format_bytes(gpu.hbm_bytes.value),
            f"{gpu.hbm_bandwidth_bytes_per_s.value / 1e12:.2f} TB/s",
            f"{gpu.dense_bf16_flops.value / 1e12:.0f} TFLOP/s",
            f"{link.kind} {link.bandwidth_bytes_per_s.value / 1e9:.0f} GB/s" if link else "-",
        )
    _console().print(table)


@hardware_app.command("show")
def hardware_show(
    profile: Annotated[str, typer.Argument(help="Profile id or YAML path.")],
    json_: JsonOpt = False,
) -> None:
    """Show every number of a profile with its source and grade."""
    from specmd_sim.hardware import load_profile, lowest_grade

    p = load_profile(profile)
    if json_:
        typer.echo(json.dumps(p.model_dump(mode="json"), indent=2))
        return
    table = Table("field", "value", "grade", "source", title=f"{p.id}: {p.name}")
    quantities = list(p.quantities())
    for name, q in quantities:
        table.add_row(name, f"{q.value:.4g}", q.grade, q.source)
    console = _console()
    console.print(table)
    console.print(f"lowest grade: {lowest_grade([q for _, q in quantities])}")


@hardware_app.command("validate")
def hardware_validate(file: Annotated[Path, typer.Argument(help="Profile YAML file.")]) -> None:
    """Validate a profile file (exit 2 with a one-line error if invalid)."""
    from specmd_sim.hardware import build_graph, find_path, load_profile

    p = load_profile(file)
    graph = build_graph(p)
    for gpu in p.gpus:
        find_path(p, graph, p.hosts[0].id, gpu.id)
    typer.echo(f"{file}: valid profile {p.id!r} ({len(p.nodes)} nodes, {len(p.links)} links)")


# --- models --------------------------------------------------------------------------------


@models_app.command("list")
def models_list(json_: JsonOpt = False) -> None:
    """List the catalog with derived expert sizes."""
    from specmd_sim.models import list_models

    models = list_models()
    if json_:
        typer.echo(json.dumps([m.model_dump() | m.summary() for m in models], indent=2))
        return
    table = Table("id", "layers", "experts", "top-k", "dtype", "expert", "all routed", "5% slots")
    for m in models:
        table.add_row(
            m.id, str(m.moe_layers), str(m.num_experts), str(m.top_k), m.expert_dtype,
            format_bytes(m.expert_bytes), format_bytes(m.routed_bytes),
            str(int(0.05 * m.routed_bytes) // m.expert_bytes),
        )  # fmt: skip
    _console().print(table)


@models_app.command("show")
def models_show(
    model_id: Annotated[str, typer.Argument(help="Catalog id.")], json_: JsonOpt = False
) -> None:
    """Show a model's dimensions and derived bytes and FLOPs."""
    from specmd_sim.models import load_model

    m = load_model(model_id)
    data = m.model_dump() | m.summary()
    if json_:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table("field", "value", title=m.name)
    for key, value in data.items():
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    _console().print(table)


# --- traces --------------------------------------------------------------------------------


@trace_app.command("generate")
def trace_generate(
    out: Annotated[Path, typer.Option(help="Output .npz path.")],
    preset: Annotated[str, typer.Option(help="Generator preset (olmoe, mixtral, ...).")] = "olmoe",
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    set_: SetOpt = None,
) -> None:
    """Generate a seeded synthetic trace; --set overrides generator knobs (e.g. repeat_prob=0.3)."""
    from pydantic import ValidationError

    from specmd_sim.errors import from_validation_error
    from specmd_sim.traces import PRESETS, SyntheticParams, generate_trace, save_trace

    if preset not in PRESETS:
        raise SpecmdError(f"--preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
    data = apply_overrides(PRESETS[preset].model_dump(), set_ or [])
    try:
        params = SyntheticParams.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error("generator", exc) from None
    trace = generate_trace(params, seed)
    save_trace(trace, out)
    typer.echo(
        f"wrote {out}: {trace.num_tokens} tokens x {trace.num_layers} layers x top-{trace.top_k} "
        f"of {trace.num_experts} experts ({trace.model})"
    )


@trace_app.command("info")
def trace_info(
    trace: Annotated[str, typer.Argument(help="Trace .npz path or bundled name.")],
    json_: JsonOpt = False,
) -> None:
    """Shape, requests and routing statistics of a trace."""
    import numpy as np

    from specmd_sim.traces import load_trace
    from specmd_sim.traces.stats import popularity_skew, repeat_share

    t = load_trace(trace)
    info = {
        "model": t.model,
        "tokens": t.num_tokens,
        "layers": t.num_layers,
        "experts": t.num_experts,
        "top_k": t.top_k,
        "requests": int(np.unique(t.request).size),
        "prefill_tokens": int((t.phase == 0).sum()),
        "decode_tokens": int((t.phase == 1).sum()),
        "has_gates": t.gates is not None,
        "pred_lookahead": t.lookahead,
        "popularity_skew": popularity_skew(t.experts, t.num_experts),
        "repeat_share": repeat_share(t.experts, t.request),
    }
    if json_:
        typer.echo(json.dumps(info, indent=2))
        return
    table = Table("field", "value", title=str(trace))
    for key, value in info.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    _console().print(table)


# --- policies ------------------------------------------------------------------------------


@policies_app.command("list")
def policies_list(json_: JsonOpt = False) -> None:
    """Every registered eviction policy, prefetch policy and predictor."""
    from specmd_sim.policies import EVICTION, PREDICTORS, PREFETCH

    rows = [
        {"family": reg.family, "kind": cls.kind, "description": cls.description,
         "source": cls.source}
        for reg in (EVICTION, PREFETCH, PREDICTORS)
        for cls in reg.entries()
    ]  # fmt: skip
    if json_:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("family", "kind", "description", "source")
    for row in rows:
        table.add_row(*row.values())
    _console().print(table)


def main() -> None:
    """Entry point: run the app, turning user errors into one line and exit code 2."""
    try:
        app()
    except SpecmdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
