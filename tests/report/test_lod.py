"""Level of detail: which spans are drawn exactly, and aggregated bins that lose no busy time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specmd_sim.engine import jit
from specmd_sim.report.lod import _bins_compiled, bin_bars, bin_spans, choose_detail, step_bins
from specmd_sim.timeline import KIND, KINDS, SPAN_DTYPE

SPAN_ROWS = st.lists(
    st.tuples(
        st.floats(0, 100, allow_nan=False),
        st.floats(0, 20, allow_nan=False),
        st.integers(0, 2),
        st.sampled_from(KINDS),
    ),
    min_size=1,
    max_size=60,
)
"""(start, length, lane, kind) of up to 60 spans on 3 lanes."""


def make_spans(rows: list[tuple[float, float, int, str]]) -> np.ndarray:
    spans = np.zeros(len(rows), SPAN_DTYPE)
    for i, (start, end, lane, kind) in enumerate(rows):
        spans[i]["start"], spans[i]["end"] = start, end
        spans[i]["lane"], spans[i]["kind"] = lane, KIND[kind]
        spans[i]["bytes"] = 10
    return spans


def test_all_spans_exact_up_to_the_limit() -> None:
    spans = make_spans([(0, 1, 0, "attention"), (1, 2, 0, "expert")])
    detail = choose_detail(spans, max_spans=2)
    assert detail.complete and detail.shown == 2
    assert bin_spans(spans, spans["lane"], 1, detail) is None


def test_beyond_the_limit_the_earliest_spans_are_exact() -> None:
    spans = make_spans([(t, t + 0.5, 0, "expert") for t in range(10)])
    detail = choose_detail(spans, max_spans=4)
    assert detail.exact.tolist() == [True] * 4 + [False] * 6
    assert detail.window == (0.0, 4.0)


def test_a_window_draws_its_spans_exactly() -> None:
    spans = make_spans([(t, t + 0.5, 0, "expert") for t in range(10)])
    detail = choose_detail(spans, max_spans=100, window=(2.2, 5.1))
    assert np.flatnonzero(detail.exact).tolist() == [2, 3, 4, 5]  # [2, 2.5) overlaps
    capped = choose_detail(spans, max_spans=2, window=(2.2, 9.0))
    assert np.flatnonzero(capped.exact).tolist() == [2, 3] and capped.window == (2.2, 4.0)


def test_a_window_whose_spans_start_before_it_makes_bins_that_do_not_overlap() -> None:
    """Spans crossing into a window and more of them than drawn exactly: the window ends at its
    start (not before it), so the bins before and after it do not overlap and each span not
    drawn exactly is counted once."""
    spans = make_spans([(0, 0.5, 0, "attention"), (0, 0.5, 1, "attention")])
    detail = choose_detail(spans, 1, (0.25, 0.5))
    assert detail.window == (0.25, 0.25)
    bins = bin_spans(spans, spans["lane"], 2, detail, 40)
    assert bins is not None and (bins.lo[1:] > bins.lo[:-1]).all()
    rest = spans[~detail.exact]
    assert bins.count.sum() == rest.size == 2  # (ties at the cut: none drawn exactly)
    assert np.isclose(bins.busy.sum(), (rest["end"] - rest["start"]).sum())


def test_bins_skip_the_window_and_bars_fit_their_bins() -> None:
    spans = make_spans([(t, t + 0.5, t % 2, "prefetch") for t in range(10)])
    spans = np.concatenate([spans, make_spans([(0.0, 10.0, 1, "demand_fetch")])])
    detail = choose_detail(spans, 100, window=(4.0, 6.0))
    bins = bin_spans(spans, spans["lane"], 2, detail, budget=40)
    assert bins is not None
    assert not ((bins.lo < 6.0) & (bins.hi > 4.0)).any(), "no bin inside the window"
    for bars in bin_bars(bins).values():
        assert (bars["base"] >= bars["lo"] - 1e-12).all()
        assert (bars["base"] + bars["length"] <= bars["hi"] + 1e-12).all()
    # lane 1: a prefetch every other second plus a fetch covering everything: concurrency
    prefetch = bin_bars(bins)["prefetch"]
    assert (prefetch["concurrency"][prefetch["row"] == 1] > 1).any()


@settings(max_examples=60, deadline=None)
@given(
    SPAN_ROWS,
    st.integers(1, 30),
    st.integers(8, 400),
)
def test_bins_lose_no_busy_time(rows: list, max_spans: int, budget: int) -> None:
    """The busy time of all bins is the total length of the spans not drawn exactly, and
    every one of them is counted in exactly one bin."""
    spans = make_spans([(s, s + d, lane, kind) for s, d, lane, kind in rows])
    detail = choose_detail(spans, max_spans)
    bins = bin_spans(spans, spans["lane"], 3, detail, budget)
    rest = spans[~detail.exact]
    if bins is None:
        assert not rest.size or (rest["end"] - rest["start"]).sum() == 0
        return
    total = float((rest["end"] - rest["start"]).sum())
    assert np.isclose(bins.busy.sum(), total, rtol=1e-9, atol=1e-9)
    assert bins.count.sum() == rest.size
    assert np.isclose(bins.nbytes.sum(), rest["bytes"].sum())


@given(
    SPAN_ROWS,
    st.integers(1, 30),
)
def test_bins_of_spans_in_order_of_start_are_those_of_any_order(rows: list, max_spans: int):
    """A recording's spans come in order of start (each group's then need no sorting): the
    bins are the same, to the bit, as those of the same spans in any order."""
    spans = make_spans([(s, s + d, lane, kind) for s, d, lane, kind in rows])
    ordered = spans[np.argsort(spans["start"], kind="stable")]
    bins = [bin_spans(x, x["lane"], 3, choose_detail(x, max_spans), 50) for x in (spans, ordered)]
    if bins[0] is None:
        assert bins[1] is None
        return
    for name in ("lo", "hi", "busy", "count", "nbytes"):
        np.testing.assert_array_equal(getattr(bins[0], name), getattr(bins[1], name))


@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=40),
    st.integers(1, 30),
    st.none() | st.tuples(st.integers(0, 9), st.integers(1, 10)),
)
def test_detail_cuts_at_the_start_a_stable_sort_puts_after_the_limit(
    starts: list, max_spans: int, window: tuple | None
) -> None:
    """The exact spans are those before the start of the ``max_spans + 1``-th span in order of
    start (of those in the window), whatever order they come in and however many share one."""
    spans = make_spans([(float(s), s + 0.5, 0, "expert") for s in starts])
    if window is not None:
        window = (float(window[0]), float(window[0] + window[1]))
    detail = choose_detail(spans, max_spans, window)
    start, end = spans["start"], spans["end"]
    inside = np.ones(start.size, bool) if window is None else (
        (start < window[1]) & (end > window[0]))  # fmt: skip
    idx = np.flatnonzero(inside)
    if window is None and start.size <= max_spans:
        assert detail.complete and detail.exact.all()
        return
    if idx.size > max_spans:
        cut = start[idx[np.argsort(start[idx], kind="stable")][max_spans]]
        np.testing.assert_array_equal(detail.exact, inside & (start < cut))
        assert detail.window == ((start.min(), cut) if window is None else
                                 (window[0], max(window[0], cut)))  # fmt: skip
    else:
        np.testing.assert_array_equal(detail.exact, inside)
        assert detail.window == window


LANE_RUNS = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 6), st.integers(0, 2), st.sampled_from(KINDS)),
    min_size=1,
    max_size=80,
)
"""(gap, length, lane, kind) of up to 80 spans, each lane's one after another (in thirds and
sevenths of a second: sums that round, so that an order of summing other than the sorting
path's shows)."""


