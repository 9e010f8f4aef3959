"""The two-level cache (``memory.dram_cache``): DRAM as a cache of the NVMe-resident experts.

- With DRAM holding every expert, the GPU level is the single-level run's, metric for metric,
  in both engines.
- Where DRAM holds fewer, no DRAM policy misses less than Belady over the DRAM-level access
  sequence, and that Belady equals an independent MIN over the fetches of the single-level run.
- One DRAM miss costs the NVMe read plus the PCIe copy (closed form from the profile).
- Bad configurations fail in one line; the compiled replay does not take two-level runs.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.profiles import near_instant

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.config import build_config
from specmd_sim.engine.fast import compiled_unsupported
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.metric_spec import METRICS, reported
from specmd_sim.models import load_model
from specmd_sim.scenario import build_run, build_scenario

LAYERS, EXPERTS, K = 16, 64, 8  # olmoe-1b-7b
B = load_model("olmoe-1b-7b").expert_bytes


def random_trace(write_trace, seed: int, tokens: int = 48, experts: int = EXPERTS) -> Path:
    """Skewed routing (a Zipf-like popularity per layer), one request, decode tokens."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, experts + 1) ** 1.1
    ids = np.empty((tokens, LAYERS, K), np.int16)
    for t in range(tokens):
        for layer in range(LAYERS):
            perm = rng.permutation(experts)  # a layer's popularity order changes per token
            ids[t, layer] = rng.choice(perm, K, replace=False, p=weight / weight.sum())
    phase = np.ones(tokens, np.uint8)
    phase[0] = 0
    return write_trace(ids, "olmoe-1b-7b", experts, name=f"r{seed}.npz", phase=phase)


def gpu_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if not k.startswith(("dram_", "bytes_nvme_"))}


def config(trace: Path, section: dict[str, Any] | None, **kw: Any) -> SimConfig:
    """A run on h100-pcie; ``section`` is ``memory.dram_cache`` (None: no DRAM cache),
    ``dram`` in ``kw`` its capacity."""
    data: dict[str, Any] = {
        "trace": str(trace),
        "hardware": "h100-pcie",
        "cache": {"capacity": kw.pop("capacity", 24), "pin_demand_set": kw.pop("pin", True)},
        "eviction": {"kind": kw.pop("eviction", "lru")},
        "prefetch": kw.pop("prefetch", {"kind": "none"}),
        "timing": {"record_spans": False},
    }
    if section is not None:
        data["memory"] = {"dram_cache": section, "dram_capacity": kw.pop("dram", None)}
    data.update(kw)
    return build_config(data)


PREFETCHING = {"kind": "top-k", "lookahead": 2}


@pytest.mark.parametrize("eviction", ["lru", "least-stale", "belady"])
@pytest.mark.parametrize("prefetch", [{"kind": "none"}, PREFETCHING])
def test_dram_holding_everything_is_the_single_level_run_in_replay(
    write_trace, eviction: str, prefetch: dict[str, Any]
) -> None:
    trace = random_trace(write_trace, 1)
    single = replay(config(trace, None, eviction=eviction, prefetch=prefetch))
    # cold or warm, with a DRAM prefetcher or not: the GPU level does not see the DRAM level
    own_predictor = {"prefetch": PREFETCHING, "predictor": {"kind": "popularity"}}
    for dram in ({}, {"warm": False, "prefetch": PREFETCHING}, own_predictor):
        two = replay(config(trace, dram, eviction=eviction, prefetch=prefetch))
        assert gpu_metrics(two.metrics) == single.metrics
        assert two.per_layer == single.per_layer
        assert two.metrics["dram_evictions"] == 0


@pytest.mark.parametrize("prefetch", [{"kind": "none"}, PREFETCHING])
def test_dram_holding_everything_is_the_single_level_run_in_simulate(
    small_trace, prefetch: dict[str, Any]
) -> None:
    trace = small_trace("olmoe-1b-7b", requests=2, prefill=3, decode=6)
    single = simulate(config(trace, None, prefetch=prefetch))
    two = simulate(config(trace, {}, prefetch=prefetch))
    assert gpu_metrics(two.metrics) == single.metrics
    assert two.per_layer == single.per_layer
    assert two.per_request == single.per_request
    m = two.metrics
    assert m["dram_hits"] == m["dram_accesses"] > 0 and m["bytes_nvme_demand"] == 0


