"""Multi-GPU nodes: replicas sharing host links, expert-sharded over NVLink (hgx-h100-8gpu)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specmd_sim import SimConfig, simulate
from specmd_sim.config import build_config
from specmd_sim.engine.replay import replay
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile, transfer_path
from specmd_sim.scenario.placement import shard_owner

LAYERS, EXPERTS, K = 16, 64, 8  # olmoe-1b-7b


@pytest.fixture
def twin_trace(write_trace):
    """Two requests with identical routing (one token of prefill, 5 of decode, disjoint experts
    token to token), so two GPUs serving one each run in lockstep."""
    tokens = 6
    ids = np.stack(
        [np.tile((np.arange(K) + 8 * t) % EXPERTS, (LAYERS, 1)) for t in range(tokens)]
    ).astype(np.int16)
    experts = np.concatenate([ids, ids])
    phase = np.tile(np.r_[0, np.ones(tokens - 1)].astype(np.uint8), 2)
    request = np.repeat(np.arange(2, dtype=np.int32), tokens)
    return write_trace(experts, "olmoe-1b-7b", EXPERTS, request=request, phase=phase)


def run(trace, gpus, mode="replicas", timing_spans=False, **extra):
    config = SimConfig(
        hardware="hgx-h100-8gpu",
        trace=str(trace),
        cache={"capacity": K},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        parallel={"gpus": gpus, "mode": mode},
        timing={"record_spans": timing_spans},
        **extra,
    )
    return simulate(config)


def resource(result, name: str) -> dict:
    table = result.per_resource
    i = table["resource"].index(name)
    return {k: v[i] for k, v in table.items()}


def test_pair_behind_one_switch_halves_each_gpus_bandwidth(twin_trace) -> None:
    """gpu0 and gpu1 share the host->pcie-sw0 uplink: fetching in lockstep, each gets half of
    it, so each GPU's stall doubles (less the per-transfer latency, a small part)."""
    alone = run(twin_trace, ["gpu0"], workload={"max_requests": 1})
    pair = run(twin_trace, ["gpu0", "gpu1"])
    apart = run(twin_trace, ["gpu0", "gpu2"])
    stall_alone = alone.per_gpu["stall_s"][0]
    assert pair.per_gpu["stall_s"] == pytest.approx([2 * stall_alone] * 2, rel=0.02)
    # Behind different switches nothing is shared but DRAM (614 GB/s): no slowdown.
    assert apart.per_gpu["stall_s"] == pytest.approx([stall_alone] * 2, rel=1e-6)
    # The contention shows in the resource table: the shared uplink carried both GPUs' bytes.
    up = resource(pair, "pcie-up0:host>pcie-sw0")
    assert up["bytes"] == pytest.approx(sum(pair.per_gpu["bytes_fetched"]))
    assert up["utilization"] > 0.9
    assert resource(apart, "pcie-up1:host>pcie-sw1")["bytes"] == apart.per_gpu["bytes_fetched"][1]


def test_replicas_split_requests_round_robin(twin_trace) -> None:
    result = run(twin_trace, 2)
    assert result.per_gpu["gpu"] == ["gpu0", "gpu1"]
    assert result.per_gpu["requests"] == [1, 1]
    assert result.per_request["request"] == [0, 1]
    assert result.inputs["gpus"] == 2
    # Both caches' counters add up in the run's totals.
    assert result.metrics["accesses"] == 2 * 6 * LAYERS * K
    assert result.metrics["misses"] == sum(result.per_gpu["misses"])


def test_expert_sharded_fetches_remote_experts_over_nvlink(twin_trace) -> None:
    """Two GPUs each own half of every layer's experts; a GPU's own half always hits and the
    other half comes from the peer's HBM over NVLink (never over PCIe from the host)."""
    result = run(twin_trace, 2, mode="expert-sharded")
    owner = shard_owner(EXPERTS, 2)
    assert owner.tolist() == [0] * 32 + [1] * 32
    # Token t selects experts 8t..8t+7: tokens 0-3 are in gpu0's shard, tokens 4-5 in gpu1's.
    per_token = LAYERS * K
    assert result.per_gpu["hits_home"] == [4 * per_token, 2 * per_token]
    assert result.per_gpu["misses"] == [2 * per_token, 4 * per_token]
    assert resource(result, "pcie-up0:host>pcie-sw0")["bytes"] == 0
    to_gpu0 = resource(result, "nvlink-gpu0:nvswitch>gpu0")["bytes"]
    from_gpu1 = resource(result, "nvlink-gpu1:gpu1>nvswitch")["bytes"]
    assert to_gpu0 == from_gpu1 == result.per_gpu["bytes_fetched"][0]
    # NVLink is ~7x PCIe here: far less stall than fetching the same misses from the host.
    replicas = run(twin_trace, 2)
    assert sum(result.per_gpu["stall_s"]) < 0.3 * sum(replicas.per_gpu["stall_s"])


