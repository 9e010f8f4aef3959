"""Level of detail: which spans a figure draws one by one, and how it summarises the rest.

A browser draws a few thousand bars smoothly, not the ~100,000 spans of a default run. A figure
therefore draws at most ``max_spans`` spans exactly -- those of a *detail window*: by default
the start of the run (the first request's prefill, where its TTFT is), or a window the user
asks for -- and summarises every other span in time bins. For each row (a lane, or a layer) and
kind, a bin holds the busy time of that kind inside it. A bin is drawn as consecutive bars, one
per kind, whose lengths are those busy times, so the colour mix of a bin is the share of its
time each kind took and the idle rest of the bin stays empty. Where spans of a row overlap (two
copy engines fetching for the same layer) the busy times add up to more than the bin: the bars
are then scaled to fit and the hover text gives the average concurrency. Figures say on
themselves which part is exact and how wide the bins are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.engine import jit
from specmd_sim.timeline import KINDS

DRAW_ORDER = (
    "attention", "copy_issue", "expert", "cpu_expert", "lm_head", "stall", "demand_fetch",
    "prefetch", "promoted_prefetch", "streamed", "write_back", "nvme_read",
)  # fmt: skip
"""Order of kinds inside an aggregated bin (kinds not listed follow, in :data:`KINDS` order)."""


@dataclass(frozen=True, eq=False)
class Detail:
    """Which spans are drawn exactly: ``exact`` is a mask over the spans; ``window`` the time
    range ``[t0, t1)`` they come from (None when every span is exact)."""

    exact: np.ndarray
    window: tuple[float, float] | None
    total: int

    @property
    def complete(self) -> bool:
        return self.window is None

    @property
    def shown(self) -> int:
        return int(self.exact.sum())


def choose_detail(
    spans: np.ndarray, max_spans: int, window: tuple[float, float] | None = None
) -> Detail:
    """Pick the spans to draw exactly.

    Without ``window``: all spans when there are at most ``max_spans``, else the earliest ones:
    every span starting before the start of the ``max_spans + 1``-th (by start time). With
    ``window`` (seconds): the spans overlapping it, and if they are more than ``max_spans``
    the earliest of them, the window then ending where they stop (at its start where they
    all start before it).
    """
    total = len(spans)
    start, end = spans["start"], spans["end"]
    if window is None:
        if total <= max_spans:
            return Detail(np.ones(total, bool), None, total)
        lo, candidates, starts = float(start.min()), None, start
    else:
        lo = float(window[0])
        candidates = (start < window[1]) & (end > window[0])
        starts = start[candidates]
    if starts.size > max_spans:  # (the start of the max_spans + 1-th, by start)
        cut = float(np.partition(starts, max_spans)[max_spans])
        exact = start < cut
        window_ = (lo, max(lo, cut))  # (never before it starts: then the bins would overlap)
        return Detail(exact if candidates is None else candidates & exact, window_, total)
    assert window is not None and candidates is not None  # (else more than max_spans)
    return Detail(candidates, (lo, float(window[1])), total)


@dataclass(frozen=True, eq=False)
class Bins:
    """Time bins ``[lo, hi)`` outside the detail window, and per (row, kind index, bin) the busy
    seconds, the number of spans starting in the bin and their bytes."""

    lo: np.ndarray
    hi: np.ndarray
    busy: np.ndarray
    count: np.ndarray
    nbytes: np.ndarray

    @property
    def width(self) -> float:
        return float((self.hi - self.lo).max()) if self.lo.size else 0.0

    @property
    def size(self) -> int:
        return int(self.lo.size)


def bin_spans(
    spans: np.ndarray, rows: np.ndarray, n_rows: int, detail: Detail, budget: int = 4000
) -> Bins | None:
    """Summarise the spans that ``detail`` does not draw exactly; None when there are none.

    ``rows`` gives each span's row (lane or layer). Bins have one width, chosen so that at most
    about ``budget`` bars are drawn (one per non-empty row, kind and bin); the detail window is
    left out. Busy time is exact, also for spans that cross bin edges: for a set of spans,
    busy time before ``t`` is ``sum(t - start | start < t) - sum(t - end | end < t)``.
    """
    rest = ~detail.exact
    if not rest.any():
        return None
    shown = detail.shown
    tail = not rest[:shown].any()  # (the exact spans first, as a recording's are: the rest a
    # slice; else np.compress, which gathers a field of the rows ~2x faster than a boolean index)

    def of_rest(column: np.ndarray, dtype: Any) -> np.ndarray:
        return np.ascontiguousarray(column[shown:] if tail else np.compress(rest, column), dtype)

    s, e = of_rest(spans["start"], np.float64), of_rest(spans["end"], np.float64)
    segments = [(float(s.min()), float(e.max()))]
    if detail.window is not None:
        w0, w1 = detail.window
        t0, t1 = segments[0]
        segments = [(a, b) for a, b in ((t0, min(w0, t1)), (max(w1, t0), t1)) if b > a]
    if not segments:
        return None
    r, k = of_rest(rows, np.int64), of_rest(spans["kind"], np.int64)
    key = r * len(KINDS) + k  # (rows and kinds from 0: a few hundred values)
    groups = np.flatnonzero(np.bincount(key))
    n_bins = int(np.clip(budget // max(1, groups.size), 8, 2000))
    width = sum(b - a for a, b in segments) / n_bins
    edges = [
        np.linspace(a, b, max(1, int(np.ceil((b - a) / width - 1e-9))) + 1) for a, b in segments
    ]
    lo = np.concatenate([x[:-1] for x in edges])
    hi = np.concatenate([x[1:] for x in edges])
    # bins are [lo, hi), but the last bin of a segment also holds spans starting at its end
    last = np.concatenate([np.arange(x.size - 1) == x.size - 2 for x in edges])
    shape = (n_rows, len(KINDS), lo.size)
    busy, count, nbytes = np.zeros(shape), np.zeros(shape, np.int64), np.zeros(shape)
    b = of_rest(spans["bytes"], np.float64)
    in_order = bool(np.all(s[1:] >= s[:-1]))  # (a recording's spans are: by start)
    rising = bool(np.all(lo[1:] > lo[:-1]) and np.all(hi[1:] > hi[:-1]))  # (what it walks)
    if in_order and rising and jit.available():
        found = _bins_compiled(key, groups, s, e, b, lo, hi, last)
        if found is not None:
            rows_of, kinds_of = np.divmod(groups, len(KINDS))
            busy[rows_of, kinds_of], count[rows_of, kinds_of], nbytes[rows_of, kinds_of] = found
            return Bins(lo, hi, busy, count, nbytes)
    if groups[-1] < 2**15:  # (a stable sort of 16-bit keys is a radix sort: linear)
        key = key.astype(np.int16)
    by_group = np.argsort(key, kind="stable")  # each group's spans together, in their order
    group_keys: np.ndarray = np.r_[groups, groups[-1] + 1]  # (each group's key, and one past)
    bounds = np.searchsorted(key[by_group], group_keys)
    for g, first, stop in zip(groups.tolist(), bounds[:-1], bounds[1:], strict=True):
        row, kind = divmod(g, len(KINDS))
        m = by_group[first:stop]
        if not in_order:
            m = m[np.argsort(s[m], kind="stable")]
        starts, sizes, ends = s[m], b[m], e[m]
        if not bool(np.all(ends[1:] >= ends[:-1])):  # (a sub-lane's spans end in order)
            ends = np.sort(ends)
        busy[row, kind] = _busy_between(starts, ends, lo, hi)
        n_lo = np.searchsorted(starts, lo)
        n_hi = np.where(last, np.searchsorted(starts, hi, "right"), np.searchsorted(starts, hi))
        count[row, kind] = n_hi - n_lo
        cum = _running_sum(sizes)
        nbytes[row, kind] = cum[n_hi] - cum[n_lo]
    return Bins(lo, hi, busy, count, nbytes)


def _bins_compiled(
    key: np.ndarray,
    groups: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    last: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`bin_spans`' busy time, counts and bytes of each group (``groups``, the keys
    present) and bin, for spans in order of start, by one compiled pass over them
    (:func:`_prefixes`) in place of a sort and a gather per group; the same numbers, bit for
    bit: the same sums in the same order, the same arithmetic after. None where a group's
    spans do not end in order of start (or an end is NaN): then the sort is needed."""
    slot = np.full(int(groups[-1]) + 1, -1, np.int64)
    slot[groups] = np.arange(groups.size)
    shape = (5, groups.size, lo.size)
    n, sums, nbytes = np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape)
    if not _prefixes(slot[key], s, e, b, lo, hi, last, n, sums, nbytes):
        return None
    busy = _covered(n[1], sums[1], n[4], sums[4], hi) - _covered(n[0], sums[0], n[3], sums[3], lo)
    return busy, n[2] - n[0], nbytes[2] - nbytes[0]