@pytest.mark.parametrize("section", [
    {"eviction": "lru"},
    {"eviction": "lfu", "prefetch": {"kind": "top-k", "lookahead": 2}},
    {"eviction": "belady", "warm": False},
    {"eviction": "fifo", "prefetch": {"kind": "top-k", "lookahead": 3}},
])  # fmt: skip
@pytest.mark.parametrize("pin", [True, False], ids=["pinned", "one-at-a-time"])
def test_a_near_instant_machine_makes_the_decisions_of_replay(
    small_trace, tmp_path: Path, section: dict[str, Any], pin: bool
) -> None:
    """Replay is the zero-time limit at both levels: the reads into DRAM land as the copies
    do, at the stream's next wait (a late hit there being a hit here). A GPU fetch of an expert
    that a DRAM prefetch of the same step is reading joins that read, in replay too: a DRAM late
    hit in both, counted with the hits."""
    trace = small_trace("olmoe-1b-7b", requests=2, prefill=3, decode=6)
    machine = dict(o.split("=", 1) for o in near_instant(tmp_path))
    cfg = config(trace, section, prefetch=PREFETCHING, dram=100, capacity=40, pin=pin,
                 eviction="lfu", **machine)  # fmt: skip
    timed, counters = simulate(cfg).metrics, replay(cfg).metrics
    for metrics, level in itertools.product((timed, counters), ("", "dram_")):
        metrics[f"{level}hits"] += metrics[f"{level}late_hits"]
        metrics[f"{level}late_hits"] = 0
    assert {k: timed[k] for k in counters} == counters
    assert counters["dram_misses"] > 0 and counters["dram_evictions"] > 0
    for result in (simulate(cfg), replay(cfg)):  # exactly the metrics the spec lists for the run
        want = {m.name for m in METRICS.values() if reported(m, result.engine, result.config)}
        assert set(result.metrics) == want


def fetched_keys(trace: Path, **kw: Any) -> list[list[tuple[int, bool]]]:
    """The keys the single-level replay fetches (its DRAM-level access stream), per layer step,
    in order, each with whether it is a demand fetch, taken from the layer step's requests (a
    demand fetch landing at once, a layer's prefetches after its plan, as zero-time transfers
    do)."""
    from specmd_sim.engine.layer import Fetch, LayerStep

    scenario = build_scenario(config(trace, None, **kw))
    run = build_run(scenario)
    step = LayerStep(run, timed=False)
    steps: list[list[tuple[int, bool]]] = []
    for p in range(scenario.passes.num_passes):
        step.begin_pass(p)
        for layer in range(LAYERS):
            steps.append([])
            for request in step.layer(p, layer):
                assert isinstance(request, Fetch)
                steps[-1].append((request.key, request.demand))
                if request.demand:
                    run.cache.complete(request.key)
            for key, demand in steps[-1]:
                if not demand:
                    run.cache.complete(key)
    return steps


