"""Results rows for ``specmd compare``: read from run and sweep folders, and what varies.

A row has the layout of :func:`specmd_sim.metrics.result_row` -- metric names as columns,
``inputs.<key>``, ``config.<dotted.path>`` -- plus ``status`` (``ok``/``error``) and
``source`` (where it came from). A run folder gives one row; a sweep folder gives its results
table (``pandas.read_parquet(DIR)``, which needs pandas and pyarrow).

:func:`plan` then decides how to show the rows: the numeric columns that vary become x axes
(cache capacity as a share of the routed-expert bytes; the host-to-GPU bandwidth of each
hardware profile; any other numeric config field such as ``predictor.accuracy``), the
plug-in sections name the *policy* of each row (``least-stale(order=layer) + top-k``), other
categorical fields that vary form the *setting* (``hardware=l4``), and seeds are averaged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.policies.registry import (
    EVICTION,
    MISS,
    PREDICTORS,
    PREFETCH,
    Registry,
    is_offline,
)
from specmd_sim.runs import read_result

Row = dict[str, Any]
CAPACITY = "capacity_pct"
BANDWIDTH = "link_bandwidth_gbps"
POLICY = "policy"
SETTING = "setting"
WHAT_IF = "config.hardware_set"  # a run's what-ifs on its hardware profile (path -> value)
_NOT_SETTINGS = {"config.cache.capacity", "config.seed", "config.hardware"}


def load_rows(paths: Sequence[Path]) -> list[Row]:
    """Rows of every run folder (``result.json``) and sweep folder (parquet table) given."""
    rows: list[Row] = []
    for path in paths:
        path = Path(path)
        if (path / "result.json").is_file():
            row = result_row(read_result(path))
            rows.append({"status": "ok", "source": str(path), **row})
        elif path.is_dir() and any(path.glob("*.parquet")):
            rows.extend(_sweep_rows(path))
        else:
            raise SpecmdError(
                f"{path}: expected a run folder (with result.json) or a sweep folder "
                "(with .parquet results), got neither"
            )
    return rows


def _sweep_rows(path: Path) -> list[Row]:
    try:
        import pandas as pd
    except ImportError:
        raise SpecmdError(
            f"{path}: reading a sweep folder needs pandas and pyarrow (pip install pandas pyarrow)"
        ) from None
    try:
        table = pd.read_parquet(path)
    except ImportError as exc:
        raise SpecmdError(f"{path}: reading a sweep folder needs pyarrow ({exc})") from None
    except (OSError, ValueError) as exc:
        raise SpecmdError(f"{path}: expected a sweep results table, got {exc}") from None
    rows = []
    for i, record in enumerate(table.to_dict("records")):
        row = {k: _plain(v) for k, v in record.items()}
        index = row.get("point_index", i)
        row["source"] = f"{path}#{index}"
        row.setdefault("status", "ok")
        rows.append(row)
    return rows


def _plain(value: Any) -> Any:
    """numpy/pandas scalars to Python; NaN and missing to None."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


@cache
def link_bandwidth(hardware: str, overrides: tuple[tuple[str, Any], ...] = ()) -> float | None:
    """Bytes/s of one transfer alone on the first host-to-GPU path of a profile (with the
    run's what-ifs on it, ``hardware_set``); None when the profile cannot be loaded (a path
    that no longer exists)."""
    from specmd_sim.hardware import host_path, load_profile
    from specmd_sim.hardware.overrides import override_profile

    try:
        profile = override_profile(load_profile(hardware), dict(overrides), "hardware_set")
        return host_path(profile).bandwidth
    except (SpecmdError, OSError, ValueError, KeyError, IndexError):
        return None


def _bandwidth_axis(ok: list[Row], result: Plan) -> bool:
    """The host-to-GPU bandwidth as an axis when it varies between the machines the rows ran
    on (profiles, and the what-ifs on them); whether it alone tells them apart."""
    hardware = {_machine(r) for r in ok}
    if len(hardware) <= 1:
        return False
    for r in ok:
        bw = link_bandwidth(*_machine(r))
        r[BANDWIDTH] = bw / 1e9 if bw else None
    bandwidths = {bw for _, bw in {(_machine(r), r[BANDWIDTH]) for r in ok}}
    if not _numeric(ok, BANDWIDTH) or len(bandwidths) <= 1:
        return False
    result.axes.append(Axis(BANDWIDTH, "host→GPU bandwidth (GB/s)", log=True))
    return len(bandwidths) == len(hardware)


def what_ifs(row: Row) -> dict[str, Any]:
    """A row's what-ifs on its hardware profile (a mapping in a run's result, JSON in a sweep's
    table)."""
    value = row.get(WHAT_IF)
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def _machine(row: Row) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """What a row ran on: its profile and the what-ifs on it (hashable)."""
    return str(row.get("config.hardware")), tuple(sorted(what_ifs(row).items()))


@dataclass(frozen=True)
class Axis:
    """A numeric column to use as x: ``column`` in the rows, its ``label``, log scale."""

    column: str
    label: str
    log: bool = False


