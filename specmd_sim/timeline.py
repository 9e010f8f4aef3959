"""Spans: what each resource did when, as a numpy structured array; Chrome/Perfetto export.

A span is ``[start, end)`` in seconds on one *lane* (a resource: the GPU compute stream, a copy
engine) with a *kind* (one of :data:`KINDS`) and the pass, layer, expert (flat id), bytes,
request and access class it concerns (-1 where none). Lanes with capacity one (a compute stream,
one copy engine) never hold overlapping spans.

Lane names are ``"<process>/<track>"``: the part before the first ``/`` names the device that
owns the resource (``gpu0``, ``host0``, or ``links`` for links), the rest the resource
(``compute``, ``copy-h2d-0``, ``cpu-experts``, ``pcie:host0-gpu0``). Every view groups lanes by
that prefix, so an engine that records a new lane or a new kind (appended to :data:`KINDS`) shows
up in the Perfetto trace and the HTML timelines without changes there.

Besides the recorder this module derives what the exports need from the spans alone: the pass
table (:func:`pass_table`), the access class a transfer served (:func:`served_class`), sub-tracks
for lanes whose spans overlap (:func:`track_rows`), and the Chrome Trace Event Format
(:func:`to_chrome_trace`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.cache.states import AccessClass

KINDS = ("attention", "expert", "lm_head", "stall", "demand_fetch", "prefetch", "cpu_expert")
"""Span kinds; a span stores the index. Append only: saved spans keep their kind names."""
COMPUTE_KINDS = ("attention", "expert", "lm_head")
TRANSFER_KINDS = ("demand_fetch", "prefetch")
KIND = {name: i for i, name in enumerate(KINDS)}

SPAN_DTYPE = np.dtype(
    [
        ("start", "f8"),
        ("end", "f8"),
        ("lane", "i2"),
        ("kind", "i1"),
        ("pass_", "i4"),
        ("layer", "i2"),
        ("expert", "i4"),
        ("bytes", "i8"),
        ("request", "i4"),
        ("klass", "i1"),
    ]
)


COUNTER_DTYPE = np.dtype([("time", "f8"), ("value", "f8")])


class SpanRecorder:
    """Collects spans and counter samples during a run (plain lists: cheap appends).

    Counters (``cache_used_bytes``, ``bytes_in_flight``) are step functions sampled at each
    change: the value holds from its time until the next sample.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.lanes: list[str] = []
        self._lane_ids: dict[str, int] = {}
        self._rows: list[tuple[Any, ...]] = []
        self._counters: dict[str, list[tuple[float, float]]] = {}

    def sample(self, counter: str, time: float, value: float) -> None:
        if self.enabled:
            self._counters.setdefault(counter, []).append((time, value))

    def counters(self) -> dict[str, np.ndarray]:
        """Each counter as a ``(time, value)`` structured array, by name."""
        return {
            name: np.array(rows, dtype=COUNTER_DTYPE)
            for name, rows in sorted(self._counters.items())
        }

    def lane(self, name: str) -> int:
        if name not in self._lane_ids:
            self._lane_ids[name] = len(self.lanes)
            self.lanes.append(name)
        return self._lane_ids[name]

    def add(
        self,
        lane: int,
        kind: str,
        start: float,
        end: float,
        pass_: int = -1,
        layer: int = -1,
        expert: int = -1,
        bytes_: int = 0,
        request: int = -1,
        klass: int = -1,
    ) -> None:
        if self.enabled:
            self._rows.append(
                (start, end, lane, KIND[kind], pass_, layer, expert, bytes_, request, klass)
            )

    def array(self) -> np.ndarray:
        spans = np.array(self._rows, dtype=SPAN_DTYPE)
        return spans[np.lexsort((spans["lane"], spans["start"]))] if spans.size else spans


def busy_union(spans: np.ndarray, kinds: tuple[str, ...]) -> np.ndarray:
    """Disjoint, sorted ``[start, end]`` intervals covered by spans of ``kinds``."""
    mask = np.isin(spans["kind"], [KIND[k] for k in kinds])
    s = spans[mask]
    if not s.size:
        return np.zeros((0, 2))
    order = np.argsort(s["start"], kind="stable")
    starts, ends = s["start"][order], s["end"][order]
    running_end = np.maximum.accumulate(ends)
    new = np.r_[True, starts[1:] > running_end[:-1]]
    idx = np.flatnonzero(new)
    merged_end = np.maximum.reduceat(ends, idx)
    return np.stack([starts[idx], merged_end], axis=1)


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Total length of the intersection of two disjoint sorted interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total