def _compared(spans: np.ndarray, max_spans: int, budget: int, window: tuple | None) -> None:
    """The bins of the compiled pass are the sorting path's, bit for bit."""
    detail = choose_detail(spans, max_spans, window)
    compiled = bin_spans(spans, spans["lane"], 3, detail, budget)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jit, "available", lambda: False)
        sorting = bin_spans(spans, spans["lane"], 3, detail, budget)
    assert (compiled is None) == (sorting is None)
    if compiled is None:
        return
    for name in ("lo", "hi", "busy", "count", "nbytes"):
        np.testing.assert_array_equal(getattr(compiled, name), getattr(sorting, name))


def _taken(spans: np.ndarray) -> bool:
    """Whether the compiled pass takes the spans (each group's ends in order)."""
    key = spans["lane"].astype(np.int64) * len(KINDS) + spans["kind"]
    groups, s, e = np.flatnonzero(np.bincount(key)), spans["start"], spans["end"]
    edges = np.linspace(s.min(), e.max(), 9)
    found = _bins_compiled(key, groups, s, e, np.ones(s.size), edges[:-1], edges[1:],
                           np.arange(8) == 7)  # fmt: skip
    return found is not None


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@settings(max_examples=80, deadline=None)
@given(LANE_RUNS, st.integers(1, 30), st.integers(8, 400),
       st.none() | st.tuples(st.integers(0, 60), st.integers(1, 40)))  # fmt: skip
@example([(0, 2, 0, "attention"), (0, 2, 1, "attention")], 1, 8, (1, 1))  # (spans before it)
def test_the_compiled_bins_are_the_sorting_ones_to_the_bit(
    rows: list, max_spans: int, budget: int, window: tuple | None
) -> None:
    """Spans in order of start whose lanes' spans follow each other (a recording's sub-lanes)
    are binned by one compiled pass, to the bins the sorting path makes, windows splitting
    them included."""
    free, runs = [0.0] * 3, []  # (each lane's spans after its last one's end)
    for gap, length, lane, kind in rows:
        start = free[lane] + gap / 3
        free[lane] = start + length / 7
        runs.append((start, free[lane], lane, kind))
    spans = make_spans(sorted(runs, key=lambda r: r[0]))
    spans["bytes"] = np.arange(spans.size) * 7 + 1
    assert _taken(spans)
    _compared(spans, max_spans, budget, None if window is None else
              (window[0] / 5, (window[0] + window[1]) / 5))  # fmt: skip


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
def test_spans_that_end_out_of_order_are_left_to_the_sorting_path() -> None:
    """A group whose spans end out of order (one of a lane's spans inside another's), or an
    end that is NaN: the compiled pass is not taken, the bins are the sorting path's."""
    spans = make_spans([(0, 10, 0, "prefetch"), (1, 2, 0, "prefetch"), (3, 4, 1, "expert")])
    assert not _taken(spans)
    _compared(spans, 1, 40, None)
    spans = make_spans([(0, 1, 0, "prefetch"), (1, 2, 0, "prefetch")])
    spans["end"][0] = np.nan
    assert not _taken(spans)


def test_step_bins_min_max_mean() -> None:
    time = np.array([1.0, 2.0, 3.0, 3.5])
    value = np.array([10.0, 0.0, 5.0, 7.0])
    lo, vmin, vmax, mean = step_bins(time, value, 0.0, 4.0, 4)
    assert lo.tolist() == [0, 1, 2, 3]
    assert vmin.tolist() == [0, 10, 0, 5]
    assert vmax.tolist() == [0, 10, 0, 7]
    assert mean.tolist() == [0, 10, 0, 6]
