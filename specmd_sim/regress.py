"""Regression checks: compare the metrics of runs with a committed baseline.

A baseline is a JSON file::

    {
      "format": "specmd-baseline", "version": 1,
      "metrics": {                                  # what to check, and how strictly
        "ttft_s":   {"better": "lower",  "rel": 1e-09, "abs": 0.0},
        "misses":   {"better": "lower",  "rel": 0.0,   "abs": 0.0}
      },
      "points": {                                   # the expected values, per point
        "run": {"engine": "simulate", "point_id": "simulate-3fa9c2b1d0e4", "axes": {},
                "values": {"ttft_s": 14.86, "misses": 6039}}
      }
    }

A point is named by its key: ``run`` for a single run (or a name given with ``--key``), and
``name=value,...`` from the axis values for a point of a sweep, so a baseline still matches
after the policy under test changed (which changes the configs' hashes). ``point_id`` is kept
for information: when it differs, the config changed.

A metric *moved* when its value differs from the baseline; it *regressed* when it moved in
its bad direction (``better: lower`` — TTFT, misses; ``higher`` — hit rate; ``both`` — any
direction) by more than its tolerance ``max(abs, rel * |baseline|)`` (pytest.approx's rule);
it *improved* when it moved the good way by more than that. A point of the baseline that is
missing, or failed, or a metric that has no value any more, is a regression too. A new
baseline takes each metric's direction from the metric specification
(:data:`specmd_sim.metrics.METRICS`; a metric with no good direction checks both).

A run is deterministic (same config and seed, same result), so a new baseline checks counts
exactly and every other metric to a relative 1e-9 (rounding across platforms, not noise): any
change of behaviour shows. A looser tolerance is the user's explicit choice
(``--tolerance REL``, ``check(..., tolerance=REL)``, or the file edited by hand).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from specmd_sim.atomic import write_text
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.metrics import METRICS
from specmd_sim.schema_base import InputModel

BASELINE_FORMAT: Final = "specmd-baseline"
RUN_KEY = "run"

Better = Literal["lower", "higher", "both"]

# what a new baseline checks when no metrics are named
DEFAULT_METRICS = ("ttft_s", "tpot_s", "stall_s", "makespan_s", "hit_rate", "misses",
                   "misses_collision")  # fmt: skip
EXACT_UNITS = {"count", "B"}  # whole numbers: compared exactly
DETERMINISTIC_REL = 1e-9  # anything else: equal up to floating-point rounding


class Tolerance(InputModel):
    """How a metric is checked."""

    better: Better = Field(description="Which direction is good: lower, higher or both.")
    rel: float = Field(default=0.0, ge=0, description="Allowed change, relative to |baseline|.")
    abs: float = Field(default=0.0, ge=0, description="Allowed change, in the metric's unit.")

    def allowed(self, baseline: float) -> float:
        return max(self.abs, self.rel * abs(baseline))


class BaselinePoint(InputModel):
    engine: str | None = None
    point_id: str | None = Field(default=None, description="<engine>-<config hash> it came from.")
    axes: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, float | None] = Field(default_factory=dict)


class Baseline(InputModel):
    format: Literal["specmd-baseline"] = BASELINE_FORMAT
    version: Literal[1] = 1
    metrics: dict[str, Tolerance]
    points: dict[str, BaselinePoint] = Field(default_factory=dict)


@dataclass(frozen=True)
class Current:
    """One point's present results."""

    key: str
    values: dict[str, Any]  # metric -> value (the metrics of result.json)
    engine: str | None = None
    point_id: str | None = None
    axes: dict[str, Any] | None = None
    error: str | None = None  # the point failed


Status = Literal["regressed", "improved", "moved", "unchanged", "missing", "error", "new"]
FAILING: frozenset[str] = frozenset({"regressed", "missing", "error"})


@dataclass(frozen=True)
class Verdict:
    key: str
    metric: str  # "*" for a verdict on the whole point
    status: Status
    baseline: float | None = None
    current: float | None = None
    allowed: float | None = None
    note: str = ""

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.current is None:
            return None
        return self.current - self.baseline


@dataclass(frozen=True)
class Comparison:
    verdicts: list[Verdict]
    notes: list[str]  # e.g. which points' configs changed since the baseline

    @property
    def regressed(self) -> bool:
        return any(v.status in FAILING for v in self.verdicts)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.verdicts:
            out[v.status] = out.get(v.status, 0) + 1
        return out


# --- baselines on disk -----------------------------------------------------------------------


