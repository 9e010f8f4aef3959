"""``specmd run``, ``specmd replay`` and ``specmd config``."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from specmd_sim import gz
from specmd_sim.cli.app import app
from specmd_sim.cli.common import (
    CacheOpt,
    ConfigOpt,
    EvictionOpt,
    HardwareOpt,
    JsonOpt,
    ModelOpt,
    OutOpt,
    PluginOpt,
    PrefetchOpt,
    RuntimeOpt,
    SeedOpt,
    SetOpt,
    TraceOpt,
    console,
    load_config,
)
from specmd_sim.cli.profile import RunProfile
from specmd_sim.cli.signals import terminated_as_interrupted
from specmd_sim.units import format_bytes

if TYPE_CHECKING:
    from specmd_sim.config import SimConfig
    from specmd_sim.engine.common import Progress as EngineProgress
    from specmd_sim.metrics import RunResult
    from specmd_sim.runs import Extra
    from specmd_sim.scenario import Scenario


@contextlib.contextmanager
def _progress_bar(engine: str, total: int, unit: str) -> Iterator[EngineProgress | None]:
    """A transient progress bar of the run's ``total`` passes (``unit``; tokens where the
    passes are formed during the run) on stderr, shown only on a terminal (elsewhere there is
    none, and rich's live display is not imported)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} " + unit),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(engine, total=total)
        yield lambda done, _total: bar.update(task, completed=done)


@contextlib.contextmanager
def _status(what: str) -> Iterator[None]:
    """A transient spinner saying ``what`` is being done, on stderr, shown only on a terminal
    (as the progress bar is): the run folder of a long run takes seconds to write."""
    if not sys.stderr.isatty():
        yield
        return
    with Console(stderr=True).status(what):
        yield


@contextlib.contextmanager
def _preparing_outputs(bar: EngineProgress | None, spans: bool) -> Iterator[EngineProgress | None]:
    """``bar``, or, where the run records ``spans`` (its folder has writers to load), the
    engine's progress callback (passing each report on to ``bar``, where there is one) that at
    the engine's first report (the engine's own compiled code loaded by then, numba's compiler
    free) starts a thread loading the run folder's compiled writers (:func:`_prepare_outputs`,
    at the switch interval :data:`PREPARING_SWITCH_S`) on the core the compiled engine leaves
    idle; the thread is joined when the engine is done, before the folder is written."""
    if not spans:
        yield bar
        return
    thread = threading.Thread(target=_prepare_outputs, name="prepare-outputs", daemon=True)

    def report(done: int, total: int) -> None:
        if thread.ident is None:
            with contextlib.suppress(RuntimeError):  # (no thread to be had: loaded when used)
                thread.start()
        if bar is not None:
            bar(done, total)

    try:
        yield report
    finally:
        if thread.ident is not None:
            thread.join()


PREPARING_SWITCH_S = 0.001
"""The interpreter's switch interval while the run folder's writers load beside the engine
(Python's default: 5 ms). The engine's loop is Python around short compiled calls that release
the GIL; at each return it waits for the loading thread to give the GIL back, up to an
interval. At 4,000 tokens (2 cores, 2026-12-07, medians of 12 pairs of ``specmd run``): with
the loading at 1 ms the engine takes 0.012 s longer and the run folder 0.065 s less, the whole
process 0.057 s less; at the default 5 ms the engine lost about what the folder gained."""


def _prepare_outputs() -> None:
    """Load the machine code of the run folder's compiled writers (the trace's and the page's)
    from numba's cache (:func:`specmd_sim.engine.jit.load_cached`): what the folder's first
    write in a process would otherwise load, ~0.1 s of CPU and ~0.08 s of its wall time at
    4,000 tokens (2 cores, 2026-12-07); at :data:`PREPARING_SWITCH_S`, then the switch
    interval as it was."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(PREPARING_SWITCH_S)
    try:
        from specmd_sim import perfetto
        from specmd_sim.engine import jit
        from specmd_sim.report import lod

        jit.load_cached(perfetto, lod)
    except Exception:  # (only a head start: what fails here fails, or loads, when first used)
        pass
    finally:
        if sys.getswitchinterval() == PREPARING_SWITCH_S:  # (unless changed since: kept)
            sys.setswitchinterval(before)


def _execute(
    engine: str, cfg: SimConfig, out: Path | None, json_mode: bool, profile: bool = False
) -> None:
    """Run ``engine`` and write its run folder; a SIGTERM stops it as Ctrl-C does (its
    temporary files removed, an earlier folder at ``out`` kept: :mod:`specmd_sim.cli.signals`)."""
    with terminated_as_interrupted():
        _run_and_write(engine, cfg, out, json_mode, profile)


def _run_and_write(
    engine: str, cfg: SimConfig, out: Path | None, json_mode: bool, profile: bool
) -> None:
    from specmd_sim.runs import check_run_target, default_run_dir, trace_left_out, write_run
    from specmd_sim.scenario import build_scenario
    from specmd_sim.scenario.schedule import is_online

    # (the call both engines take below: a built scenario and the progress callback)
    run_engine: Callable[[Scenario, EngineProgress | None], RunResult]
    if engine == "simulate":  # only the engine that runs (a replay imports no SimPy)
        from specmd_sim import simulate as run_engine
    else:
        from specmd_sim import replay as run_engine

    out_console = console(json_mode)
    run_dir = out or default_run_dir(engine, cfg)
    check_run_target(run_dir)
    prof = RunProfile()
    with prof.phase("inputs (trace, passes, placement, checks)"):
        scenario = build_scenario(cfg)
    gc.freeze()  # the set-up's objects stay to the end: the run's collections skip them
    gc.enable()
    total, unit = scenario.num_passes, "passes"
    if engine == "simulate" and is_online(cfg):  # (the passes are formed as the run goes)
        total, unit = sum(int(p.rows.size) for p, _ in scenario.shards), "tokens"
    spans = engine == "simulate" and cfg.timing.record_spans  # (a replay's folder has none)
    with _progress_bar(engine, total, unit) as bar, _preparing_outputs(bar, spans) as progress:

        def go() -> Any:
            return run_engine(scenario, progress)

        result = prof.profiled("engine", go) if profile else go()
    timeline = None if result.spans is None else _timeline_writer(result, run_dir, prof)
    started = time.perf_counter()
    with _status(f"writing the run folder {run_dir}"):
        files = write_run(run_dir, result, timeline)
    page = sum(seconds for name, seconds in prof.phases if name == TIMELINE_PHASE)
    prof.add(FOLDER_PHASE, time.perf_counter() - started - page)
    _summary(out_console, result)
    if profile:  # on stderr: --json keeps stdout for the metrics
        written = None if result.spans is None else gz.compressor()
        prof.print(console(True), result.engine_path, written)
    out_console.print(f"run folder: {run_dir}  ({', '.join(p.name for p in files.values())})")
    if result.spans is not None and "trace" not in files:  # (why: asked only then)
        out_console.print(f"note: no Perfetto trace in the run folder: {trace_left_out(result)}")
    if json_mode:
        sys.stdout.write(json.dumps(result.to_dict()["metrics"], sort_keys=True) + "\n")


TIMELINE_PHASE = "timeline page"
FOLDER_PHASE = "run folder after the page (spans, trace: written beside it)"


def _timeline_writer(result: Any, run_dir: Path, prof: RunProfile) -> Extra:
    """Writes the run's timeline page into the folder being written (``write_run``'s extra)."""

    def write(folder: Path, written: dict[str, Any]) -> dict[str, Path]:
        from specmd_sim.report import RunData, write_timeline
        from specmd_sim.runs import TIMELINE_FILE

        page = folder / TIMELINE_FILE
        with prof.phase(TIMELINE_PHASE):
            write_timeline(RunData(written, result.recording(), run_dir), page)
        return {"timeline": page}

    return write


# the metrics of the summary table, a row each (several joined by " / "), with their label
_SUMMARY_ROWS: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("accesses",), None),
    (("hit_rate",), None),
    (("late_hits",), None),
    (("misses_compulsory", "misses_capacity", "misses_collision"),
     "misses compulsory / capacity / collision"),
    (("belady_reference", "belady_hit_rate", "belady_gap_misses"),
     "offline optimum / its hit rate / misses above it"),
    (("bypassed",), None),
    (("overflowed",), None),
    (("activations_substituted",), None),
    (("activations_cpu",), None),
    (("activations_dropped",), None),
    (("prefetch_issued", "prefetch_used", "prefetch_wasted"), "prefetch issued / used / wasted"),
    (("bytes_demand", "bytes_prefetch"), "bytes demand / prefetch"),
    (("bytes_written_back",), None),
    (("dram_capacity_bytes", "dram_hit_rate"), "DRAM cache / its hit rate"),
    (("dram_misses_compulsory", "dram_misses_capacity", "dram_misses_collision"),
     "DRAM misses compulsory / capacity / collision"),
    (("dram_prefetch_issued", "dram_prefetch_used", "dram_prefetch_wasted"),
     "DRAM prefetch issued / used / wasted"),
    (("bytes_nvme_demand", "bytes_nvme_prefetch"), "bytes read from NVMe demand / prefetch"),
    (("evictions_kv",), None),
    (("ttft_s",), None),
    (("ttft_p50_s", "ttft_p90_s", "ttft_p99_s"), "TTFT p50 / p90 / p99"),
    (("tpot_s",), None),
    (("tpot_p50_s", "tpot_p90_s", "tpot_p99_s"), "TPOT p50 / p90 / p99"),
    (("itl_p50_s", "itl_p90_s", "itl_p99_s"), "inter-token latency p50 / p90 / p99"),
    (("slo_attainment", "slo_requests_met"), "SLO attainment / requests meeting it"),
    (("goodput_rps",), None),
    (("stall_s",), None),
    (("overlap_s",), None),
    (("makespan_s",), None),
    (("ttft_compute_s", "ttft_stall_s", "ttft_other_s"), "TTFT = compute / stall / other"),
    (("tpot_compute_s", "tpot_stall_s", "tpot_other_s"), "TPOT = compute / stall / other"),
    (("throughput_tok_s",), None),
)  # fmt: skip
# rows of mechanisms most runs do not have (memory parity, bypassing, miss handlers)
_IF_NONZERO = {"bytes_written_back", "bypassed", "overflowed", "activations_substituted",
               "activations_cpu", "activations_dropped", "evictions_kv",
               "dram_prefetch_issued"}  # fmt: skip
_SUMMED_OVER_GPUS = {"stall_s", "overlap_s"}  # summed over GPUs, they can exceed the makespan
_GPU_COLUMNS = ("gpu", "requests", "hit_rate", "bytes_fetched", "stall_s", "ttft_s", "tpot_s")


def _summary(out: Console, result: Any) -> None:
    from specmd_sim.cli.notes import run_notes, setup_line
    from specmd_sim.metrics import METRICS, TABLES
    from specmd_sim.policies.registry import plugin_label

    m, inputs = result.metrics, result.inputs
    cfg = result.config
    gpus = inputs.get("gpus", 1)
    table = Table(
        title=(
            f"{result.engine}: {inputs['model']} on {inputs['hardware']}"
            f"{'' if gpus == 1 else f' x{gpus} GPUs'}, cache "
            f"{inputs['capacity_slots']} slots ({format_bytes(inputs['capacity_bytes'])}), "
            f"{plugin_label('eviction', cfg['eviction']['kind'])} + "
            f"{plugin_label('prefetch', cfg['prefetch']['kind'])}"
        ),
        show_header=True,
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for names, label in _SUMMARY_ROWS:
        if all(m.get(name) is not None for name in names):
            if names[0] in _IF_NONZERO and not m[names[0]]:
                continue
            values = " / ".join(METRICS[name].format(m[name]) for name in names)
            label = label or METRICS[names[0]].label
            if gpus > 1 and names[0] in _SUMMED_OVER_GPUS:
                label += f" (sum over {gpus} GPUs)"
            table.add_row(label, values)
    if result.hardware_grade:
        table.add_row("lowest hardware grade used", result.hardware_grade)
    out.print(setup_line(cfg, inputs), highlight=False)
    out.print(table)
    out.print(f"engine path: {result.engine_path}", highlight=False)
    if result.spans is not None:  # (a run that wrote a trace)
        compressor, why_not = gz.compressor()
        if why_not is not None:
            out.print(f"trace compressed by {compressor}: {why_not}", highlight=False, markup=False)
    for section in ("hardware", "runtime"):
        changed = cfg.get(f"{section}_set") or {}
        if changed:
            what = ", ".join(f"{path}={value}" for path, value in changed.items())
            out.print(f"what-if: {section} {cfg[section]} with {what} (grade D)", highlight=False)
    for note in run_notes(cfg, inputs, m):
        out.print(note, highlight=False)
    if "budget_gpu" in inputs:
        from specmd_sim.scenario.budget import MemoryBudget

        line = MemoryBudget.from_dict(inputs).describe()
        out.print(f"runtime {cfg['runtime']}; GPU memory: {line}", highlight=False)
    by_gpu = result.per_gpu
    if len(by_gpu.get("gpu", [])) > 1:
        columns = TABLES["per_gpu"].columns
        shown = [columns[c] for c in _GPU_COLUMNS]
        per_gpu = Table(*(c.label for c in shown))
        for i in range(len(by_gpu["gpu"])):
            per_gpu.add_row(*(c.format(by_gpu[c.name][i]) for c in shown))
        out.print(per_gpu)
        idle = by_gpu["requests"].count(0)
        if idle:
            out.print(
                f"note: {idle} of {len(by_gpu['gpu'])} GPUs served no request (the run has "
                f"{sum(by_gpu['requests'])} requests)"
            )


def _engine_command(engine: str, doc: str) -> Any:
    """``specmd run`` and ``specmd replay`` take the same options and differ in the engine."""

    def command(
        config: ConfigOpt = None,
        model: ModelOpt = None,
        hardware: HardwareOpt = None,
        runtime: RuntimeOpt = None,
        trace: TraceOpt = None,
        cache: CacheOpt = None,
        eviction: EvictionOpt = None,
        prefetch: PrefetchOpt = None,
        seed: SeedOpt = None,
        out: OutOpt = None,
        set_: SetOpt = None,
        plugin: PluginOpt = None,
        json_: JsonOpt = False,
        profile: Annotated[
            bool,
            typer.Option(
                "--profile", help="Also print where the wall time went (engine parts, writing)."
            ),
        ] = False,
    ) -> None:
        # The set-up (imports, config, scenario) makes some 100k objects that live to the end
        # and hardly any garbage: the cycle collector, which would walk them again and again, is
        # off until the engine starts (_execute), and from then on they are frozen (0.2-0.3 s).
        enabled, frozen = gc.isenabled(), gc.get_freeze_count()
        gc.disable()
        try:
            cfg = load_config(config, model, hardware, trace, cache, eviction, prefetch, seed,
                              set_, runtime, plugin)  # fmt: skip
            _execute(engine, cfg, out, json_, profile)
        finally:  # as it was (for a caller in this process)
            if not frozen:
                gc.unfreeze()
            if enabled:
                gc.enable()

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

    from specmd_sim.config import SimConfig, config_to_dict

    typer.echo(yaml.safe_dump(config_to_dict(SimConfig()), sort_keys=False), nl=False)
