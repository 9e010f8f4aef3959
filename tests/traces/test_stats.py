"""Routing statistics on tiny hand-made arrays (exact values) and on the real reference traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specmd_sim.traces.stats import (
    popularity_skew,
    popularity_skew_per_layer,
    repeat_share,
    repeat_share_per_layer,
    routing_stats,
    shuffled_repeat_share,
    stack_requests,
    working_set_coverage,
)

SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def ex(rows: list) -> np.ndarray:
    """Tokens x layers x k from nested lists."""
    return np.array(rows, dtype=np.int16)


# --- popularity skew ----------------------------------------------------------------------


def test_popularity_skew_exact() -> None:
    # layer 0: counts e0=3, e1..e3=1 -> mean 6/4 = 1.5, max 3 -> 2.0
    # layer 1: counts e0..e2 = 2, e3 = 0 -> mean 1.5, max 2 -> 4/3
    experts = ex([[[0, 1], [0, 1]], [[0, 2], [2, 0]], [[0, 3], [1, 2]]])
    per_layer = popularity_skew_per_layer(experts, 4)
    np.testing.assert_allclose(per_layer, [2.0, 4.0 / 3.0])
    assert popularity_skew(experts, 4) == pytest.approx((2.0 + 4.0 / 3.0) / 2)


def test_popularity_skew_ignores_missing_and_empty_layers() -> None:
    experts = ex([[[0, -1], [-1, -1]], [[0, 1], [-1, -1]]])
    # layer 0: e0=2, e1=1 over E=4 -> mean 0.75 -> 2/0.75; layer 1 empty -> NaN, skipped
    per_layer = popularity_skew_per_layer(experts, 4)
    assert per_layer[0] == pytest.approx(8.0 / 3.0)
    assert np.isnan(per_layer[1])
    assert popularity_skew(experts, 4) == pytest.approx(8.0 / 3.0)


def test_popularity_skew_uniform_is_one_and_2d_input() -> None:
    experts = np.array([[0, 1], [2, 3]], dtype=np.int16)  # [T, k]: a single layer
    assert popularity_skew(experts, 4) == pytest.approx(1.0)


# --- repeat share -------------------------------------------------------------------------


def test_repeat_share_exact_and_request_boundaries() -> None:
    experts = ex([[[0, 1]], [[1, 2]], [[1, 2]]])  # t1 repeats 1 of 2, t2 repeats 2 of 2
    assert repeat_share(experts) == pytest.approx(0.75)
    assert repeat_share(experts, np.array([0, 0, 1])) == pytest.approx(0.5)
    assert repeat_share(experts, np.array([0, 1, 1])) == pytest.approx(1.0)
    assert np.isnan(repeat_share(experts, np.array([0, 1, 2])))  # no pair at all


def test_repeat_share_missing_records() -> None:
    experts = ex([[[3, 4]], [[3, -1]], [[-1, -1]], [[5, 6]]])
    # t1: 1 valid expert, repeated -> 1.0; t2: no valid expert -> skipped;
    # t3: previous token has no record -> skipped
    assert repeat_share(experts) == pytest.approx(1.0)


def test_repeat_share_interleaved_requests_pair_within_request() -> None:
    # rows alternate between request 0 (always [0, 1]) and request 1 (always [2, 3])
    experts = ex([[[0, 1]], [[2, 3]], [[0, 1]], [[2, 3]], [[0, 1]]])
    request = np.array([0, 1, 0, 1, 0])
    assert repeat_share(experts) == pytest.approx(0.0)  # as one request: never repeats
    assert repeat_share(experts, request) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    assert shuffled_repeat_share(experts, request, rng=rng, num_shuffles=3) == pytest.approx(1.0)


def test_repeat_share_per_layer_lag_and_rows() -> None:
    a, b = [0, 1], [2, 3]
    experts = ex([[a, a], [b, a], [a, a], [b, a]])  # layer 0 alternates, layer 1 constant
    np.testing.assert_allclose(repeat_share_per_layer(experts), [0.0, 1.0])
    np.testing.assert_allclose(repeat_share_per_layer(experts, lag=2), [1.0, 1.0])
    assert repeat_share(experts) == pytest.approx(0.5)
    # rows as a boolean mask: rows 0 and 2 only -> consecutive considered rows are both 'a'
    assert repeat_share(experts, rows=np.array([True, False, True, False])) == pytest.approx(1.0)
    # rows as an ordering: 0, 2, 1, 3 -> pairs (a, a), (a, b), (b, b) in layer 0
    np.testing.assert_allclose(
        repeat_share_per_layer(experts, rows=np.array([0, 2, 1, 3])), [2.0 / 3.0, 1.0]
    )
    with pytest.raises(ValueError, match="lag"):
        repeat_share(experts, lag=0)


def test_shuffled_repeat_share_is_seeded_and_keeps_popularity() -> None:
    rng = np.random.default_rng(5)
    experts = rng.integers(0, 4, size=(60, 2, 1)).astype(np.int16)
    first = shuffled_repeat_share(experts, rng=np.random.default_rng(1), num_shuffles=2)
    again = shuffled_repeat_share(experts, rng=np.random.default_rng(1), num_shuffles=2)
    assert first == again
    constant = ex([[[0, 1]]] * 10)
    assert shuffled_repeat_share(constant, rng=np.random.default_rng(0)) == 1.0


# --- working-set coverage -----------------------------------------------------------------


def test_working_set_coverage_exact() -> None:
    # k = 1, one layer; request 0 picks 0, 0, 1; request 1 picks 2, 2, 2, 3
    experts = ex([[[0]], [[0]], [[1]], [[2]], [[2]], [[2]], [[3]]])
    request = np.array([0, 0, 0, 1, 1, 1, 1])
    own, glob = working_set_coverage(experts, request, n=1)
    # global top-1 is expert 2 (count 3); own top-1 covers 2/3 and 3/4
    assert own == pytest.approx((2 / 3 + 3 / 4) / 2)
    assert glob == pytest.approx((0 / 3 + 3 / 4) / 2)
    own2, glob2 = working_set_coverage(experts, request, n=2)
    assert own2 == pytest.approx(1.0)
    assert glob2 == pytest.approx((2 / 3 + 3 / 4) / 2)  # global top-2: experts 2 and 0


def test_working_set_coverage_ties_go_to_lower_id_and_sparse_request_ids() -> None:
    experts = ex([[[1]], [[0]], [[5]], [[5]]])
    request = np.array([7, 7, 42, 42])
    own, glob = working_set_coverage(experts, request, n=1)
    # global counts: e0 = e1 = 1, e5 = 2 -> top-1 = 5
    assert own == pytest.approx((0.5 + 1.0) / 2)
    assert glob == pytest.approx((0.0 + 1.0) / 2)
    tie = ex([[[1]], [[0]]])
    assert working_set_coverage(tie, None, n=1) == (0.5, 0.5)


def test_stack_requests_and_routing_stats() -> None:
    ids = np.arange(2 * 3 * 1 * 2).reshape(2, 3, 1, 2) % 4
    experts, request = stack_requests(ids)
    assert experts.shape == (6, 1, 2)
    np.testing.assert_array_equal(request, [0, 0, 0, 1, 1, 1])
    stats = routing_stats(experts, request, 4, rng=np.random.default_rng(0), n=2)
    assert set(stats) == {
        "popularity_skew",
        "repeat_share",
        "shuffled_repeat_share",
        "random_repeat_share",
        "working_set_own",
        "working_set_global",
        "working_set_uniform",
    }
    assert stats["random_repeat_share"] == 0.5


# --- the real reference traces ------------------------------------------------------------


def _shared(name: str) -> Path:
    path = SHARED_TRACES / name
    if not path.is_file():
        pytest.skip(f"reference trace {path} not available")
    return path


def test_real_mixtral_statistics() -> None:
    with np.load(_shared("mixtral8x7b_decode.npz"), allow_pickle=False) as data:
        experts = data["humaneval_p0_ids"]
    assert popularity_skew(experts, 8) == pytest.approx(1.5753, abs=1e-4)
    assert repeat_share(experts) == pytest.approx(0.3639, abs=1e-4)
    shuffled = shuffled_repeat_share(experts, rng=np.random.default_rng(0), num_shuffles=50)
    assert shuffled == pytest.approx(0.27, abs=0.005)


def test_real_qwen_statistics() -> None:
    with np.load(_shared("qwen15_moe_a27b_decode_5layers.npz"), allow_pickle=False) as data:
        experts, request = stack_requests(data["ids"])
    assert popularity_skew(experts, 60) == pytest.approx(1.743, abs=1e-3)
    assert repeat_share(experts, request) == pytest.approx(0.1138, abs=1e-4)
    own, glob = working_set_coverage(experts, request, n=8)
    assert own == pytest.approx(0.279, abs=1e-3)
    assert glob == pytest.approx(0.1975, abs=1e-3)


def test_real_olmoe_layer0_skew() -> None:
    with np.load(_shared("olmoe_1b7b_layer0_stream.npz"), allow_pickle=False) as data:
        ids = data["ids"]
    assert popularity_skew(ids[:, None, :], 64) == pytest.approx(5.08, abs=0.01)
