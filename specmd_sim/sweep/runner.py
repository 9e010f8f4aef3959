"""Run a sweep: expand the spec, skip what is done, run the rest, store each row at once.

A row is ``result_row(result.json)`` (the layout ``specmd compare`` reads) plus the bookkeeping
columns ``point_index``, ``point_id`` (``<engine>-<config hash>``), ``status`` (``ok`` or
``error``), ``error`` (the message) and ``axis.<name>`` for each axis. A failed point's row
has its config columns and no metrics.

Without ``resume`` the output folder must be new or empty; with it, the folder must have been
made by the same spec (the same points), and the points whose row exists are skipped
(``retry_errors`` runs the failed ones again). A lock in ``_meta/`` keeps two sweeps from
writing to one folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from specmd_sim.atomic import write_text
from specmd_sim.config import config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.sweep.executors import Outcome, Task, make_executor
from specmd_sim.sweep.grid import Point, axis_label, expand
from specmd_sim.sweep.spec import SweepSpec, load_spec
from specmd_sim.sweep.store import META_DIR, ResultStore, Row, table_columns

POINTS_FORMAT = "specmd-sweep-points"


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


def point_row(point: Point, engine: str, outcome: Outcome) -> Row:
    """The table row of a finished point."""
    row: Row = {
        "point_index": point.index,
        "point_id": point.point_id,
        "status": outcome["status"],
        "error": outcome["error"],
    }
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


def run_sweep(
    spec: SweepSpec | Path | str,
    out: Path | str,
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[PointDone], None] | None = None,
) -> SweepSummary:
    """Run a sweep into the folder ``out``; see the module docstring.

    ``on_start(to_run, skipped)`` is called once before the first point runs and
    ``on_point`` after each finished point (both in this process).
    """
    started = time.monotonic()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    out = Path(out)
    points = expand(spec)
    runner = make_executor(executor, workers, address)
    lock = _prepare_folder(out, spec, points, resume)
    try:
        axes = {name: [axis_label(p.axes[name]) for p in points] for name in spec.axis_names()}
        columns = table_columns(spec.engine, axes, [p.config for p in points])
        store = ResultStore(out, columns, len(points))
        store.scan()
        done = store.done_ids()
        if retry_errors:
            done -= store.error_ids()
        todo = [p for p in points if p.point_id not in done]
        if on_start is not None:
            on_start(len(todo), len(points) - len(todo))
        finished = 0

        def record(task: Task, outcome: Outcome) -> None:
            nonlocal finished
            point = points[task.index]
            row = point_row(point, spec.engine, outcome)
            store.append(row)
            finished += 1
            if on_point is not None:
                on_point(PointDone(point, row, finished, len(todo)))

        tasks = [Task(p.index, spec.engine, config_to_dict(p.config)) for p in todo]
        runner.run(tasks, record)
        statuses = [row["status"] for row in store.read_rows()]
    finally:
        lock.close()
    return SweepSummary(
        out=out,
        points=len(points),
        skipped=len(points) - len(todo),
        ran=len(todo),
        ok=statuses.count("ok"),
        errors=len(statuses) - statuses.count("ok"),
        seconds=time.monotonic() - started,
    )


def _prepare_folder(out: Path, spec: SweepSpec, points: list[Point], resume: bool) -> IO[Any]:
    """Check the folder may be used, take its lock, and write the spec and the point list."""
    if out.exists() and not out.is_dir():
        raise SpecmdError(f"--out {out}: expected a folder, got a file")
    meta = out / META_DIR
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if entries:
        if not resume:
            raise SpecmdError(
                f"--out {out}: expected a new or empty folder, got one with {len(entries)} "
                "entries (add --resume to continue the sweep in it)"
            )
        _check_same_points(out, points)
    meta.mkdir(parents=True, exist_ok=True)
    lock = _lock(meta / "lock", out)
    listing = {
        "format": POINTS_FORMAT,
        "version": 1,
        "engine": spec.engine,
        "points": [
            {"index": p.index, "point_id": p.point_id, "key": p.key,
             "axes": {name: axis_label(v) for name, v in p.axes.items()}}
            for p in points
        ],
    }  # fmt: skip
    _write_text(meta / "points.json", json.dumps(listing, indent=1, sort_keys=True) + "\n")
    spec_text = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
    _write_text(meta / "spec.yaml", spec_text)
    return lock


def _check_same_points(out: Path, points: list[Point]) -> None:
    listing = out / META_DIR / "points.json"
    try:
        stored = json.loads(listing.read_text())
        old = [entry["point_id"] for entry in stored["points"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise SpecmdError(
            f"--out {out}: expected a sweep folder to resume (with {META_DIR}/points.json), "
            "got a folder without a readable one"
        ) from None
    new = [p.point_id for p in points]
    if old != new:
        differ = len(set(old) ^ set(new)) or sum(a != b for a, b in zip(old, new, strict=False))
        raise SpecmdError(
            f"--out {out}: expected the spec that made this sweep folder, got one whose points "
            f"differ ({len(new)} points now, {len(old)} before, {differ} differ); "
            "use a new --out folder"
        )


def _lock(path: Path, out: Path) -> IO[Any]:
    """An exclusive lock held until the returned handle is closed (also on kill -9)."""
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


def _write_text(path: Path, text: str) -> None:
    write_text(path, text)
