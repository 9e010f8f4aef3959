"""The CPU expert kernel as hardware runs it: a runtime's measured throughput per core and cycle,
picked by the host's instruction-set extensions and scaled by its cores and clock; and a pass too
short to group its tokens, whose CPU experts run once per token (kTransformers' group_min_len).
Each checked against a hand computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.hardware import load_profile
from specmd_sim.hardware.schema import HostNode
from specmd_sim.models import CostModel, load_model
from specmd_sim.models.cost import first_job_binding
from specmd_sim.runtime import load_runtime
from specmd_sim.runtime.schema import RuntimeProfile

KT = load_runtime("ktransformers")
XEON = load_profile("xeon6454s-rtx4090")
DSV3 = load_model("deepseek-v3")


def host_with(**fields: object) -> HostNode:
    data = XEON.hosts[0].model_dump(mode="json")
    for name, value in fields.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = {"value": value, "source": "test", "grade": "D"}
    return HostNode.model_validate(data)


def runtime_with(base: RuntimeProfile, **fields: object) -> RuntimeProfile:
    data = base.model_dump(mode="json")
    for name, value in fields.items():
        data[name] = None if value is None else {"value": value, "source": "test", "grade": "D"}
    return RuntimeProfile.model_validate(data)


def cost(runtime: RuntimeProfile = KT) -> CostModel:
    return CostModel(DSV3, XEON.gpus[0], runtime)


def test_the_kernel_runs_at_its_measured_rate_on_the_hosts_cores_and_clock() -> None:
    """A kTransformers-like runtime, its threads bound evenly, on the two Xeon 6454S: no AMX
    kernel, so the AVX-512 one (33.0 ops per core per cycle) on 64 threads at 2.2 GHz."""
    even = runtime_with(KT, cpu_thread_binding="even")
    assert cost(even).cpu_rate(XEON.hosts[0]) == pytest.approx(64 * 2.2e9 * 33.0, rel=1e-12)
    one_socket = runtime_with(KT, cpu_threads=32, cpu_numa_aware=False)
    assert cost(one_socket).cpu_rate(XEON.hosts[0]) == pytest.approx(32 * 2.2e9 * 33.0)
    # more threads than cores count once per core
    assert cost(runtime_with(even, cpu_threads=256)).cpu_rate(XEON.hosts[0]) == pytest.approx(
        64 * 2.2e9 * 33.0
    )
    # an AVX2-only host runs the AVX2 build: 26.4 per core and cycle
    avx2 = host_with(isa="avx2", physical_cores=16, cpu_clock_hz=4.0e9, sockets=None)
    assert cost().cpu_rate(avx2) == pytest.approx(16 * 4.0e9 * 26.4)
    # every thread of the default (64) on 16 cores: 16 count
    assert cost(runtime_with(KT, cpu_threads=None)).cpu_rate(avx2) == pytest.approx(
        16 * 4.0e9 * 26.4
    )


def test_threads_bound_at_the_first_job_that_wakes_them_crowd_one_socket() -> None:
    """kTransformers V0.2.0/V0.2.1 with --cpu_infer 65 (64 threads) on two sockets: the load-time
    warm-up's first job (one DeepSeek-V3 expert on one token: 2048 / 64 = 32 tasks) wakes
    threads 0-31 and binds them by 32 (0-15 to socket 0, 16-31 to socket 1); its second (7168 /
    64 = 112 tasks) wakes all 64 and binds 32-63 by 64, to socket 1: 16 and 48 threads, the
    fix's PR #685 printed the same. A socket computes with at most its 32 cores: 16 + 32."""
    assert first_job_binding(64, 2, (32, 112)) == (16, 48)
    assert first_job_binding(64, 2, (64, 112)) == (32, 32)  # a first job that wakes them all
    assert first_job_binding(41, 2, (32, 112)) == (16, 25)  # PR #685's 2 x 24 cores: 25 > 24
    assert first_job_binding(3, 2, ()) == (2, 1)  # bound by a later job that wakes them all
    assert cost().cpu_rate(XEON.hosts[0]) == pytest.approx((16 + 32) * 2.2e9 * 33.0, rel=1e-12)
    # one socket's numactl run is no NUMA build: nothing bound, 32 threads on 32 cores
    one_socket = runtime_with(KT, cpu_threads=32, cpu_numa_aware=False)
    assert cost(one_socket).cpu_rate(XEON.hosts[0]) == pytest.approx(32 * 2.2e9 * 33.0)
    with pytest.raises(ValueError, match="cpu_task_stride: expected the CPU kernel's rows"):
        runtime_with(KT, cpu_task_stride=None)


@pytest.mark.parametrize(
    "fields",
    [
        {"isa": "baseline"},  # no kernel the runtime states runs on it
        {"cpu_clock_hz": None},  # the host does not state its clock
        {"physical_cores": None},
        {"isa": None},
    ],
)
def test_without_what_the_kernel_rate_needs_the_peak_fraction_stands_in(fields) -> None:
    host = host_with(**fields)
    expected = host.cpu_flops.value * KT.cpu_flops_efficiency.value
    assert cost().cpu_rate(host) == pytest.approx(expected, rel=1e-12)
    # ... as it does for a runtime that states no kernel
    plain = runtime_with(KT, cpu_kernel_ops_per_cycle=None)
    assert cost(plain).cpu_rate(XEON.hosts[0]) == pytest.approx(
        XEON.hosts[0].cpu_flops.value * KT.cpu_flops_efficiency.value, rel=1e-12
    )


