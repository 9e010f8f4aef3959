"""The SpecMD reproduction: its traces and controls, the verdict rule (a variant that makes the
effect vanish makes a finding a "setup artefact", a null control that shows it as strongly one of
"layer order"), and docs/reproduction.md against the runs
behind it (rendered from them, and a sample of them rerun).

The whole study runs in `specmd reproduce specmd --quick` (under two minutes), not here.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specmd_sim.reproduce.specmd import traces as study_traces
from specmd_sim.reproduce.specmd.findings import Spread, judge, score_based
from specmd_sim.reproduce.specmd.grid import config_for, run_row
from specmd_sim.reproduce.specmd.report import plan_of, read_runs, render
from specmd_sim.traces import load_trace

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_mixtral_trace_is_prompt_then_decode(shared_traces: Path) -> None:
    trace = study_traces.mixtral(shared_traces)
    assert trace is not None
    with np.load(shared_traces / "mixtral8x7b_decode.npz") as raw:
        expected = np.concatenate([raw["humaneval_p0_prefill_ids"], raw["humaneval_p0_ids"]])
    assert trace.model == "mixtral-8x7b" and trace.num_tokens == 135 + 83
    assert (trace.phase[:135] == 0).all() and (trace.phase[135:] == 1).all()
    assert np.array_equal(trace.experts, expected)


def test_missing_shared_folder_skips_the_real_trace(tmp_path: Path) -> None:
    assert study_traces.mixtral(tmp_path / "absent") is None


def test_controls_keep_the_shape_and_remove_the_structure() -> None:
    subject = study_traces.olmoe(0)
    uniform = study_traces.uniform(subject, 0)
    shuffled = study_traces.shuffled(subject, 0)
    for control in (uniform, shuffled):
        assert control.experts.shape == subject.experts.shape
        assert np.array_equal(control.request, subject.request)
        assert np.array_equal(control.phase, subject.phase)
    # shuffled: the same rows in another order; uniform: no popularity left
    assert sorted(map(bytes, shuffled.experts)) == sorted(map(bytes, subject.experts))
    assert not np.array_equal(shuffled.experts, subject.experts)
    counts = np.bincount(uniform.experts[:, 0].ravel(), minlength=64)
    skewed = np.bincount(subject.experts[:, 0].ravel(), minlength=64)
    assert counts.max() / counts.mean() < skewed.max() / skewed.mean()
    assert np.array_equal(study_traces.uniform(subject, 0).experts, uniform.experts)  # seeded


def test_the_verdict_rule() -> None:
    strong, weak = Spread.of([0.10, 0.12, 0.11]), Spread.of([0.0, 0.01, -0.01])
    assert judge(strong, 0.05, {"uniform": weak}, {})[0] == "reproduced"
    assert judge(strong, 0.05, {"uniform": strong}, {})[0] == "layer order"
    assert judge(strong, 0.05, {"uniform": weak}, {"timing": weak})[0] == "setup artefact"
    assert judge(Spread.of([0.10, 0.02]), 0.05, {}, {})[0] == "not reproduced"  # one seed fails
    # log2 ratios: a 4x null effect is much weaker than a 16x one (under half the ratio)
    assert judge(Spread.of([4.0]), 1.0, {"uniform": Spread.of([2.0])}, {}, log2=True)[0] == (
        "reproduced"
    )
    assert judge(Spread.of([4.0]), 1.0, {"uniform": Spread.of([3.0])}, {}, log2=True)[0] == (
        "layer order"
    )
    assert judge(strong, 0.05, {}, {"not measured": Spread.of([])})[0] == "reproduced"
    # a variant that kills it decides, whatever the controls show; both are named
    verdict, reason = judge(strong, 0.05, {"uniform": strong}, {"timing": weak})
    assert verdict == "setup artefact"
    assert "uniform control" in reason and "with timing" in reason
    verdict, reason = judge(strong, 0.05, {"uniform": strong, "shuffled": weak}, {})
    assert verdict == "layer order" and "uniform control" in reason and "shuffled" not in reason


def _score_rows(effect_on_control: float) -> list[dict[str, Any]]:
    rows = []
    for control, gain in (("subject", 0.07), ("uniform", effect_on_control)):
        for seed in range(5):
            for predictor in ("oracle", "oracle-uniform", "transition-fitted"):
                for engine in ("replay", "simulate"):
                    base = {
                        "experiment": "score",
                        "control": control,
                        "seed": seed,
                        "predictor": predictor,
                        "engine": engine,
                        "bytes_moved": 100,
                    }
                    rows.append(base | {"prefetch": "top-k", "accuracy": 0.9, "hit_rate": 0.8})
                    rows.append(base | {"prefetch": "score-threshold", "accuracy": 0.8,
                                        "hit_rate": 0.8 + gain})  # fmt: skip
    for r in rows:
        if r["predictor"] == "transition-fitted":
            r["accuracy"] = None
    return rows


def test_a_finding_as_strong_on_the_null_control_is_layer_order_not_reproduced() -> None:
    """The check can fail: fed a null control that shows the effect, it says so."""
    (on_null,) = score_based(_score_rows(effect_on_control=0.07))
    assert on_null.verdict == "layer order" and "uniform control" in on_null.reason
    (absent,) = score_based(_score_rows(effect_on_control=0.0))
    assert absent.verdict == "reproduced", absent.reason


@pytest.fixture(scope="module")
def documented() -> tuple[str, list[dict[str, Any]]]:
    runs = DOCS / "reproduction-runs.csv"
    return (DOCS / "reproduction.md").read_text(encoding="utf-8"), read_runs(runs)


def test_the_document_is_the_rendering_of_its_runs(documented) -> None:
    text, rows = documented
    assert render(rows, plan_of(text)) == text, (
        "docs/reproduction.md is generated: `specmd reproduce specmd --out DIR`, then copy "
        "DIR/reproduction.md and DIR/runs.csv to docs/ (reproduction-runs.csv)"
    )


def test_a_sample_of_the_documented_runs_reproduces_exactly(documented, tmp_path: Path) -> None:
    _, rows = documented
    rng = random.Random(0)
    olmoe = [r for r in rows if r["subject"] == "olmoe"]
    sample = [rng.choice([r for r in olmoe if r["engine"] == e]) for e in ("replay", "simulate")]
    sample.append(rng.choice([r for r in olmoe if r["predictor"] == "transition-fitted"]))
    # and one timed run of each runtime and per-kernel overhead of the study (their times are
    # what a change of the time model moves: the hf-eager rows went stale unseen once)
    timed = [r for r in olmoe if r["engine"] == "simulate"]
    for setup in sorted({(r["runtime"], r["dispatch_s"]) for r in timed}, key=str):
        sample.append(rng.choice([r for r in timed if (r["runtime"], r["dispatch_s"]) == setup]))
    for row in sample:
        paths = study_traces.write_traces(
            tmp_path / "traces", {"olmoe": study_traces.olmoe}, (row["seed"],)
        )
        labels = {k: v for k, v in row.items() if k not in METRIC_KEYS}
        again = run_row((labels, config_for(labels, paths, tmp_path)))
        assert again == row, f"run {labels} changed"
    assert load_trace(paths[("olmoe", "subject", row["seed"])]).num_tokens == 256


METRIC_KEYS = ("slots", "hit_rate", "late_hit_rate", "misses", "misses_collision",
               "bytes_moved", "prefetch_issued", "ttft_s")  # fmt: skip


def test_a_users_trace_is_a_subject_and_its_recorded_predictions_are_used(tmp_path: Path) -> None:
    from specmd_sim.models import load_model
    from specmd_sim.reproduce.specmd import subjects
    from specmd_sim.reproduce.specmd.grid import Plan, rows
    from specmd_sim.traces import save_trace
    from specmd_sim.traces.trace import make_trace

    base = study_traces.olmoe(3)  # carries predictions, like a recorded trace
    spec = load_model("olmoe-1b-7b").model_copy(update={"id": "my-olmoe"}).model_dump(mode="json")
    mine = make_trace(
        base.experts, model="my-olmoe", num_experts=64, request=base.request, phase=base.phase,
        gates=base.gates, pred_scores=base.pred_scores, model_spec=spec,
    )  # fmt: skip
    path = save_trace(mine, tmp_path / "My Trace.npz")
    made, recorded = subjects(tmp_path / "no-shared", [path])
    assert list(made) == ["olmoe", "my-trace"] and recorded == ("my-trace",)
    plan = Plan(tuple(made), (0, 1), True, recorded)
    own = [r for r in rows(plan) if r["predictor"] == "recorded"]
    assert own and {(r["subject"], r["control"]) for r in own} == {("my-trace", "subject")}
    assert {r["experiment"] for r in own} == {"collision", "hit"}
    paths = study_traces.write_traces(tmp_path / "traces", {"my-trace": made["my-trace"]}, (0,))
    uniform = load_trace(paths[("my-trace", "uniform", 0)])
    assert uniform.meta["model_spec"]["id"] == "my-olmoe" and uniform.pred_scores is None
    row = next(r for r in own if r["engine"] == "replay")
    config = config_for(row, paths, tmp_path)
    assert config.predictor.kind == "trace"
    assert run_row((row, config))["hit_rate"] > 0