def min_misses(steps: list[list[tuple[int, bool]]], slots: int) -> int:
    """Belady's MIN on a plain cache of ``slots`` keys over the accesses of ``steps``, where
    what a step prefetches is being copied until the step ends, so it cannot be evicted before
    (independent of the project's code)."""
    keys = [key for accesses in steps for key, _ in accesses]
    following = [0] * len(keys)  # the position of each access's key's next access
    last: dict[int, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        following[i] = last.get(keys[i], len(keys))
        last[keys[i]] = i
    cached: dict[int, int] = {}  # key -> its next access
    misses, i = 0, 0
    for accesses in steps:
        copying: set[int] = set()
        for key, demand in accesses:
            if key not in cached:
                misses += 1
                if len(cached) == slots:
                    free = [k for k in cached if k not in copying]
                    del cached[max(free, key=cached.__getitem__)]
            cached[key] = following[i]
            if not demand:
                copying.add(key)
            i += 1
    return misses


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_no_dram_policy_misses_less_than_belady_over_the_dram_stream(write_trace, seed) -> None:
    trace = random_trace(write_trace, seed, tokens=24)
    gpu = {"eviction": "lru", "prefetch": PREFETCHING, "capacity": 20}
    slots = 160  # of 1024 experts; the GPU cache's 20 + one layer's 8 must fit in DRAM
    kw = dict(gpu, dram=slots)
    best = replay(config(trace, {"eviction": "belady", "warm": False}, pin=False, **kw)).metrics
    stream = fetched_keys(trace, pin=False, **gpu)
    assert best["dram_accesses"] == sum(map(len, stream))
    assert best["dram_misses"] == min_misses(stream, slots)
    for pin in (False, True):
        bound = replay(config(trace, {"eviction": "belady", "warm": False}, pin=pin, **kw))
        for policy in ("lru", "fifo", "lfu", "least-stale", "random"):
            other = replay(config(trace, {"eviction": policy, "warm": False}, pin=pin, **kw))
            assert other.metrics["dram_misses"] >= bound.metrics["dram_misses"], (policy, pin)
            assert other.metrics["dram_accesses"] == bound.metrics["dram_accesses"]


def test_dram_metrics_add_up(write_trace) -> None:
    trace = random_trace(write_trace, 5)
    dram = {"eviction": "lru", "prefetch": {"kind": "top-k", "lookahead": 3}}
    m = replay(config(trace, dram, prefetch=PREFETCHING, dram=120)).metrics
    assert m["dram_hits"] + m["dram_late_hits"] + m["dram_misses"] == m["dram_accesses"]
    assert m["dram_misses"] == sum(m[f"dram_misses_{c}"] for c in ("compulsory", "capacity",
                                                                    "collision"))  # fmt: skip
    # every fetch into the GPU cache reads DRAM once (replay cancels nothing)
    assert m["dram_accesses"] == m["misses"] + m["prefetch_issued"]
    assert m["bytes_nvme_demand"] == m["dram_misses"] * B
    assert m["bytes_nvme_prefetch"] == m["dram_prefetch_issued"] * B
    assert m["dram_prefetch_used"] + m["dram_prefetch_wasted"] == m["dram_prefetch_issued"] > 0
    demand_only = replay(config(trace, {"eviction": "lru"}, prefetch=PREFETCHING, dram=120))
    assert m["dram_misses"] < demand_only.metrics["dram_misses"]  # the DRAM prefetcher helps


def test_the_compiled_replay_leaves_two_level_runs_to_python(write_trace) -> None:
    trace = random_trace(write_trace, 6, tokens=8)
    cfg = config(trace, {"eviction": "fifo"}, eviction="fifo", dram=100)
    run = build_run(build_scenario(cfg))
    assert compiled_unsupported(run) == "a DRAM cache (memory.dram_cache)"
    with pytest.raises(SpecmdError, match="does not cover this run: a DRAM cache"):
        replay(cfg, compiled=True)
    assert replay(cfg).metrics == replay(cfg, compiled=False).metrics
    result = replay(cfg)
    assert result.to_json() == replay(cfg).to_json()  # deterministic
    assert build_config(result.config) == cfg  # the echo loads back


@pytest.fixture
def one_token(write_trace) -> Path:
    """One decode token selecting expert 1 in every layer (k = 1)."""
    return write_trace(np.ones((1, LAYERS, 1), np.int16), "olmoe-1b-7b", EXPERTS)


def test_a_dram_miss_costs_the_nvme_read_then_the_pcie_copy(one_token) -> None:
    profile = load_profile("h100-pcie")
    drive = profile.node("nvme0")
    pcie = profile.links[0]
    assert {pcie.a, pcie.b} == {"host", "gpu0"}
    # the drive at 96 requests outstanding (capped) runs at its peak, below its link's 14 GB/s
    depth = math.ceil(B / drive.read_request_bytes.value)
    nvme_read = B / min(drive.read_bandwidth(depth), 14e9)
    copy = pcie.latency_s.value + B / pcie.bandwidth_bytes_per_s.value

    def stall(warm: bool) -> dict[str, Any]:
        cfg = SimConfig(
            trace=str(one_token),
            cache={"capacity": 1},
            eviction={"kind": "lru"},
            prefetch={"kind": "none"},
            memory={"dram_capacity": 2, "placement": "layer-order",
                    "dram_cache": {"warm": warm}},
            timing={"record_spans": False},
        )  # fmt: skip
        return simulate(cfg).metrics

    cold = stall(False)
    assert cold["dram_misses_compulsory"] == LAYERS
    assert cold["stall_s"] == pytest.approx(LAYERS * (nvme_read + copy), rel=1e-9)
    # warm: DRAM starts with layer 0's experts 0 and 1 (layer order), so layer 0 only copies
    warm = stall(True)
    assert warm["dram_hits"] == 1 and warm["dram_misses"] == LAYERS - 1
    assert warm["stall_s"] == pytest.approx((LAYERS - 1) * (nvme_read + copy) + copy, rel=1e-9)


def test_a_dram_miss_waits_while_dram_is_full_of_prefetch_reads(one_token) -> None:
    """Two DRAM slots, both taken by DRAM prefetches in flight when layer 0's expert misses:
    the miss waits for a read to land, then reserves (the timing engine's only wait)."""
    cfg = SimConfig(
        trace=str(one_token),
        cache={"capacity": 1},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        memory={"dram_capacity": 2, "dram_cache": {
            "warm": False, "prefetch": {"kind": "top-k", "lookahead": 2}}},
        predictor={"kind": "noisy-oracle"},  # (one that predicts the first token's experts)
        timing={"record_spans": False},
    )  # fmt: skip
    m = simulate(cfg).metrics
    assert m["dram_accesses"] == m["misses"] == LAYERS
    assert m["dram_hits"] + m["dram_late_hits"] + m["dram_misses"] == LAYERS
    assert m["dram_prefetch_issued"] > 0 and m["dram_misses_compulsory"] >= 1


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"hardware": "h100-sxm"}, "memory.dram_cache: expected a hardware profile with an NVMe"),
        ({"memory": {"dram_cache": {}, "dram_capacity": 20}},
         "memory.dram_capacity: expected at least the GPU cache"),
        ({"miss": {"kind": "cpu-execute"}}, "memory.dram_cache: expected a miss handler"),
        ({"runtime": "mixtral-offloading", "cache": {"capacity": 8}},
         "memory.dram_cache: expected a runtime without memory parity"),
        ({"hardware": "hgx-h100-8gpu", "parallel": {"gpus": 2}},
         "memory.dram_cache: expected 1 GPU"),
        ({"memory": {"dram_cache": {"eviction": "nope"}}},
         "memory.dram_cache.eviction.kind: expected one of"),
    ],
)  # fmt: skip
def test_bad_two_level_configs_fail_in_one_line(
    write_trace, update: dict[str, Any], message: str
) -> None:
    trace = random_trace(write_trace, 7, tokens=4)
    data: dict[str, Any] = {"trace": str(trace), "cache": {"capacity": 16},
                            "memory": {"dram_cache": {}}}  # fmt: skip
    data.update(update)
    with pytest.raises(SpecmdError) as info:
        build_scenario(build_config(data))
    text = str(info.value)
    assert message in text and "\n" not in text