def test_prefill_time_of_a_long_prompt_is_the_kernels_compute() -> None:
    """At 969 tokens each DeepSeek-V3 expert gets ~30 tokens: compute-bound at the kernel's
    rate (its weights read once, in the shadow of the compute)."""
    c, host = cost(), XEON.hosts[0]
    flops = 2 * 3 * 7168 * 2048 * 30
    compute = flops / (48 * 2.2e9 * 33.0) + KT.cpu_expert_overhead_s.value  # 16 + 32 cores
    reads = DSV3.expert_bytes / c.cpu_dram_rate(host)
    assert compute > reads
    assert c.cpu_expert_time(host, 30, pass_tokens=969) == pytest.approx(compute, rel=1e-12)


LAYERS, EXPERTS = 32, 8  # mixtral-8x7b


def short_prompt(write_trace, tokens: int) -> Path:
    """One request whose ``tokens`` prompt tokens all route to expert 0 of every layer."""
    ids = np.zeros((tokens, LAYERS, 1), np.int16)
    return write_trace(ids, "mixtral-8x7b", EXPERTS, phase=np.zeros(tokens, np.uint8))


def run_ttft(trace: Path, tmp_path: Path, grouped_min: int | None) -> float:
    runtime = runtime_with(load_runtime("roofline"), cpu_grouped_min_tokens=grouped_min)
    path = tmp_path / f"rt-{grouped_min}.yaml"
    path.write_text(yaml.safe_dump(runtime.model_dump(mode="json", exclude_none=True)))
    cfg = SimConfig(
        trace=str(trace), hardware="h100-pcie", runtime=str(path), cache={"capacity": 1},
        eviction={"kind": "lru"}, prefetch={"kind": "none"},
        miss={"kind": "cpu-execute", "mode": "always"}, workload={"prefill_chunk_tokens": 0},
    )  # fmt: skip
    return float(simulate(cfg).metrics["ttft_s"])


@pytest.mark.parametrize("tokens", [2, 9])
def test_a_pass_shorter_than_the_group_floor_runs_each_token_alone(
    write_trace, tmp_path: Path, tokens: int
) -> None:
    """All of a short prompt's tokens route to one expert per layer. Grouped, the CPU reads the
    expert once for all of them; below the floor (10) each token runs alone and reads it again:
    per layer ``tokens * t(1)`` instead of ``t(tokens)``, everything else equal."""
    trace = short_prompt(write_trace, tokens)
    grouped, alone = run_ttft(trace, tmp_path, None), run_ttft(trace, tmp_path, 10)
    host = load_profile("h100-pcie").hosts[0]
    mixtral = load_model("mixtral-8x7b")
    roofline = load_runtime("roofline")

    def t(n: int) -> float:  # one CPU run over n tokens, at the roofline runtime's rates
        compute = 2 * 3 * 4096 * 14336 * n / host.cpu_flops.value
        return max(compute, mixtral.expert_bytes / host.dram_bandwidth_bytes_per_s.value)

    assert roofline.cpu_grouped_min_tokens is None
    assert alone - grouped == pytest.approx(LAYERS * (tokens * t(1) - t(tokens)), rel=1e-9)
    assert alone > grouped
    # at the floor the tokens are grouped again
    assert run_ttft(short_prompt(write_trace, 10), tmp_path, 10) == pytest.approx(
        run_ttft(short_prompt(write_trace, 10), tmp_path, None), rel=1e-12
    )


def run_split(trace: Path, last: int) -> dict:
    """Decode with the experts of the last ``last`` layers resident (static-layers) and every
    other layer's experts run on the CPU (llama.cpp's --n-cpu-moe): the roofline runtime."""
    cfg = SimConfig(
        trace=str(trace), hardware="h100-pcie", runtime="roofline",
        cache={"capacity": last * EXPERTS + 1}, eviction={"kind": "static-layers", "last": last},
        prefetch={"kind": "none"}, miss={"kind": "cpu-execute", "mode": "always"},
    )  # fmt: skip
    return simulate(cfg).metrics


def test_a_layer_split_runs_the_cpu_layers_experts_on_the_cpu(write_trace) -> None:
    """Every decode token routes to expert 0 of each layer. With the last N layers' experts on
    the GPU and the others on the CPU, moving 8 more layers to the GPU shortens each token by
    8 x (the CPU's time for one expert - the GPU's): the CPU's is worked out by hand (roofline:
    its weights at the DRAM peak, or its FLOPs at the CPU peak, whichever is longer), and
    nothing is copied over the link (no layer's expert is fetched)."""
    ids = np.zeros((6, LAYERS, 1), np.int16)
    trace = write_trace(ids, "mixtral-8x7b", EXPERTS, phase=np.ones(6, np.uint8))
    profile, mixtral = load_profile("h100-pcie"), load_model("mixtral-8x7b")
    host = profile.hosts[0]
    cpu = max(
        2 * 3 * 4096 * 14336 / host.cpu_flops.value,
        mixtral.expert_bytes / host.dram_bandwidth_bytes_per_s.value,
    )
    gpu = CostModel(mixtral, profile.gpus[0], load_runtime("roofline")).expert_time(1)
    assert cpu > 2 * gpu  # (the host's DRAM is the bound: 0.57 ms against 0.23 ms)
    none, eight, sixteen = (run_split(trace, last) for last in (0, 8, 16))
    assert eight["tpot_s"] - sixteen["tpot_s"] == pytest.approx(8 * (cpu - gpu), rel=1e-9)
    assert none["tpot_s"] - eight["tpot_s"] == pytest.approx(8 * (cpu - gpu), rel=1e-9)
    for m in (none, eight, sixteen):
        assert m["bytes_demand"] == m["bytes_prefetch"] == 0
        assert m["activations_cpu"] == 6 * LAYERS - m["hits"]
