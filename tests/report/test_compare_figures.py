"""The figures of ``specmd compare`` on rows shaped like ``examples/sweep-quick.yaml`` (2
machines x 3 eviction policies x 2 prefetchers x 2 (trace, cache) pairs): curves only along
an axis that a series varies, each policy listed once beside the plots, log axes over
decades, bars that average nothing silently, labels with every parameter that tells two
policies apart."""

from __future__ import annotations

from typing import Any

import pytest

from specmd_sim.report.compare import MAX_BAR_GROUPS, compare_figures
from specmd_sim.report.rows import BANDWIDTH, CAPACITY, Row, plan

EVICTIONS = ({"kind": "lru", "prefetch_insert": "mru"}, {"kind": "least-stale", "order": "fifo"},
             {"kind": "least-stale", "order": "layer"})  # fmt: skip
PAIRS = (("mixtral-synthetic", 6.25, 14.0), ("olmoe-synthetic", 5.0, 0.5))  # capacity %, TTFT


def row(i: int, **fields: Any) -> Row:
    base = {"status": "ok", "source": f"sweep#{i}", "engine": "simulate", "config.seed": 0,
            "inputs.routed_bytes": 100.0, "config.eviction.order": None,
            "config.eviction.prefetch_insert": None, "config.prefetch.k": None,
            "config.prefetch.lookahead": None}  # fmt: skip
    return {**base, **fields}


def quick_rows(evictions: tuple[dict, ...] = EVICTIONS) -> list[Row]:
    rows = []
    for hardware, slower in (("h100-pcie", 1.0), ("slow-link-5gbps", 11.0)):
        for e, eviction in enumerate(evictions):
            for p, prefetch in enumerate(("none", "top-k")):
                for trace, capacity, ttft in PAIRS:
                    fields = {
                        "config.hardware": hardware,
                        "config.trace": trace,
                        "inputs.capacity_bytes": capacity,
                        **{f"config.eviction.{k}": v for k, v in eviction.items()},
                        "config.prefetch.kind": prefetch,
                        "config.prefetch.lookahead": 1 if prefetch == "top-k" else None,
                        "hit_rate": 0.02 * (e + p + 1),
                        "misses_collision": 10 * e,
                        "ttft_s": ttft * slower,
                        "tpot_s": ttft * slower / 30,
                        "stall_s": ttft * slower * 3 * (1 - 0.1 * e),
                    }
                    rows.append(row(len(rows), **fields))
    return rows


@pytest.fixture(scope="module")
def figures() -> dict:
    layout = plan(quick_rows())
    assert [a.column for a in layout.axes] == [CAPACITY, BANDWIDTH]
    return compare_figures(layout)


def test_an_axis_no_series_varies_draws_no_curve(figures: dict) -> None:
    """Each trace has its own capacity: along capacity every series is one point."""
    assert set(figures) == {"vs-link_bandwidth_gbps", "policies"}
    lines = [t for t in figures["vs-link_bandwidth_gbps"].data if t.type == "scatter"]
    assert lines and all(len(t.x) == 2 and t.mode == "lines+markers" for t in lines)


def test_a_series_of_one_point_is_a_marker() -> None:
    rows = quick_rows()
    rows.append(row(99, **{**rows[0], "config.eviction.kind": "fifo", "source": "run"}))
    fig = compare_figures(plan(rows))["vs-link_bandwidth_gbps"]
    fifo = [t for t in fig.data if t.name == "fifo + none"]
    assert fifo and all(len(t.x) == 1 and t.mode == "markers" for t in fifo)
    assert "1 series with one x value as markers" in fig.layout.title.subtitle.text


