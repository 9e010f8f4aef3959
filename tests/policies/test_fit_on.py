"""Fitted predictors (``predictor.fit_on``): trained on other requests or another trace, never
silently on the requests they are evaluated on; and the predictor-quality report."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim import simulate
from specmd_sim.config import build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.build import build_scenario, new_rng
from specmd_sim.scenario.plugins import make_predictor, run_views
from specmd_sim.scenario.quality import predictor_quality
from specmd_sim.traces import generate_trace, load_trace, save_trace
from specmd_sim.traces.synthetic import PRESETS
from specmd_sim.traces.trace import make_trace

TRAIN, EVAL = (0, 1), (2, 3)  # request ids of the bundled olmoe-synthetic trace (4 requests)


def config(predictor: dict, **workload: object) -> object:
    return build_config(
        {
            "predictor": predictor,
            "prefetch": {"kind": "top-k", "k": 8},
            # token-serial: every pass is one row of the trace, as the counts below take them
            "workload": {"requests": list(EVAL), "prefill_chunk_tokens": 1, **workload},
        }
    )


def popularity_counts(trace_ref: str, requests: tuple[int, ...]) -> np.ndarray:
    """Selections per (layer, expert) of those requests, counted from the trace's rows (with
    token-serial prefill and batch 1, every pass is one row)."""
    trace = load_trace(trace_ref)
    counts = np.zeros((trace.num_layers, trace.num_experts))
    for row in np.flatnonzero(np.isin(trace.request, requests)):
        for layer in range(trace.num_layers):
            ids = trace.experts[row, layer]
            counts[layer, ids[ids >= 0]] += 1
    return counts


def fitted(cfg: object):
    scenario = build_scenario(cfg)
    views = run_views(scenario, 0, new_rng(cfg))
    return scenario, views, make_predictor(scenario, views)


def test_popularity_fitted_on_other_requests_starts_from_their_counts() -> None:
    cfg = config({"kind": "popularity", "fit_on": {"requests": list(TRAIN)}, "learn_online": False})
    scenario, views, predictor = fitted(cfg)
    counts = popularity_counts("olmoe-synthetic", TRAIN)
    views.online.history.advance(0, 0)
    for target in (1, 7, 15):
        expected = counts[target] / counts[target].sum()
        np.testing.assert_allclose(predictor.scores(0, 0, target), expected)
    # frozen: after the whole run the scores are still the training counts
    last = scenario.passes.num_passes - 1
    views.online.history.advance(last, 3)
    np.testing.assert_allclose(predictor.scores(last, 3, 4), counts[4] / counts[4].sum())


def test_learning_online_adds_the_run_to_the_fit() -> None:
    cfg = config({"kind": "popularity", "fit_on": {"requests": list(TRAIN)}})
    scenario, views, predictor = fitted(cfg)
    last = scenario.passes.num_passes - 1
    views.online.history.advance(last, 3)
    got = predictor.scores(last, 3, 2)
    counts = popularity_counts("olmoe-synthetic", TRAIN)
    assert not np.allclose(got, counts[2] / counts[2].sum())


def test_fitting_on_the_evaluated_requests_is_refused() -> None:
    cfg = build_config({"predictor": {"kind": "transition", "fit_on": {"requests": [0, 1]}}})
    with pytest.raises(
        SpecmdError, match=r"expected requests the run does not evaluate, got \[0, 1\]"
    ):
        build_scenario(cfg)
    same_file = build_config({"predictor": {"kind": "popularity", "fit_on": "olmoe-synthetic"}})
    with pytest.raises(SpecmdError, match="in both"):
        build_scenario(same_file)


def test_fit_on_errors_name_the_field() -> None:
    with pytest.raises(SpecmdError, match=r"predictor: fit_on: .*got neither"):
        build_config({"predictor": {"kind": "popularity", "fit_on": {}}})
    with pytest.raises(
        SpecmdError, match=r"predictor\.fit_on\.requests: expected request ids .* \[9\]"
    ):
        build_scenario(config({"kind": "popularity", "fit_on": {"requests": [9]}}))
    with pytest.raises(SpecmdError, match=r"predictor\.fit_on\.trace: expected 16 MoE layers x 64"):
        build_scenario(config({"kind": "popularity", "fit_on": "mixtral-synthetic"}))
    with pytest.raises(SpecmdError, match="fit_on"):  # a predictor that does not learn
        build_config({"predictor": {"kind": "noisy-oracle", "fit_on": "olmoe-synthetic"}})
    with pytest.raises(SpecmdError, match=r"workload\.requests: expected request ids .* \[7\]"):
        build_scenario(build_config({"workload": {"requests": [7]}}))


@pytest.mark.parametrize("kind", ["popularity", "transition", "activation-matrix"])
def test_a_run_fitted_on_another_trace_is_deterministic(kind: str, tmp_path) -> None:
    other = tmp_path / "train.npz"
    save_trace(generate_trace(PRESETS["olmoe"], seed=7), other)
    cfg = build_config(
        {
            "predictor": {"kind": kind, "fit_on": str(other)},
            "prefetch": {"kind": "top-k", "k": 8},
            "workload": {"max_requests": 2},
        }
    )
    a, b = simulate(cfg), simulate(cfg)
    assert a.metrics == b.metrics
    unfitted = simulate(
        cfg.model_copy(update={"predictor": build_config({"predictor": {"kind": kind}}).predictor})
    )
    assert a.metrics != unfitted.metrics  # the fit changes what it prefetches


def test_quality_recall_of_the_noisy_oracle_follows_its_accuracy() -> None:
    def recall(accuracy: float) -> float:
        cfg = build_config({"predictor": {"kind": "noisy-oracle", "accuracy": accuracy}})
        rows = predictor_quality(cfg, 1)
        (decode,) = [r for r in rows if r.phase == "decode"]
        return decode.recall

    assert recall(1.0) == 1.0
    assert recall(0.0) == 0.0
    assert abs(recall(0.7) - 0.7) < 0.02


def recorded_predictor(tmp_path, decoys: int) -> object:
    """The bundled trace with recorded predictions of equal mass on each true expert and on
    ``decoys`` wrong ones per true expert: calibrated by construction (an expert with mass is
    true with probability 1 / (1 + decoys))."""
    trace = load_trace("olmoe-synthetic")
    rng = np.random.default_rng(0)
    pred = np.zeros((1, trace.num_tokens, trace.num_layers, trace.num_experts), np.float16)
    for t in range(trace.num_tokens):
        for layer in range(1, trace.num_layers):
            true = trace.experts[t, layer]
            others = np.setdiff1d(np.arange(trace.num_experts), true)
            pred[0, t, layer, true] = 1
            pred[0, t, layer, rng.choice(others, decoys * true.size, replace=False)] = 1
    path = tmp_path / "perfect.npz"
    save_trace(make_trace(
        trace.experts, model=trace.model, num_experts=trace.num_experts, request=trace.request,
        phase=trace.phase, gates=trace.gates, pred_scores=pred,
    ), path)  # fmt: skip
    # token-serial: each pass's predictions are its token's own, calibrated as constructed
    return build_config({"trace": str(path), "predictor": {"kind": "trace"},
                         "workload": {"prefill_chunk_tokens": 1}})  # fmt: skip


def test_quality_of_predictions_calibrated_by_construction(tmp_path) -> None:
    rows = predictor_quality(recorded_predictor(tmp_path, 0), 1)
    assert all(r.ece < 1e-9 and r.recall == 1.0 and r.coverage == 1.0 for r in rows)
    half = predictor_quality(recorded_predictor(tmp_path, 1), 1)
    assert all(r.ece < 1e-9 and 0.3 < r.recall < 0.7 for r in half)


def test_quality_coverage_shows_a_fitted_predictor_answers_from_the_start() -> None:
    def decode_coverage(predictor: dict) -> float:
        rows = predictor_quality(config(predictor, prefill_chunk_tokens=0), 1)
        return next(r.coverage for r in rows if r.phase == "prefill")

    assert decode_coverage({"kind": "popularity"}) < 1.0
    assert decode_coverage({"kind": "popularity", "fit_on": {"requests": list(TRAIN)}}) == 1.0


def test_a_copy_of_the_evaluated_trace_is_refused_as_training(tmp_path) -> None:
    copy = tmp_path / "copy.npz"
    save_trace(load_trace("olmoe-synthetic"), copy)
    cfg = build_config({"predictor": {"kind": "popularity", "fit_on": str(copy)}})
    with pytest.raises(SpecmdError, match=r"routed exactly as evaluated ones \(a copy"):
        build_scenario(cfg)
    other = config({"kind": "popularity", "fit_on": {"trace": str(copy), "requests": [0, 1]}})
    build_scenario(other)  # the copy's requests 0-1 are not evaluated (2-3 are): fine


def test_a_frozen_predictor_must_be_fitted() -> None:
    with pytest.raises(SpecmdError, match="learn_online: expected true without fit_on"):
        build_config({"predictor": {"kind": "transition", "learn_online": False}})


def test_transition_fitted_counts_are_the_training_co_activations() -> None:
    """Counted independently from the trace rows (token-serial prefill, batch 1: every pass is
    one row): expert e at layer l followed by e' at layer l + 1 within a training row."""
    cfg = config({"kind": "transition", "fit_on": {"requests": list(TRAIN)}, "learn_online": False})
    _, _, predictor = fitted(cfg)
    trace = load_trace("olmoe-synthetic")
    expected = np.zeros((trace.num_layers, trace.num_experts, trace.num_experts), np.float32)
    for row in np.flatnonzero(np.isin(trace.request, TRAIN)):
        for layer in range(trace.num_layers - 1):
            here, there = trace.experts[row, layer], trace.experts[row, layer + 1]
            expected[layer][np.ix_(here[here >= 0], there[there >= 0])] += 1
    assert np.array_equal(predictor.table[0], expected)
