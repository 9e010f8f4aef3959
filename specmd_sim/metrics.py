"""RunResult: the metrics of one run, per layer and per request, with the config echoed.

Every metric, table column and input a result holds is named in the metric specification
(:mod:`specmd_sim.metric_spec`, re-exported here; ``docs/metrics.md`` is generated from it):
:meth:`RunResult.to_dict` refuses a name that is not there, or one the engine does not report.
``result.json`` is written with sorted keys and no timestamps, so the same config and seed give
byte-identical files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.atomic import write_text
from specmd_sim.cache import AccessClass, CacheStats
from specmd_sim.metric_spec import (
    INPUTS,
    METRICS,
    TABLES,
    UNITS,
    Metric,
    Table,
    format_value,
    reported,
    value_type,
)
from specmd_sim.timeline import Recording

__all__ = [
    "INPUTS",
    "METRICS",
    "RESULT_FORMAT",
    "RESULT_VERSION",
    "TABLES",
    "UNITS",
    "Metric",
    "RunResult",
    "Table",
    "cache_metrics",
    "format_value",
    "per_layer_cache_table",
    "reported",
    "result_row",
    "value_type",
]

RESULT_FORMAT = "specmd-result"
RESULT_VERSION = 1


@dataclass(eq=False)
class RunResult:
    engine: str  # "replay" or "simulate"
    metrics: dict[str, Any]
    per_layer: dict[str, list[Any]]
    per_request: dict[str, list[Any]]
    config: dict[str, Any]
    inputs: dict[str, Any]  # what the config resolved to: model, profile, trace, capacity
    hardware_grade: str | None  # lowest grade of the hardware numbers used; None in replay
    spans: np.ndarray | None = field(default=None, repr=False)
    lanes: list[str] = field(default_factory=list)
    counters: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    per_resource: dict[str, list[Any]] = field(default_factory=dict)  # links, DRAM, engines
    per_gpu: dict[str, list[Any]] = field(default_factory=dict)  # one row per GPU (simulate)
    # one row per pass (simulate): gpu, pass, request, phase, start_s, end_s
    per_pass: dict[str, list[Any]] = field(default_factory=dict)
    # the path the engine took and, where it fell back from its compiled one, why and at what
    # cost (:meth:`specmd_sim.engine.coverage.EnginePath.line`): shown, never written (to_dict)
    engine_path: str = ""
    _recording: Recording | None = field(default=None, init=False, repr=False, compare=False)

    def recording(self) -> Recording | None:
        """The spans, lanes and counters as one :class:`~specmd_sim.timeline.Recording`, the
        same object each call (None without spans), so that the outputs written from one
        result (the trace, the timeline page) derive what they share once."""
        if self.spans is not None and self._recording is None:
            self._recording = Recording(self.spans, list(self.lanes), dict(self.counters))
        return self._recording

    def to_dict(self) -> dict[str, Any]:
        """The ``result.json`` mapping; raises ValueError for a name outside the spec."""
        self.check_names()
        return {
            "format": RESULT_FORMAT,
            "version": RESULT_VERSION,
            "specmd_sim": version("specmd-sim"),
            "engine": self.engine,
            "metrics": self.metrics,
            "per_layer": self.per_layer,
            "per_request": self.per_request,
            "per_resource": self.per_resource,
            "per_gpu": self.per_gpu,
            "per_pass": self.per_pass,
            "hardware_grade": self.hardware_grade,
            "inputs": self.inputs,
            "config": self.config,
        }

    def check_names(self) -> None:
        """Every metric, table column and input is in the spec and reported by this engine
        (an engine that reports something new must add it to :mod:`specmd_sim.metric_spec`)."""
        _check_names("metrics", self.metrics, METRICS, self.engine)
        for name, table in TABLES.items():
            _check_names(name, getattr(self, name), table.columns, self.engine)
        _check_names("inputs", self.inputs, INPUTS, self.engine)

    def to_json(self) -> str:
        return json.dumps(_clean(self.to_dict()), sort_keys=True, indent=2) + "\n"

    def write(self, path: Path) -> None:
        write_text(path, self.to_json())


def _check_names(
    where: str, values: Mapping[str, Any], spec: Mapping[str, Metric], engine: str
) -> None:
    for name in values:
        if name not in spec:
            raise ValueError(
                f"RunResult.{where}: {name!r} is not in the metric specification; add it to "
                "specmd_sim/metric_spec.py (and regenerate docs/metrics.md)"
            )
        if engine not in spec[name].engines:
            raise ValueError(
                f"RunResult.{where}: {name!r} is reported by {', '.join(spec[name].engines)} "
                f"only, got it from {engine!r}"
            )


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to null."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


def cache_metrics(stats: CacheStats) -> dict[str, Any]:
    totals: dict[str, Any] = stats.totals()  # (the counts, and the hit rate added here)
    accesses = totals["accesses"]
    totals["hit_rate"] = totals["hits"] / accesses if accesses else 0.0
    return totals


def per_layer_cache_table(stats: CacheStats) -> dict[str, list[Any]]:
    counts = stats.access_class
    accesses = counts.sum(axis=1)
    table: dict[str, list[Any]] = {
        "layer": list(range(counts.shape[0])),
        "accesses": accesses.tolist(),
    }
    for klass in AccessClass:
        name = {"HIT": "hits", "LATE_HIT": "late_hits"}.get(klass.name)
        table[name or f"misses_{klass.name.lower()}"] = counts[:, klass].tolist()
    table["hit_rate"] = [
        (h / a if a else 0.0)
        for h, a in zip(counts[:, AccessClass.HIT].tolist(), accesses.tolist(), strict=False)
    ]
    return table


def result_row(result: dict[str, Any]) -> dict[str, Any]:
    """One flat row of a results table from a ``result.json`` mapping.

    Columns: ``engine``, ``hardware_grade``, every metric under its own name (``hit_rate``,
    ``ttft_s``, ...), ``inputs.<key>`` and ``config.<dotted.path>`` (e.g. ``config.eviction.kind``,
    ``config.cache.capacity``). Sweep tables and ``specmd compare`` share this layout.
    """
    row: dict[str, Any] = {"engine": result["engine"], "hardware_grade": result["hardware_grade"]}
    row.update(result["metrics"])
    row.update({f"inputs.{k}": v for k, v in result["inputs"].items()})
    row.update(_flatten(result["config"], "config"))
    return row


# config mappings whose keys are paths into a profile, not config sections: one column each,
# as JSON (as a sweep's table stores mappings)
_PATH_MAPPINGS = {"config.hardware_set", "config.runtime_set"}


def _flatten(data: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if name in _PATH_MAPPINGS:
            out[name] = json.dumps(value, sort_keys=True)
        elif isinstance(value, dict):
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out
