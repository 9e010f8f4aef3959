"""Where copies run and where experts live (runtime ``copy_stream`` and ``memory_parity``).

Closed forms on Mixtral's shape (the ``roofline`` runtime, copies of one expert each):

- copies on the compute stream overlap nothing: a layer with one resident and one missing
  expert takes ``attn + fetch + 2 e`` instead of ``attn + max(e, fetch) + e``;
- memory parity copies each evicted expert back on the D2H engines, beside the load that
  replaced it: free while DRAM has room for both directions, and with DRAM as narrow as the
  link, the two loads and two write-backs of a layer share it four ways;
- copies on the compute stream run one at a time, write-backs included (mixtral-offloading's
  ``_swap`` issues the load and the write-back on the default stream): each layer's two loads
  and the two write-backs of the experts they replaced follow each other;
- the host needs the cache's bytes less DRAM, and a run that does not fit says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from support.profiles import near_instant

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.scenario import build_scenario

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b


def runtime(tmp_path: Path, **settings: object) -> str:
    """``roofline`` with some settings changed."""
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    for key, value in settings.items():
        data[key]["value"] = value
    path = tmp_path / ("rt-" + "-".join(f"{k}-{v}" for k, v in settings.items()) + ".yaml")
    path.write_text(yaml.safe_dump(data))
    return str(path)


def h100(tmp_path: Path, dram: float | None = None) -> str:
    """h100-pcie, optionally with another host DRAM bandwidth."""
    data = load_profile("h100-pcie").model_dump(mode="json")
    if dram is not None:
        (host,) = [n for n in data["nodes"] if n["id"] == "host"]
        host["dram_bandwidth_bytes_per_s"]["value"] = dram
    path = tmp_path / f"h100-dram-{dram}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def pcie(profile: str) -> tuple[float, float]:
    data = load_profile(profile).model_dump(mode="json")
    (lk,) = [lk for lk in data["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    return lk["bandwidth_bytes_per_s"]["value"], lk["latency_s"]["value"]


def expert_time() -> float:
    """One bf16 Mixtral expert on one token on h100-pcie, by hand (roofline plus launch)."""
    gpu = load_profile("h100-pcie").model_dump(mode="json")["nodes"][0]
    h, inter = 4096, 14336
    params = 3 * h * inter
    peak = gpu["dense_bf16_flops"]["value"] * gpu["compute_efficiency"]["value"]
    bw = gpu["hbm_bandwidth_bytes_per_s"]["value"] * gpu["memory_efficiency"]["value"]
    return (
        max(2 * params / peak, (2 * params + 2 * h * 2) / bw)
        + gpu["kernel_launch_overhead_s"]["value"]
    )


def two_tokens(write_trace) -> Path:
    """A prompt token routing experts (0, 1) in every layer, then a decode token routing (0, 2):
    in the decode pass expert 0 is resident and expert 2 is missing."""
    first = np.tile([0, 1], (LAYERS, 1))
    second = np.tile([0, 2], (LAYERS, 1))
    return write_trace(
        np.stack([first, second]).astype(np.int16), "mixtral-8x7b", EXPERTS,
        phase=np.array([0, 1], np.uint8), name="two.npz",
    )  # fmt: skip


def run(trace: Path, rt: str, hardware: str = "h100-pcie", **sections: object) -> dict:
    cfg = SimConfig(
        trace=str(trace), hardware=hardware, runtime=rt, eviction={"kind": "lru"},
        prefetch={"kind": "none"}, **{"cache": {"capacity": 96}, **sections},
    )  # fmt: skip
    return simulate(cfg).metrics


def test_copies_on_the_compute_stream_overlap_nothing(write_trace, tmp_path: Path) -> None:
    trace = two_tokens(write_trace)
    apart = run(trace, runtime(tmp_path, copy_stream="separate"))
    queued = run(trace, runtime(tmp_path, copy_stream="compute"))
    bw, latency = pcie("h100-pcie")
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw
    e = expert_time()
    assert fetch > e  # the resident expert runs entirely inside the fetch when copies overlap
    # prompt: both experts missing, nothing to overlap either way; on the compute stream the
    # two fetches follow each other, so each pays the link's latency
    assert queued["ttft_s"] - apart["ttft_s"] == pytest.approx(LAYERS * latency, rel=1e-6)
    # decode: the resident expert's compute is no longer hidden behind the fetch
    assert queued["tpot_s"] - apart["tpot_s"] == pytest.approx(LAYERS * e, rel=1e-6)
    assert apart["overlap_s"] == pytest.approx(LAYERS * e, rel=1e-6)
    assert queued["overlap_s"] == 0.0


def parity_trace(write_trace) -> Path:
    """One prompt token, experts (2l mod 8, 2l+1 mod 8) in layer l: with a 2-slot cache every
    layer after the first evicts the previous layer's two experts."""
    ids = np.array([[(2 * layer) % EXPERTS, (2 * layer + 1) % EXPERTS] for layer in range(LAYERS)])
    return write_trace(
        ids[None].astype(np.int16), "mixtral-8x7b", EXPERTS, phase=np.zeros(1, np.uint8),
        name="parity.npz",
    )  # fmt: skip


def test_write_backs_are_free_while_dram_has_room(write_trace, tmp_path: Path) -> None:
    trace = parity_trace(write_trace)
    nbytes = load_model("mixtral-8x7b").expert_bytes
    plain = run(trace, runtime(tmp_path), cache={"capacity": 2})
    parity = run(trace, runtime(tmp_path, memory_parity=True), cache={"capacity": 2})
    assert plain["bytes_written_back"] == 0
    assert parity["evictions"] == 2 * (LAYERS - 1)
    assert parity["bytes_written_back"] == parity["evictions"] * nbytes
    # h100-pcie's DRAM (614 GB/s) carries both directions of the 53 GB/s link at full rate
    assert parity["ttft_s"] == pytest.approx(plain["ttft_s"], rel=1e-12)