def test_legend_beside_the_plots_lists_each_policy_once(figures: dict) -> None:
    fig = figures["vs-link_bandwidth_gbps"]
    listed = [t.name for t in fig.data if t.showlegend]
    assert listed == [
        "lru + none", "lru + top-k", "least-stale(order=fifo) + none",
        "least-stale(order=fifo) + top-k", "least-stale(order=layer) + none",
        "least-stale(order=layer) + top-k",
    ]  # fmt: skip
    for name in ("vs-link_bandwidth_gbps", "policies"):
        legend, title = figures[name].layout.legend, figures[name].layout.title
        assert legend.orientation == "v" and legend.x >= 1 and legend.xanchor == "left", name
        assert legend.y <= 1 and legend.yanchor == "top" and title.yref == "container", name
    # the contexts are rows of panels, each with its heading
    headings = [a.text for a in fig.layout.annotations if a.text.startswith("<b>")]
    assert headings == ["<b>trace=mixtral-synthetic · cache capacity=6.25</b>",
                        "<b>trace=olmoe-synthetic · cache capacity=5</b>"]  # fmt: skip


def test_axes_that_span_decades_are_logarithmic(figures: dict) -> None:
    curves = figures["vs-link_bandwidth_gbps"]
    titles = [a.text for a in curves.layout.annotations if not a.text.startswith("<b>")]
    assert titles == ["TPOT (ms)", "TTFT (ms)", "stall (ms)"] * 2  # (no throughput in these rows)
    assert all(curves.layout[f"yaxis{i}"].type == "log" for i in range(1, 7))
    bars = figures["policies"]
    types = {a.text: bars.layout[f"xaxis{i}"].type for i, a in
             enumerate(bars.layout.annotations, start=1)}  # fmt: skip
    assert types == {"hit rate": None, "TTFT (ms)": "log", "TPOT (ms)": "log",
                     "stall (ms)": "log"}  # fmt: skip
    narrow = quick_rows()
    for r in narrow:
        r["ttft_s"] = 1.0 + r["hit_rate"]  # within a factor of 2
    fig = compare_figures(plan(narrow))["policies"]
    assert fig.layout.xaxis2.type is None and fig.layout.xaxis2.rangemode == "tozero"


def test_bars_average_nothing_silently(figures: dict) -> None:
    fig = figures["policies"]
    assert fig.layout.title.text == "Policies side by side"
    groups = [t.name for t in fig.data if t.showlegend]
    assert len(groups) == 4
    for hardware in ("h100-pcie", "slow-link-5gbps"):
        for trace in ("mixtral-synthetic", "olmoe-synthetic"):
            assert sum(hardware in g and trace in g for g in groups) == 1, (hardware, trace)
    assert all(list(t.customdata) == [1] * 6 for t in fig.data), "one run per bar"
    assert [a.text for a in fig.layout.annotations] == [
        "hit rate", "TTFT (ms)", "TPOT (ms)", "stall (ms)",
    ]  # fmt: skip


def test_bars_over_many_points_say_what_they_average() -> None:
    rows = []
    for capacity in range(1, MAX_BAR_GROUPS + 3):
        for kind in ("lru", "fifo"):
            fields = {"config.hardware": "h100-pcie", "config.trace": "t",
                      "inputs.capacity_bytes": float(capacity), "config.eviction.kind": kind,
                      "config.prefetch.kind": "none", "hit_rate": capacity / 20}  # fmt: skip
            rows.append(row(len(rows), **fields))
    fig = compare_figures(plan(rows))["policies"]
    expected = f"cache capacity ({MAX_BAR_GROUPS + 2} values)"
    assert fig.layout.title.text == f"Policies side by side — each bar the mean over {expected}"
    assert [list(t.customdata) for t in fig.data] == [[MAX_BAR_GROUPS + 2] * 2]


def test_labels_keep_the_parameters_that_differ() -> None:
    lru, layer = EVICTIONS[0], EVICTIONS[2]
    layout = plan(quick_rows((lru, layer)))
    assert layout.policies == ["lru + none", "lru + top-k", "least-stale(order=layer) + none",
                               "least-stale(order=layer) + top-k"]  # fmt: skip
    layout = plan(quick_rows())
    assert "least-stale(order=fifo) + none" in layout.policies
