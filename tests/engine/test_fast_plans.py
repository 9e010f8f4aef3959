"""Bulk prefetch plans equal the reference's, plan for plan and draw for draw: over random
traces (prefill and decode, batches, chunked prefill), top-k and score-threshold at several
depths, the noisy oracle at several accuracies and the trace's own predictions with NaNs;
blocks of varying sizes leave the run's generator where the per-layer calls leave it. The
row-wise probabilities equal ``as_probabilities``, the compiled kernels the interpreted ones,
and what is not built in (another prefetcher or predictor, a subclass, a fitted predictor, an
eviction that reads scores) is refused."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.traces import random_trace_ids

from specmd_sim import build_config, make_trace, save_trace
from specmd_sim.engine.fast import plan_kernel as PK
from specmd_sim.engine.fast import plans as P
from specmd_sim.engine.fast.plans import BulkPlans, plans_unsupported
from specmd_sim.policies.predictors.noisy_oracle import NoisyOraclePredictor
from specmd_sim.policies.prefetch.top_k import TopKPrefetch
from specmd_sim.policies.scores import as_probabilities
from specmd_sim.scenario import build_run, build_scenario

LAYERS, EXPERTS, K = 16, 64, 8


def trace_file(tmp_path: Path, seed: int, depth: int = 0, nan: float = 0.0) -> str:
    """Four requests of 6 prompt and 10 decode tokens; ``depth`` layers of ``pred_scores``
    (random, ties included), a ``nan`` fraction NaN and some rows all NaN."""
    rng = np.random.default_rng(seed)
    requests, prompt, decode = 4, 6, 10
    tokens = requests * (prompt + decode)
    experts = random_trace_ids(rng, tokens, LAYERS, EXPERTS, K)
    phase = np.tile(np.r_[np.zeros(prompt), np.ones(decode)].astype(np.uint8), requests)
    request = np.repeat(np.arange(requests, dtype=np.int32), prompt + decode)
    pred = None
    if depth:
        pred = rng.integers(0, 40, (depth, tokens, LAYERS, EXPERTS)).astype(np.float16) / 8
        pred[rng.random(pred.shape) < nan] = np.nan
        pred[rng.random(pred.shape[:3]) < 0.3 * (nan > 0)] = np.nan  # whole rows unpredicted
    trace = make_trace(experts, model="olmoe-1b-7b", num_experts=EXPERTS, request=request,
                       phase=phase, pred_scores=pred)  # fmt: skip
    return str(save_trace(trace, tmp_path / f"t{seed}-{depth}.npz"))


def config(trace: str, prefetch: dict[str, Any], predictor: dict[str, Any], **extra: Any) -> Any:
    return build_config({"trace": trace, "seed": 11, "cache": {"capacity": 64},
                         "eviction": "least-stale", "prefetch": prefetch,
                         "predictor": predictor, **extra})  # fmt: skip


def reference(run: Any) -> list[list[int]]:
    """Every (pass, layer)'s plan, asked in run order as the engine does."""
    out = []
    for p in range(run.scenario.passes.num_passes):
        for layer in range(run.ctx.num_layers):
            run.ctx.history.advance(p, layer)
            out.append(run.prefetch.plan(p, layer, run.predictor, run.cache))
    return out


def bulk(run: Any, sizes: list[int]) -> list[list[int]]:
    """The same plans from blocks of ``sizes`` passes (cycled), the last one the rest."""
    plans = BulkPlans(run)
    total, lo, i = run.scenario.passes.num_passes, 0, 0
    out: list[list[int]] = []
    while lo < total:
        hi = min(total, lo + sizes[i % len(sizes)])
        offsets, keys = plans.block(lo, hi)
        assert offsets.size == (hi - lo) * run.ctx.num_layers + 1
        assert offsets.dtype == keys.dtype == np.int64
        out.extend(keys[a:b].tolist() for a, b in itertools.pairwise(offsets))
        lo, i = hi, i + 1
    return out


def assert_equal_runs(cfg: Any, sizes: list[int]) -> list[list[int]]:
    scenario = build_scenario(cfg)
    ref, fast = build_run(scenario), build_run(scenario)
    assert plans_unsupported(fast) is None
    want = reference(ref)
    got = bulk(fast, sizes)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, f"(pass, layer) #{i}"
    assert fast.ctx.rng.bit_generator.state == ref.ctx.rng.bit_generator.state
    return want


WORKLOADS = [{}, {"batch_size": 3}, {"batch_size": 2, "prefill_chunk_tokens": 4},
             {"batch_size": 4, "prefill_chunk_tokens": 0}]  # fmt: skip


