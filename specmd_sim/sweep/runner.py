"""Run a sweep: expand the spec, skip what is done, run the rest, store each row at once.

A row is ``result_row(result.json)`` (the layout ``specmd compare`` reads) plus the bookkeeping
columns ``point_index``, ``point_id`` (``<engine>-<config hash>``), ``status`` (``ok`` or
``error``), ``error`` (the message) and ``axis.<name>`` for each axis. A failed point's row
has its config columns and no metrics. A spec with a rate ``search`` adds the ``search.*``
columns (:data:`~specmd_sim.sweep.search.SEARCH_COLUMNS`); its row's result is the run at the
rate found.

With ``keep_runs`` each point's worker also writes the point's run folder (of the run that
gives the row) to ``DIR/_runs/<point id>/``, and the row's ``run_dir`` column names it relative
to ``DIR`` (null for a failed point): ``specmd report DIR/_runs/<point id>`` opens it. The
folder is written, whole and atomically, before the row, so a stored ok row has its folder. A
resumed sweep reruns an ok point whose folder is missing or incomplete
(:func:`~specmd_sim.runs.check_run_folder`), which rewrites both; the run is deterministic, so
the row is the same. A sweep is resumed with the ``keep_runs`` and the ``search`` it was made
with (they are kept in ``_meta/points.json``; else one line); without ``keep_runs`` the table
and ``_meta`` are as they always were.

Before any work the grid is counted (more than ``max_points`` is refused) and the output folder
checked (:func:`check_sweep_folder`). Without ``resume`` it must be new or empty; with it, it
must have been made by the same spec (the same points), and the points whose row exists and
reads are skipped (``retry_errors`` runs the failed ones again; a part that does not read is run
again and replaced). A folder that holds anything else is refused either way. A lock in
``_meta/`` keeps two sweeps from writing to one folder.

The grid is streamed twice, one point at a time: once to list the points and find the table's
columns, once to run those not done; only the listing and the points in flight are held.
An interruption (``KeyboardInterrupt``) stops the executor's workers and propagates; every row
stored until then stays, and a rerun with ``resume`` goes on from there.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from specmd_sim.atomic import check_output, make_folder, write_text, writing
from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.policies.registry import SECTIONS, is_offline, load_plugins
from specmd_sim.runs import check_run_folder
from specmd_sim.sweep.executors import Outcome, Task, error_outcome, make_executor
from specmd_sim.sweep.grid import MAX_POINTS, Point, axis_label, check_size, iter_points
from specmd_sim.sweep.search import SEARCH_COLUMNS
from specmd_sim.sweep.smallest import SMALLEST_COLUMNS, SmallestSearch
from specmd_sim.sweep.spec import SweepSpec, load_spec
from specmd_sim.sweep.store import (
    META_DIR,
    Kind,
    ResultStore,
    Row,
    is_part,
    part_files,
    table_columns,
)

POINTS_FORMAT = "specmd-sweep-points"
RUNS_DIR = "_runs"  # the kept run folders (--keep-runs); readers of the table skip "_" names


@dataclass(frozen=True)
class PointDone:
    """Passed to ``on_point`` as each point finishes."""

    point: Point
    row: Row
    done: int  # points finished in this run so far
    total: int  # points to run in this run


@dataclass(frozen=True)
class SweepSummary:
    out: Path
    points: int  # in the spec
    skipped: int  # already in the table before this run
    ran: int  # run now
    ok: int  # rows with status ok in the table
    errors: int  # rows with status error in the table
    seconds: float


def offline_plugins(config: dict[str, Any]) -> str:
    """The point's plug-ins that are given the run's future (bounds, oracles), as
    ``predictor=noisy-oracle``, comma-separated; empty for a point a real system could run."""
    return ",".join(
        f"{section}={section_config['kind']}"
        for section in SECTIONS
        if isinstance(section_config := config.get(section), dict)
        and is_offline(section, str(section_config.get("kind")))
    )


def point_row(point: Point, engine: str, outcome: Outcome, run_dir: str | None = None) -> Row:
    """The table row of a finished point; ``run_dir``: its kept run folder, relative to the
    sweep folder (``--keep-runs``)."""
    row: Row = {
        "point_index": point.index,
        "point_id": point.point_id,
        "status": outcome["status"],
        "error": outcome["error"],
        "offline": offline_plugins(config_to_dict(point.config)),
    }
    if run_dir is not None:
        row["run_dir"] = run_dir
    row.update(outcome.get("search") or {})
    row.update({f"axis.{name}": axis_label(value) for name, value in point.axes.items()})
    result = outcome["result"] or {
        "engine": engine,
        "hardware_grade": None,
        "metrics": {},
        "inputs": {},
        "config": config_to_dict(point.config),
    }
    flat = result_row(result)
    clash = row.keys() & flat.keys()
    if clash:
        raise RuntimeError(f"result columns clash with bookkeeping columns: {sorted(clash)}")
    row.update(flat)
    return row


def _importing_main_in_a_worker() -> bool:
    """Whether ``run_sweep`` is called by the top level of a main script that a process started
    by 'spawn' runs again (as ``__mp_main__``): an unguarded call would start a sweep in every
    worker of the sweep, each failing on the sweep's locked folder."""
    caller = sys._getframe(2)  # (run_sweep's caller)
    return caller.f_code.co_name == "<module>" and caller.f_globals.get("__name__") == "__mp_main__"


