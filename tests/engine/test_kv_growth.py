"""The KV cache competing with the expert cache (``workload.kv_cache: evict``): a closed-form
count of the evictions its growth forces, in both engines.

One request of OLMoE shape, every token routed to 8 experts per layer, the cache full after the
first pass (128 accesses, 40 slots). HBM is set so that the expert cache's 40 slots plus half an
expert are left beside the weights and the workspace; each token adds its KV cache (written out
by hand from OLMoE's published dimensions), and whenever the capacity falls below a whole slot
more, the policy gives up one more expert.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.profiles import profile_with_hbm

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.models import load_model
from specmd_sim.runtime import load_runtime

MODEL, LAYERS, EXPERTS, TOP_K = "olmoe-1b-7b", 16, 64, 8
# OLMoE-1B-7B: 16 layers, 16 KV heads of dimension 128, bf16 keys and values
KV_PER_TOKEN = 16 * 2 * 16 * 128 * 2
SLOTS = 40


def config(write_trace, tmp_path: Path, tokens: int, **kw) -> SimConfig:
    rng = np.random.default_rng(0)
    experts = np.stack([[rng.permutation(EXPERTS)[:TOP_K] for _ in range(LAYERS)]
                        for _ in range(tokens)]).astype(np.int16)  # fmt: skip
    phase = np.r_[0, np.ones(tokens - 1)].astype(np.uint8)
    trace = write_trace(experts, MODEL, EXPERTS, phase=phase)
    model = load_model(MODEL)
    workspace = int(load_runtime("fused-kernels").workspace_bytes.value)
    slack = model.expert_bytes // 2
    hbm = model.non_expert_bytes + workspace + SLOTS * model.expert_bytes + slack
    return SimConfig(
        trace=str(trace), hardware=str(profile_with_hbm(tmp_path, hbm)), cache={"capacity": "auto"},
        eviction={"kind": kw.pop("eviction", "lru")}, prefetch={"kind": kw.pop("prefetch", "none")},
        workload={"kv_cache": "evict"}, **kw,
    )  # fmt: skip


def forced_evictions(tokens: int, per_token: int = KV_PER_TOKEN) -> int:
    """Slots lost from the first pass to the last: at pass p the request holds p + 1 tokens,
    and the cache, full, holds as many experts as its capacity then has whole slots."""
    eb = load_model(MODEL).expert_bytes
    left = SLOTS * eb + eb // 2
    slots = [min(SLOTS * eb, left - (p + 1) * per_token) // eb for p in range(tokens)]
    return slots[0] - slots[-1]


@pytest.mark.parametrize(
    ("eviction", "kv_dtype", "per_token", "evicted"),
    [
        # 300 tokens of 128 KiB: 3.1 experts of 12 MiB, the first half slack
        ("lru", None, KV_PER_TOKEN, 3),
        ("least-stale", None, KV_PER_TOKEN, 3),
        ("fifo", None, KV_PER_TOKEN, 3),
        ("lru", "fp8", KV_PER_TOKEN // 2, 2),  # one byte a value: 1.6 experts
    ],
)
def test_kv_growth_forces_a_known_number_of_evictions(
    write_trace, tmp_path, eviction, kv_dtype, per_token, evicted
) -> None:
    tokens = 300
    expected = forced_evictions(tokens, per_token)
    assert expected == evicted
    cfg = config(write_trace, tmp_path, tokens, eviction=eviction, kv_dtype=kv_dtype)
    replayed = replay(cfg).metrics
    timed = simulate(cfg.model_copy(update={"timing": cfg.timing.model_copy(
        update={"record_spans": False})})).metrics  # fmt: skip
    for m in (replayed, timed):
        assert m["evictions_kv"] == expected
        assert m["evictions"] >= expected
    # demand-only: every decision the same, and the forced evictions make misses
    assert replayed["misses"] == timed["misses"]


def test_the_budget_reports_the_peak_and_the_capacity_before_it(write_trace, tmp_path) -> None:
    tokens = 300
    result = replay(config(write_trace, tmp_path, tokens))
    inputs = result.inputs
    eb = load_model(MODEL).expert_bytes
    assert inputs["kv_cache_mode"] == "evict"
    assert inputs["kv_dtype"] == "bf16" and inputs["kv_bytes_per_token"] == KV_PER_TOKEN
    assert inputs["kv_cache_bytes"] == tokens * KV_PER_TOKEN
    assert inputs["kv_context_tokens"] == tokens
    assert inputs["budget_available_bytes"] == SLOTS * eb + eb // 2
    assert inputs["capacity_slots"] == SLOTS


def test_without_growth_nothing_is_forced(write_trace, tmp_path) -> None:
    """``reserved`` sets the whole KV cache aside first: the same run has no forced evictions
    (and one slot fewer, the 300 tokens' KV taken before the run)."""
    cfg = config(write_trace, tmp_path, 300)
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={
        "kv_cache": "reserved"})})  # fmt: skip
    result = replay(cfg)
    assert result.metrics["evictions_kv"] == 0
    assert result.inputs["capacity_slots"] == SLOTS - 3


