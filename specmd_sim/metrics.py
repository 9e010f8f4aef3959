"""RunResult: the metrics of one run, per layer and per request, with the config echoed.

Metric names and formulas are listed in ``docs/metrics.md``. ``result.json`` is written with
sorted keys and no timestamps, so the same config and seed give byte-identical files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim import __version__
from specmd_sim.cache import AccessClass, CacheStats

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RESULT_FORMAT,
            "version": RESULT_VERSION,
            "specmd_sim": __version__,
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

    def to_json(self) -> str:
        return json.dumps(_clean(self.to_dict()), sort_keys=True, indent=2) + "\n"

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)


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
    totals = stats.totals()
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


def load_result(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


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


def _flatten(data: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out