def run_sweep(
    spec: SweepSpec | Path | str,
    out: Path | str,
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    keep_runs: bool = False,
    max_points: int = MAX_POINTS,
    plugins: Sequence[str] = (),
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[PointDone], None] | None = None,
) -> SweepSummary:
    """Run a sweep into the folder ``out``; see the module docstring.

    ``keep_runs``: also keep each point's run folder in ``out/_runs/`` (the module docstring).
    ``plugins``: modules of the user's plug-ins that the spec names by import path, imported
    here and in every worker (a spec never imports code itself). ``on_start(to_run,
    skipped)`` is called once before the first point runs and ``on_point`` after each
    finished point (both in this process).
    """
    if _importing_main_in_a_worker():
        raise SpecmdError(
            "run_sweep: called as a sweep worker imports the script that called it (workers "
            "start by 'spawn', which runs the script's top level again): put the call under "
            "if __name__ == '__main__':"
        )
    started = time.monotonic()
    load_plugins(plugins, "plugins")
    source = "sweep spec"
    if not isinstance(spec, SweepSpec):
        source = f"sweep spec {spec}"
        spec = load_spec(spec)
    out = Path(out)
    total = check_size(spec, max_points, source)
    check_sweep_folder(out, resume)
    runner = make_executor(executor, workers, address)
    listing, columns = _survey(spec, source, keep_runs)
    lock = _prepare_folder(out, spec, listing, keep_runs)
    runs = out.resolve() / RUNS_DIR
    search = None if spec.search is None else spec.search.model_dump(mode="json")
    try:
        store = ResultStore(out, columns, total)
        store.scan()
        done = store.done_ids()
        if retry_errors:
            done -= store.error_ids()
        if keep_runs:  # an ok row without its complete run folder is run again
            rows = store.read_rows()
            done -= {r["point_id"] for r in rows
                     if r["status"] == "ok" and not _complete(runs / r["point_id"])}  # fmt: skip
        to_run = sum(entry["point_id"] not in done for entry in listing)
        if on_start is not None:
            on_start(to_run, total - to_run)
        running: dict[int, Point] = {}  # by index: the points handed to the executor
        finished = 0

        def tasks() -> Iterator[Task]:
            for point in iter_points(spec, source):
                if point.point_id not in done:
                    running[point.index] = point
                    run_dir = None
                    if keep_runs:
                        run_dir = str(_clear_incomplete(runs / point.point_id))
                    config = config_to_dict(point.config)
                    yield Task(point.index, spec.engine, config, tuple(plugins), run_dir, search)

        def record(task: Task, outcome: Outcome) -> None:
            nonlocal finished
            point = running.pop(task.index)
            run_dir = None
            if keep_runs and outcome["status"] == "ok":
                outcome, run_dir = _kept(outcome, runs / point.point_id)
            row = point_row(point, spec.engine, outcome, run_dir)
            store.append(row)
            finished += 1
            if on_point is not None:
                on_point(PointDone(point, row, finished, to_run))

        runner.run(tasks(), record)
        statuses = [row["status"] for row in store.read_rows()]
    finally:
        lock.close()
    return SweepSummary(
        out=out,
        points=total,
        skipped=total - to_run,
        ran=to_run,
        ok=statuses.count("ok"),
        errors=len(statuses) - statuses.count("ok"),
        seconds=time.monotonic() - started,
    )


def check_sweep_folder(out: Path, resume: bool) -> None:
    """One line, before any work, unless ``out`` can take the sweep: a writable location that is
    new, empty (of results: ``_meta`` and names that readers skip, starting with ``.`` or ``_``,
    do not count) or, with ``resume``, a sweep folder that holds nothing but result files."""
    check_output(out, "--out", folder=True)
    if not out.is_dir():
        return
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith((".", "_")))
    others = [name for name in names if not ((out / name).is_file() and is_part(out / name))]
    if others:
        listed = ", ".join(repr(name) for name in others[:3]) + (", ..." if others[3:] else "")
        raise SpecmdError(
            f"--out: expected a new folder, an empty one or a sweep folder, got {str(out)!r}, "
            f"which holds other files ({listed})"
        )
    if names and not resume:
        raise SpecmdError(
            f"--out: expected a new or empty folder, got the sweep folder {str(out)!r} with "
            f"{len(names)} result files (add --resume to continue the sweep in it)"
        )


def _complete(run_dir: Path) -> bool:
    try:
        check_run_folder(run_dir)
    except SpecmdError:
        return False
    return True


def _clear_incomplete(run_dir: Path) -> Path:
    """Remove what is at a point's run folder unless it is a complete run folder (changed since
    it was written): the point's worker writes it anew, and refuses a folder of other files."""
    if run_dir.is_dir() and not _complete(run_dir):
        shutil.rmtree(run_dir)
    elif run_dir.exists() and not run_dir.is_dir():
        run_dir.unlink()
    return run_dir


