"""Per-expert precision: hot experts keep the model's dtype, cold ones are stored, moved and run
at ``precision.cold_dtype``; the cache accounts bytes per expert."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specmd_sim import SimConfig, simulate
from specmd_sim.cache import ExpertCache, FetchReason
from specmd_sim.config import build_config
from specmd_sim.hardware import load_profile
from specmd_sim.models import CostModel, load_model
from specmd_sim.policies import EVICTION
from specmd_sim.runtime import load_runtime
from specmd_sim.scenario.placement import build_placement, routing_counts
from specmd_sim.traces.io import load_trace

LAYERS, EXPERTS = 16, 64
MODEL = load_model("olmoe-1b-7b")


def test_hot_experts_keep_the_model_dtype() -> None:
    config = build_config({"precision": {"cold_dtype": "int4", "hot_fraction": 0.25}})
    trace = load_trace(config.trace)
    placement = build_placement(config, load_profile(config.hardware), MODEL, trace)
    dtype = np.asarray(placement.dtype).reshape(LAYERS, EXPERTS)
    counts = routing_counts(trace).reshape(LAYERS, EXPERTS)
    for layer in range(LAYERS):
        hot = dtype[layer] == "bf16"
        assert hot.sum() == 16
        assert counts[layer][hot].min() >= counts[layer][~hot].max()
    nbytes = placement.nbytes.reshape(LAYERS, EXPERTS)
    assert set(nbytes[dtype == "bf16"].tolist()) == {MODEL.expert_bytes_at("bf16")}
    assert set(nbytes[dtype == "int4"].tolist()) == {MODEL.expert_bytes_at("int4")}
    # int4 with one fp16 scale per 128 weights: 0.515625 bytes per parameter
    assert MODEL.expert_bytes_at("int4") == round(MODEL.expert_params * 0.515625)


def test_cache_accounts_bytes_per_expert() -> None:
    """A bf16 expert needs the room of ~3.9 int4 experts: admitting it evicts several."""
    big, small = MODEL.expert_bytes_at("bf16"), MODEL.expert_bytes_at("int4")
    sizes = [big] + [small] * 7
    policy = EVICTION.get("lru")(
        EVICTION.parse_config("lru"), SimpleNamespace(num_layers=1, num_experts=8)
    )
    cache = ExpertCache(1, 8, sizes, big, policy)
    policy.attach(cache)
    for key in range(1, 4):
        assert cache.reserve(key, FetchReason.DEMAND)
        cache.complete(key)
    assert cache.used_bytes == 3 * small
    assert cache.reserve(0, FetchReason.DEMAND)
    assert cache.contents() == [0]
    assert cache.used_bytes == big
    assert cache.stats.evictions == 3


def test_cold_experts_move_and_run_at_their_dtype(write_trace) -> None:
    """One token, one expert per layer, nothing cached: each layer stalls for one transfer of
    the expert's bytes, so the int4 run's stall is the bf16 one scaled by the byte ratio (less
    the fixed link latency), and its expert kernels read fewer bytes."""
    trace = write_trace(np.ones((1, LAYERS, 1), np.int16), "olmoe-1b-7b", EXPERTS)

    def run(cold: str | None):
        config = SimConfig(
            trace=str(trace),
            cache={"capacity": "50MB"},
            eviction={"kind": "lru"},
            prefetch={"kind": "none"},
            precision={"cold_dtype": cold, "hot_fraction": 0.0},
            runtime="roofline",
        )
        return simulate(config).metrics

    bf16, int4 = run(None), run("int4")
    latency, bw = 10e-6, 53e9
    assert bf16["stall_s"] == pytest.approx(LAYERS * (latency + MODEL.expert_bytes_at("bf16") / bw))
    assert int4["stall_s"] == pytest.approx(LAYERS * (latency + MODEL.expert_bytes_at("int4") / bw))
    assert int4["bytes_demand"] == LAYERS * MODEL.expert_bytes_at("int4")
    cost = CostModel(MODEL, load_profile("h100-pcie").gpus[0], load_runtime("roofline"))
    saved = LAYERS * (cost.expert_time(1, "bf16") - cost.expert_time(1, "int4"))
    assert saved > 0
    assert bf16["compute_s"] - int4["compute_s"] == pytest.approx(saved)


def test_fp8_experts_use_the_fp8_peak() -> None:
    gpu = load_profile("h100-pcie").gpus[0]
    cost = CostModel(MODEL, gpu, load_runtime("roofline"))
    tokens = 4096  # compute-bound
    flops = MODEL.expert_flops_per_token * tokens
    launch = gpu.kernel_launch_overhead_s.value
    eff = gpu.compute_efficiency.value
    assert cost.expert_time(tokens, "fp8") == pytest.approx(
        flops / (gpu.dense_fp8_flops.value * eff) + launch
    )
    assert cost.expert_time(tokens, "bf16") == pytest.approx(
        flops / (gpu.dense_bf16_flops.value * eff) + launch
    )