@pytest.mark.parametrize("accuracy", [0.0, 0.5, 1.0])
@pytest.mark.parametrize(
    "prefetch",
    [{"kind": "top-k", "lookahead": 1}, {"kind": "top-k", "k": 3, "lookahead": 2},
     {"kind": "top-k", "k": 64, "lookahead": 3},
     {"kind": "score-threshold", "threshold": 0.02, "lookahead": 2},
     {"kind": "score-threshold", "threshold": 0.005, "max_per_layer": 5, "lookahead": 3}],
    ids=["k8-1", "k3-2", "k64-3", "thr-2", "thr-cap-3"],
)  # fmt: skip
def test_noisy_oracle_plans_equal_the_reference(tmp_path, monkeypatch, prefetch, accuracy) -> None:
    seed = int(accuracy * 2) + 3 * len(prefetch)
    if accuracy == 0.5:  # chunks of a few passes: blocks cut across them
        monkeypatch.setattr(BulkPlans, "CHUNK_ROWS", 100)
    predictor = {"kind": "noisy-oracle", "accuracy": accuracy, "confidence": 1.0 + accuracy,
                 "near_miss": 0.5 + accuracy}  # fmt: skip
    workload = WORKLOADS[seed % len(WORKLOADS)]
    cfg = config(trace_file(tmp_path, seed), prefetch, predictor, workload=workload)
    plans = assert_equal_runs(cfg, [1, 7, 3, 40])
    assert sum(map(len, plans)) > 0


def test_every_expert_of_a_layer_demanded(tmp_path) -> None:
    """Demand sets as large as the layer (a batch routed to every expert): no outsider is
    left to replace a dropped expert, so some dropped ones stay predicted."""
    rng = np.random.default_rng(5)
    requests, per = 4, 6  # request r routes to experts 2r and 2r + 1: a batch covers all 8
    own = np.repeat(np.arange(requests), per)[:, None, None] * 2 + np.arange(2)
    experts = np.broadcast_to(own, (requests * per, 32, 2)).copy()
    swap = rng.random(experts.shape[:2]) < 0.5
    experts[swap] = experts[swap][:, ::-1]
    trace = make_trace(experts.astype(np.int16), model="mixtral-8x7b", num_experts=8,
                       request=np.repeat(np.arange(requests, dtype=np.int32), per))  # fmt: skip
    path = str(save_trace(trace, tmp_path / "full.npz"))
    cfg = build_config({"trace": path, "model": "mixtral-8x7b", "seed": 3,
                        "cache": {"capacity": 16}, "workload": {"batch_size": 4},
                        "prefetch": {"kind": "top-k", "k": 8, "lookahead": 2},
                        "predictor": {"kind": "noisy-oracle", "accuracy": 0.3}})  # fmt: skip
    assert_equal_runs(cfg, [2, 5])


@pytest.mark.parametrize(
    ("prefetch", "depth", "nan"),
    [({"kind": "top-k", "lookahead": 1}, 1, 0.0),
     ({"kind": "top-k", "k": 4, "lookahead": 3}, 2, 0.3),
     ({"kind": "score-threshold", "threshold": 0.02, "lookahead": 2}, 2, 0.3),
     ({"kind": "score-threshold", "threshold": 0.01, "max_per_layer": 6, "lookahead": 3}, 3, 0.6)],
    ids=["k8-1", "k4-3-beyond-depth", "thr-2", "thr-cap-3"],
)  # fmt: skip
def test_trace_predictor_plans_equal_the_reference(tmp_path, prefetch, depth, nan) -> None:
    for seed, workload in enumerate(WORKLOADS):
        cfg = config(trace_file(tmp_path, 20 + seed, depth, nan), prefetch, {"kind": "trace"},
                     workload=workload)  # fmt: skip
        assert_equal_runs(cfg, [5, 2, 11])


@pytest.mark.parametrize(
    "predictor",
    [{"kind": "transition"}, {"kind": "transition", "max_distance": 3}, {"kind": "popularity"},
     {"kind": "transition", "fit_on": {"requests": [0, 1]}, "learn_online": False},
     {"kind": "popularity", "fit_on": {"requests": [0]}}],
    ids=["transition", "transition-3", "popularity", "transition-fitted", "popularity-fitted"],
)  # fmt: skip
@pytest.mark.parametrize(
    "prefetch",
    [{"kind": "top-k", "lookahead": 2}, {"kind": "score-threshold", "threshold": 0.02}],
    ids=["top-k", "threshold"],
)
def test_learned_predictor_plans_equal_the_reference(tmp_path, predictor, prefetch) -> None:
    """Popularity and transitions learned from the routing so far (and fitted beforehand):
    the kernel's counts, scores and plans are the Python predictors', block after block."""
    for seed, workload in enumerate(WORKLOADS):
        fitted = "fit_on" in predictor
        cfg = config(trace_file(tmp_path, 40 + seed), prefetch, predictor,
                     workload={**workload, "requests": [2, 3]} if fitted else workload)  # fmt: skip
        plans = assert_equal_runs(cfg, [3, 1, 7])
        assert any(plans)


