"""The figures as data: lanes, kinds, hover fields, markers, level of detail, and the numbers
of the run report (checked against the timing engine's own totals)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.pages import packed_ids

from specmd_sim.metrics import METRICS, RunResult
from specmd_sim.report import RunData, layer_figure, timeline_figure
from specmd_sim.report.analysis import covered, stall_by_cause, stall_by_phase, ttft_breakdown
from specmd_sim.report.run_report import run_figures, write_run_report
from specmd_sim.report.style import kind_colour
from specmd_sim.timeline import COMPUTE_KINDS, KIND, KINDS, Recording, SpanRecorder


@pytest.fixture(scope="module")
def run(timed: RunResult) -> RunData:
    return RunData.from_result(timed)


def bars(fig, name: str) -> list:
    return [t for t in fig.data if t.type == "bar" and t.name == name]


def exact_spans_drawn(fig) -> int:
    return sum(len(t.x) for t in fig.data if t.type == "bar" and t.legendgroup in KINDS
               and "aggregated" not in t.name)  # fmt: skip


def test_timeline_has_a_lane_per_engine_and_a_trace_per_kind(run: RunData) -> None:
    fig = timeline_figure(run, max_spans=len(run.spans))
    assert list(fig.layout.yaxis.ticktext) == [
        "requests", "passes", "gpu0/compute", "gpu0/copy-h2d-0", "gpu0/copy-h2d-1",
    ]  # fmt: skip
    names = {t.name for t in fig.data if t.type == "bar"}
    assert {"attention", "expert compute", "LM head", "stall", "demand fetch",
            "prefetch"} <= names  # fmt: skip
    assert bars(fig, "stall")[0].marker.color == kind_colour("stall")
    assert exact_spans_drawn(fig) == len(run.spans), "below the limit every span is drawn"
    assert "All" in fig.layout.title.subtitle.text


def test_hover_shows_token_layer_expert_bytes_and_class(run: RunData) -> None:
    fig = timeline_figure(run)
    fetch = bars(fig, "demand fetch")[0]
    # (the pass's position in its request: "step", prompts being prefilled in one pass; "token"
    # where every pass is one token)
    for field in ("pass", "request", "step", "layer", "expert", "MiB", "serves"):
        assert field in fetch.hovertemplate, field
    assert set(fetch.hovertext) <= {"compulsory miss", "capacity miss", "collision miss",
                                    "late hit", "hit", "unused by its target layer"}  # fmt: skip
    expert = bars(fig, "expert compute")[0]
    assert "access: %{hovertext}" in expert.hovertemplate
    row = np.asarray(expert.customdata)[0]
    _pass, _request, step, layer, local, flat = row[:6].astype(int)
    assert flat == layer * run.num_experts + local and step >= 0


def test_ttft_and_passes_are_marked(run: RunData) -> None:
    fig = timeline_figure(run)
    ttft = [a.text for a in fig.layout.annotations if "TTFT" in (a.text or "")]
    assert len(ttft) == len(run.requests) == 2
    dashed = [s for s in fig.layout.shapes if s.type == "line" and s.line.dash == "dash"]
    table = run.result["per_request"]
    firsts = sorted((a + t) * 1e3 for a, t in zip(table["arrival_s"], table["ttft_s"],
                                                  strict=True))  # fmt: skip
    assert sorted(s.x0 for s in dashed) == pytest.approx(firsts)
    passes = next(t for t in fig.data if t.name == "passes")
    assert len(passes.x) == len(run.passes) == run.inputs["passes"]


def test_passes_and_requests_are_the_engines_tables(run: RunData) -> None:
    per_pass, per_request = run.result["per_pass"], run.result["per_request"]
    passes = run.passes
    assert passes["pass_"].tolist() == per_pass["pass"]
    assert passes["start"].tolist() == per_pass["start_s"]
    assert passes["end"].tolist() == per_pass["end_s"]
    assert [("prefill", "decode")[p] for p in passes["phase"]] == per_pass["phase"]
    assert run.requests["end"].tolist() == per_request["finish_s"]
    assert run.requests["decode_tokens"].tolist() == per_request["decode_tokens"]
    # the pass bars are coloured by the engine's phase
    fig = timeline_figure(run)
    bars = next(t for t in fig.data if t.name == "passes")
    assert list(bars.hovertext) == per_pass["phase"]


def test_beyond_the_limit_spans_are_aggregated_and_the_figure_says_so(run: RunData) -> None:
    fig = timeline_figure(run, max_spans=300)
    # the earliest spans: those starting before the 301st start (a tie at the cut is left out)
    starts = run.spans["start"]
    drawn = int((starts < np.sort(starts)[300]).sum())
    assert 290 <= drawn <= 300
    assert exact_spans_drawn(fig) == drawn
    aggregated = [t for t in fig.data if "aggregated" in (t.name or "")]
    assert aggregated and all(not t.showlegend or t.legendgroup for t in aggregated)
    subtitle = fig.layout.title.subtitle.text
    assert f"{drawn} of {len(run.spans):,} spans drawn one by one" in subtitle
    assert "summarised in" in subtitle
    grey = [s for s in fig.layout.shapes if s.type == "rect"]
    assert grey, "the aggregated time range is shaded"


def test_a_window_is_drawn_exactly_and_shown_first(run: RunData) -> None:
    lo, hi = float(run.passes["start"][3]), float(run.passes["end"][4])
    fig = timeline_figure(run, max_spans=100_000, window=(lo, hi))
    assert tuple(fig.layout.xaxis.range) == pytest.approx((lo * 1e3, hi * 1e3))
    layers = layer_figure(run, max_spans=100_000, window=(lo, hi))
    assert tuple(layers.layout.xaxis.range) == pytest.approx((lo * 1e3, hi * 1e3))


def test_per_layer_view_puts_compute_above_and_transfers_below(run: RunData) -> None:
    fig = layer_figure(run)
    assert list(fig.layout.yaxis.ticktext)[: run.num_layers] == [
        f"layer {i}" for i in range(run.num_layers)
    ]
    for name in ("attention", "expert compute", "stall"):
        y = np.concatenate([np.asarray(t.y) for t in bars(fig, name)])
        assert ((y - np.round(y)) < 0).all(), name  # above the layer's line
    y = np.concatenate([np.asarray(t.y) for t in bars(fig, "prefetch")])
    assert ((y - np.round(y)) > 0).all()
    totals = [t for t in fig.data if t.xaxis == "x2"]
    assert [t.name for t in totals] == ["compute per layer", "stall per layer"]
    assert [list(t.x) for t in totals] == [run.per_layer["compute_s"], run.per_layer["stall_s"]]
    assert "Showing passes 0–2" in fig.layout.title.subtitle.text
    notes = [a.text for a in fig.layout.annotations]
    assert notes[0] == "compute and stall per layer"  # the panel's title is kept, and
    assert [n.split(" · ")[0] for n in notes[1:]] == ["first token r0", "first token r1"]
    assert not fig.layout.updatemenus, "one GPU: no GPU menu"


def test_lanes_and_kinds_are_data_driven() -> None:
    """A lane of another device and a kind the engine does not record yet appear as such."""
    rec = SpanRecorder()
    gpu, cpu, link = rec.lane("gpu0/compute"), rec.lane("host0/cpu-experts"), rec.lane("links/x")
    rec.add(gpu, "attention", 0.0, 1e-3, pass_=0, layer=0, request=0)
    rec.add(cpu, "cpu_expert", 1e-3, 3e-3, pass_=0, layer=0, expert=5, request=0, klass=2)
    rec.add(link, "demand_fetch", 0.0, 2e-3, 0, 0, 7, 100, 0)
    rec.add(link, "demand_fetch", 1e-3, 4e-3, 0, 0, 8, 100, 0)
    rec.add(gpu, "lm_head", 4e-3, 5e-3, pass_=0, request=0)
    result = {"engine": "simulate", "metrics": {"makespan_s": 5e-3}, "per_layer": {},
              "per_request": {"request": [0], "arrival_s": [0.0], "ttft_s": [5e-3],
                              "finish_s": [5e-3], "decode_tokens": [0]},
              "per_pass": {"gpu": ["gpu0"], "pass": [0], "request": [0], "phase": ["prefill"],
                           "start_s": [0.0], "end_s": [5e-3]},
              "inputs": {"num_layers": 2, "num_experts": 4}, "config": {}}  # fmt: skip
    run = RunData(result, Recording(rec.array(), rec.lanes))
    fig = timeline_figure(run)
    assert list(fig.layout.yaxis.ticktext) == [
        "requests", "passes", "gpu0/compute", "host0/cpu-experts", "links/x #0", "links/x #1",
    ]  # fmt: skip
    cpu_bars = bars(fig, "CPU expert")
    assert cpu_bars and cpu_bars[0].marker.color == kind_colour("cpu_expert")


def test_replay_runs_have_no_timeline(replay_dir: Path) -> None:
    from specmd_sim.errors import SpecmdError

    run = RunData.load(replay_dir)
    with pytest.raises(SpecmdError, match="this is a replay run"):
        timeline_figure(run)
    assert set(run_figures(run)) == {"taxonomy", "prefetch"}


# --- the numbers of the report -------------------------------------------------------------


def test_stall_breakdown_adds_up_to_the_engines_stall(run: RunData) -> None:
    by_cause = stall_by_cause(run)
    assert by_cause.sum() == pytest.approx(run.metrics["stall_s"], rel=1e-9)
    assert by_cause.sum(axis=1) == pytest.approx(run.per_layer["stall_s"], rel=1e-9, abs=1e-12)
    assert sum(stall_by_phase(run).values()) == pytest.approx(run.metrics["stall_s"], rel=1e-9)


def test_ttft_breakdown_per_layer_adds_up_to_the_engines_split(run: RunData) -> None:
    """The per-layer split, from the spans, covers each request's TTFT window as the engine's
    per-request compute and stall do (the spans of no layer, the LM head, make up the rest)."""
    engine = run.result["per_request"]
    b = ttft_breakdown(run)
    assert b.requests["request"].tolist() == engine["request"]
    assert b.requests["total"].tolist() == engine["ttft_s"]
    assert b.requests["other"].tolist() == engine["ttft_other_s"]
    spans = run.spans
    compute = spans[np.isin(spans["kind"], [KIND[k] for k in COMPUTE_KINDS])]
    stall = spans[spans["kind"] == KIND["stall"]]
    n = run.num_layers
    for r in b.requests:
        arrival = engine["arrival_s"][engine["request"].index(int(r["request"]))]
        window = (arrival, arrival + r["total"])
        assert covered(compute, *window, n).sum() == pytest.approx(r["compute"], rel=1e-9)
        assert covered(stall, *window, n).sum() == pytest.approx(r["stall"], rel=1e-9, abs=1e-15)
    mean_layers = b.layer_compute.sum() + b.layer_stall.sum()
    assert 0 < mean_layers <= (b.requests["compute"] + b.requests["stall"]).mean()


def test_run_report_page(run: RunData, timed_dir: Path, tmp_path: Path) -> None:
    figures = write_run_report(RunData.load(timed_dir), tmp_path / "report.html")
    assert set(figures) == {"taxonomy", "prefetch", "stall", "ttft", "latency"}
    taxonomy = figures["taxonomy"]
    stacked = np.sum([np.asarray(t.y) for t in taxonomy.data], axis=0)
    assert stacked.tolist() == run.per_layer["accesses"]
    page = (tmp_path / "report.html").read_text()
    # plotly.js once and its loader, then each figure's JSON and the script that draws it
    assert packed_ids(page) == ["plotly-js"] + [f"fig-{i}-data" for i in range(1, 6)]
    assert page.count("<script") == 2 + 2 * len(figures)
    assert 'href="timeline.html"' in page and "All metrics" in page
    # each number in its unit: throughput in tok/s, link bandwidths in B/s, shares in %
    throughput = METRICS["throughput_tok_s"].format(run.metrics["throughput_tok_s"])
    assert throughput.endswith(" tok/s") and f">{throughput}</td>" in page
    assert "GB/s</td>" in page and "%</td>" in page
    json.loads(json.dumps(figures["ttft"].to_plotly_json(), default=str))


def test_latency_figure_draws_each_requests_ttft_and_tpot_and_the_slo(tiny_config) -> None:
    """The empirical CDFs are the per-request values, sorted, at shares 1/n ... 1; each SLO
    limit is a line; the caption carries the run's percentiles and attainment."""
    from specmd_sim import replay, simulate
    from specmd_sim.report.run_report import latency_figure

    result = simulate(tiny_config(slo={"ttft_s": 0.2, "tpot_s": 0.05},
                                  timing={"record_spans": False}))  # fmt: skip
    figure = latency_figure(RunData.from_result(result, None))
    assert figure is not None
    ttft, tpot = figure.data
    for trace, column in ((ttft, "ttft_s"), (tpot, "tpot_s")):
        values = sorted(v for v in result.per_request[column] if v is not None)
        assert np.asarray(trace.x).tolist() == pytest.approx([v * 1e3 for v in values])
        assert np.asarray(trace.y).tolist() == pytest.approx(
            [(i + 1) / len(values) for i in range(len(values))])  # fmt: skip
    lines = [s.x0 for s in figure.layout.shapes]
    assert lines == pytest.approx([200.0, 50.0])
    caption = figure.layout.title.subtitle.text
    assert METRICS["ttft_p99_s"].format(result.metrics["ttft_p99_s"]) in caption
    assert "SLO met by" in caption
    assert latency_figure(RunData.from_result(replay(tiny_config()), None)) is None
