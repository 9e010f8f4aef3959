"""The timeline, per-layer view and run report of a run on two GPUs: every row, panel and axis
names its GPU, each GPU has its own request and pass rows and its own per-layer view."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim.metrics import RunResult
from specmd_sim.report import RunData, layer_figure, timeline_figure
from specmd_sim.report.analysis import layer_totals, ttft_breakdown
from specmd_sim.report.run_report import (
    prefetch_figure,
    stall_figure,
    taxonomy_figure,
    ttft_figure,
)
from specmd_sim.timeline import lane_process


@pytest.fixture(scope="module")
def run(two_gpus: RunResult) -> RunData:
    return RunData.from_result(two_gpus)


def test_each_gpu_has_its_request_and_pass_rows_above_its_lanes(run: RunData) -> None:
    assert run.gpus == ["gpu0", "gpu1"]
    fig = timeline_figure(run)
    names = list(fig.layout.yaxis.ticktext)
    assert names == [
        "gpu0/requests", "gpu0/passes", "gpu0/compute", "gpu0/copy-h2d-0", "gpu0/copy-h2d-1",
        "gpu1/requests", "gpu1/passes", "gpu1/compute", "gpu1/copy-h2d-0", "gpu1/copy-h2d-1",
    ]  # fmt: skip
    gpu_of_pass = dict(zip(run.result["per_pass"]["pass"], run.result["per_pass"]["gpu"],
                           strict=True))  # fmt: skip
    passes = next(t for t in fig.data if t.name == "passes")
    for (pass_, *_), y in zip(passes.customdata, passes.y, strict=True):
        assert names[int(y)] == f"{gpu_of_pass[int(pass_)]}/passes"
    assert {names[int(y)] for y in passes.y} == {"gpu0/passes", "gpu1/passes"}
    assert "%{text}pass" in passes.hovertemplate and set(passes.text) == {"gpu0 · ", "gpu1 · "}
    gpu_of_request = {r: gpu_of_pass[p] for p, r in zip(run.result["per_pass"]["pass"],
                                                        run.result["per_pass"]["request"],
                                                        strict=True)}  # fmt: skip
    for phase in ("prefill", "decode"):
        bars = next(t for t in fig.data if t.name == phase)
        for (request, *_), y in zip(bars.customdata, bars.y, strict=True):
            assert names[int(y)] == f"{gpu_of_request[int(request)]}/requests"
    ttft = {a.text.split(" ")[2]: names[int(a.y)] for a in fig.layout.annotations}
    assert ttft == {"r0": "gpu0/requests", "r1": "gpu1/requests"}


def test_spans_are_drawn_on_their_gpus_lanes(run: RunData) -> None:
    fig = timeline_figure(run, max_spans=len(run.spans))
    names = list(fig.layout.yaxis.ticktext)
    for trace in fig.data:
        if trace.type == "bar" and trace.name not in ("passes", "prefill", "decode"):
            lane = trace.hovertemplate.split(" · ", 1)[1].split("<br>", 1)[0]
            assert {names[int(y)] for y in trace.y} == {lane}


def test_every_counter_axis_names_its_gpu(run: RunData) -> None:
    fig = timeline_figure(run)
    titles = [fig.layout[f"yaxis{i}"].title.text for i in range(2, 6)]
    assert titles == [
        "gpu0 · in flight<br>(MiB)", "gpu0 · cache used<br>(MiB)",
        "gpu1 · in flight<br>(MiB)", "gpu1 · cache used<br>(MiB)",
    ]  # fmt: skip
    counters = {t.name for t in fig.data if t.type == "scatter"}
    of_gpus = {n for n in counters if not n.startswith("network ")}
    assert of_gpus == {"gpu0 in flight", "gpu0 cache used", "gpu1 in flight", "gpu1 cache used"}
    names = run.require_spans("counters").counters
    links = {f"network {n.removeprefix('network/').removesuffix('_bytes_per_s')}"
             for n in names if n.startswith("network/")}  # fmt: skip
    assert links and counters - of_gpus == links  # each link's name holds its GPUs


def _passes_of(fig, traces) -> set[int]:
    return {int(row[0]) for t in traces for row in np.asarray(t.customdata)}


def test_the_per_layer_view_is_one_gpu_at_a_time(run: RunData) -> None:
    fig = layer_figure(run)
    gpu_passes = [set(np.asarray(run.passes["pass_"])[run.pass_gpu == g].tolist()) for g in (0, 1)]
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["gpu0", "gpu1"]
    for g, button in enumerate(menu.buttons):
        visible, layout = button.args
        spans = [t for t, v in zip(fig.data, visible["visible"], strict=True)
                 if v and t.xaxis == "x"]  # fmt: skip
        assert spans and _passes_of(fig, spans) <= gpu_passes[g]
        lanes = {t.hovertemplate.split(" · ", 1)[1].split("<br>", 1)[0] for t in spans}
        assert {lane_process(lane) for lane in lanes} == {run.gpus[g]}
        titles = [a["text"] for a in layout["annotations"]]
        assert titles[:2] == [f"gpu{g}: spans by layer", f"gpu{g}: compute and stall per layer"]
        assert titles[2:] == [f"first token r{g} · TTFT " + titles[2].rsplit(" ", 2)[-2] + " ms"]
        assert layout["yaxis.title.text"] == f"gpu{g}"
        totals = [t for t, v in zip(fig.data, visible["visible"], strict=True)
                  if v and t.xaxis == "x2"]  # fmt: skip
        compute, stall = layer_totals(run, g)
        assert [list(t.x) for t in totals] == [compute.tolist(), stall.tolist()]
    # the first GPU is shown first: its traces, titles and markers
    shown = [t for t in fig.data if t.visible]
    assert _passes_of(fig, [t for t in shown if t.xaxis == "x"]) <= gpu_passes[0]
    assert [a.text for a in fig.layout.annotations][:2] == [
        "gpu0: spans by layer", "gpu0: compute and stall per layer",
    ]  # fmt: skip
    assert fig.layout.yaxis.title.text == "gpu0"


def test_per_gpu_totals_add_up_to_the_engines_per_layer_table(run: RunData) -> None:
    parts = [layer_totals(run, g) for g in (0, 1)]
    for k, column in enumerate(("compute_s", "stall_s")):
        assert all(p[k].sum() > 0 for p in parts)
        total = sum(p[k] for p in parts)
        assert total == pytest.approx(run.per_layer[column], rel=1e-9, abs=1e-15)


def test_ttft_per_layer_counts_only_the_requests_gpu(run: RunData) -> None:
    """Each request's layers add up to at most its own compute and stall: the other GPU,
    busy with another request at the same time, is not counted."""
    b = ttft_breakdown(run)
    mean_layers = b.layer_compute.sum() + b.layer_stall.sum()
    assert 0 < mean_layers <= (b.requests["compute"] + b.requests["stall"]).mean() * (1 + 1e-9)
    fig = ttft_figure(run)
    assert list(fig.data[0].y) == ["request 0 · gpu0", "request 1 · gpu1"]


def test_panels_summed_over_the_gpus_say_so(run: RunData) -> None:
    for figure in (taxonomy_figure, prefetch_figure, stall_figure):
        subtitle = figure(run).layout.title.subtitle.text
        assert "of the 2 GPUs" in subtitle or "(all 2 GPUs)" in subtitle, figure.__name__
