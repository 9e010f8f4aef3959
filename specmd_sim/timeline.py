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

The recorder (:class:`SpanRecorder`) packs spans and counter samples into numpy arrays as the
run goes (42 and 16 bytes each, where Python tuples take ~200 and ~110), and the results are
those arrays (the spans sorted); past a bound the packed rows are spilled to disk and the
results mapped from there, so a long run's recording takes bounded memory.

Besides the recorder this module derives what the exports need from the spans: the access class
a transfer served (:func:`served_class`), what ended each stall (:func:`stall_causes`), which
access used each prefetch (:func:`prefetch_uses`) and sub-tracks for lanes whose spans overlap
(:func:`track_rows`); and it writes the Chrome Trace Event Format, whose passes and requests
are the engine's own tables (``per_pass``, ``per_request`` of the result), not rebuilt from the
spans: as pieces of text (:func:`chrome_trace_chunks`), into a ``.json.gz`` a chunk at a time
(:func:`write_chrome_trace`; a long run's trace is hundreds of MB of JSON), or parsed
(:func:`to_chrome_trace`).
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from specmd_sim.cache.states import AccessClass
from specmd_sim.gz import write_gzip
from specmd_sim.packed_rows import SPILL_BYTES, PackedRows, SpillBudget

KINDS = (
    "attention", "expert", "lm_head", "stall", "demand_fetch", "prefetch", "cpu_expert",
    "write_back", "nvme_read", "promoted_prefetch", "streamed", "copy_issue",
)  # fmt: skip
"""Span kinds; a span stores the index. Append only: saved spans keep their kind names."""
COMPUTE_KINDS = ("attention", "expert", "lm_head", "copy_issue")
"""The kinds that are the compute stream's compute time (``compute_s``; ``copy_issue``: the host
issuing a layer's copies of experts, during which the stream launches nothing)."""
TRANSFER_KINDS = ("demand_fetch", "prefetch", "promoted_prefetch", "streamed")
"""A transfer is drawn as what it was issued as: a demand fetch; a prefetch; a prefetch that a
layer needed before it had completed (a late hit: promoted to the demand queue if still queued,
waited for if moving); or a demand fetch streamed past the cache through a staging buffer (the
policy did not admit it, or the layer's demand set left it no room: ``bypassed`` and
``overflowed``), used once and never cached. A transfer moved in chunks
(``timing.chunk_bytes``) draws each chunk as it was when it moved: those before the promotion
as a prefetch."""
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


@dataclass(eq=False)
class Recording:
    """Everything a :class:`SpanRecorder` holds after a run: the spans (``SPAN_DTYPE``), the
    lane names their ``lane`` field indexes, and the counters (``COUNTER_DTYPE``) by name."""

    spans: np.ndarray
    lanes: list[str]
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    _served: np.ndarray | None = field(default=None, init=False, repr=False)
    _deriving: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _rows: LaneRowsOf | None = field(default=None, init=False, repr=False)
    _placing: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def served(self, derive: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """:func:`served_class` of the spans, derived once however many outputs read it (the
        timeline page, the trace, written side by side: a second reader waits for the
        first's), by ``derive``: it (by default) or what computes the same (the compiled
        ``perfetto.served_class_compiled``)."""
        with self._deriving:
            if self._served is None:
                self._served = (derive or served_class)(self.spans)
        return self._served

    def lane_rows(self, derive: LaneRows | None = None) -> LaneRowsOf:
        """:func:`lane_rows` of the spans (their lanes' sub-tracks, by their times in
        seconds), derived once as :meth:`served` is, by ``derive``: it (by default) or what
        computes the same (the compiled ``perfetto.lane_rows_compiled``)."""
        with self._placing:
            if self._rows is None:
                s = self.spans
                self._rows = (derive or lane_rows)(s["lane"], s["start"], s["end"], len(self.lanes))
        return self._rows


SPAN_CHUNK_ROWS = 1 << 14
"""Spans a :class:`SpanRecorder` holds as tuples before it packs them: a tuple and its numbers
take ~200 bytes, a packed span 42, so the tuples waiting take at most ~3 MB however long the
run."""
COUNTER_CHUNK_ROWS = 1 << 12
"""Samples a counter holds as ``(time, value)`` tuples (~110 bytes each, 16 packed) before it
packs them: at most ~0.5 MB waiting per counter (a run has a few counters per GPU and one per
network resource)."""


class SpanRecorder:
    """Collects spans and counter samples during a run, packed as they come.

    Each span is appended as a tuple (the cheapest thing the hot path can do), and every
    ``chunk_rows`` spans the tuples are packed into one growing ``SPAN_DTYPE`` array
    (:class:`PackedRows`); each counter's samples likewise, every ``counter_chunk_rows``, as
    ``COUNTER_DTYPE``. So a run holds 42 bytes a span and 16 a sample (an eighth more at most,
    and a chunk of tuples each), where tuples would take ~200 and ~110: :meth:`array` gives
    the spans sorted (a copy of at most the bound below), :meth:`counters` each counter's array
    as it is. Past ``spill_bytes`` of packed spans and samples together, the
    series holding the most goes to a temporary file, and the results of a series that did are
    mapped from disk, so a long run's recording takes a bounded amount of memory
    (:mod:`specmd_sim.packed_rows`). They are what one list of every span and sample would
    give, byte for byte.

    Counters (``cache_used_bytes``, ``bytes_in_flight``, each network resource's
    ``network/<resource>_bytes_per_s``) are step functions sampled at each change: the value
    holds from its time until the next sample. Of several samples at one instant only the last
    is kept (``PackedRows(last_at_instant=True)``): the others held for no time.
    """

    def __init__(
        self,
        enabled: bool = True,
        chunk_rows: int = SPAN_CHUNK_ROWS,
        counter_chunk_rows: int = COUNTER_CHUNK_ROWS,
        spill_bytes: int = SPILL_BYTES,
    ) -> None:
        self.enabled = enabled
        self.lanes: list[str] = []
        self._lane_ids: dict[str, int] = {}
        self._budget = SpillBudget(spill_bytes)  # the spans and the counters together
        self._spans = PackedRows(SPAN_DTYPE, chunk_rows, ("start", "lane"), budget=self._budget)
        self._span_rows = self._spans.rows
        self._chunk_rows = chunk_rows
        self._counter_chunk_rows = counter_chunk_rows
        self._series: dict[str, PackedRows] = {}

    def sample(self, counter: str, time: float, value: float) -> None:
        """One sample of ``counter`` (a source that samples often appends to its
        :meth:`series` instead, without the lookup)."""
        if self.enabled:
            self.series(counter).append((time, value))

    def series(self, counter: str) -> PackedRows:
        """``counter``'s samples, for a source that samples often to append ``(time, value)``
        to directly (in time order): only while the recorder is enabled, which appending does
        not check."""
        if counter not in self._series:
            self._series[counter] = PackedRows(
                COUNTER_DTYPE, self._counter_chunk_rows, budget=self._budget, last_at_instant=True
            )
        return self._series[counter]

    def counters(self) -> dict[str, np.ndarray]:
        """Each counter as a ``(time, value)`` structured array, by name: the arrays the
        recorder packed the samples into (:meth:`PackedRows.array`), not copies."""
        return {name: series.array() for name, series in sorted(self._series.items())}

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
        if self.enabled:  # PackedRows.append inlined: a call less a span, the hot path's
            rows = self._span_rows
            rows.append(
                (start, end, lane, KIND[kind], pass_, layer, expert, bytes_, request, klass)
            )
            if len(rows) == self._chunk_rows:
                self._spans.pack()

    def extend(self, rows: np.ndarray) -> None:
        """Add many spans at once (``SPAN_DTYPE`` rows, after those added so far), as an
        engine that records them in arrays does."""
        if self.enabled:
            self._spans.extend(rows)

    def renumber_passes(self, firsts: np.ndarray, shifts: np.ndarray) -> None:
        """Add ``shifts[i]`` to every span's pass from ``firsts[i]`` on (up to the next first;
        ``firsts`` ascending): passes numbered after the run, once their counts are known."""
        rows = self._spans.array()
        if not rows.flags.writeable:
            rows = rows.copy()
        passes = rows["pass_"]
        at = np.searchsorted(firsts, passes, side="right") - 1
        real = passes >= 0
        passes[real] += shifts[at[real]]
        self._spans.leave_budget()  # (replaced by the series of the rows renumbered)
        self._spans = PackedRows(SPAN_DTYPE, self._chunk_rows, ("start", "lane"),
                                 budget=self._budget)  # fmt: skip
        self._spans.extend(rows)
        self._span_rows = self._spans.rows

    def array(self) -> np.ndarray:
        """The spans sorted by start, then lane, then the order they were added in: the array
        the recorder packed them into, sorted, or, for a run long enough that they were
        spilled to disk, mapped from the file they were merged into
        (:meth:`PackedRows.array`). Spans added later go after them, and a later call sorts
        them in."""
        return self._spans.array()


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Total length of the intersection of two disjoint sorted interval lists (``(n, 2)``
    arrays of ``[start, end)``).

    Every pair that overlaps is found with two binary searches per interval of ``a`` (those of
    ``b`` ending after it starts and starting before it ends), and the overlaps are added one
    after another in ``(a, b)`` order (``cumsum``, not numpy's pairwise ``sum``): the order and
    the rounding of a two-pointer merge over both lists, so the total is the same to the bit.
    """
    if len(a) == 0 or len(b) == 0:
        return 0.0
    first = np.searchsorted(b[:, 1], a[:, 0], side="right")
    count = np.maximum(np.searchsorted(b[:, 0], a[:, 1], side="left") - first, 0)
    i = np.repeat(np.arange(len(a)), count)
    j = np.arange(len(i)) + np.repeat(first - (np.cumsum(count) - count), count)
    part = np.minimum(a[i, 1], b[j, 1]) - np.maximum(a[i, 0], b[j, 0])
    part = part[part > 0]
    return float(np.cumsum(part)[-1]) if len(part) else 0.0


# --- lanes and tracks ----------------------------------------------------------------------


def lane_process(name: str) -> str:
    """The device a lane belongs to: the part of its name before the first ``/``."""
    return name.split("/", 1)[0]


def lane_track(name: str) -> str:
    """The resource part of a lane name (the whole name when it has no ``/``)."""
    return name.split("/", 1)[1] if "/" in name else name


def track_rows(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Sub-track of each span so that no two spans of one sub-track overlap; and their number.

    Spans go, in order of start (ties by position), to the lowest-numbered sub-track that is
    free by then. A capacity-one lane therefore keeps a single sub-track; a lane that holds
    concurrent spans (a link carrying several flows) gets as many as it needs.

    Without a loop over spans: sub-track 0's spans are the greedy chain from the first span
    (each next one the first to start once the last has ended), since whether a span goes there
    depends on sub-track 0 alone; sub-track 1's the chain of those left; and so on. A chain is
    the nodes reached from its first by following "next" (:func:`_reached`).
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, np.int32), 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    if n == 1 or bool(np.all(s[1:] >= np.maximum.accumulate(e)[:-1])):
        return np.zeros(n, np.int32), 1
    rows = np.empty(n, np.int32)
    left, row = np.arange(n), 0
    while left.size:
        ls = s[left]
        later = np.maximum(np.searchsorted(ls, e[left], "left"), np.arange(1, left.size + 1))
        on = _reached(later)
        rows[left[on]] = row
        left, row = left[~on], row + 1
    out = np.empty(n, np.int32)
    out[order] = rows
    return out, row


def _reached(later: np.ndarray) -> np.ndarray:
    """Which nodes ``0, later[0], later[later[0]], ...`` visits (``later[i] > i``; ``m`` =
    ``later.size``: none), by doubling: after round ``k`` it holds the first ``2**k`` steps."""
    m = later.size
    jump = np.append(later, m)  # m, the end, stays the end
    on = np.zeros(m + 1, bool)
    on[0] = True
    nodes = np.zeros(1, np.int64)
    while True:
        reached = jump[nodes]
        on[reached] = True
        if bool(np.all(reached == m)):
            return on[:m]
        nodes = np.flatnonzero(on[:m])
        jump = jump[jump]


# --- what the spans tell about transfers -------------------------------------------------

_TRANSFER_IDS = [KIND[k] for k in TRANSFER_KINDS]
_RUN_IDS = [KIND["expert"], KIND["cpu_expert"]]


def served_class(spans: np.ndarray) -> np.ndarray:
    """The access class of each span; for a transfer, the class of the access it served.

    A transfer serves the access of its target (pass, expert) when that expert ran there: a
    demand fetch serves a miss (or a late hit, when a queued prefetch was promoted), a prefetch
    a hit or a late hit. A prefetch whose target layer did not run its expert gets -1.
    """
    kind, klass = spans["kind"], spans["klass"]
    out = klass.astype(np.int8)  # (a copy: the column is a view of the rows)
    transfer = np.isin(kind, _TRANSFER_IDS)
    runs = np.isin(kind, _RUN_IDS) & (klass >= 0) & (spans["pass_"] >= 0)
    if not transfer.any():
        return out
    if not runs.any():
        out[transfer] = -1
        return out
    # (the keys of every span from the two columns, then those wanted: not whole rows taken)
    key = (spans["pass_"].astype(np.int64) << 32) | (spans["expert"].astype(np.int64) & 0xFFFFFFFF)
    run_keys = key[runs]
    order = np.argsort(run_keys, kind="stable")
    sorted_keys, sorted_class = run_keys[order], klass[runs][order]
    wanted = key[transfer]
    pos = np.minimum(np.searchsorted(sorted_keys, wanted), sorted_keys.size - 1)
    out[transfer] = np.where(sorted_keys[pos] == wanted, sorted_class[pos], -1)
    return out


def match_keys(sources: Sequence[np.ndarray], targets: Sequence[np.ndarray]) -> np.ndarray:
    """For each row of the key columns ``sources``, the index of the last row (by position) of
    the key columns ``targets`` with equal keys; -1 where none has them (by sorting)."""
    n = len(sources[0])
    if not n or not len(targets[0]):
        return np.full(n, -1, np.int64)
    columns = [np.concatenate((a, b)) for a, b in zip(sources, targets, strict=True)]
    source = np.r_[np.ones(n, bool), np.zeros(len(targets[0]), bool)]
    order = np.lexsort((source, *columns[::-1]))  # equal keys: targets first, by position
    last = np.maximum.accumulate(np.where(source[order], -1, np.arange(order.size)))
    found = last >= 0
    for column in columns:
        ordered = column[order]
        found &= ordered[np.maximum(last, 0)] == ordered
    out = np.full(n, -1, np.int64)
    mine = source[order]
    out[order[mine]] = np.where(found[mine], order[np.maximum(last, 0)][mine] - n, -1)
    return out


def _take(rows: np.ndarray, matched: np.ndarray) -> np.ndarray:
    """``rows[matched]`` where ``matched`` >= 0, else -1."""
    if not rows.size:
        return np.full(matched.size, -1, np.int64)
    return np.where(matched >= 0, rows[np.maximum(matched, 0)], -1)


def stall_causes(spans: np.ndarray, lanes: Sequence[str]) -> np.ndarray:
    """For each stall span, the index of the span whose end ended it; -1 for other spans.

    A stall ends when what it waited for ends, at the same instant: the transfer of its expert
    on a copy lane of its own device (the last chunk of the fetch, or of the prefetch it joined:
    a late hit), else that expert's CPU run in its pass; a stall waiting for the copies to drain
    (copies on the compute stream: no expert) on a copy of its device ending with it. A stall
    none of these explains (no such span ended with it) keeps -1.
    """
    out = np.full(spans.size, -1, np.int64)
    stall = np.flatnonzero(spans["kind"] == KIND["stall"])
    if not stall.size:
        return out
    device: np.ndarray | list[int] = (
        np.unique([lane_process(n) for n in lanes], return_inverse=True)[1] if lanes else []
    )
    of_lane = np.r_[np.asarray(device, np.int64), -1]  # a lane of no name (-1): no device
    dev = of_lane[np.where(spans["lane"] >= 0, spans["lane"], len(lanes))]
    kind, expert, end, pass_ = spans["kind"], spans["expert"], spans["end"], spans["pass_"]
    transfer = np.flatnonzero(np.isin(kind, _TRANSFER_IDS))
    copies = np.flatnonzero(np.isin(kind, [*_TRANSFER_IDS, KIND["write_back"]]))
    cpu = np.flatnonzero(kind == KIND["cpu_expert"])
    waits = stall[expert[stall] >= 0]
    by_transfer = match_keys(
        (dev[waits], expert[waits], end[waits]),
        (dev[transfer], expert[transfer], end[transfer]),
    )
    found = by_transfer >= 0
    out[waits[found]] = transfer[by_transfer[found]]
    waits = waits[~found]
    by_cpu = match_keys(
        (pass_[waits], expert[waits], end[waits]), (pass_[cpu], expert[cpu], end[cpu])
    )
    out[waits] = _take(cpu, by_cpu)
    drains = stall[expert[stall] < 0]
    out[drains] = _take(copies, match_keys((dev[drains], end[drains]), (dev[copies], end[copies])))
    return out


def prefetch_uses(spans: np.ndarray) -> np.ndarray:
    """For each prefetch span (promoted ones included), the index of the expert span of the
    access it served: its target (pass, expert) run on the GPU once it had arrived; -1 for
    other spans, and for a prefetch that nothing used (its expert did not run in its target
    layer, or ran on the CPU)."""
    out = np.full(spans.size, -1, np.int64)
    prefetch = np.flatnonzero(np.isin(spans["kind"], [KIND["prefetch"], KIND["promoted_prefetch"]]))
    runs = np.flatnonzero((spans["kind"] == KIND["expert"]) & (spans["pass_"] >= 0))
    key = ("pass_", "expert")
    target = match_keys([spans[k][prefetch] for k in key], [spans[k][runs] for k in key])
    target = _take(runs, target)
    after = spans["start"][np.maximum(target, 0)] >= spans["end"][prefetch]
    out[prefetch] = np.where((target >= 0) & after, target, -1)
    return out


_CLASS_NAMES = [c.name.lower() for c in sorted(AccessClass)]


def class_name(klass: int) -> str:
    """``'hit'``, ``'late_hit'``, ``'compulsory'``, ...; ``''`` for -1."""
    return _CLASS_NAMES[klass] if klass >= 0 else ""


# --- Chrome / Perfetto trace ---------------------------------------------------------------


TRACE_MAX_S = float(np.iinfo(np.int64).max) / 1e9
"""The latest time a trace holds: whole nanoseconds in 64 bits, ~9.2e9 s (292 years)."""


def untraceable(recording: Recording, makespan_s: float) -> str | None:
    """Why no trace of this run can be written (a time past :data:`TRACE_MAX_S`: a link of a
    few bytes a second, say), else None; the run's results and spans hold such times."""
    ends = [float(makespan_s)]
    if recording.spans.size:
        ends.append(float(recording.spans["end"].max()))
    ends += [float(c["time"].max()) for c in recording.counters.values() if c.size]
    last = max(ends)
    if last < TRACE_MAX_S:
        return None
    return (
        f"a trace holds times up to {TRACE_MAX_S:.3g} s (whole nanoseconds in 64 bits); "
        f"this run lasts {last:.3g} s of simulated time"
    )


def to_ns(seconds: npt.ArrayLike) -> np.ndarray:
    """Whole nanoseconds. Rounding is monotonic, so spans that do not overlap in seconds do not
    overlap in the trace either, and ``ns / 1000`` prints (and parses back) exactly."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def counter_label(name: str) -> tuple[str, str]:
    """Perfetto names a counter track ``"<event name> <arg>"``: ``cache_used_bytes`` becomes
    ``cache used`` + ``bytes``; a resource's bandwidth ``network/pcie0:host>gpu0_bytes_per_s``
    becomes ``pcie0:host>gpu0`` + ``bytes/s`` (the resource's name as it is)."""
    base = name.rpartition("/")[2]
    if base.endswith("_bytes_per_s"):
        return base.removesuffix("_bytes_per_s"), "bytes/s"
    if base.endswith("_bytes"):
        return base.removesuffix("_bytes").replace("_", " "), "bytes"
    if base.startswith("bytes_"):
        return base.removeprefix("bytes_").replace("_", " "), "bytes"
    return base.replace("_", " "), "value"


def step_changes(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step counter's change points in whole ns: the last sample at each instant, and only
    where the value changes."""
    if not samples.size:
        return np.zeros(0, np.int64), np.zeros(0)
    t, v = to_ns(samples["time"]), samples["value"].astype(np.float64)
    last = np.r_[t[1:] != t[:-1], True]
    t, v = t[last], v[last]
    keep = np.r_[True, v[1:] != v[:-1]]
    return t[keep], v[keep]


TRACE_CHUNK = 1 << 14
"""Events formatted, and handed to the compressor, at a time: ~3 MB of text. Writing a trace
holds one chunk's text and up to ~40 bytes of numbers per span (the spans take 42), never the
whole text (~190 bytes per span, ~65 KB per token)."""
TRACE_GZIP_LEVEL = 4
"""At 2,000 tokens the trace is 130 MB of JSON; level 4 makes it 12x smaller in about the CPU time
formatting it takes (so a thread compressing alongside hides it where a core is free), level 6
13x in 1.7x that time, level 1 10x in 0.6x (measured on 2026-12-01, when the run folder's
trace was this JSON)."""

_dumps = functools.partial(json.dumps, separators=(",", ":"))
_FRACTIONS = np.array(["." + (f"{r:03d}".rstrip("0") or "0") for r in range(1000)], dtype=object)
_CATEGORY = {
    "stall": "stall",
    "write_back": "transfer",
    "nvme_read": "transfer",
    **dict.fromkeys(TRANSFER_KINDS, "transfer"),
}
_SPAN_HEADS = [
    _dumps({"ph": "X", "name": kind, "cat": _CATEGORY.get(kind, "compute")})[:-1]
    + ',"args":{"pass":'
    for kind in KINDS
]


@dataclass(eq=False)
class TraceLayout:
    """Where a trace puts things, whatever its format: a process per device (``pid_of``, from
    1; ``main_pid`` that of the first lane), its tracks (``tracks``: ``(pid, name)``, track id
    = place + 1: each GPU's ``passes`` track first, then each lane's sub-tracks), the spans in
    trace order (``order``: by lane, then start, then position) with the track of each
    (``tid``; ``span_tid`` by span, 0 for a span on no track), the pid of each track
    (``track_pid``, by track id), of each pass's GPU and of each request's, and the spans'
    times in whole ns."""

    pid_of: dict[str, int]
    main_pid: int
    tracks: list[tuple[int, str]]
    pass_pid: list[int]
    pass_pids: list[int]
    request_pid: list[int]
    start_ns: np.ndarray
    end_ns: np.ndarray
    order: np.ndarray
    tid: np.ndarray
    span_tid: np.ndarray
    track_pid: np.ndarray

    def counter_pid(self, name: str) -> int:
        """A counter named ``"<device>/<name>"`` goes to that device's process, others to the
        first lane's."""
        return self.pid_of.get(name.rpartition("/")[0], self.main_pid)


def trace_layout(
    spans: np.ndarray,
    lanes: list[str],
    counters: Mapping[str, np.ndarray],
    per_pass: Mapping[str, Sequence[Any]],
    per_request: Mapping[str, Sequence[Any]],
    rows: LaneRowsOf | None = None,
) -> TraceLayout:
    """The :class:`TraceLayout` of a run's spans, counters and pass and request tables; each
    lane's sub-tracks ``rows`` (:func:`lane_rows` of the spans, where the caller has them:
    :meth:`Recording.lane_rows`)."""
    if rows is None:
        rows = lane_rows(spans["lane"], spans["start"], spans["end"], len(lanes))
    processes = list(dict.fromkeys(lane_process(name) for name in lanes))
    for name in counters:
        device = name.rpartition("/")[0]
        if device and device not in processes:
            processes.append(device)
    pid_of = {name: i + 1 for i, name in enumerate(processes or ["specmd"])}
    main_pid = pid_of[lane_process(lanes[0])] if lanes else 1
    pass_pid = [pid_of.get(gpu, main_pid) for gpu in per_pass.get("gpu", [])]
    pid_of_request: dict[int, int] = {}  # a request runs on one GPU: that of its passes
    for req, pid in zip(per_pass.get("request", []), pass_pid, strict=True):
        pid_of_request.setdefault(req, pid)
    request_pid = [pid_of_request.get(r, main_pid) for r in per_request.get("request", [])]
    pass_pids = list(dict.fromkeys(pass_pid))
    tracks = [(pid, "passes") for pid in pass_pids]
    start_ns, end_ns = to_ns(spans["start"]), to_ns(spans["end"])
    order, tid = _span_tracks(rows, lanes, pid_of, tracks)
    span_tid = np.zeros(spans.size, np.int32)  # 0: a span on no track
    span_tid[order] = tid
    track_pid = np.array([0] + [pid for pid, _ in tracks])
    return TraceLayout(pid_of, main_pid, tracks, pass_pid, pass_pids, request_pid, start_ns,
                       end_ns, order, tid, span_tid, track_pid)  # fmt: skip


def chrome_trace_chunks(
    spans: np.ndarray,
    lanes: list[str],
    counters: dict[str, np.ndarray] | None = None,
    *,
    per_pass: Mapping[str, Sequence[Any]] | None = None,
    per_request: Mapping[str, Sequence[Any]] | None = None,
    num_experts: int | None = None,
    metadata: dict[str, Any] | None = None,
    served: Served | None = None,
    rows: LaneRowsOf | None = None,
) -> Iterator[str]:
    """The Chrome Trace Event Format (JSON object form), for ui.perfetto.dev and chrome://tracing,
    as consecutive pieces of one compact JSON text, at most :data:`TRACE_CHUNK` events each, so
    that a writer never holds the whole text:

    - a process per device (:func:`lane_process`), a thread track per lane (split into
      sub-tracks where its spans overlap, so no track holds overlapping slices);
    - complete events (``ph: X``, microseconds with nanosecond resolution) with args ``pass``,
      ``request``, ``layer``, ``expert`` (index within its layer, given ``num_experts``),
      ``expert_id`` (flat id), ``bytes`` and ``class`` (for a transfer, the class of the access
      it served: :func:`served_class`), each track's in order of start; on a run of several
      GPUs a span on a lane of another device (the host's CPU experts) also names the GPU it
      served (``gpu``, that of its pass);
    - from the engine's ``per_pass`` table (columns ``gpu``, ``pass``, ``request``, ``phase``,
      ``start_s``, ``end_s``), in the process of each pass's GPU (the first lane's where the
      GPU has no lane), a ``passes`` track: one slice per pass, with args ``pass``, ``request``
      (the first of a batch) and ``phase``; on that track, from ``per_request`` (columns
      ``request``, ``arrival_s``, ``ttft_s``, ``finish_s``), one async slice per request phase
      (prefill from its arrival until its first token, then decode until it finishes;
      ``request`` throughout where it has no first token) and an instant event at each first
      token, in the process of the GPU that ran the request's passes;
    - flow events (:data:`FLOWS`): from each stall to the span that ended it, from each
      prefetch to the expert span that used it (:func:`_flow_chunks`);
    - counter tracks (``ph: C``) for every counter (a counter named ``"<device>/<name>"`` goes
      to that device's process, others to the first lane's: the bandwidth of each resource of
      the flow network, ``network/<resource>_bytes_per_s``, to a process ``network``);
    - ``otherData``: ``metadata`` (e.g. model, hardware, policies).

    ``served`` is :func:`served_class` of the spans (or what gives it when first needed) and
    ``rows`` their :func:`lane_rows` (of their times in seconds, as the spans' own order of
    start has them) where the caller has them already (:meth:`Recording.served`,
    :meth:`Recording.lane_rows`).

    Span and counter events, nearly all of a trace, are formatted from the arrays' columns, not
    built as a dict each and dumped: that is what makes a long run's trace cheap (``_span_text``).
    Their times print as the exact decimal of their whole nanoseconds (times are >= 0: a run
    starts at 0), as ``json.dumps(ns / 1000)`` prints them below 10**15 ns, so the text is the
    one a dict per event would give, byte for byte.
    """
    counters = counters or {}
    per_pass, per_request = per_pass or {}, per_request or {}
    layout = trace_layout(spans, lanes, counters, per_pass, per_request, rows)
    pid_of, tracks = layout.pid_of, layout.tracks
    pass_pid, request_pid = layout.pass_pid, layout.request_pid
    start_ns, end_ns, order, tid = layout.start_ns, layout.end_ns, layout.order, layout.tid

    meta: list[dict[str, Any]] = []
    for name, pid in pid_of.items():
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        meta.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
        )
    for t, (pid, name) in enumerate(tracks, 1):
        meta.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": name}}
        )
        meta.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": t,
                "args": {"sort_index": t},
            }
        )
    yield '{"traceEvents":[' + ",".join(map(_dumps, meta))  # never empty: a process at least
    for t, pid in enumerate(layout.pass_pids, 1):
        events = itertools.chain(
            _pass_events(per_pass, [q == pid for q in pass_pid], pid, t),
            _request_events(per_request, [q == pid for q in request_pid], pid, t),
        )
        while batch := list(itertools.islice(events, TRACE_CHUNK)):
            yield "," + ",".join(map(_dumps, batch))
    klass = served_class(spans) if served is None else served_of(served)
    gpus = list(dict.fromkeys(per_pass.get("gpu", [])))
    gpu = served_gpu(spans, lanes, per_pass, gpus)
    track_pid = layout.track_pid
    for lo in range(0, order.size, TRACE_CHUNK):
        i, at = order[lo : lo + TRACE_CHUNK], tid[lo : lo + TRACE_CHUNK]
        yield "," + _span_text(
            spans[i], klass[i], start_ns[i], end_ns[i], track_pid[at], at, num_experts,
            gpu[i], gpus,
        )  # fmt: skip
    yield from _flow_chunks(flow_pairs(spans, lanes), layout)
    for name, samples in sorted(counters.items()):
        label, arg = counter_label(name)
        pid = layout.counter_pid(name)
        event = _dumps({"ph": "C", "name": label, "pid": pid})[:-1]
        event += ',"ts":%d%s,"args":{' + _dumps(arg) + ":%s}}"
        times, values = step_changes(samples)
        for lo in range(0, times.size, TRACE_CHUNK):
            whole, part = _microseconds(times[lo : lo + TRACE_CHUNK])
            texts = [
                str(int(v)) if v.is_integer() else _dumps(v)
                for v in values[lo : lo + TRACE_CHUNK].tolist()
            ]
            yield "," + ",".join(map(event.__mod__, zip(whole, part, texts, strict=True)))
    other = f',"otherData":{_dumps({k: str(v) for k, v in metadata.items()})}' if metadata else ""
    yield '],"displayTimeUnit":"ms"' + other + "}"


def span_gpus(
    spans: np.ndarray,
    lanes: Sequence[str],
    gpus: Sequence[str],
    pass_ids: np.ndarray,
    pass_gpu: np.ndarray,
) -> np.ndarray:
    """Per span, the index in ``gpus`` of the GPU it worked for: the GPU that ran its pass
    (``pass_gpu[i]`` ran pass ``pass_ids[i]``), else its lane's device; -1 for a span of no
    pass on a lane of no GPU."""
    index = {g: i for i, g in enumerate(gpus)}
    of_lane = np.array([index.get(lane_process(n), -1) for n in lanes] + [-1], np.int64)
    out = of_lane[np.where(spans["lane"] >= 0, spans["lane"], len(lanes))]
    pass_ids = np.asarray(pass_ids, np.int64)
    if pass_ids.size:
        gpu_of_pass = np.full(int(pass_ids.max()) + 1, -1, np.int64)
        gpu_of_pass[pass_ids] = pass_gpu
        p = spans["pass_"].astype(np.int64)
        known = (p >= 0) & (p < gpu_of_pass.size)
        known[known] = gpu_of_pass[p[known]] >= 0
        out[known] = gpu_of_pass[p[known]]
    return out


def served_gpu(
    spans: np.ndarray, lanes: list[str], per_pass: Mapping[str, Sequence[Any]], gpus: list[str]
) -> np.ndarray:
    """On a run of several GPUs, for each span on a lane of another device (the host's CPU
    experts), the index in ``gpus`` of the GPU whose pass it served (:func:`span_gpus`); -1
    elsewhere (its process names its GPU already)."""
    if len(gpus) < 2 or not spans.size:
        return np.full(spans.size, -1, np.int64)
    elsewhere = np.array([lane_process(n) not in gpus for n in lanes] + [True])
    pass_gpu = np.array([gpus.index(g) for g in per_pass["gpu"]], np.int64)
    gpu = span_gpus(spans, lanes, gpus, np.asarray(per_pass["pass"]), pass_gpu)
    return np.where(elsewhere[np.where(spans["lane"] >= 0, spans["lane"], len(lanes))], gpu, -1)


def _span_tracks(
    placed: LaneRowsOf, lanes: list[str], pid_of: dict[str, int], tracks: list[tuple[int, str]]
) -> tuple[np.ndarray, np.ndarray]:
    """The spans of ``lanes`` in trace order (by lane, then start, then position) and the track
    (tid) of each; each lane's sub-tracks (``placed``: :func:`lane_rows`) are appended to
    ``tracks``."""
    order, bounds, rows, n_sub = placed
    tid = np.zeros(order.size, np.int32)
    for lane_id, name in enumerate(lanes):
        lo, hi = bounds[lane_id], bounds[lane_id + 1]
        tid[lo:hi] = len(tracks) + 1 + rows[order[lo:hi]]
        track, pid = lane_track(name), pid_of[lane_process(name)]
        n_rows = int(n_sub[lane_id])
        tracks += [(pid, track if n_rows == 1 else f"{track} #{r}") for r in range(n_rows)]
    return order, tid


Served = np.ndarray | Callable[[], np.ndarray]
"""The served classes of a run's spans (:func:`served_class`), or what gives them when first
needed (a recording's, derived once: :meth:`Recording.served`)."""


def served_of(served: Served) -> np.ndarray:
    """The served classes ``served`` holds or gives."""
    return served() if callable(served) else served


LaneRowsOf = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Spans grouped by lane, each lane split into sub-tracks: :func:`lane_rows`' result."""
LaneRows = Callable[[np.ndarray, np.ndarray, np.ndarray, int], LaneRowsOf]
"""What computes :data:`LaneRowsOf` as :func:`lane_rows` does."""


def lane_rows(lane: np.ndarray, start: np.ndarray, end: np.ndarray, n_lanes: int) -> LaneRowsOf:
    """The spans by lane, then start, then position (``order``; those of a lane below 0
    first, none of a lane from ``n_lanes`` on), where each lane's begin in that order (``bounds``,
    ``n_lanes + 1`` of them), each span's sub-track in its lane (``rows``, :func:`track_rows` of
    the lane's spans; 0 off the lanes) and each lane's count of sub-tracks (``n_sub``). (The
    specification of the compiled one the Perfetto trace and the timeline page use,
    ``perfetto.lane_rows_compiled``.)"""
    order = np.lexsort((start, lane))
    bounds = np.searchsorted(lane[order], np.arange(n_lanes + 1))
    order = order[: bounds[-1]]
    rows = np.zeros(lane.size, np.int32)
    n_sub = np.zeros(n_lanes, np.int64)
    for lane_id in range(n_lanes):
        mine = order[bounds[lane_id] : bounds[lane_id + 1]]
        rows[mine], n_sub[lane_id] = track_rows(start[mine], end[mine])
    return order, bounds, rows, n_sub


FLOWS = ("stall ended by", "prefetch used by")
"""The names of the flow events (category ``flow``): from a stall to the span that ended it
(:func:`stall_causes`), and from a prefetch to the expert span that used it
(:func:`prefetch_uses`)."""


def flow_targets(spans: np.ndarray, lanes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Where each span's flows of :data:`FLOWS` go: :func:`stall_causes` and
    :func:`prefetch_uses` (-1: none). The specification of the compiled pass the Perfetto
    trace takes them from (``perfetto.flow_targets_compiled``)."""
    return stall_causes(spans, lanes), prefetch_uses(spans)


def flow_pairs(
    spans: np.ndarray,
    lanes: list[str],
    targets: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The flows of :data:`FLOWS` between spans on a lane of ``lanes`` (those a trace draws), as
    ``(name, sources, targets)`` span indices: from each stall to the span that ended it
    (:func:`stall_causes`), from each prefetch to the expert span that used it
    (:func:`prefetch_uses`); ``targets`` is :func:`flow_targets` where the caller has it.
    Numbered 1, 2, ... in that order, they are the flow ids of every trace format."""
    drawn = (spans["lane"] >= 0) & (spans["lane"] < len(lanes))
    pairs = []
    for name, target in zip(FLOWS, targets or flow_targets(spans, lanes), strict=True):
        src = np.flatnonzero((target >= 0) & drawn)
        src = src[drawn[target[src]]]
        pairs.append((name, src, target[src]))
    return pairs


def _flow_chunks(
    pairs: list[tuple[str, np.ndarray, np.ndarray]], layout: TraceLayout
) -> Iterator[str]:
    """The flow events of :func:`flow_pairs` (``ph: s`` in the first slice, ``ph: f`` with
    ``bp: e`` in the second: each binds to the slice enclosing it on its track). A flow runs
    forward in time (what both ends need to bind): from a stall, at a third of the time it
    shares with the transfer that ended it, to that transfer, at two thirds; from the middle
    of a prefetch to the middle of the expert span that used it (which starts after the
    prefetch ended)."""
    first, start_ns, end_ns = 1, layout.start_ns, layout.end_ns
    track_pid, span_tid = layout.track_pid, layout.span_tid
    for name, src, dst in pairs:
        if name == FLOWS[0]:  # the time both spans cover (they end at the same instant)
            shared = np.maximum(start_ns[src], start_ns[dst])
            length = np.minimum(end_ns[src], end_ns[dst]) - shared
            at_src, at_dst = shared + length // 3, shared + 2 * length // 3
        else:
            at_src = start_ns[src] + (end_ns[src] - start_ns[src]) // 2
            at_dst = start_ns[dst] + (end_ns[dst] - start_ns[dst]) // 2
        head = _dumps({"name": name, "cat": "flow"})[1:-1]
        start = '{"ph":"s","id":%d,' + head + ',"pid":%d,"tid":%d,"ts":%d%s}'
        finish = '{"ph":"f","bp":"e","id":%d,' + head + ',"pid":%d,"tid":%d,"ts":%d%s}'
        for lo in range(0, src.size, TRACE_CHUNK // 2):
            part = slice(lo, lo + TRACE_CHUNK // 2)
            ids = range(first + lo, first + min(src.size, lo + TRACE_CHUNK // 2))
            ends = []
            for template, at, span in ((start, at_src, src), (finish, at_dst, dst)):
                tid = span_tid[span[part]]
                rows = zip(ids, track_pid[tid].tolist(), tid.tolist(), *_microseconds(at[part]),
                           strict=True)  # fmt: skip
                ends.append(map(template.__mod__, rows))
            yield "," + ",".join(itertools.chain.from_iterable(zip(*ends, strict=True)))
        first += src.size


def _microseconds(ns: np.ndarray) -> tuple[list[int], list[str]]:
    """Whole nanoseconds (>= 0) as microseconds in two parts: the whole ones, and ``.fff`` with
    trailing zeros dropped (``.0`` at least): ``1500`` -> ``1`` and ``.5``."""
    whole, part = np.divmod(ns, 1000)
    return whole.tolist(), _FRACTIONS[part].tolist()


def _texts(text: Callable[..., str], *columns: np.ndarray) -> list[str]:
    """``text(*row)`` for each row of the int ``columns``, each distinct row formatted once: the
    spans of a chunk share their kinds, passes, experts, tracks and durations, so few are."""
    order = np.lexsort(columns)
    ordered = [c[order] for c in columns]
    first = np.r_[True, np.any([c[1:] != c[:-1] for c in ordered], axis=0)]  # of a distinct row
    rows = np.array([c[first] for c in ordered], np.int64).T.tolist()
    table = np.array([text(*row) for row in rows], dtype=object)
    inverse = np.empty(order.size, np.int64)
    inverse[order] = np.cumsum(first) - 1
    return table[inverse].tolist()


def _span_text(
    spans: np.ndarray,
    klass: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    num_experts: int | None,
    gpu: np.ndarray,
    gpus: list[str],
) -> str:
    """The events of ``spans`` (a chunk, in trace order), with the class each served, their
    times in whole ns, their tracks and the GPU each served (an index into ``gpus``, -1 to
    leave it out), joined by commas. An event is three texts of few distinct values (what it
    is; its args and track; its duration) and its start."""

    def what(kind: int, pass_: int, request: int) -> str:
        return f'{_SPAN_HEADS[kind]}{pass_},"request":{request}'

    def args_and_track(
        layer: int, expert: int, size: int, klass: int, transfer: int, gpu: int, pid: int,
        tid: int,
    ) -> str:  # fmt: skip
        text = f',"gpu":{_dumps(gpus[gpu])}' if gpu >= 0 else ""
        text += f',"layer":{layer}' if layer >= 0 else ""
        if expert >= 0:
            if num_experts:
                text += f',"expert":{expert % num_experts}'
            text += f',"expert_id":{expert}'
        if size:
            text += f',"bytes":{size}'
        if klass >= 0 or transfer:  # a prefetch whose target layer did not run its expert
            text += f',"class":"{class_name(klass) if klass >= 0 else "unused"}"'
        return text + f'}},"pid":{pid},"tid":{tid},"ts":'

    def duration(ns: int) -> str:
        whole, part = divmod(ns, 1000)
        return f',"dur":{whole}{_FRACTIONS[part]}}}'

    transfer = np.isin(spans["kind"], _TRANSFER_IDS)
    ts_whole, ts_part = _microseconds(start_ns)
    args = (spans["layer"], spans["expert"], spans["bytes"], klass, transfer, gpu, pid, tid)
    columns = (
        _texts(what, spans["kind"], spans["pass_"], spans["request"]),
        _texts(args_and_track, *args),
        ts_whole,
        ts_part,
        _texts(duration, end_ns - start_ns),
    )
    return ",".join(map("%s%s%d%s%s".__mod__, zip(*columns, strict=True)))


def to_chrome_trace(
    spans: np.ndarray,
    lanes: list[str],
    counters: dict[str, np.ndarray] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`chrome_trace_chunks` as one parsed document (same arguments): what a trace file
    holds, for a look at a small run's events in Python."""
    return json.loads("".join(chrome_trace_chunks(spans, lanes, counters, **kwargs)))


def _pass_events(
    per_pass: Mapping[str, Sequence[Any]], mine: list[bool], pid: int, tid: int
) -> Iterator[dict[str, Any]]:
    """A slice per pass of ``per_pass`` where ``mine``."""
    start, end = to_ns(per_pass["start_s"]).tolist(), to_ns(per_pass["end_s"]).tolist()
    for i in np.flatnonzero(mine).tolist():
        p, s, e = int(per_pass["pass"][i]), start[i], end[i]
        args = {"pass": p, "request": int(per_pass["request"][i]), "phase": per_pass["phase"][i]}
        yield {
            "ph": "X",
            "name": f"pass {p}",
            "cat": "pass",
            "pid": pid,
            "tid": tid,
            "ts": s / 1000,
            "dur": (e - s) / 1000,
            "args": args,
        }


def _request_events(
    per_request: Mapping[str, Sequence[Any]], mine: list[bool], pid: int, tid: int
) -> Iterator[dict[str, Any]]:
    """The async slices of each phase and the first-token instant of the requests of
    ``per_request`` where ``mine``."""
    for i in np.flatnonzero(mine).tolist():
        req, ttft = int(per_request["request"][i]), per_request["ttft_s"][i]
        arrival = float(per_request["arrival_s"][i])
        a, z = int(to_ns(arrival)), int(to_ns(per_request["finish_s"][i]))
        first = None if ttft is None else int(to_ns(arrival + ttft))
        phases = [("request", a, z)]
        if first is not None:
            phases = [("prefill", a, first), ("decode", first, z)]
        for phase, lo, hi in phases:
            if hi <= lo and phase == "decode":
                continue
            name = f"request {req} {phase}"
            common = {"cat": "request", "id": req, "pid": pid, "tid": tid, "name": name}
            yield {"ph": "b", "ts": lo / 1000, **common}
            yield {"ph": "e", "ts": hi / 1000, **common}
        if first is not None:
            yield {
                "ph": "i",
                "s": "p",
                "name": f"first token (request {req})",
                "cat": "request",
                "pid": pid,
                "tid": tid,
                "ts": first / 1000,
                "args": {"ttft_ms": (first - a) / 1e6},
            }


def write_chrome_trace(
    path: Path, spans: np.ndarray, lanes: list[str], level: int = TRACE_GZIP_LEVEL, **kwargs: Any
) -> None:
    """Write :func:`chrome_trace_chunks` (same arguments) gzip-compressed at ``level``, a chunk
    at a time (:func:`specmd_sim.gz.write_gzip`): a ``.json.gz`` that ui.perfetto.dev and
    chrome://tracing open as it is, and whose writing holds one chunk's text, not the trace's
    (a long run's is hundreds of MB). The same inputs give the same bytes."""
    write_gzip(
        path, (piece.encode() for piece in chrome_trace_chunks(spans, lanes, **kwargs)), level
    )
