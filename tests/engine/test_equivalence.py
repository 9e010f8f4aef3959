"""The engines make the same decisions: one layer step, fulfilled two ways.

1. Replay is the timing engine's zero-time limit: on a near-instant machine (no switch: a
   hardware and runtime profile whose every rate is 1e30 and every latency and overhead tiny,
   transfers tinier than compute, ``support.profiles.near_instant``) ``simulate`` gives exactly
   ``replay``'s per-access outcome sequence (a late hit there, a prefetch still in its ~0 s
   flight, being a hit in replay), eviction sequence and cache counters, for every eviction ×
   prefetch × miss handler of the registry (each in one pin mode, alternating, so that every
   pair of plug-ins is checked in both modes), on Hypothesis-generated traces with chunked
   prefill and batches; and under KV pressure (here) and with a DRAM cache
   (``test_two_level.py``).
2. With real timing and a cache that holds every expert (so no eviction can make the engines'
   contents diverge), time only ever makes an access worse: a hit in ``simulate`` is a hit in
   ``replay``, a late hit in ``simulate`` is a hit in ``replay``, and a miss in ``replay`` is a
   miss in ``simulate`` — never the reverse.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.profiles import near_instant

from specmd_sim import apply_overrides, build_config, replay, simulate
from specmd_sim.cache import AccessClass, ExpertCache
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.traces import make_trace, save_trace

# mixtral-8x7b: the cheapest catalog shape to simulate (64 accesses per token); with a cache a
# few slots above one layer's demand, prefetches still compete with each other for slots
MODEL, LAYERS, EXPERTS, TOP_K = "mixtral-8x7b", 32, 8, 2
_HIT, _LATE = int(AccessClass.HIT), int(AccessClass.LATE_HIT)


class _Recording(ExpertCache):
    """Logs every access with its class and every eviction, in order."""

    logs: ClassVar[list[dict[str, list[tuple[int, int]]]]] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: dict[str, list[tuple[int, int]]] = {"access": [], "evict": []}
        _Recording.logs.append(self.log)

    def access(self, key: int, layer: int) -> int:
        klass = super().access(key, layer)
        self.log["access"].append((key, klass))
        return klass

    def _evict(self, key: int) -> None:
        self.log["evict"].append((key, self.pass_index))
        super()._evict(key)


@st.composite
def workloads(draw, overflow: bool = False):
    """A routing trace and a workload: requests with prefill and decode tokens, chunked
    prefill, batches, and a cache a little larger than one layer's largest demand set (with
    ``overflow``, a little smaller than the largest a pass could demand)."""
    # the bounds make even Hypothesis's first, smallest example one whose cache fills up
    requests = draw(st.integers(2, 3))
    prefill = draw(st.lists(st.integers(2, 3), min_size=requests, max_size=requests))
    decode = draw(st.lists(st.integers(1, 3), min_size=requests, max_size=requests))
    chunk, batch = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    sizes = zip(prefill, decode, strict=True)
    phase = np.concatenate([np.r_[np.zeros(p), np.ones(d)] for p, d in sizes])
    request = np.repeat(np.arange(requests), np.add(prefill, decode))
    tokens = phase.size
    # skewed, so that experts repeat and caches matter
    weights = 1.0 / np.arange(1, EXPERTS + 1) ** 1.2
    ids = np.array(
        [
            rng.choice(EXPERTS, size=TOP_K, replace=False, p=weights / weights.sum())
            for _ in range(tokens * LAYERS)
        ]
    ).reshape(tokens, LAYERS, TOP_K)
    gates = np.sort(rng.random((tokens, LAYERS, TOP_K)), axis=2)[:, :, ::-1]
    pred = rng.random((1, tokens, LAYERS, EXPERTS)).astype(np.float16)
    trace = make_trace(
        ids.astype(np.int16), model=MODEL, num_experts=EXPERTS,
        request=request.astype(np.int32), phase=phase.astype(np.uint8),
        gates=gates.astype(np.float32), pred_scores=pred,
    )  # fmt: skip
    largest = TOP_K * max(chunk, 1) * batch
    slots = st.integers(1, largest - 1) if overflow else st.integers(largest + 4, largest + 24)
    overrides = [
        f"workload.prefill_chunk_tokens={chunk}",
        f"workload.batch_size={batch}",
        f"cache.capacity={draw(slots)}",
        f"seed={draw(st.integers(0, 99))}",
        f"predictor.kind={draw(st.sampled_from(PREDICTORS.kinds()))}",
    ]
    return trace, overrides


def _python_replay(config):
    """``replay`` through the layer step and the cache object these tests watch (the compiled
    path, which keeps its state in arrays, equals it: ``test_fast_replay.py``)."""
    return replay(config, compiled=False)


def _run(engine, trace, overrides: list[str]):
    _Recording.logs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = save_trace(trace, Path(tmp) / "t.npz")
        config = build_config(apply_overrides({}, [f"trace={path}", *overrides]))
        with mock.patch("specmd_sim.scenario.plugins.ExpertCache", _Recording):
            result = engine(config)
    (log,) = _Recording.logs
    return result, log


_CACHE_COUNTERS = (
    "accesses", "hits", "late_hits", "misses", "misses_compulsory", "misses_capacity",
    "misses_collision", "prefetch_issued", "prefetch_completed", "prefetch_used",
    "prefetch_wasted", "prefetch_cancelled", "prefetch_dropped", "evictions",
    "evictions_prefetch", "bypassed", "overflowed", "activations_dropped",
    "activations_substituted", "activations_cpu", "bytes_demand", "bytes_prefetch",
)  # fmt: skip


def _plugin_grid() -> list[tuple[str, str, str, str]]:
    """Every (eviction, prefetch, miss) of the registry once, the pin mode alternating with
    the parity of their indices: every triple of two plug-ins and a pin mode is then covered
    too (each family has at least two kinds), at half the cost of the full product."""
    return [
        (e, p, m, "true" if (i + j + k) % 2 == 0 else "false")
        for i, e in enumerate(EVICTION.kinds())
        for j, p in enumerate(PREFETCH.kinds())
        for k, m in enumerate(MISS.kinds())
    ]


def assert_the_same_decisions(replayed, replay_log, timed, timed_log, more=()) -> None:
    """The near-instant run made replay's decisions: the same accesses in the same classes (a
    late hit being a hit), the same evictions, the same counters."""
    as_replayed = [(key, _HIT if klass == _LATE else klass) for key, klass in timed_log["access"]]
    assert as_replayed == replay_log["access"]
    assert timed_log["evict"] == replay_log["evict"]
    names = [*_CACHE_COUNTERS, *more]
    got = {k: timed.metrics[k] for k in names}
    got["hits"], got["late_hits"] = got["hits"] + got["late_hits"], 0
    assert got == {k: replayed.metrics[k] for k in names}
    layers = [h + late for h, late in zip(timed.per_layer["hits"], timed.per_layer["late_hits"],
                                          strict=True)]  # fmt: skip
    assert layers == replayed.per_layer["hits"]
    assert timed.metrics["makespan_s"] > 0


@pytest.mark.parametrize(("eviction", "prefetch", "miss", "pin"), _plugin_grid())
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads())
def test_near_instant_timing_makes_replays_decisions(eviction, prefetch, miss, pin, workload):
    trace, overrides = workload
    overrides = [
        *overrides, f"eviction.kind={eviction}", f"prefetch.kind={prefetch}",
        f"miss.kind={miss}", f"cache.pin_demand_set={pin}",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:  # (the same machine for plug-ins that read it)
        overrides = [*overrides, *near_instant(Path(tmp))]
        replayed, replay_log = _run(_python_replay, trace, overrides)
        timed, timed_log = _run(simulate, trace, overrides)
    assert_the_same_decisions(replayed, replay_log, timed, timed_log)


@pytest.mark.parametrize("prefetch", ["none", "top-k"])
# (per-layer-lru holds a layer's overflow in its own staging buffers instead, and static-hot
# streams every expert it does not hold: neither ever overflows)
@pytest.mark.parametrize(
    "eviction", [k for k in EVICTION.kinds() if k not in ("per-layer-lru", "static-hot")]
)
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads(overflow=True))
def test_near_instant_timing_makes_replays_decisions_when_a_demand_set_overflows(
    eviction, prefetch, workload
):
    """A layer demands more experts than the cache holds: what its pins leave no room for is
    streamed past the cache in both engines, the same experts, in the same order."""
    trace, overrides = workload
    overrides = [*overrides, f"eviction.kind={eviction}", f"prefetch.kind={prefetch}"]
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [*overrides, *near_instant(Path(tmp))]
        replayed, replay_log = _run(_python_replay, trace, overrides)
        timed, timed_log = _run(simulate, trace, overrides)
    assume(replayed.metrics["overflowed"] > 0)
    assert_the_same_decisions(replayed, replay_log, timed, timed_log)


@pytest.mark.parametrize("prefetch", ["top-k", "score-threshold", "oracle", "pre-gated"])
@pytest.mark.parametrize("eviction", ["lru", "least-stale", "lfu"])
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads(), pin=st.sampled_from(["true", "false"]))
def test_time_only_makes_accesses_worse(eviction, prefetch, pin, workload):
    trace, overrides = workload
    overrides = [
        *overrides, f"eviction.kind={eviction}", f"prefetch.kind={prefetch}",
        f"cache.pin_demand_set={pin}", f"cache.capacity={LAYERS * EXPERTS}", "hardware=h200",
    ]  # fmt: skip
    _, replay_log = _run(_python_replay, trace, overrides)
    timed, timed_log = _run(simulate, trace, overrides)
    assert not timed_log["evict"] and not replay_log["evict"]
    pairs = list(zip(replay_log["access"], timed_log["access"], strict=True))
    assert all(r[0] == t[0] for r, t in pairs)  # the same access sequence
    for (_, r), (_, t) in pairs:
        if t in (_HIT, _LATE):
            assert r == _HIT
        if r != _HIT:
            assert t == r  # the same miss class
    assert timed.metrics["makespan_s"] > 0


@pytest.mark.parametrize("eviction", ["lru", "least-stale", "lfu", "belady"])
@pytest.mark.parametrize("prefetch", ["top-k", "none"])
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads())
def test_near_instant_timing_makes_replays_decisions_under_kv_pressure(
    eviction, prefetch, workload
):
    """Continuous batching with a KV cache that grows into the expert cache (its HBM leaves the
    drawn capacity and the KV cache of half a token less than its peak): the capacity loses a
    slot at the peak and gets it back, and both engines evict the same experts for it."""
    from specmd_sim.config import WorkloadConfig
    from specmd_sim.models import load_model
    from specmd_sim.runtime import load_runtime
    from specmd_sim.scenario.schedule import build_passes

    trace, overrides = workload
    model = load_model(MODEL)
    slots = int(next(o for o in overrides if o.startswith("cache.capacity=")).split("=")[1])
    batch = int(next(o for o in overrides if o.startswith("workload.batch_size=")).split("=")[1])
    continuous = WorkloadConfig(scheduler="continuous", batch_size=batch, max_tokens_per_step=3)
    peak = int(build_passes(trace, continuous).kv_resident.max())
    per_token = model.kv_bytes_per_token * model.num_layers
    hbm = (model.non_expert_bytes + int(load_runtime("roofline").workspace_bytes.value)
           + slots * model.expert_bytes + (2 * peak - 1) * per_token // 2)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            *overrides, f"eviction.kind={eviction}", f"prefetch.kind={prefetch}",
            "workload.scheduler=continuous", "workload.kv_cache=evict",
            "workload.max_tokens_per_step=3",
        ]  # fmt: skip
        machine = near_instant(Path(tmp), hbm)
        replayed, replay_log = _run(_python_replay, trace, [*overrides, *machine])
        timed, timed_log = _run(simulate, trace, [*overrides, *machine])
    assume(replayed.metrics["evictions_kv"] > 0)  # a cache not full at the peak shows nothing
    assert_the_same_decisions(replayed, replay_log, timed, timed_log, more=("evictions_kv",))


@pytest.mark.parametrize("pin", ["true", "false"])
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads())
def test_near_instant_released_swap_makes_replays_decisions(pin, workload):
    """mixtral-offloading's mechanisms: per-layer LRU starting as build_model leaves the GPU
    (``preload``, staging when a layer's slots are all in use) and the swap's copies one at a
    time on the compute stream, write-backs included (memory parity): on the near-instant
    machine, replay's decisions."""
    trace, overrides = workload
    overrides = [
        *overrides, "eviction.kind=per-layer-lru", "eviction.preload=true", "prefetch.kind=none",
        f"cache.pin_demand_set={pin}",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        machine = near_instant(Path(tmp), memory_parity=True, copy_stream="compute")
        overrides = [*overrides, *machine]
        replayed, replay_log = _run(_python_replay, trace, overrides)
        timed, timed_log = _run(simulate, trace, overrides)
    assert_the_same_decisions(replayed, replay_log, timed, timed_log)