def _kept(outcome: Outcome, run_dir: Path) -> tuple[Outcome, str | None]:
    """A finished point's outcome and its ``run_dir`` cell, once its worker has written its
    run folder: an error if that folder cannot be read here (a worker on another machine)."""
    try:
        check_run_folder(run_dir)
    except SpecmdError as exc:
        return error_outcome(
            f"--keep-runs: expected the point's run folder, as its worker wrote it, got {exc} "
            "(on a Ray cluster --out must be on a filesystem every node shares)"
        ), None
    return outcome, f"{RUNS_DIR}/{run_dir.name}"


def _survey(
    spec: SweepSpec, source: str, keep_runs: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Kind]]:
    """One pass over the grid: the listing of its points (``points.json``) and the columns of
    its table."""
    listing: list[dict[str, Any]] = []

    def configs() -> Iterator[SimConfig]:
        for p in iter_points(spec, source):
            axes = {name: axis_label(v) for name, v in p.axes.items()}
            listing.append({"index": p.index, "point_id": p.point_id, "key": p.key, "axes": axes})
            yield p.config

    # every value of an axis is the value of some point: its column's kind needs no points
    axes = {name: [axis_label(v) for v in values]
            for factor in spec.factors() for name, values in factor.items()}  # fmt: skip
    extra: dict[str, Kind] = {"offline": "string"}
    if keep_runs:
        extra["run_dir"] = "string"
    if isinstance(spec.search, SmallestSearch):
        extra.update(SMALLEST_COLUMNS)
    elif spec.search is not None:
        extra.update(SEARCH_COLUMNS)
    columns = table_columns(spec.engine, axes, configs(), extra)
    return listing, columns


def _prepare_folder(
    out: Path, spec: SweepSpec, listing: list[dict[str, Any]], keep_runs: bool = False
) -> IO[Any]:
    """Check a folder being resumed has the same points (and the same ``keep_runs`` and
    search), take its lock, and write the spec and the point list."""
    meta = out / META_DIR
    options: dict[str, Any] = {}  # only what is set: a plain sweep's points.json is unchanged
    if keep_runs:
        options["keep_runs"] = True
    if spec.search is not None:
        options["search"] = spec.search.model_dump(mode="json")
    if out.is_dir() and part_files(out):  # without results (killed before the first), any spec
        _check_same_points(out, [entry["point_id"] for entry in listing], options)
    make_folder(meta, "--out")
    lock = _lock(meta / "lock", out)
    document = {"format": POINTS_FORMAT, "version": 1, "engine": spec.engine, "points": listing}
    document.update(options)
    write_text(meta / "points.json", json.dumps(document, indent=1, sort_keys=True) + "\n")
    plain = {"search"} if spec.search is None else None  # a plain sweep's spec.yaml as before
    spec_text = yaml.safe_dump(spec.model_dump(mode="json", exclude=plain), sort_keys=False)
    write_text(meta / "spec.yaml", spec_text)
    return lock


def _check_same_points(out: Path, new: list[str], options: dict[str, Any]) -> None:
    listing = out / META_DIR / "points.json"
    try:
        stored = json.loads(listing.read_text())
        old = [entry["point_id"] for entry in stored["points"]]
        before = {key: stored[key] for key in ("keep_runs", "search") if key in stored}
    except (OSError, ValueError, KeyError, TypeError):
        raise SpecmdError(
            f"--out {out}: expected a sweep folder to resume (with {META_DIR}/points.json), "
            "got a folder without a readable one"
        ) from None
    if old != new:
        differ = len(set(old) ^ set(new)) or sum(a != b for a, b in zip(old, new, strict=False))
        raise SpecmdError(
            f"--out {out}: expected the spec that made this sweep folder, got one whose points "
            f"differ ({len(new)} points now, {len(old)} before, {differ} differ); "
            "use a new --out folder"
        )
    if before.get("keep_runs", False) != options.get("keep_runs", False):
        made = "with" if before.get("keep_runs") else "without"
        now = "with" if options.get("keep_runs") else "without"
        raise SpecmdError(
            f"--keep-runs: expected the sweep folder {out} to be resumed {made} --keep-runs, as "
            f"it was made, got {now}"
        )
    if before.get("search") != options.get("search"):
        raise SpecmdError(
            f"--out {out}: expected the spec that made this sweep folder, got one whose search "
            f"differs ({options.get('search')} now, {before.get('search')} before); use a new "
            "--out folder"
        )


def _lock(path: Path, out: Path) -> IO[Any]:
    """An exclusive lock held until the returned handle is closed (also on kill -9)."""
    with writing(path, "--out"):
        handle = open(path, "a+")  # noqa: SIM115 (held for the whole sweep)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise SpecmdError(
            f"--out {out}: expected a folder no other sweep is writing to, got one that is "
            "locked by a running sweep"
        ) from None
    return handle
