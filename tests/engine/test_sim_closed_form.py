"""Timing cases with a closed form, computed by hand from the profile and the model.

Demand-only, every expert missing, one request of one prefill token: per layer the GPU runs
attention, waits for the fetch, then runs the expert(s); nothing can overlap. The expected
times below are written out from the profile's numbers, independently of the cost model code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.profiles import profile_with_engines

from specmd_sim import SimConfig, simulate
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b shape


def roofline(flops: float, nbytes: float, gpu: dict) -> float:
    peak = gpu["dense_bf16_flops"]["value"] * gpu["compute_efficiency"]["value"]
    bw = gpu["hbm_bandwidth_bytes_per_s"]["value"] * gpu["memory_efficiency"]["value"]
    return max(flops / peak, nbytes / bw) + gpu["kernel_launch_overhead_s"]["value"]


def hand_times(gpu: dict) -> tuple[float, float, float]:
    """Attention (1 token at position 1), one expert on 1 token, LM head: Mixtral by hand."""
    h, inter, heads, kv_heads, hd, vocab = 4096, 14336, 32, 8, 128, 32000
    attn_params = h * (2 * heads * hd + 2 * kv_heads * hd) + h * EXPERTS  # + router
    attn = roofline(
        2 * attn_params + 4 * heads * hd * 1,
        attn_params * 2 + 1 * (2 * kv_heads * hd * 2) + 2 * h * 2,
        gpu,
    )
    expert_params = 3 * h * inter
    expert = roofline(2 * expert_params, expert_params * 2 + 2 * h * 2, gpu)
    lm_head = roofline(2 * h * vocab, h * vocab * 2, gpu)
    return attn, expert, lm_head


def run_one_token(write_trace, tmp_path: Path, k: int, engines: int) -> tuple[dict, dict]:
    experts = np.stack([np.arange(k) + (layer % (EXPERTS - k + 1)) for layer in range(LAYERS)])
    trace = write_trace(
        experts[None].astype(np.int16), "mixtral-8x7b", EXPERTS, phase=np.zeros(1, np.uint8)
    )
    cfg = SimConfig(
        trace=str(trace),
        hardware=str(profile_with_engines(tmp_path, engines)),
        cache={"capacity": k},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        runtime="roofline",
    )
    result = simulate(cfg)
    profile = load_profile(cfg.hardware).model_dump(mode="json")
    return result.metrics, profile


def link(profile: dict) -> tuple[float, float]:
    """The host-GPU link (h100-pcie also has an NVMe drive's link, unused here)."""
    (lk,) = [lk for lk in profile["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    return lk["bandwidth_bytes_per_s"]["value"], lk["latency_s"]["value"]


def test_ttft_single_expert_per_layer(write_trace, tmp_path: Path) -> None:
    metrics, profile = run_one_token(write_trace, tmp_path, k=1, engines=1)
    gpu = profile["nodes"][0]
    attn, expert, lm_head = hand_times(gpu)
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw  # DRAM is faster than PCIe
    expected = LAYERS * (attn + fetch + expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)
    assert metrics["stall_s"] == pytest.approx(LAYERS * fetch, rel=1e-9)
    assert metrics["misses_compulsory"] == LAYERS and metrics["hits"] == 0


def test_ttft_two_concurrent_fetches_share_the_link(write_trace, tmp_path: Path) -> None:
    """Two copy engines, two misses per layer: both flows get half the link and end together."""
    metrics, profile = run_one_token(write_trace, tmp_path, k=2, engines=2)
    attn, expert, lm_head = hand_times(profile["nodes"][0])
    bw, latency = link(profile)
    both = latency + 2 * load_model("mixtral-8x7b").expert_bytes / bw
    expected = LAYERS * (attn + both + 2 * expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)


def test_one_copy_engine_serializes_the_fetches(write_trace, tmp_path: Path) -> None:
    """One copy engine: the second expert's fetch overlaps the first expert's compute."""
    metrics, profile = run_one_token(write_trace, tmp_path, k=2, engines=1)
    attn, expert, lm_head = hand_times(profile["nodes"][0])
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw
    assert expert < fetch  # so the second fetch, not the first expert, is on the critical path
    expected = LAYERS * (attn + 2 * fetch + expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)
    assert metrics["overlap_s"] == pytest.approx(LAYERS * expert, rel=1e-9)