def load_baseline(path: Path | str) -> Baseline:
    from specmd_sim.runs import read_json

    path = Path(path)
    data = read_json(path, f"baseline {path}")
    try:
        return Baseline.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(f"baseline {path}", exc) from None


def save_baseline(baseline: Baseline, path: Path | str) -> None:
    """Write sorted, indented JSON (stable diffs), atomically."""
    text = json.dumps(baseline.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    write_text(Path(path), text, "baseline")


# --- present results -------------------------------------------------------------------------


def current_from_result(
    result: dict[str, Any], key: str = RUN_KEY, source: str = "result"
) -> Current:
    """A ``result.json`` mapping (or ``RunResult.to_dict()``) as one point; ``source`` names it
    in errors. Its config names the point (its hash, as a sweep names points): a plug-in it
    names by import path is never imported here, so a result naming one whose module is not
    loaded (``--plugin``) is refused; a config this version no longer accepts gives no id
    (the metrics are still compared)."""
    from specmd_sim.config import build_config
    from specmd_sim.policies.registry import UnloadedPlugin
    from specmd_sim.runs import config_hash

    engine = result["engine"]
    try:
        point_id = f"{engine}-{config_hash(build_config(result['config'], f'{source}: config'))}"
    except UnloadedPlugin:
        raise
    except SpecmdError:  # an older config: the point has no id
        point_id = None
    return Current(key, dict(result["metrics"]), engine, point_id, {})


def current_from_run(run_dir: Path | str, key: str = RUN_KEY) -> Current:
    """The point of a complete run folder (:func:`specmd_sim.runs.read_result`)."""
    from specmd_sim.runs import read_result

    run_dir = Path(run_dir)
    if not (run_dir / "result.json").is_file():
        raise SpecmdError(f"--run {run_dir}: expected a run folder with result.json, got none")
    return current_from_result(read_result(run_dir), key, str(run_dir / "result.json"))


def current_from_sweep(sweep_dir: Path | str) -> list[Current]:
    """The points of a sweep folder, keyed by their axis values."""
    from specmd_sim.sweep.grid import point_key
    from specmd_sim.sweep.store import read_rows

    out: list[Current] = []
    for row in read_rows(sweep_dir):
        axes = {k.removeprefix("axis."): v for k, v in row.items() if k.startswith("axis.")}
        values = {k: v for k, v in row.items() if k in METRICS and v is not None}
        error = None if row["status"] == "ok" else (row["error"] or "failed")
        out.append(Current(point_key(axes), values, row["engine"], row["point_id"], axes, error))
    return out


# --- comparing -------------------------------------------------------------------------------


def compare(
    baseline: Baseline, current: list[Current], only: list[str] | None = None
) -> Comparison:
    """Check every baseline point (or those keyed in ``only``) against the present results."""
    by_key = {c.key: c for c in current}
    keys = list(baseline.points) if only is None else [k for k in only if k in baseline.points]
    verdicts: list[Verdict] = []
    notes: list[str] = []
    for key in sorted(keys):
        expected = baseline.points[key]
        now = by_key.get(key)
        if now is None:
            verdicts.append(Verdict(key, "*", "missing", note="no such point in the results"))
            continue
        if now.error is not None:
            verdicts.append(Verdict(key, "*", "error", note=now.error))
            continue
        if expected.point_id and now.point_id and expected.point_id != now.point_id:
            notes.append(f"{key}: config changed ({expected.point_id} -> {now.point_id})")
        for metric, tolerance in sorted(baseline.metrics.items()):
            if metric not in expected.values:
                continue
            value = now.values.get(metric)
            verdicts.append(_check(key, metric, tolerance, expected.values[metric], value))
    for c in sorted(current, key=lambda c: c.key):
        if c.key not in baseline.points and (only is None or c.key in only):
            verdicts.append(Verdict(c.key, "*", "new", note="not in the baseline"))
    return Comparison(verdicts, notes)


def _check(key: str, metric: str, tol: Tolerance, base: float | None, now: Any) -> Verdict:
    now = _number(now)
    if base is None:
        status: Status = "unchanged" if now is None else "new"
        return Verdict(key, metric, status, None, now)
    if now is None:
        return Verdict(key, metric, "missing", base, None, None, "no value now")
    allowed = tol.allowed(base)
    delta = now - base
    worse = {"lower": delta, "higher": -delta, "both": abs(delta)}[tol.better]
    if delta == 0:
        status = "unchanged"
    elif worse > allowed:
        status = "regressed"
    elif tol.better != "both" and -worse > allowed:
        status = "improved"
    else:
        status = "moved"
    return Verdict(key, metric, status, base, now, allowed)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --- writing a baseline ----------------------------------------------------------------------


def default_tolerance(metric: str, rel: float | None = None) -> Tolerance:
    """The tolerance a new baseline gives a metric: its direction from the spec; exact for
    counts and bytes, a relative 1e-9 for anything else (a deterministic run), or ``rel`` when
    the user chooses one."""
    spec = METRICS.get(metric)
    if spec is None:
        raise SpecmdError(
            f"metric {metric!r}: expected a metric of docs/metrics.md (such as ttft_s, "
            f"hit_rate, misses_collision), got an unknown name"
        )
    better: Better = "both" if spec.better == "none" else spec.better
    if rel is None:
        rel = 0.0 if spec.unit in EXACT_UNITS else DETERMINISTIC_REL
    return Tolerance(better=better, rel=rel)


def update_baseline(
    baseline: Baseline | None,
    current: list[Current],
    metrics: list[str] | None = None,
    replace_all: bool = True,
    rel: float | None = None,
) -> Baseline:
    """A baseline holding the present values.

    The metrics and tolerances of ``baseline`` are kept; ``metrics`` adds metrics (with default
    tolerances, or the relative tolerance ``rel`` when given), and a new baseline without
    ``metrics`` checks the default ones that the results have. ``replace_all`` drops baseline
    points not in ``current`` (a sweep); otherwise other points are kept (one run of several).
    Failed points are not written.
    """
    tolerances = dict(baseline.metrics) if baseline else {}
    names = list(metrics or [])
    if baseline is None and not names:
        names = [m for m in DEFAULT_METRICS if any(_number(c.values.get(m)) is not None
                                                   for c in current)]  # fmt: skip
    for name in names:
        tolerances.setdefault(name, default_tolerance(name, rel))
    points = {} if (baseline is None or replace_all) else dict(baseline.points)
    for c in current:
        if c.error is not None:
            continue
        values = {m: _number(c.values.get(m)) for m in sorted(tolerances)}
        points[c.key] = BaselinePoint(
            engine=c.engine, point_id=c.point_id, axes=c.axes or {}, values=values
        )
    return Baseline(metrics=tolerances, points=points)


# --- rendering -------------------------------------------------------------------------------

_STYLES = {
    "regressed": "bold red",
    "missing": "bold red",
    "error": "bold red",
    "improved": "green",
    "moved": "yellow",
    "new": "cyan",
    "unchanged": "dim",
}


def render_table(comparison: Comparison, show_all: bool = False) -> Any:
    """A rich Table of what moved (every check with ``show_all``), or None if nothing did."""
    from rich.markup import escape
    from rich.table import Table

    rows = [v for v in comparison.verdicts if show_all or v.status != "unchanged"]
    if not rows:
        return None
    table = Table("point", "metric", "baseline", "current", "change", "tolerance", "verdict")
    for v in rows:
        change = ""
        if v.delta is not None:
            change = f"{v.delta:+.4g}"
            if v.baseline:
                change += f" ({v.delta / abs(v.baseline):+.1%})"
        verdict = v.status + (f": {v.note}" if v.note else "")
        table.add_row(
            escape(v.key), escape(v.metric), _fmt(v.baseline), _fmt(v.current), change,
            "" if v.allowed is None else f"±{v.allowed:.4g}",
            f"[{_STYLES[v.status]}]{escape(verdict)}[/]",
        )  # fmt: skip
    return table


def summary_line(comparison: Comparison) -> str:
    counts = comparison.counts()
    checked = sum(counts.values())
    order = ("regressed", "missing", "error", "improved", "moved", "new", "unchanged")
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    verdict = "REGRESSION" if comparison.regressed else "ok"
    return f"{verdict}: {checked} checks ({', '.join(parts) or 'nothing to check'})"


def print_report(console: Any, comparison: Comparison, show_all: bool = False) -> None:
    """Print the table of what moved, the notes and the summary line on a rich Console."""
    table = render_table(comparison, show_all)
    if table is not None:
        console.print(table)
    for note in comparison.notes:
        console.print(f"note: {note}", markup=False)
    console.print(summary_line(comparison), markup=False)


def render_text(comparison: Comparison, show_all: bool = False, width: int = 140) -> str:
    """The report as plain text (for a pytest failure message)."""
    import io

    from rich.console import Console

    buffer = io.StringIO()
    print_report(Console(file=buffer, width=width, color_system=None, highlight=False),
                 comparison, show_all)  # fmt: skip
    return buffer.getvalue()


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"
