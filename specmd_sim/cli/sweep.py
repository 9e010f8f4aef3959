"""``specmd sweep`` (run a sweep spec into a results table) and ``specmd regress`` (check runs
against a baseline).

``specmd sweep`` checks its outputs and the size of the grid before any work, and stops cleanly
on SIGINT or SIGTERM: the workers are stopped, the rows stored so far kept (a rerun with
``--resume`` goes on), "interrupted" printed, and the exit code is 130 or 143 (128 + the
signal). A second signal while it stops exits at once.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specmd_sim.cli.app import app
from specmd_sim.cli.common import PluginOpt, console
from specmd_sim.cli.signals import stop_on_signals
from specmd_sim.errors import SpecmdError


@app.command(
    "sweep",
    help="Run every point of a sweep spec; each finished point is stored at once in --out. "
    "The table reads with pandas.read_parquet(OUT); `specmd compare OUT` plots it. Exit code 1 "
    "when any point of the table failed (its row holds the error), 0 otherwise.",
)
def sweep(
    spec: Annotated[Path, typer.Argument(help="Sweep spec YAML (see docs/sweeps.md).")],
    out: Annotated[Path, typer.Option("--out", help="Sweep folder: the results table.")],
    executor: Annotated[
        str, typer.Option(help="Where points run: local (a process pool) or ray.")
    ] = "local",
    workers: Annotated[
        int | None,
        typer.Option(
            help="Worker processes (local) or CPUs of a local Ray (default: one per core)."
        ),
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local Ray).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the sweep in --out; skip finished points.")
    ] = False,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="With --resume: run failed points again.")
    ] = False,
    keep_runs: Annotated[
        bool,
        typer.Option(
            "--keep-runs",
            help="Also keep each point's run folder in OUT/_runs/<point id>/ (the row's run_dir "
            "column); `specmd report` opens it.",
        ),
    ] = False,
    csv: Annotated[
        Path | None, typer.Option("--csv", help="Also export the table as CSV to this file.")
    ] = None,
    plugin: PluginOpt = None,
    max_points: Annotated[
        int | None,
        typer.Option(
            "--max-points",
            help="Refuse a grid of more points than this (default 10,000): a larger sweep must be "
            "confirmed.",
        ),
    ] = None,
) -> None:
    """Run a sweep spec into a results table (the help text is in the decorator)."""
    from specmd_sim.atomic import check_output
    from specmd_sim.policies.registry import load_plugins
    from specmd_sim.sweep import PointDone, export_csv, load_spec, run_sweep
    from specmd_sim.sweep.grid import MAX_POINTS, count_points
    from specmd_sim.sweep.runner import RUNS_DIR
    from specmd_sim.sweep.search import search_line
    from specmd_sim.sweep.smallest import SmallestSearch, smallest_line
    from specmd_sim.sweep.store import part_files

    if retry_errors and not resume:
        raise SpecmdError("--retry-errors: expected together with --resume, got it alone")
    load_plugins(plugin or (), "--plugin")
    if csv is not None:  # run_sweep checks --out and the size of the grid before any work
        check_output(csv, "--csv", folder=False)
        if out.resolve() in csv.resolve().parents:
            raise SpecmdError(
                f"--csv: expected a file outside the sweep folder, got {str(csv)!r} (the table "
                "is every file of that folder)"
            )
    loaded = load_spec(spec)  # run_sweep loads it again, naming the file in its errors
    from rich.progress import (  # (here: the other commands' processes do not need it)
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    bar = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        disable=not sys.stderr.isatty(),
    )
    task = bar.add_task(spec.stem, total=None)

    def on_start(to_run: int, skipped: int) -> None:
        bar.update(task, total=to_run)
        if skipped:
            err.print(f"resuming: {skipped} points already done, {to_run} to run", markup=False)

    def on_point(done: PointDone) -> None:
        bar.update(task, completed=done.done)
        if done.row["status"] != "ok":
            message = f"point {done.point.index} ({done.point.key}): {done.row['error']}"
            bar.console.print(message, markup=False)
        elif loaded.search is not None:
            search = loaded.search
            line = (smallest_line(done.row, search) if isinstance(search, SmallestSearch)
                    else search_line(done.row))  # fmt: skip
            message = f"point {done.point.index} ({done.point.key}): {line}"
            bar.console.print(message, markup=False)

    limit = MAX_POINTS if max_points is None else max_points
    received: list[int] = []
    try:
        with stop_on_signals(received):
            with bar:
                summary = run_sweep(
                    spec, out, executor=executor, workers=workers, address=address,
                    resume=resume, retry_errors=retry_errors, keep_runs=keep_runs,
                    max_points=limit,
                    plugins=plugin or (), on_start=on_start, on_point=on_point,
                )  # fmt: skip
            typer.echo(
                f"{summary.points} points: {summary.ok} ok, {summary.errors} failed "
                f"({summary.ran} run now, {summary.skipped} done before) in "
                f"{summary.seconds:.1f} s; table: {out} (pandas.read_parquet)"
            )
            if keep_runs:
                typer.echo(f"run folders: {out / RUNS_DIR} (the run_dir column; specmd report)")
            if csv is not None:
                typer.echo(f"csv: {export_csv(out, csv)}")
    except KeyboardInterrupt:
        stored = len(part_files(out)) if out.is_dir() else 0
        total = count_points(loaded)
        err.print(f"stopped: {stored} of {total} points are stored in {out}; run the same "
                  "command with --resume to go on", markup=False)  # fmt: skip
        if received != [signal.SIGTERM]:
            raise  # typer exits 130 and the entry point prints "interrupted"
        err.print("interrupted", markup=False)
        raise typer.Exit(128 + signal.SIGTERM) from None
    if summary.errors:
        raise typer.Exit(1)


@app.command(
    "regress",
    help="Compare metrics with a baseline: a table of what moved; exit 1 on a regression. A "
    "metric regresses when it moves in its bad direction by more than max(abs, rel * "
    "|baseline|); a new metric is checked exactly (counts) or to a relative 1e-9 (a run is "
    "deterministic) unless --tolerance says otherwise. --update writes the present values "
    "(creating the file if needed) and exits 0.",
)
def regress(
    baseline: Annotated[Path, typer.Argument(help="Baseline JSON (see docs/regression.md).")],
    run: Annotated[
        Path | None, typer.Option("--run", help="A run folder (with result.json).")
    ] = None,
    sweep_dir: Annotated[
        Path | None, typer.Option("--sweep", help="A sweep folder (its results table).")
    ] = None,
    key: Annotated[
        str, typer.Option(help="With --run: the name of the run's point in the baseline.")
    ] = "run",
    update: Annotated[
        bool, typer.Option("--update", help="Rewrite the baseline with the present values.")
    ] = False,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="With --update: also check this metric (repeatable)."),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance",
            min=0.0,
            help="With --update: the relative tolerance of the metrics it adds (default: exact "
            "for counts, 1e-9 for the rest).",
        ),
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Show unchanged metrics too.")] = False,
    plugin: PluginOpt = None,
) -> None:
    """Check runs or a sweep against a baseline (the help text is in the decorator)."""
    from specmd_sim.atomic import check_output
    from specmd_sim.policies.registry import load_plugins

    load_plugins(plugin or (), "--plugin")
    from specmd_sim import regress as rg

    if (run is None) == (sweep_dir is None):
        raise SpecmdError("regress: expected exactly one of --run RUN_DIR or --sweep SWEEP_DIR")
    if sweep_dir is not None and key != "run":
        raise SpecmdError("--key: expected only with --run (sweep points are keyed by their axes)")
    if metric and not update:
        raise SpecmdError("--metric: expected together with --update, got it alone")
    if tolerance is not None and not update:
        raise SpecmdError("--tolerance: expected together with --update, got it alone")
    if update:
        check_output(baseline, "baseline", folder=False)
    if run is not None:
        current = [rg.current_from_run(run, key)]
        only: list[str] | None = [key]
    else:
        assert sweep_dir is not None  # exactly one of the two, checked above
        current = rg.current_from_sweep(sweep_dir)
        only = None
    out = console()
    if not baseline.exists():
        if not update:
            raise SpecmdError(
                f"baseline {baseline}: expected a baseline file, got none (create it with --update)"
            )
        new = rg.update_baseline(None, current, metric, rel=tolerance)
        rg.save_baseline(new, baseline)
        out.print(f"wrote {baseline}: {len(new.points)} points x {len(new.metrics)} metrics")
        return
    old = rg.load_baseline(baseline)
    comparison = rg.compare(old, current, only)
    if update:  # (made before the report is shown: a bad --metric is the command's one line)
        new = rg.update_baseline(old, current, metric, replace_all=run is None, rel=tolerance)
    rg.print_report(out, comparison, show_all)
    if update:
        rg.save_baseline(new, baseline)
        out.print(f"updated {baseline}: {len(new.points)} points x {len(new.metrics)} metrics")
        return
    if comparison.regressed:
        raise typer.Exit(1)