def test_no_prefetch_has_empty_plans_and_no_draws(tmp_path) -> None:
    cfg = config(trace_file(tmp_path, 1), {"kind": "none"}, {"kind": "noisy-oracle"})
    plans = assert_equal_runs(cfg, [4])
    assert not any(plans)


def test_blocks_follow_each_other(tmp_path) -> None:
    cfg = config(trace_file(tmp_path, 2), {"kind": "top-k"}, {"kind": "noisy-oracle"})
    plans = BulkPlans(build_run(build_scenario(cfg)))
    plans.block(0, 3)
    with pytest.raises(ValueError, match="from pass 3"):
        plans.block(4, 6)


class MyTopK(TopKPrefetch):
    """A user's subclass: not taken for the built-in, whatever it overrides."""


class MyOracle(NoisyOraclePredictor):
    pass


def test_what_is_not_built_in_is_refused(tmp_path) -> None:
    trace = trace_file(tmp_path, 4)
    oracle = {"kind": "noisy-oracle"}
    cases = {
        "prefetch 'oracle'": config(trace, {"kind": "oracle"}, oracle),
        "predictor 'activation-matrix'": config(
            trace, {"kind": "top-k"}, {"kind": "activation-matrix"}
        ),
        "eviction 'finemoe'": config(trace, {"kind": "top-k"}, oracle, eviction="finemoe"),
    }
    for why, cfg in cases.items():
        run = build_run(build_scenario(cfg))
        assert why in (plans_unsupported(run) or ""), why
        with pytest.raises(Exception, match="computed in bulk"):
            BulkPlans(run)
    run = build_run(build_scenario(config(trace, {"kind": "top-k"}, oracle)))
    run.prefetch.__class__ = MyTopK
    assert plans_unsupported(run) == "prefetch 'top-k'"
    run = build_run(build_scenario(config(trace, {"kind": "top-k"}, oracle)))
    run.predictor.inner.__class__ = MyOracle  # type: ignore[union-attr]
    assert plans_unsupported(run) == "predictor 'noisy-oracle'"


def test_row_probabilities_equal_as_probabilities() -> None:
    rng = np.random.default_rng(9)
    rows = rng.integers(-3, 4, (400, 16)).astype(np.float64) / 2
    rows[rng.random(rows.shape) < 0.2] = np.nan
    rows[:40] = np.abs(rows[:40])  # no negatives: scores over their sum
    rows[40:50] = 0.0  # all zero: uniform
    rows[50:55] = np.nan  # all NaN: uniform
    rows[55, 3] = np.inf
    rows[56, :] = -np.inf
    rows[56, 2] = 1.0
    rows[57, 1] = -np.inf
    with np.errstate(invalid="ignore"):
        want = np.array([as_probabilities(row) for row in rows])
    np.testing.assert_array_equal(P._probabilities(rows), want)
    probs = rng.random((300, 64))
    want = np.array([as_probabilities(row) for row in probs])
    assert np.array_equal(P._probabilities(probs), want)  # bits, not just close


