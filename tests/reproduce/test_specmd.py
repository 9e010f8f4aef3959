"""The SpecMD reproduction: trace conversion, finding checks and the report, on small inputs.

The full grid is exercised by `specmd reproduce specmd --quick` (about a minute), not here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specmd_sim.reproduce.specmd import Study, evaluate, markdown_report, mixtral_trace
from specmd_sim.traces import load_trace


def test_mixtral_trace_is_prompt_then_decode(shared_traces: Path, tmp_path: Path) -> None:
    path = mixtral_trace(shared_traces, tmp_path)
    assert path is not None
    trace = load_trace(path)
    with np.load(shared_traces / "mixtral8x7b_decode.npz") as raw:
        expected = np.concatenate([raw["humaneval_p0_prefill_ids"], raw["humaneval_p0_ids"]])
    assert trace.model == "mixtral-8x7b" and trace.num_tokens == 135 + 83
    assert (trace.phase[:135] == 0).all() and (trace.phase[135:] == 1).all()
    assert np.array_equal(trace.experts, expected)


def test_missing_shared_folder_skips_the_real_trace(tmp_path: Path) -> None:
    assert mixtral_trace(tmp_path / "absent", tmp_path) is None


def _row(**kw):
    base = {"trace": "olmoe-synthetic", "engine": "replay", "hardware": "h100-pcie",
            "accuracy": 0.9, "misses": 0, "bytes_moved": 0, "prefetch_issued": 0,
            "ttft_s": None, "slots": 51}  # fmt: skip
    return base | kw


def tiny_study() -> Study:
    rows = []
    for cap in ("2%", "5%"):
        for ev, coll, hit_none, hit_pf in (
            ("lru", 100, 0.10, 0.80),
            ("least-stale", 20, 0.10, 0.85),
            ("least-stale-layer", 10, 0.12, 0.90),
            ("belady", 0, 0.40, 0.95),
        ):
            rows.append(_row(experiment="grid", capacity=cap, eviction=ev, prefetch="none",
                             hit_rate=hit_none, misses_collision=coll * 2))  # fmt: skip
            for pf in ("top-k", "score-threshold"):
                rows.append(_row(experiment="grid", capacity=cap, eviction=ev, prefetch=pf,
                                 hit_rate=hit_pf, misses_collision=coll))  # fmt: skip
    for acc, topk, thr in ((0.7, 0.7, 0.8), (0.8, 0.75, 0.86), (0.9, 0.84, 0.9)):
        rows.append(
            _row(
                experiment="accuracy",
                capacity="5%",
                eviction="least-stale",
                prefetch="top-k",
                accuracy=acc,
                hit_rate=topk,
                misses_collision=0,
            )
        )
        rows.append(_row(experiment="accuracy", capacity="5%", eviction="least-stale",
                         prefetch="score-threshold", accuracy=acc, hit_rate=thr,
                         misses_collision=0))  # fmt: skip
    for th, hit in ((0.01, 0.9), (0.05, 0.8)):
        rows.append(_row(experiment="threshold", capacity="5%", eviction="least-stale",
                         prefetch="score-threshold", accuracy=0.8, threshold=th, hit_rate=hit,
                         misses_collision=0))  # fmt: skip
    for ev, ttft in (("lru", 1.0), ("least-stale-layer", 0.8)):
        for pf in ("none", "top-k"):
            rows.append(
                _row(
                    experiment="ttft",
                    engine="simulate",
                    capacity="5%",
                    eviction=ev,
                    prefetch=pf,
                    ttft_s=ttft,
                    hit_rate=0.5,
                    misses_collision=0,
                )
            )
    return Study(rows=rows, traces={"olmoe-synthetic": "olmoe-synthetic"})


def test_findings_are_checked_against_the_numbers() -> None:
    study = tiny_study()
    found = {f["finding"][:40]: f for f in evaluate(study, quick=True)}
    collision = found["Least-Stale cuts collision misses versus"]
    assert collision["holds"] and collision["summary"].startswith("best 10.00x (least-stale-layer")
    equal = found["Without prefetching Least-Stale is about"]
    assert equal["holds"] and equal["summary"] == "largest advantage of LS +0.0000"
    score = found["Score-based prefetch beats fixed top-k i"]
    assert score["holds"]  # 0.86 at accuracy 0.8 > 0.84 at 0.9
    sweep = found["... and how that depends on the threshol"]
    assert sweep["summary"] == "beats top-k @0.9 for thresholds [0.01]"
    needs = found["88%+ hit rate at 5% on OLMoE needs prefe"]
    assert needs["holds"]  # best online without prefetch 0.12 < 0.88 <= 0.90 with
    ttft = found["Least-Stale reduces TTFT versus LRU on h"]
    assert ttft["holds"] and "20.0% lower TTFT" in ttft["summary"]


def test_a_finding_that_fails_is_reported_as_such() -> None:
    study = tiny_study()
    for r in study.rows:
        if r["experiment"] == "grid" and r["eviction"] == "least-stale" and r["prefetch"] == "none":
            r["hit_rate"] = 0.5  # LS far better than LRU without prefetching
    found = {f["finding"][:40]: f for f in evaluate(study, quick=True)}
    assert not found["Without prefetching Least-Stale is about"]["holds"]


def test_markdown_report_has_findings_and_tables() -> None:
    study = tiny_study()
    study.findings = evaluate(study, quick=True)
    text = markdown_report(study)
    assert text.startswith("# SpecMD reproduction")
    assert "| lru | top-k | 0.800 / 100 / 0 | 0.800 / 100 / 0 |" in text
    assert "## TTFT" in text