@jit.compiled
def _prefixes(group, s, e, b, lo, hi, last, n, sums, nbytes):  # type: ignore[no-untyped-def]
    """For spans in order of start (``s``; ends ``e``, bytes ``b``, each's ``group`` slot), at
    each bin ``j`` of each group ``g``: how many of its spans, their running sum and that of
    their bytes (``n``, ``sums``, ``nbytes`` at ``[q, g, j]``), for each query ``q``: 0 starts
    before ``lo``, 1 starts before ``hi``, 2 starts before ``hi`` or at it where the bin is its
    segment's last, 3 ends before ``lo``, 4 ends before ``hi``. Each a prefix of the group's
    spans, taken as they pass the bins' edges (which increase). False where a group's ends do
    not come in order (or one is NaN)."""
    groups = n.shape[1]
    at = np.zeros((5, groups), np.int64)  # each query's next bin, by group
    count, total = np.zeros((2, groups), np.int64), np.zeros((2, groups))
    total_b, end = np.zeros(groups), np.full(groups, -np.inf)
    out = (at, n, sums, nbytes)
    for i in range(s.size):
        g, x, y = group[i], s[i], e[i]
        if not y >= end[g]:  # (an end before the last, or NaN)
            return False
        end[g] = y
        for q, edges in ((0, lo), (1, hi), (2, hi)):  # (unrolled: a tuple of arrays)
            _passed(q, g, x, edges, last, out, count[0, g], total[0, g], total_b[g])
        count[0, g] += 1
        total[0, g] += x
        total_b[g] += b[i]
        for q, edges in ((3, lo), (4, hi)):
            _passed(q, g, y, edges, last, out, count[1, g], total[1, g], total_b[g])
        count[1, g] += 1
        total[1, g] += y
    for g in range(groups):  # (the bins past every span: all of them)
        for q, edges in ((0, lo), (1, hi), (2, hi), (3, lo), (4, hi)):
            k = 0 if q < 3 else 1
            _passed(q, g, np.inf, edges, last, out, count[k, g], total[k, g], total_b[g])
    return True


