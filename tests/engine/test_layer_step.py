"""Hand-built races of the layer step in the timing engine."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim import apply_overrides, build_config, replay, simulate

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b


@pytest.fixture
def prefetch_lands_while_a_miss_waits(write_trace):
    """Even layers demand {0, 1}; the odd layers of a batch-2 decode pass demand {2, 3, 4, 5}
    (5 last in gate order), predicted as {5, 6}. With 4 slots, 0 and 1 resident and 5 and 6
    loading, misses 2 and 3 evict 0 and 1, miss 4 waits for space, and meanwhile the prefetches
    of 5 and 6 land: 5 was a late hit at the router and is resident by its turn."""
    requests, prefill, decode = 2, 1, 4
    phase = np.concatenate([np.r_[np.zeros(prefill), np.ones(decode)]] * requests)
    request = np.repeat(np.arange(requests), prefill + decode)
    tokens = phase.size
    ids = np.zeros((tokens, LAYERS, 2), np.int16)
    gates = np.zeros((tokens, LAYERS, 2), np.float32)
    pred = np.zeros((1, tokens, LAYERS, EXPERTS), np.float16)
    for t in range(tokens):
        for layer in range(LAYERS):
            if layer % 2 == 0:
                ids[t, layer], gates[t, layer] = (0, 1), (0.6, 0.4)
            elif request[t] == 0:
                ids[t, layer], gates[t, layer] = (2, 3), (0.9, 0.8)
            else:
                ids[t, layer], gates[t, layer] = (4, 5), (0.7, 0.1)
            pred[0, t, layer, [5, 6] if layer % 2 else [0, 1]] = 1.0
    path = write_trace(
        ids, "mixtral-8x7b", EXPERTS, request=request.astype(np.int32),
        phase=phase.astype(np.uint8), gates=gates, pred_scores=pred,
    )  # fmt: skip
    return [
        f"trace={path}", "hardware=slow-link-5gbps", "workload.batch_size=2",
        "cache.capacity=4", "eviction.kind=lru", "prefetch.kind=top-k", "predictor.kind=trace",
    ]  # fmt: skip


@pytest.mark.parametrize("pin", ["true", "false"])
def test_a_late_hit_whose_prefetch_lands_during_a_wait_needs_no_join(
    prefetch_lands_while_a_miss_waits, pin
) -> None:
    config = build_config(
        apply_overrides({}, [*prefetch_lands_while_a_miss_waits, f"cache.pin_demand_set={pin}"])
    )
    timed, untimed = simulate(config).metrics, replay(config).metrics
    assert timed["accesses"] == untimed["accesses"] == 512
    assert timed["hits"] + timed["late_hits"] + timed["misses"] == timed["accesses"]
    assert timed["late_hits"] > 0 and timed["stall_s"] > 0
    # time only ever makes accesses worse than the timing-free engine
    assert timed["hits"] + timed["late_hits"] <= untimed["hits"]