@dataclass
class Plan:
    """How to show rows: ``rows`` (status ok, with ``policy``, ``setting`` and derived axis
    columns), the x ``axes`` that vary, the categorical ``setting_columns`` that vary, whether
    seeds vary, and the number of rows left out because their run failed."""

    rows: list[Row]
    axes: list[Axis] = field(default_factory=list)
    policy_columns: list[str] = field(default_factory=list)
    setting_columns: list[str] = field(default_factory=list)
    seeds: bool = False
    failed: int = 0

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(r[POLICY] for r in self.rows))

    @property
    def settings(self) -> list[str]:
        return list(dict.fromkeys(r[SETTING] for r in self.rows))


def _distinct(rows: list[Row], column: str) -> list[Any]:
    return list(dict.fromkeys(repr(r.get(column)) for r in rows))


def _numeric(rows: list[Row], column: str) -> bool:
    values = [r.get(column) for r in rows]
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plan(rows: list[Row]) -> Plan:
    """Choose axes, policies and settings from what varies among the rows that ran."""
    ok = [dict(r) for r in rows if r.get("status", "ok") == "ok"]
    result = Plan(ok, failed=len(rows) - len(ok))
    if not ok:
        return result
    columns = list(dict.fromkeys(k for r in ok for k in r))
    sections = [c.split(".")[1] for c in columns if c.startswith("config.") and c.endswith(".kind")]
    plugin_params = [c for c in columns if c.startswith("config.") and c.split(".")[1] in sections]

    # capacity: resolved bytes, shown as a share of the routed-expert bytes
    for r in ok:
        cap, routed = r.get("inputs.capacity_bytes"), r.get("inputs.routed_bytes")
        r[CAPACITY] = 100 * cap / routed if cap and routed else None
    if len(_distinct(ok, CAPACITY)) > 1 and _numeric(ok, CAPACITY):
        result.axes.append(Axis(CAPACITY, "cache capacity (% of routed-expert bytes)"))

    hardware_is_axis = _bandwidth_axis(ok, result)
    link_what_ifs = BANDWIDTH in {a.column for a in result.axes} and all(
        path.endswith("bandwidth_bytes_per_s") for r in ok for path in what_ifs(r)
    )  # the bandwidth axis says all the what-ifs do
    result.seeds = len(_distinct(ok, "config.seed")) > 1

    for column in columns:
        if column in _NOT_SETTINGS or not (column.startswith("config.") or column == "engine"):
            continue
        if link_what_ifs and column == WHAT_IF:
            continue
        values = [r.get(column) for r in ok]
        if column in plugin_params and not column.endswith(".kind"):
            values = [v for v in values if v is not None]  # a parameter of some kinds only
        if len({repr(v) for v in values}) <= 1:
            continue
        if _numeric([{column: v} for v in values], column) and None not in values:
            result.axes.append(Axis(column, column.removeprefix("config.")))
        elif column in plugin_params:
            result.policy_columns.append(column)
        else:
            result.setting_columns.append(column)
    if len(_distinct(ok, "config.hardware")) > 1 and not hardware_is_axis:
        result.setting_columns.insert(0, "config.hardware")

    axis_columns = {a.column for a in result.axes}
    for r in ok:
        r[POLICY] = _policy_label(r, sections, result.policy_columns, axis_columns)
        r[SETTING] = ", ".join(
            f"{c.removeprefix('config.')}={r.get(c)}" for c in result.setting_columns
        )
    return result


_REGISTRIES: dict[str, Registry[Any]] = {
    "eviction": EVICTION,
    "prefetch": PREFETCH,
    "predictor": PREDICTORS,
    "miss": MISS,
}


@cache
def _defaults(section: str, kind: str) -> dict[str, Any]:
    """The parameters a plug-in of ``kind`` takes by default (none known for a section or kind
    this process cannot load, such as a plug-in module not imported)."""
    registry = _REGISTRIES.get(section)
    if registry is None:
        return {}
    try:
        return registry.parse_config({"kind": kind}).model_dump(mode="json")
    except (SpecmdError, ValueError):
        return {}


def _policy_label(row: Row, sections: list[str], varying: list[str], axes: set[str]) -> str:
    """``least-stale + top-k``; a section's parameters in brackets where they vary among the
    rows or differ from the kind's defaults (``least-stale(order=layer)``, as the sweep's
    ``axis.<name>`` columns write them), unless they are an x axis. The eviction and prefetch
    sections always, other plug-in sections when they vary."""
    parts = []
    for section in sections:
        prefix = f"config.{section}."
        kind = str(row.get(f"{prefix}kind"))
        defaults = _defaults(section, kind)
        shown = []
        for column in sorted(c for c in row if c.startswith(prefix) and c != f"{prefix}kind"):
            name, value = column.removeprefix(prefix), row[column]
            if value is None or column in axes:
                continue
            if column in varying or (name in defaults and value != defaults[name]):
                shown.append(f"{name}={value}")
        if section in ("eviction", "prefetch") or any(c.startswith(prefix) for c in varying):
            offline = " (offline)" if is_offline(section, kind) else ""  # a bound, an oracle
            parts.append(kind + (f"({', '.join(shown)})" if shown else "") + offline)
    return " + ".join(parts) or "run"
