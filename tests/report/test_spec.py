"""Figures as plotly's JSON (``report/spec.py``), checked against plotly itself: the subplot
grid against ``make_subplots``, and every timeline and per-layer spec against the figure
plotly makes of it, whose validation must leave the JSON a page holds unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import plotly.io as pio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plotly.subplots import make_subplots

from specmd_sim import SimConfig, simulate
from specmd_sim.metrics import RunResult
from specmd_sim.report import RunData, timeline
from specmd_sim.report.layers import layer_spec
from specmd_sim.report.spec import grid, spec_json, template, to_figure
from specmd_sim.report.timeline import timeline_spec


@st.composite
def grids(draw: st.DrawFn) -> tuple[int, int, dict]:
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    sizes = st.sampled_from([0.16, 0.3, 0.84, 1, 3, 90, 400])
    kw: dict = {
        "shared_xaxes": draw(st.booleans()),
        "shared_yaxes": draw(st.booleans()),
    }
    if draw(st.booleans()):
        kw["row_heights"] = draw(st.lists(sizes, min_size=rows, max_size=rows))
    if draw(st.booleans()):
        kw["column_widths"] = draw(st.lists(sizes, min_size=cols, max_size=cols))
    if rows > 1 and draw(st.booleans()):
        kw["vertical_spacing"] = draw(st.sampled_from([0.0, 0.04, 0.1]))
    if cols > 1 and draw(st.booleans()):
        kw["horizontal_spacing"] = draw(st.sampled_from([0.0, 0.015, 0.1]))
    if draw(st.booleans()):
        titles = st.sampled_from(["", "a", "compute and stall per layer"])
        kw["subplot_titles"] = draw(st.lists(titles, min_size=rows * cols, max_size=rows * cols))
    return rows, cols, kw


@settings(max_examples=300, deadline=None)
@given(grids())
def test_the_grid_is_the_layout_make_subplots_gives(case: tuple[int, int, dict]) -> None:
    rows, cols, kw = case
    expected = make_subplots(rows=rows, cols=cols, **kw).to_dict()["layout"]
    expected.pop("template")
    assert json.loads(json.dumps(grid(rows, cols, **kw))) == json.loads(json.dumps(expected))


@pytest.mark.parametrize("rows, cols, space", [(34, 1, 0.04), (1, 3, 0.6), (2, 1, -0.1)])
def test_spacing_a_grid_cannot_have_is_refused_as_make_subplots_refuses_it(
    rows: int, cols: int, space: float
) -> None:
    kw = {"vertical_spacing" if cols == 1 else "horizontal_spacing": space}
    with pytest.raises(ValueError, match="spacing"):
        make_subplots(rows=rows, cols=cols, **kw)
    with pytest.raises(ValueError, match=r"spacing of \d+ subplots: expected 0 to .* got"):
        grid(rows, cols, **kw)


def test_many_counters_fit_the_timeline(tiny_config: Callable[..., SimConfig]) -> None:
    """A plot per counter (a run of 8 GPUs records ~33): the spacing between them shrinks so
    that they fit (plotly refuses 0.04 between more than 26 subplots)."""
    run = RunData.from_result(
        simulate(tiny_config(hardware="hgx-h100-8gpu",
                             parallel={"gpus": 8, "mode": "expert-sharded"}))
    )  # fmt: skip
    counters = run.require_spans("the timeline").counters
    samples = next(c for c in counters.values() if c.size)
    counters.update({f"gpu{g}/extra_{k}_bytes": samples for g in range(8) for k in range(3)})
    spec = timeline_spec(run)
    domains = [v["domain"] for k, v in spec["layout"].items() if k.startswith("yaxis")]
    assert len(domains) > 26 and all(hi > lo for lo, hi in domains)
    assert json.loads(spec_json(spec)) == as_plotly_writes_it(spec)


def test_a_figure_of_a_spec_leaves_the_spec_as_it_was(runs: dict[str, RunData]) -> None:
    spec = layer_spec(runs["two GPUs"])
    text = spec_json(spec)
    to_figure(spec)
    assert spec_json(spec) == text


def as_plotly_writes_it(spec: dict) -> dict:
    """The JSON of the figure plotly makes of ``spec`` (validated, its template built)."""
    return json.loads(pio.to_json(to_figure(spec), validate=False, remove_uids=True))


@pytest.fixture(scope="module")
def runs(timed: RunResult, two_gpus: RunResult) -> dict[str, RunData]:
    return {"one GPU": RunData.from_result(timed), "two GPUs": RunData.from_result(two_gpus)}


@pytest.mark.parametrize("gpus", ["one GPU", "two GPUs"])
@pytest.mark.parametrize(
    "view",
    [{}, {"max_spans": 100}, {"max_spans": 10**9}, {"window": (0.2, 0.4)}],
    ids=["default", "aggregated", "every span", "window"],
)
def test_plotly_leaves_each_spec_as_the_page_writes_it(
    runs: dict[str, RunData], gpus: str, view: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec is the figure plotly would make: validating it changes nothing the page holds
    (every trace, its arrays as plotly writes them, the layout with its template)."""
    monkeypatch.setattr(timeline, "MAX_COUNTER_POINTS", 50)  # (counters in bands too)
    run = runs[gpus]
    if "window" in view:  # (as fractions of the run)
        end = float(run.metrics["makespan_s"])
        view = {"window": (view["window"][0] * end, view["window"][1] * end)}
    for spec in (timeline_spec(run, **view), layer_spec(run, **view)):
        text = spec_json(spec)
        assert json.loads(text) == as_plotly_writes_it(spec)
        assert json.loads(spec_json(spec)) == json.loads(text), "writing leaves the spec as it was"
        assert any(isinstance(v, np.ndarray) for t in spec["data"] for v in t.values())