@jit.compiled_inline
def _passed(q, g, value, edges, last, out, count, total, total_b):  # type: ignore[no-untyped-def]
    """Query ``q`` of group ``g`` (:func:`_prefixes`) at each next edge ``value`` has passed
    (is at or past it; past it, for query 2 at a segment's last bin): the prefix so far."""
    at, n, sums, nbytes = out
    j = at[q, g]
    while j < edges.size and (edges[j] < value if q == 2 and last[j] else edges[j] <= value):
        n[q, g, j], sums[q, g, j], nbytes[q, g, j] = count, total, total_b
        j += 1
    at[q, g] = j


def _busy_between(
    starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Total time the spans (sorted ``starts``, sorted ``ends``) cover between each ``lo`` and
    its ``hi``: what they cover before ``hi`` less what they cover before ``lo``."""
    cs, ce = _running_sum(starts), _running_sum(ends)

    def before(t: np.ndarray) -> np.ndarray:
        ns, ne = np.searchsorted(starts, t), np.searchsorted(ends, t)
        return _covered(ns, cs[ns], ne, ce[ne], t)

    return before(hi) - before(lo)


def _covered(
    n_starts: np.ndarray, starts: np.ndarray, n_ends: np.ndarray, ends: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """The time spans cover before ``t``, from the count and sum of their starts before it and
    of their ends before it (the one formula of both ways of binning: the same bits)."""
    return (n_starts * t - starts) - (n_ends * t - ends)


def _running_sum(values: np.ndarray) -> np.ndarray:
    """0, then the running sums of ``values`` (``np.r_[0.0, np.cumsum(values)]``, in place)."""
    out = np.empty(values.size + 1)
    out[0] = 0.0
    np.cumsum(values, out=out[1:])
    return out


BAR_DTYPE = np.dtype(
    [("row", "i4"), ("base", "f8"), ("length", "f8"), ("busy", "f8"), ("share", "f8"),
     ("concurrency", "f8"), ("count", "i8"), ("bytes", "f8"), ("lo", "f8"), ("hi", "f8")]
)  # fmt: skip


def bin_bars(bins: Bins) -> dict[str, np.ndarray]:
    """The bars that draw ``bins``, by kind (``BAR_DTYPE``): inside each (row, bin) the kinds
    follow one another in :data:`DRAW_ORDER` from the bin's start; a bar's ``length`` is its
    busy time, scaled down where the busy times of the bin add up to more than its width."""
    order = [KINDS.index(k) for k in DRAW_ORDER if k in KINDS]
    order += [i for i in range(len(KINDS)) if i not in order]
    busy = bins.busy[:, order, :]  # (rows, kinds, bins)
    width = bins.hi - bins.lo
    total = busy.sum(axis=1)
    scale = np.where(total > width, width / np.where(total > 0, total, 1.0), 1.0)
    length = busy * scale[:, None, :]
    offset = np.cumsum(length, axis=1) - length
    out: dict[str, np.ndarray] = {}
    for j, kind_id in enumerate(order):
        rr, bb = np.nonzero(busy[:, j, :] > 0)
        if not rr.size:
            continue
        bars = np.zeros(rr.size, BAR_DTYPE)
        bars["row"] = rr
        bars["base"] = bins.lo[bb] + offset[rr, j, bb]
        bars["length"] = length[rr, j, bb]
        bars["busy"] = busy[rr, j, bb]
        bars["share"] = busy[rr, j, bb] / width[bb]
        bars["concurrency"] = np.maximum(total[rr, bb] / width[bb], 1.0)
        bars["count"] = bins.count[rr, kind_id, bb]
        bars["bytes"] = bins.nbytes[rr, kind_id, bb]
        bars["lo"], bars["hi"] = bins.lo[bb], bins.hi[bb]
        out[KINDS[kind_id]] = bars
    return out


def step_bins(
    time: np.ndarray, value: np.ndarray, lo: float, hi: float, n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A step function (``value[i]`` holds from ``time[i]`` on, 0 before the first sample)
    summarised over ``n_bins`` equal bins of ``[lo, hi]``: bin starts, minimum, maximum and
    time-weighted mean in each bin. A counter with many thousand changes is drawn as the
    min-max band and the mean line without losing a peak."""
    edges = np.linspace(lo, hi, n_bins + 1)
    v = np.r_[0.0, value]  # v[k]: value after the k-th sample (k = 0: before any)
    t = np.r_[-np.inf, time]
    held = v[np.searchsorted(time, edges[:-1], side="right")]
    first_in = np.searchsorted(time, edges[:-1], side="right") + 1  # in v/t indexing
    end_in = np.searchsorted(time, edges[1:], side="left") + 1
    vmin, vmax = held.copy(), held.copy()
    has = end_in > first_in
    if has.any():
        bounds = np.stack([first_in[has], end_in[has]], axis=1).ravel()
        padded = np.r_[v, 0.0]
        vmax[has] = np.maximum(vmax[has], np.maximum.reduceat(padded, bounds)[::2])
        vmin[has] = np.minimum(vmin[has], np.minimum.reduceat(padded, bounds)[::2])
    # integral of the step function from the first sample to x
    steps = np.diff(t[1:]) * v[1:-1] if time.size > 1 else np.zeros(0)
    cum = _running_sum(steps)

    def integral(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(time, x, side="right")  # samples at or before x
        i = np.clip(k - 1, 0, None)
        return np.where(k > 0, cum[i] + v[k] * (x - time[i]), 0.0) if time.size else 0 * x

    mean = (integral(edges[1:]) - integral(edges[:-1])) / np.diff(edges)
    return edges[:-1], vmin, vmax, mean