def test_write_backs_share_a_narrow_dram(write_trace, tmp_path: Path) -> None:
    trace = parity_trace(write_trace)
    bw, latency = pcie("h100-pcie")
    narrow = h100(tmp_path, dram=bw)  # DRAM no faster than one direction of the link
    nbytes = load_model("mixtral-8x7b").expert_bytes
    plain = run(trace, runtime(tmp_path), narrow, cache={"capacity": 2})
    parity = run(trace, runtime(tmp_path, memory_parity=True), narrow, cache={"capacity": 2})
    # without parity each layer's two loads share the link (and DRAM): latency + 2 B / bw.
    # With it, from layer 1 on the two loads and the two write-backs of the previous layer's
    # experts start together and share DRAM four ways: latency + 4 B / bw.
    extra = (LAYERS - 1) * (2 * nbytes / bw)
    assert parity["ttft_s"] - plain["ttft_s"] == pytest.approx(extra, rel=1e-9)
    assert plain["stall_s"] == pytest.approx(LAYERS * (latency + 2 * nbytes / bw), rel=1e-9)


def test_write_backs_on_the_compute_stream_follow_the_loads(write_trace, tmp_path: Path) -> None:
    trace = parity_trace(write_trace)
    bw, latency = pcie("h100-pcie")  # (each direction of the link: the write-backs' path too)
    copy = latency + load_model("mixtral-8x7b").expert_bytes / bw
    queued = {"copy_stream": "compute"}
    plain = run(trace, runtime(tmp_path, **queued), cache={"capacity": 2})
    parity = run(trace, runtime(tmp_path, memory_parity=True, **queued), cache={"capacity": 2})
    # one copy at a time: each layer's two loads; from layer 1 on, also the two write-backs of
    # the previous layer's experts they evicted, before the layer's experts run
    assert plain["stall_s"] == pytest.approx(LAYERS * 2 * copy, rel=1e-9)
    assert parity["stall_s"] == pytest.approx((LAYERS * 2 + (LAYERS - 1) * 2) * copy, rel=1e-9)
    assert parity["ttft_s"] - plain["ttft_s"] == pytest.approx((LAYERS - 1) * 2 * copy, rel=1e-9)
    simpy_path = simulate(
        SimConfig(
            trace=str(trace), hardware="h100-pcie", eviction={"kind": "lru"},
            runtime=runtime(tmp_path, memory_parity=True, **queued), prefetch={"kind": "none"},
            cache={"capacity": 2},
        ),
        compiled=False,
    ).metrics  # fmt: skip
    assert simpy_path["ttft_s"] == parity["ttft_s"]  # the SimPy path gives the compiled core's


def test_replay_counts_the_same_write_backs(write_trace, tmp_path: Path) -> None:
    trace = parity_trace(write_trace)
    cfg = SimConfig(
        trace=str(trace), hardware="h100-pcie", runtime=runtime(tmp_path, memory_parity=True),
        cache={"capacity": 2}, eviction={"kind": "lru"}, prefetch={"kind": "none"},
    )  # fmt: skip
    timed, free = simulate(cfg).metrics, replay(cfg).metrics
    assert timed["bytes_written_back"] == free["bytes_written_back"] > 0
    machine = dict(o.split("=", 1) for o in near_instant(tmp_path, memory_parity=True))
    instant = simulate(cfg.model_copy(update=machine)).metrics
    for key in ("hits", "misses", "evictions", "bytes_demand", "bytes_written_back"):
        assert instant[key] == free[key], key


def test_the_host_needs_the_cache_less(tmp_path: Path) -> None:
    """Mixtral at 2-bit HQQ (15.8 GiB of experts) on the Colab T4 (12.7 GiB): it fits only when
    the host keeps what the GPU cache does not (128 experts on the GPU), and not with 2 slots."""
    base = {"trace": "mixtral-synthetic", "hardware": "t4", "expert_dtype": "hqq-2bit",
            "dense_dtype": "hqq-4bit", "eviction": {"kind": "lru"}}  # fmt: skip
    parity = runtime(tmp_path, memory_parity=True)
    with pytest.raises(SpecmdError, match="expected an NVMe node in hardware profile t4"):
        build_scenario(SimConfig(**base, runtime=runtime(tmp_path), cache={"capacity": 128}))
    scenario = build_scenario(SimConfig(**base, runtime=parity, cache={"capacity": 128}))
    assert scenario.placement.summary()["experts_nvme"] == 0
    with pytest.raises(SpecmdError) as err:
        build_scenario(SimConfig(**base, runtime=parity, cache={"capacity": 2}))
    message = str(err.value)
    assert "experts outside the GPU cache (15.7 GiB" in message
    assert "12.7 GiB of host DRAM on t4" in message and "memory parity" in message


def test_memory_parity_needs_one_gpu(tmp_path: Path) -> None:
    cfg = SimConfig(
        trace="mixtral-synthetic", hardware="hgx-h100-8gpu", parallel={"gpus": 2},
        runtime=runtime(tmp_path, memory_parity=True), cache={"capacity": 16},
    )  # fmt: skip
    with pytest.raises(SpecmdError, match="expected 1 GPU with runtime roofline, which keeps"):
        build_scenario(cfg)