def test_a_view_with_no_markers_has_no_empty_lists_of_them(
    runs: dict[str, RunData], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No first-token marks (too many requests) and every span drawn (no aggregated ranges):
    no shapes or annotations, as plotly leaves empty ones out."""
    monkeypatch.setattr(timeline, "ttft_marks", lambda *a, **k: ([], []))
    spec = timeline_spec(runs["one GPU"], max_spans=10**9)
    assert "shapes" not in spec["layout"] and "annotations" not in spec["layout"]
    assert json.loads(spec_json(spec)) == as_plotly_writes_it(spec)


def test_a_template_plotly_does_not_have_is_one_line() -> None:
    with pytest.raises(ValueError, match="expected one of plotly's templates, got 'nope'"):
        template("nope")
    assert template("plotly_white")["layout"]["plot_bgcolor"] == "white"


@pytest.mark.parametrize(
    "values",
    [
        np.array([1.5, np.nan, np.inf, -np.inf]),
        np.arange(5, dtype=np.int64) * 1_000,
        np.array([1, 1 << 40], dtype=np.int64),
        np.array([3, 70_000], dtype=np.uint64),
        np.array([1, 2], dtype=np.float32),
        np.array([True, False]),
        np.zeros(0),
        np.arange(6.0).reshape(3, 2),
        np.array(["a", "b</script>"], dtype=object),
        np.array(["x", "y"]),
        np.array([1.5, 2.5, 3.0], dtype=">f8"),
        np.array(["2026-12-07", "2026-12-08"], dtype="datetime64[D]"),
    ],
    ids=[
        "floats",
        "int64",
        "int64-wide",
        "uint64",
        "float32",
        "bool",
        "empty",
        "2-d",
        "objects",
        "unicode",
        "big-endian",
        "dates",
    ],
)
def test_arrays_are_written_as_plotly_writes_them(values: np.ndarray) -> None:
    """Each kind of array, and a numpy scalar, a tuple, arrays in a list and an array under a
    key plotly never types (``range``), against plotly's writing of the same figure."""
    spec = {
        "data": [{"type": "scatter", "x": values, "y": np.arange(values.shape[0]),
                  "customdata": values, "marker": {"size": np.int64(3)},
                  "meta": [values, "a"]}],
        "layout": {"template": "plotly_white",
                   "xaxis": {"range": np.array([0.5, 2.0]), "tickvals": (1, 2)},
                   "title": {"text": "NaN <b>Infinity</b>"}},
    }  # fmt: skip
    assert json.loads(spec_json(spec)) == as_plotly_writes_it(spec)