def test_a_peak_that_leaves_no_room_for_an_expert_is_refused(write_trace, tmp_path) -> None:
    """Past 40 slots' worth of KV the cache cannot hold one layer's 8 experts: the run streams
    what does not fit past it (in both engines alike); past 48 it cannot hold one expert:
    refused before the run, in one line naming the setting."""
    eb = load_model(MODEL).expert_bytes
    tokens = (SLOTS - TOP_K + 1) * eb // KV_PER_TOKEN + 2
    replayed = replay(config(write_trace, tmp_path, tokens))
    assert replayed.metrics["overflowed"] > 0
    tokens = SLOTS * eb // KV_PER_TOKEN + 2
    with pytest.raises(SpecmdError, match=r"^workload.kv_cache: evict: expected the expert cache"):
        replay(config(write_trace, tmp_path, tokens))


def test_the_timeline_draws_the_capacity_as_it_shrinks(write_trace, tmp_path) -> None:
    """A counter of the expert cache's capacity, sampled at each change: the hand-computed
    capacities of the passes, without repeats."""
    tokens = 300
    result = simulate(config(write_trace, tmp_path, tokens))
    samples = result.counters["cache_capacity_bytes"]
    eb = load_model(MODEL).expert_bytes
    left = SLOTS * eb + eb // 2
    capacities = [min(SLOTS * eb, left - (p + 1) * KV_PER_TOKEN) for p in range(tokens)]
    changes = [c for i, c in enumerate(capacities) if i == 0 or c != capacities[i - 1]]
    assert samples["value"].tolist() == changes
    assert samples["time"][0] == 0.0 and np.all(np.diff(samples["time"]) > 0)


def test_prefetching_replay_counts_the_same_forced_evictions(write_trace, tmp_path) -> None:
    """Prefetches fill the cache too; the KV cache still takes one expert per slot lost
    (replay: nothing is loading when the capacity shrinks)."""
    cfg = config(write_trace, tmp_path, 300, prefetch="top-k")
    assert replay(cfg).metrics["evictions_kv"] == forced_evictions(300)


def test_the_reserved_kv_cache_is_of_the_longest_request(write_trace, tmp_path) -> None:
    """Continuous batching: a 70-token request that joins after, and leaves before, a 51-token
    one is never a pass's first request; the reservation is still 70 tokens x 2 requests."""
    experts = np.zeros((121, LAYERS, TOP_K), np.int16) + np.arange(TOP_K, dtype=np.int16)
    request = np.r_[np.zeros(51), np.ones(70)].astype(np.int32)
    phase = np.r_[0, np.ones(50), np.zeros(40), np.ones(30)].astype(np.uint8)
    trace = write_trace(experts, MODEL, EXPERTS, request=request, phase=phase)
    cfg = SimConfig(trace=str(trace), workload={
        "scheduler": "continuous", "batch_size": 2, "max_tokens_per_step": 4,
        "prefill_chunk_tokens": 0})  # fmt: skip
    inputs = replay(cfg).inputs
    assert inputs["kv_context_tokens"] == 70 and inputs["kv_batch"] == 2
    assert inputs["kv_cache_bytes"] == 70 * 2 * KV_PER_TOKEN


def test_a_miss_ratio_curve_refuses_a_kv_pool(write_trace, tmp_path) -> None:
    from specmd_sim.engine.mrc import miss_ratio_curve

    cfg = config(write_trace, tmp_path, 20)
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={
        "scheduler": "continuous", "kv_cache": "wait"}), "cache": cfg.cache.model_copy(
        update={"capacity": 20})})  # fmt: skip
    with pytest.raises(SpecmdError, match=r"^workload.kv_cache: expected reserved or evict"):
        miss_ratio_curve(cfg, [16, 20])