def test_peer_path_goes_through_the_nvswitch() -> None:
    profile = load_profile("hgx-h100-8gpu")
    path = transfer_path(profile, "gpu3", "gpu0")
    assert [h.key for h in path.hops] == ["nvlink-gpu3:gpu3>nvswitch", "nvlink-gpu0:nvswitch>gpu0"]
    assert not any(r.startswith("dram:") for r in path.resources)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"parallel": {"gpus": 9}}, "parallel.gpus: expected at most the 8 GPU(s)"),
        ({"parallel": {"gpus": ["gpu0", "gpu9"]}}, "got ['gpu9']"),
        ({"parallel": {"gpus": True}}, "expected a number of GPUs or a list of GPU ids"),
        ({"parallel": {"gpus": 1, "mode": "expert-sharded"}}, "at least 2 GPUs"),
        ({"parallel": {"gpus": 2}, "belady_gap": True}, "belady_gap: expected false"),
        (
            {"parallel": {"gpus": 2, "mode": "expert-sharded"}, "cache": {"capacity": "79GB"}},
            "own expert shard",
        ),
    ],
)
def test_impossible_parallel_configs_fail_clearly(twin_trace, extra, message) -> None:
    base = {"hardware": "hgx-h100-8gpu", "trace": str(twin_trace), "model": "olmoe-1b-7b"}
    with pytest.raises(SpecmdError) as info:
        simulate(build_config({**base, **extra}))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_replay_refuses_several_gpus(twin_trace) -> None:
    with pytest.raises(SpecmdError, match="replay engine"):
        replay(SimConfig(hardware="hgx-h100-8gpu", trace=str(twin_trace), parallel={"gpus": 2}))


def test_same_seed_same_multi_gpu_result(twin_trace) -> None:
    config = dict(
        hardware="hgx-h100-8gpu",
        trace=str(twin_trace),
        parallel={"gpus": 2},
        predictor={"kind": "noisy-oracle", "accuracy": 0.7},
        timing={"record_spans": False},
    )
    a, b = simulate(SimConfig(**config)), simulate(SimConfig(**config))
    assert a.to_json() == b.to_json()


def test_static_hot_picks_its_hot_set_outside_the_gpus_own_shard(twin_trace) -> None:
    from specmd_sim.scenario import build_scenario
    from specmd_sim.scenario.plugins import build_runs

    config = SimConfig(
        hardware="hgx-h100-8gpu",
        trace=str(twin_trace),
        cache={"capacity": 16},
        eviction={"kind": "static-hot"},
        parallel={"gpus": 2, "mode": "expert-sharded"},
    )
    for run_objs in build_runs(build_scenario(config)):
        hot = run_objs.eviction.initial_contents()
        assert len(hot) == 16
        assert (run_objs.ctx.source[hot] >= 0).all()  # none is in the GPU's own shard
        assert run_objs.cache.contents() == sorted(hot)  # all 16 slots hold hot experts


def test_perfetto_trace_has_one_passes_track_per_gpu(twin_trace) -> None:
    from specmd_sim.timeline import to_chrome_trace

    result = run(twin_trace, 2, timing_spans=True)
    trace = to_chrome_trace(
        result.spans, result.lanes, result.counters,
        per_pass=result.per_pass, per_request=result.per_request,
    )  # fmt: skip
    events = trace["traceEvents"]
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    track = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    per_gpu: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and track.get((e["pid"], e["tid"])) == "passes":
            per_gpu.setdefault(process[e["pid"]], []).append((e["ts"], e["ts"] + e["dur"]))
    assert sorted(per_gpu) == ["gpu0", "gpu1"]
    for slices in per_gpu.values():
        assert len(slices) == 6
        slices.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in itertools.pairwise(slices))
    assert {"gpu0/cache_used_bytes", "gpu1/cache_used_bytes"} <= set(result.counters)