def _kernel_outputs(K: Any) -> dict[Any, Any]:
    """What the plan kernels of ``K`` (a module: :mod:`.plan_kernel`, or the one compiled
    ahead of time) give on random inputs with ties, NaN and -inf rows, empty and full sets."""
    rng = np.random.default_rng(13)
    passes, layers, experts = 60, 4, 16
    target = np.array([1, 2, 3, 2, 3, 3])  # lookahead 3
    per_layer = np.array([3, 2, 1, 0])
    size = rng.integers(0, experts + 1, passes * layers)  # empty and full demand sets
    keys = np.concatenate([layer * experts + rng.permutation(experts)[:m]
                           for layer, m in zip(np.tile(np.arange(layers), passes), size,
                                               strict=True)]).astype(np.int32)  # fmt: skip
    offsets = np.r_[0, np.cumsum(size)]
    rows = (passes - 1) * target.size  # from pass 1 on
    spans = (1 + np.arange(rows) // target.size) * layers + np.tile(target, passes - 1)
    u = np.floor(rng.random(rows * experts + 2 * int(size[spans].sum())) * 8) / 8  # ties
    values = np.floor(rng.random((rows, experts)) * 6)
    values[rng.random(values.shape) < 0.1] = np.nan
    values[:5] = np.nan  # rows of NaNs only
    values[5:9, ::2] = -np.inf
    present = rng.random(rows) < 0.9
    out = np.empty((rows, experts))
    K.oracle_logits(u, offsets, keys, 1, layers, target, 0.5, 1.5, 0.7, out)
    got: dict[Any, Any] = {"logits": (out,)}
    for threshold, cap in [(-np.inf, 5), (0.5, 3), (2.0, experts), (-np.inf, 1)]:
        plan_keys = np.full(rows * experts, -1)
        ends = np.full((passes - 1) * layers, -1)
        count = K.select(values, present, per_layer, target, threshold, cap, plan_keys, 0, ends)
        got[threshold, cap] = count, plan_keys, ends
    sizes = np.maximum(size, 2)  # top-k 2 needs sets of 2 experts at least
    top_keys = np.concatenate([layer * experts + rng.permutation(experts)[:m]
                               for layer, m in zip(np.tile(np.arange(layers), passes), sizes,
                                                   strict=True)]).astype(np.int32)  # fmt: skip
    top_u = rng.random(rows * experts + 2 * int(sizes[spans].sum()))
    for accuracy in (0.0, 0.4):
        plan, ends = np.full(rows * 2, -1), np.full((passes - 1) * layers, -1)
        count = K.oracle_top(top_u, np.r_[0, np.cumsum(sizes)], top_keys, 1, layers, experts,
                             target, per_layer, accuracy, 2, plan, 0, ends)  # fmt: skip
        got["top", accuracy] = count, plan, ends
    for distance, learn in ((2, True), (0, True), (3, False)):
        table = rng.integers(0, 3, (max(distance, 1), layers, experts, experts)).astype(np.int32)
        popular = np.floor(rng.random((layers, experts)) * 4) * (not learn)
        scores, present = np.zeros((passes * target.size, experts)), np.ones(passes * 6, bool)
        K.learned_scores(keys, offsets, layers, experts, per_layer, target, distance, learn,
                         table, popular, scores, present)  # fmt: skip
        got["learned", distance] = scores, present, table, popular
    return got


def _assert_same(a: dict[Any, Any], b: dict[Any, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            np.testing.assert_array_equal(x, y)


def test_the_compiled_kernels_equal_the_interpreted_ones(monkeypatch) -> None:
    pytest.importorskip("numba")
    kernels = ("oracle_logits", "oracle_top", "_dropped", "_replacements", "_less_max",
               "select", "_best", "learned_scores", "_learn", "_followers")  # fmt: skip
    for name in kernels:
        assert hasattr(getattr(PK, name), "py_func"), f"numba is installed: {name} is not compiled"
    compiled = _kernel_outputs(PK)
    for name in kernels:  # every kernel and the helpers it calls
        monkeypatch.setattr(PK, name, getattr(PK, name).py_func)
    _assert_same(compiled, _kernel_outputs(PK))


def test_the_kernels_compiled_ahead_of_time_equal_the_jit(compiled_ahead) -> None:
    _assert_same(_kernel_outputs(compiled_ahead), _kernel_outputs(PK))


@pytest.mark.parametrize("accuracy", [0.0, 0.4, 1.0])
def test_the_top_k_shortcut_equals_selecting_by_score(accuracy) -> None:
    """Top-k over the noisy oracle where every true set has at least k experts: the first k
    predicted experts (``oracle_top``) are the k best scores (``oracle_logits``, the softmax,
    ``select``), on the same draws; nearly every outsider taken (sets of 13 of 16 experts)
    included."""
    rng = np.random.default_rng(int(accuracy * 10) + 3)
    passes, layers, experts, k = 40, 4, 16, 3
    target = np.array([1, 2, 3, 2, 3, 3])  # lookahead 3
    per_layer = np.array([3, 2, 1, 0])
    size = rng.integers(k, 14, passes * layers)
    keys = np.concatenate([layer * experts + rng.permutation(experts)[:m]
                           for layer, m in zip(np.tile(np.arange(layers), passes), size,
                                               strict=True)]).astype(np.int32)  # fmt: skip
    offsets = np.r_[0, np.cumsum(size)]
    rows = passes * target.size
    spans = (np.arange(rows) // target.size) * layers + np.tile(target, passes)
    u = rng.random(rows * experts + 2 * int(size[spans].sum()))
    logits = np.empty((rows, experts))
    PK.oracle_logits(u, offsets, keys, 0, layers, target, accuracy, 1.0, 0.5, logits)
    p = np.exp(logits)
    scores = p / p.sum(axis=1, keepdims=True)
    want, want_ends = np.full(rows * k, -1), np.full(passes * layers, -1)
    n = PK.select(scores, np.ones(rows, np.bool_), per_layer, target, -np.inf, k, want, 0,
                  want_ends)  # fmt: skip
    got, got_ends = np.full(rows * k, -1), np.full(passes * layers, -1)
    m = PK.oracle_top(u, offsets, keys, 0, layers, experts, target, per_layer, accuracy, k, got,
                      0, got_ends)  # fmt: skip
    assert n == m == rows * k
    assert np.array_equal(got, want) and np.array_equal(got_ends, want_ends)
