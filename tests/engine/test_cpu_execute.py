"""CPU execution of missing experts: the decision rule, a closed-form TTFT, and DRAM shared
between the CPU's weight reads and the copy engines' DMA reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.hardware import load_profile
from specmd_sim.models import CostModel, load_model
from specmd_sim.runtime import load_runtime
from specmd_sim.timeline import KIND

ROOFLINE = load_runtime("roofline")

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b
MIXTRAL_BYTES = load_model("mixtral-8x7b").expert_bytes


def profile(tmp_path: Path, **host: float) -> Path:
    data = load_profile("h100-pcie").model_dump(mode="json")
    for field, value in host.items():
        data["nodes"][1][field]["value"] = value
    path = tmp_path / "machine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def one_token(write_trace, k: int) -> Path:
    ids = np.stack([np.arange(k) + layer % (EXPERTS - k + 1) for layer in range(LAYERS)])
    return write_trace(ids[None].astype(np.int16), "mixtral-8x7b", EXPERTS,
                       phase=np.zeros(1, np.uint8))  # fmt: skip


def config(trace: Path, hardware: str, mode: str = "fiddler", k: int = 1) -> SimConfig:
    return SimConfig(
        trace=str(trace), hardware=hardware, cache={"capacity": k}, eviction={"kind": "lru"},
        prefetch={"kind": "none"}, miss={"kind": "cpu-execute", "mode": mode}, runtime="roofline",
    )  # fmt: skip


def test_ttft_when_every_missing_expert_runs_on_the_cpu(write_trace, tmp_path: Path) -> None:
    """Mixtral's 336 MiB expert: fetching over PCIe takes ~6.6 ms, the CPU reads it from DRAM in
    ~0.57 ms, so every miss runs on the CPU: per layer attention, then the CPU expert."""
    hw = str(profile(tmp_path))
    m = simulate(config(one_token(write_trace, 1), hw)).metrics
    host = load_profile(hw).hosts[0]
    flops = 2 * 3 * 4096 * 14336 / host.cpu_flops.value  # the roofline runtime: CPU at peak
    t_cpu = max(flops, MIXTRAL_BYTES / host.dram_bandwidth_bytes_per_s.value)
    cost = CostModel(load_model("mixtral-8x7b"), load_profile(hw).gpus[0], ROOFLINE)
    expected = LAYERS * (cost.attention_time(1, 1) + t_cpu) + cost.lm_head_time()
    assert m["ttft_s"] == pytest.approx(expected, rel=1e-9)
    assert (m["activations_cpu"], m["bytes_demand"], m["misses"]) == (LAYERS, 0, LAYERS)
    assert m["stall_s"] == pytest.approx(LAYERS * t_cpu, rel=1e-9)


def test_a_slow_cpu_is_not_used(write_trace, tmp_path: Path) -> None:
    hw = str(profile(tmp_path, cpu_flops=1e9))  # 1 GFLOP/s: ~1 s per Mixtral expert
    m = replay(config(one_token(write_trace, 1), hw)).metrics
    assert m["activations_cpu"] == 0 and m["bytes_demand"] == LAYERS * MIXTRAL_BYTES


def test_greedy_split_shares_dram_with_dma(write_trace, tmp_path: Path) -> None:
    """DRAM at 10 GB/s (below the 53 GB/s PCIe link): fetching and CPU execution both cost
    B / 10 GB/s. HybriMoE's greedy split sends the first miss to the GPU (a tie goes to the
    GPU) and the second to the CPU; their DRAM reads then share 10 GB/s. The CPU read starts
    first, alone for the DMA's latency L, then at half rate: it lasts 2 B / bw - L."""
    bw = 10e9
    hw = str(profile(tmp_path, dram_bandwidth_bytes_per_s=bw))
    result = simulate(config(one_token(write_trace, 2), hw, mode="greedy", k=2))
    assert result.metrics["activations_cpu"] == LAYERS
    assert result.metrics["bytes_demand"] == LAYERS * MIXTRAL_BYTES
    latency = load_profile(hw).links[0].latency_s.value
    cpu = result.spans[result.spans["kind"] == KIND["cpu_expert"]]
    assert len(cpu) == LAYERS
    durations = cpu["end"] - cpu["start"]
    assert durations == pytest.approx(np.full(LAYERS, 2 * MIXTRAL_BYTES / bw - latency), rel=1e-9)
    assert result.lanes[int(cpu["lane"][0])] == "host/cpu-experts"