def test_every_nvme_read_is_a_span_on_the_drives_lane(small_trace) -> None:
    """The timeline shows each read into DRAM (demand, prefetch or staged past the cache) as a
    ``nvme_read`` span on ``nvme0/dram-fill``: as many bytes as the DRAM level counts, each
    ending before the copy of its expert to the GPU that follows it starts."""
    from specmd_sim.timeline import KIND, TRANSFER_KINDS

    trace = small_trace("olmoe-1b-7b", requests=2, prefill=3, decode=6)
    dram = {"eviction": "lru", "prefetch": {"kind": "top-k", "lookahead": 3}, "warm": False}
    cfg = config(trace, dram, prefetch=PREFETCHING, dram=100, capacity=40)
    result = simulate(cfg.model_copy(update={"timing": cfg.timing.model_copy(
        update={"record_spans": True})}))  # fmt: skip
    spans, m = result.spans, result.metrics
    reads = spans[spans["kind"] == KIND["nvme_read"]]
    assert {result.lanes[lane] for lane in reads["lane"].tolist()} == {"nvme0/dram-fill"}
    assert int(reads["bytes"].sum()) == m["bytes_nvme_demand"] + m["bytes_nvme_prefetch"] > 0
    assert np.all(reads["end"] > reads["start"])
    copies = spans[np.isin(spans["kind"], [KIND[k] for k in TRANSFER_KINDS])]
    followed = 0
    for read in reads[:50]:  # the copy of its expert that follows it starts once it landed
        later = copies[(copies["expert"] == read["expert"]) & (copies["end"] > read["end"])]
        if later.size:
            assert later["start"].min() >= read["end"] - 1e-12
            followed += 1
    assert followed > 25  # most reads feed a copy (a few prefetched into DRAM never do)
