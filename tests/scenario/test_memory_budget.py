"""The GPU memory budget, by hand: HBM - non-expert weights - KV cache - workspace [- shard].

Mixtral-8x7B (bf16) on an A100 80 GB with the fused-kernels runtime; every term is written out
from the model's config.json dimensions, the profile's HBM and the runtime YAML.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from specmd_sim.config import build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.scenario import build_scenario

LAYERS, EXPERTS, K = 32, 8, 2
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, INTER = 4096, 32, 8, 128, 32000, 14336

ATTENTION = HIDDEN * (2 * HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM)  # q, o, k, v
ROUTER = HIDDEN * EXPERTS
NON_EXPERT = (LAYERS * (ATTENTION + ROUTER) + 2 * VOCAB * HIDDEN) * 2  # bf16
KV_PER_TOKEN_LAYER = 2 * KV_HEADS * HEAD_DIM * 2  # K and V, bf16
EXPERT = 3 * HIDDEN * INTER * 2  # bf16
HBM = 80_000_000_000


def workspace(runtime: str) -> int:
    data = yaml.safe_load((runtime_dir() / f"{runtime}.yaml").read_text())
    return int(data["workspace_bytes"]["value"])


# request 0: 2 prompt + 1 generated token (3); request 1: 3 prompt + 4 generated (7)
LENGTHS = {0: (2, 1), 1: (3, 4)}
LONGEST = 7


@pytest.fixture
def trace(write_trace):
    request = np.concatenate([np.full(p + d, r, np.int32) for r, (p, d) in LENGTHS.items()])
    phase = np.concatenate([np.r_[np.zeros(p), np.ones(d)] for p, d in LENGTHS.values()])
    tokens = request.size
    experts = np.stack([np.arange(K) + t % (EXPERTS - K + 1) for t in range(tokens)])
    experts = np.broadcast_to(experts[:, None, :], (tokens, LAYERS, K)).astype(np.int16)
    return str(write_trace(experts, "mixtral-8x7b", EXPERTS, request=request,
                           phase=phase.astype(np.uint8)))  # fmt: skip


def config(trace: str, **kw):
    data = {
        "trace": trace,
        "hardware": "a100-80g-sxm",
        "runtime": "fused-kernels",
        "eviction": {"kind": "lru"},
        "prefetch": {"kind": "none"},
        "cache": {"capacity": 4},
    }
    data.update(kw)
    return build_config(data)


def test_terms_by_hand() -> None:
    assert ATTENTION == 41_943_040
    assert NON_EXPERT == 3_210_739_712
    assert KV_PER_TOKEN_LAYER == 4096
    assert workspace("fused-kernels") == 1_500_000_000


@pytest.mark.parametrize("batch", [1, 2, 8])
def test_budget_fields_and_available(trace: str, batch: int) -> None:
    scenario = build_scenario(config(trace, workload={"batch_size": batch}))
    (budget,) = scenario.budgets
    kv_batch = min(batch, len(LENGTHS))
    kv = LONGEST * kv_batch * KV_PER_TOKEN_LAYER * LAYERS
    assert budget.gpu == "gpu0"
    assert budget.hbm == HBM
    assert budget.weights == NON_EXPERT
    assert budget.kv_context == LONGEST
    assert budget.kv_batch == kv_batch
    assert budget.kv_cache == kv
    assert budget.workspace == 1_500_000_000
    assert budget.shard == 0
    assert budget.available == HBM - NON_EXPERT - kv - 1_500_000_000
    data = budget.as_dict()
    assert data["budget_available_bytes"] == budget.available
    assert type(budget).from_dict(data) == budget


def test_dense_dtype_changes_the_weights_term(trace: str) -> None:
    (budget,) = build_scenario(config(trace, dense_dtype="fp8")).budgets
    assert budget.weights == NON_EXPERT // 2


def test_workspace_follows_the_runtime(trace: str) -> None:
    (budget,) = build_scenario(config(trace, runtime="roofline")).budgets
    assert budget.workspace == 0
    (budget,) = build_scenario(config(trace, runtime="ktransformers")).budgets
    assert budget.workspace == workspace("ktransformers") == 2_000_000_000


def test_auto_capacity_takes_whole_slots(trace: str) -> None:
    scenario = build_scenario(config(trace, cache={"capacity": "auto"}))
    available = HBM - NON_EXPERT - LONGEST * KV_PER_TOKEN_LAYER * LAYERS - 1_500_000_000
    slots = available // EXPERT
    assert slots == 213  # 75.29 GB / 352.3 MB
    assert scenario.slots == slots
    assert scenario.capacity_bytes == slots * EXPERT


def test_auto_with_a_quantized_model_holds_more(trace: str) -> None:
    scenario = build_scenario(config(trace, cache={"capacity": "auto"}, expert_dtype="int4"))
    available = HBM - NON_EXPERT - LONGEST * KV_PER_TOKEN_LAYER * LAYERS - 1_500_000_000
    int4 = round(3 * HIDDEN * INTER * (4 + 16 / 128) / 8)
    assert scenario.slots == available // int4
    assert scenario.capacity_bytes == available // int4 * int4


def test_capacity_that_just_fits_is_accepted(trace: str) -> None:
    assert build_scenario(config(trace, cache={"capacity": 213})).slots == 213


def test_capacity_above_available_names_every_term(trace: str) -> None:
    with pytest.raises(SpecmdError) as info:
        build_scenario(config(trace, cache={"capacity": 214}))
    message = str(info.value)
    assert "\n" not in message
    for term in ("cache.capacity", "non-expert weights", "KV cache", "runtime workspace",
                 "a100-80g-sxm", "fused-kernels"):  # fmt: skip
        assert term in message
    assert "own expert shard" not in message


def test_expert_sharded_budget_includes_own_shard(trace: str) -> None:
    scenario = build_scenario(
        config(
            trace,
            hardware="hgx-h100-8gpu",
            parallel={"gpus": 2, "mode": "expert-sharded"},
            cache={"capacity": "auto"},
        )
    )
    shard = LAYERS * (EXPERTS // 2) * EXPERT  # half of every layer's experts
    assert len(scenario.budgets) == 2
    # replicas round robin: request 0 (3 tokens) on gpu 0, request 1 (7 tokens) on gpu 1
    for budget, context in zip(scenario.budgets, (3, 7), strict=True):
        kv = context * 1 * KV_PER_TOKEN_LAYER * LAYERS
        assert budget.hbm == HBM
        assert budget.shard == shard
        assert budget.kv_context == context and budget.kv_batch == 1
        assert budget.available == HBM - NON_EXPERT - kv - 1_500_000_000 - shard
    smallest = min(b.available for b in scenario.budgets)
    assert scenario.capacity_bytes == smallest // EXPERT * EXPERT


def test_expert_sharded_overflow_names_own_shard(trace: str) -> None:
    with pytest.raises(SpecmdError) as info:
        build_scenario(
            config(
                trace,
                hardware="hgx-h100-8gpu",
                parallel={"gpus": 2, "mode": "expert-sharded"},
                cache={"capacity": 100},  # 35 GB > the ~30 GB the shard leaves
            )
        )
    message = str(info.value)
    assert "\n" not in message
    for term in ("non-expert weights", "KV cache", "runtime workspace", "own expert shard"):
        assert term in message
