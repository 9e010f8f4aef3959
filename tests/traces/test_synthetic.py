"""The synthetic trace generator: determinism, format, one knob per statistic, calibration."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from specmd_sim.models.loader import load_model
from specmd_sim.traces.stats import (
    popularity_skew,
    repeat_share,
    shuffled_repeat_share,
    working_set_coverage,
)
from specmd_sim.traces.synthetic import (
    GENERATOR,
    PRESETS,
    SyntheticParams,
    generate,
    zipf_exponent,
)

SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def params(**update: object) -> SyntheticParams:
    """A small OLMoE-shaped trace (3 requests x (4 + 12) tokens) with every knob on."""
    base = {
        "model": "olmoe-1b-7b",
        "num_requests": 3,
        "prompt_tokens": 4,
        "decode_tokens": 12,
        "popularity_skew": 4.0,
        "working_set_size": 8,
        "working_set_boost": 3.0,
        "repeat_prob": 0.2,
        "predictor_accuracy": 0.7,
        "lookahead": 2,
    }
    return SyntheticParams(**{**base, **update})


def mean_stat(p: SyntheticParams, stat, seeds=range(4)) -> float:
    return float(np.mean([stat(generate(p, seed)) for seed in seeds]))


# --- determinism and format ---------------------------------------------------------------


def test_same_seed_same_arrays_different_seed_different() -> None:
    p = params()
    a, b, c = generate(p, 7), generate(p, 7), generate(p, 8)
    for name in ("experts", "gates", "request", "phase", "pred_scores"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    assert a.meta == b.meta
    assert not np.array_equal(a.experts, c.experts)
    assert not np.array_equal(a.gates, c.gates)
    assert not np.array_equal(a.pred_scores, c.pred_scores, equal_nan=True)


def test_shapes_dtypes_and_validity() -> None:
    p = params()
    spec = load_model(p.model)
    tr = generate(p, 0)
    t, num_layers, k, num_e = 3 * 16, spec.moe_layers, spec.top_k, spec.num_experts
    assert tr.experts.shape == (t, num_layers, k) and tr.experts.dtype == np.int16
    assert tr.gates.shape == (t, num_layers, k) and tr.gates.dtype == np.float32
    assert tr.request.dtype == np.int32 and tr.phase.dtype == np.uint8
    assert tr.pred_scores.shape == (2, t, num_layers, num_e)
    assert tr.pred_scores.dtype == np.float16
    assert tr.num_experts == num_e and tr.model == "olmoe-1b-7b" and tr.lookahead == 2
    # distinct, in-range experts
    assert tr.experts.min() >= 0 and tr.experts.max() < num_e
    srt = np.sort(tr.experts, axis=2)
    assert (srt[..., 1:] != srt[..., :-1]).all()
    # gates: positive, descending, renormalized over the top-k
    assert (tr.gates > 0).all() and (np.diff(tr.gates, axis=2) <= 0).all()
    np.testing.assert_allclose(tr.gates.sum(axis=2), 1.0, rtol=1e-5)
    # contiguous requests, prefill rows then decode rows
    np.testing.assert_array_equal(tr.request, np.repeat(np.arange(3), 16))
    np.testing.assert_array_equal(tr.phase, np.tile([0] * 4 + [1] * 12, 3))
    # NaN exactly where no earlier layer exists (l - j < 0)
    for j in (1, 2):
        nan = np.isnan(tr.pred_scores[j - 1]).any(axis=(0, 2))
        np.testing.assert_array_equal(nan, np.arange(num_layers) < j)
        assert np.isnan(tr.pred_scores[j - 1, :, :j]).all()
    # meta
    assert tr.meta["generator"] == GENERATOR == "specmd-sim synthetic v1"
    assert tr.meta["seed"] == 0
    assert tr.meta["params"] == p.model_dump(mode="json", exclude_none=True)
    assert SyntheticParams(**tr.meta["params"]) == p


def test_lookahead_zero_has_no_predictions() -> None:
    tr = generate(params(lookahead=0), 0)
    assert tr.pred_scores is None and tr.lookahead == 0


def test_top_k_overrides_the_model() -> None:
    """Fewer experts per token than the model routes (a runtime's "6 experts" of 8)."""
    tr = generate(params(top_k=3), 0)
    assert tr.top_k == 3 and tr.experts.shape[2] == 3
    assert (np.sort(tr.experts, axis=2)[:, :, 1:] > np.sort(tr.experts, axis=2)[:, :, :-1]).all()
    assert generate(params(), 0).top_k == load_model("olmoe-1b-7b").top_k


def test_params_are_strict() -> None:
    p = params()
    with pytest.raises(ValidationError):
        p.repeat_prob = 0.5  # frozen
    for bad in (
        {"colour": 1},
        {"model": "no-such-model"},
        {"popularity_skew": 64.0},
        {"popularity_skew": 0.5},
        {"working_set_size": 65},
        {"repeat_prob": 1.5},
        {"predictor_accuracy": -0.1},
        {"lookahead": 16},
        {"prompt_tokens": 0, "decode_tokens": 0},
        {"num_requests": 0},
        {"top_k": 0},
        {"top_k": 65},
    ):
        with pytest.raises(ValidationError):
            params(**bad)
    for name, field in SyntheticParams.model_fields.items():
        assert field.description, name


def test_presets() -> None:
    assert PRESETS["olmoe"].model == "olmoe-1b-7b"
    assert PRESETS["mixtral"].model == "mixtral-8x7b"
    assert PRESETS["olmoe"].num_tokens == 4 * (16 + 48)
    assert PRESETS["mixtral"].num_tokens == 4 * (32 + 64)
    tr = generate(PRESETS["olmoe"], 0)
    assert tr.num_tokens == 256 and tr.lookahead == 1
    # calibrated towards OLMoE layer 0's popularity skew (5.08)
    assert popularity_skew(tr.experts, 64) == pytest.approx(5.1, abs=0.35)


def test_zipf_exponent() -> None:
    assert zipf_exponent(1.0, 8) == pytest.approx(0.0, abs=1e-9)
    for skew, num_e in ((1.55, 8), (8.8, 64), (30.0, 64)):
        s = zipf_exponent(skew, num_e)
        w = np.arange(1, num_e + 1, dtype=float) ** -s
        assert w[0] / w.mean() == pytest.approx(skew, rel=1e-9)


# --- each knob moves its own statistic ----------------------------------------------------


def test_popularity_knob_raises_popularity_skew() -> None:
    def skew(tr):
        return popularity_skew(tr.experts, 64)

    low = mean_stat(params(popularity_skew=1.0, working_set_size=0), skew)
    high = mean_stat(params(popularity_skew=8.0, working_set_size=0), skew)
    assert high > low + 1.0


def test_repeat_knob_raises_repeat_share_only_above_shuffled() -> None:
    def excess(tr):
        rng = np.random.default_rng(0)
        return repeat_share(tr.experts, tr.request) - shuffled_repeat_share(
            tr.experts, tr.request, rng=rng, num_shuffles=2
        )

    assert abs(mean_stat(params(repeat_prob=0.0), excess)) < 0.02
    assert mean_stat(params(repeat_prob=0.5), excess) > 0.2

    def share(tr):
        return repeat_share(tr.experts, tr.request)

    assert mean_stat(params(repeat_prob=0.4), share) > mean_stat(params(repeat_prob=0.1), share)


def test_working_set_knob_raises_own_coverage_over_global() -> None:
    def gap(tr):
        own, glob = working_set_coverage(tr.experts, tr.request, n=8)
        return own - glob

    p = {"popularity_skew": 1.0, "num_requests": 4, "decode_tokens": 40}
    off = mean_stat(params(**p, working_set_boost=1.0), gap)
    on = mean_stat(params(**p, working_set_boost=10.0), gap)
    assert on > off + 0.15


def test_gate_concentration_flattens_gates() -> None:
    sharp = generate(params(gate_concentration=0.5), 0).gates[..., 0].mean()
    flat = generate(params(gate_concentration=5.0), 0).gates[..., 0].mean()
    assert sharp > flat + 0.1


def _recall(tr, j: int = 1) -> float:
    """Share of true experts among the predicted top-k (layers with a prediction)."""
    k = tr.top_k
    scores = tr.pred_scores[j - 1, :, j:].astype(np.float32)
    top = np.argsort(-scores, axis=2, kind="stable")[..., :k]
    truth = tr.experts[:, j:]
    return float((top[..., :, None] == truth[..., None, :]).any(axis=-1).mean())


def test_predictor_accuracy() -> None:
    perfect = generate(params(predictor_accuracy=1.0), 3)
    k = perfect.top_k
    for j in (1, 2):
        scores = perfect.pred_scores[j - 1, :, j:].astype(np.float32)
        order = np.argsort(-scores, axis=2, kind="stable")[..., :k]
        np.testing.assert_array_equal(order, perfect.experts[:, j:])  # same set, same order
    assert _recall(perfect, 2) == 1.0
    assert _recall(generate(params(predictor_accuracy=0.0), 3)) == 0.0
    half = params(predictor_accuracy=0.5)
    assert _recall(generate(half, 3)) == pytest.approx(0.5, abs=0.03)
    # predictions are drawn after the routing: accuracy never changes the experts
    np.testing.assert_array_equal(generate(half, 3).experts, perfect.experts)


def test_predictor_accuracy_with_few_experts() -> None:
    tr = generate(params(model="mixtral-8x7b", predictor_accuracy=0.0, working_set_size=2), 0)
    assert _recall(tr) == 0.0
    assert np.isfinite(tr.pred_scores[0, :, 1:]).all()


# --- calibration and speed ----------------------------------------------------------------


def test_mixtral_preset_matches_real_humaneval_trace() -> None:
    path = SHARED_TRACES / "mixtral8x7b_decode.npz"
    if not path.is_file():
        pytest.skip(f"reference trace {path} not available")
    with np.load(path, allow_pickle=False) as data:
        real = data["humaneval_p0_ids"]
    num_tokens = real.shape[0]  # 83 decode tokens, one request
    real_stats = np.array(
        [
            popularity_skew(real, 8),
            repeat_share(real),
            shuffled_repeat_share(real, rng=np.random.default_rng(0), num_shuffles=50),
        ]
    )
    p = PRESETS["mixtral"].model_copy(
        update={"num_requests": 1, "prompt_tokens": 0, "decode_tokens": num_tokens}
    )
    synth = []
    for seed in range(16):
        tr = generate(p, seed)
        rng = np.random.default_rng(seed)
        synth.append(
            [
                popularity_skew(tr.experts, 8),
                repeat_share(tr.experts),
                shuffled_repeat_share(tr.experts, rng=rng, num_shuffles=4),
            ]
        )
    synth_mean = np.mean(synth, axis=0)
    tolerance = np.array([0.05, 0.01, 0.01])  # skew, repeat share, shuffled repeat share
    assert (np.abs(synth_mean - real_stats) <= tolerance).all(), (real_stats, synth_mean)


@pytest.mark.slow
def test_generate_8000_olmoe_tokens_is_fast() -> None:
    p = PRESETS["olmoe"].model_copy(
        update={"num_requests": 8, "prompt_tokens": 0, "decode_tokens": 1000}
    )
    start = time.perf_counter()
    tr = generate(p, 0)
    elapsed = time.perf_counter() - start
    assert tr.num_tokens == 8000
    assert elapsed < 10.0, f"generate took {elapsed:.1f} s for 8,000 OLMoE tokens"
