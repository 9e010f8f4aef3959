"""The contract suite: every registered plug-in, through the same invariants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.traces import random_trace_ids

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.cache import ExpertCache
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.policies.registry import PluginConfig

EVICTION_KINDS = EVICTION.kinds()
PREFETCH_KINDS = PREFETCH.kinds()
PREDICTOR_KINDS = PREDICTORS.kinds()


@pytest.mark.parametrize("registry", [EVICTION, PREFETCH, PREDICTORS], ids=lambda r: r.family)
def test_registry_entries_are_well_formed(registry) -> None:
    assert registry.kinds(), "empty registry"
    for cls in registry.entries():
        assert issubclass(cls.Config, PluginConfig)
        assert cls.Config().kind == cls.kind  # the config's default kind is the registered name
        assert cls.description and cls.source
        assert (
            cls.Config.model_config.get("frozen")
            and cls.Config.model_config.get("extra") == "forbid"
        )


def test_required_kinds_are_registered() -> None:
    assert {"lru", "fifo", "lfu", "least-stale", "belady"} <= set(EVICTION_KINDS)
    assert {"none", "top-k"} <= set(PREFETCH_KINDS)
    assert {"noisy-oracle", "trace"} <= set(PREDICTOR_KINDS)


class CheckedCache(ExpertCache):
    """Asserts the cache invariants after every mutating operation."""

    def _check(self) -> None:
        assert 0 <= self.used_bytes <= self.capacity_bytes
        held = sum(1 for s in self.state if s)
        assert held * self.expert_bytes == self.used_bytes

    def reserve(self, key, reason):  # type: ignore[override]
        victim_before = self.policy.choose_victim(self.evictable, key)
        again = self.policy.choose_victim(self.evictable, key)
        assert victim_before == again, "choose_victim must not change the policy's state"
        ok = super().reserve(key, reason)
        self._check()
        return ok

    def _evict(self, key: int) -> None:
        assert self.state[key] == 2 and not self.pins[key], "evicted a pinned or loading expert"
        super()._evict(key)

    def complete(self, key: int) -> None:
        super().complete(key)
        self._check()


@pytest.fixture
def olmoe_like_trace(write_trace) -> Path:
    rng = np.random.default_rng(7)
    ids = random_trace_ids(rng, tokens=24, layers=16, experts=64, k=8)
    request = np.r_[np.zeros(12), np.ones(12)].astype(np.int32)
    phase = np.r_[np.zeros(4), np.ones(8), np.zeros(4), np.ones(8)].astype(np.uint8)
    return write_trace(ids, "olmoe-1b-7b", 64, phase=phase, request=request)


def _invariants(result) -> None:
    m = result.metrics
    assert m["hits"] + m["late_hits"] + m["misses"] == m["accesses"]
    assert m["misses_compulsory"] + m["misses_capacity"] + m["misses_collision"] == m["misses"]
    assert (
        m["prefetch_used"] + m["prefetch_wasted"] + m["prefetch_cancelled"] == m["prefetch_issued"]
    )
    assert m["prefetch_completed"] <= m["prefetch_issued"]
    layer = result.per_layer
    assert sum(layer["accesses"]) == m["accesses"]
    assert sum(layer["misses_collision"]) == m["misses_collision"]


@pytest.mark.parametrize("eviction", EVICTION_KINDS)
@pytest.mark.parametrize("pin", [True, False])
def test_every_eviction_policy_keeps_the_invariants_in_replay(
    eviction: str, pin: bool, olmoe_like_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("specmd_sim.scenario.plugins.ExpertCache", CheckedCache)
    cfg = SimConfig(
        trace=str(olmoe_like_trace),
        cache={"capacity": 32, "pin_demand_set": pin},
        eviction={"kind": eviction},
        prefetch={"kind": "top-k", "lookahead": 2},
        workload={"prefill_chunk_tokens": 0},
    )
    _invariants(replay(cfg))


@pytest.mark.parametrize("eviction", EVICTION_KINDS)
def test_every_eviction_policy_keeps_the_invariants_in_simulate(
    eviction: str, olmoe_like_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("specmd_sim.scenario.plugins.ExpertCache", CheckedCache)
    cfg = SimConfig(
        trace=str(olmoe_like_trace),
        cache={"capacity": 20},
        eviction={"kind": eviction},
        prefetch={"kind": "top-k", "lookahead": 2},
        workload={"prefill_chunk_tokens": 2},
        timing={"chunk_bytes": 4 * 1024 * 1024},
    )
    result = simulate(cfg)
    _invariants(result)
    assert result.metrics["stall_s"] <= result.metrics["makespan_s"]


@pytest.mark.parametrize("prefetch", PREFETCH_KINDS)
@pytest.mark.parametrize("predictor", PREDICTOR_KINDS)
def test_every_prefetcher_and_predictor_run(prefetch: str, predictor: str) -> None:
    cfg = SimConfig(
        trace="mixtral-synthetic",
        cache={"capacity": 12},
        prefetch={"kind": prefetch},
        predictor={"kind": predictor},
        workload={"max_requests": 2},
    )
    _invariants(replay(cfg))


def test_least_stale_equals_lru_without_prefetching(write_trace) -> None:
    """Without prefetcher hints, Least-Stale's two queues order experts exactly as LRU does
    (everything touched this pass is more recent than everything stale), so the two must agree
    access for access; SpecMD's gain needs prefetching."""
    rng = np.random.default_rng(3)
    path = write_trace(random_trace_ids(rng, 40, 32, 8, 2), "mixtral-8x7b", 8)
    results = {
        kind: replay(
            SimConfig(
                trace=str(path),
                cache={"capacity": c},
                eviction={"kind": kind},
                prefetch={"kind": "none"},
            )
        ).per_layer
        for kind in ("lru", "least-stale")
        for c in (24,)
    }
    assert results["lru"] == results["least-stale"]


@pytest.mark.parametrize("miss", MISS.kinds())
def test_every_miss_handler_keeps_the_invariants(
    miss: str, olmoe_like_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("specmd_sim.scenario.plugins.ExpertCache", CheckedCache)
    cfg = SimConfig(
        trace=str(olmoe_like_trace),
        cache={"capacity": 20},
        prefetch={"kind": "top-k"},
        miss={"kind": miss},
        workload={"prefill_chunk_tokens": 2},
    )
    for result in (replay(cfg), simulate(cfg)):
        _invariants(result)
        m = result.metrics
        handled = m["activations_dropped"] + m["activations_substituted"] + m["activations_cpu"]
        assert handled <= m["misses"] + m["late_hits"]
        if miss == "stall":
            assert handled == 0
