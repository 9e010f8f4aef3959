"""Results rows for ``specmd compare``: read from run and sweep folders, and what varies.

A row has the layout of :func:`specmd_sim.metrics.result_row` -- metric names as columns,
``inputs.<key>``, ``config.<dotted.path>`` -- plus ``status`` (``ok``/``error``) and
``source`` (where it came from). A run folder gives one row; a sweep folder gives its results
table (``pandas.read_parquet(DIR)``, which needs pandas and pyarrow).

:func:`plan` then decides how to show the rows: the numeric columns that vary become x axes
(cache capacity as a share of the routed-expert bytes; the host-to-GPU bandwidth of each
hardware profile; any other numeric config field such as ``predictor.accuracy``), the
plug-in sections that vary name the *policy* of each row (``least-stale + top-k``), other
categorical fields that vary form the *setting* (``hardware=l4``), and seeds are averaged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import load_result, result_row
from specmd_sim.runs import check_run_folder

Row = dict[str, Any]
CAPACITY = "capacity_pct"
BANDWIDTH = "link_bandwidth_gbps"
POLICY = "policy"
SETTING = "setting"
_NOT_SETTINGS = {"config.cache.capacity", "config.seed", "config.hardware"}


def load_rows(paths: Sequence[Path]) -> list[Row]:
    """Rows of every run folder (``result.json``) and sweep folder (parquet table) given."""
    rows: list[Row] = []
    for path in paths:
        path = Path(path)
        if (path / "result.json").is_file():
            check_run_folder(path)
            row = result_row(load_result(path / "result.json"))
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
def link_bandwidth(hardware: str) -> float | None:
    """Bytes/s of one transfer alone on the first host-to-GPU path of a profile; None when
    the profile cannot be loaded (a path that no longer exists)."""
    from specmd_sim.hardware import host_path, load_profile

    try:
        return host_path(load_profile(hardware)).bandwidth
    except (SpecmdError, OSError, ValueError, KeyError, IndexError):
        return None


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

    # hardware: the host-to-GPU bandwidth when it tells the profiles apart
    hardware = _distinct(ok, "config.hardware")
    hardware_is_axis = False
    if len(hardware) > 1:
        for r in ok:
            bw = link_bandwidth(str(r.get("config.hardware")))
            r[BANDWIDTH] = bw / 1e9 if bw else None
        pairs = {(repr(r.get("config.hardware")), r[BANDWIDTH]) for r in ok}
        if _numeric(ok, BANDWIDTH) and len({bw for _, bw in pairs}) == len(hardware):
            result.axes.append(Axis(BANDWIDTH, "host→GPU bandwidth (GB/s)", log=True))
            hardware_is_axis = True
    result.seeds = len(_distinct(ok, "config.seed")) > 1

    for column in columns:
        if column in _NOT_SETTINGS or not (column.startswith("config.") or column == "engine"):
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
    if len(hardware) > 1 and not hardware_is_axis:
        result.setting_columns.insert(0, "config.hardware")

    axis_columns = {a.column for a in result.axes}
    for r in ok:
        r[POLICY] = _policy_label(r, sections, result.policy_columns, axis_columns)
        r[SETTING] = ", ".join(
            f"{c.removeprefix('config.')}={r.get(c)}" for c in result.setting_columns
        )
    return result


def _policy_label(row: Row, sections: list[str], varying: list[str], axes: set[str]) -> str:
    """``least-stale + top-k``, with the varying parameters of a section in brackets; the
    eviction and prefetch sections always, other plug-in sections when they vary."""
    parts = []
    for section in sections:
        prefix = f"config.{section}."
        params = [c for c in varying if c.startswith(prefix) and not c.endswith(".kind")]
        if (
            section not in ("eviction", "prefetch")
            and f"{prefix}kind" not in varying
            and not (params)
        ):
            continue
        text = str(row.get(f"{prefix}kind"))
        shown = [f"{c.removeprefix(prefix)}={row[c]}" for c in params
                 if row.get(c) is not None and c not in axes]  # fmt: skip
        parts.append(text + (f" ({', '.join(shown)})" if shown else ""))
    return " + ".join(parts) or "run"
