"""The contract suite: every registered plug-in, through the same invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from support import context
from support.traces import random_trace_ids

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.cache import ExpertCache
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.policies.context import OfflineContext, RunContext
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.eviction.belady import BeladyConfig, BeladyEviction
from specmd_sim.policies.eviction.fifo import FIFOConfig
from specmd_sim.policies.eviction.lru import LRUConfig, LRUEviction
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.prefetch.top_k import TopKPrefetch
from specmd_sim.policies.registry import PluginConfig, Registry
from specmd_sim.scenario import build_scenario
from specmd_sim.scenario.plugins import build_run

EVICTION_KINDS = EVICTION.kinds()
PREFETCH_KINDS = PREFETCH.kinds()
PREDICTOR_KINDS = PREDICTORS.kinds()


@pytest.mark.parametrize("registry", [EVICTION, PREFETCH, PREDICTORS, MISS], ids=lambda r: r.family)
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
        held = sum(1 for s in self.state if s) - len(self.staged_keys)  # (outside the capacity)
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

    def settle(self) -> None:
        super().settle()
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


# --- the plug-in contract itself: kind from the config, the view each plug-in is given --------

FAMILIES = (EVICTION, PREFETCH, PREDICTORS, MISS)


def _built(family: str, kind: str):
    """A one-request run whose ``family`` section is ``kind`` (built, not run)."""
    sections = {family: {"kind": kind}}
    if family == "predictor":
        sections["prefetch"] = {"kind": "top-k"}  # one that asks the predictor
    config = SimConfig(
        trace="mixtral-synthetic", cache={"capacity": 16}, workload={"max_requests": 1}, **sections
    )
    run = build_run(build_scenario(config))
    return {
        "eviction": run.eviction,
        "prefetch": run.prefetch,
        "predictor": run.predictor.inner if run.predictor is not None else None,
        "miss": run.miss,
    }[family], run


@pytest.mark.parametrize(
    ("family", "kind"), [(r.family, k) for r in FAMILIES for k in r.kinds()], ids=str
)
def test_every_plugin_is_given_the_view_it_declares(family: str, kind: str) -> None:
    """Online plug-ins get the online view (no future demand sets, no trace); offline ones
    (bounds, oracles, the run's own profile) the offline view, sharing its generator and
    history. Online plug-ins reading the future would fail every run of this suite: the
    history refuses what the cache has not reached."""
    plugin, run = _built(family, kind)
    assert type(plugin).kind == kind
    assert type(plugin.ctx) is (OfflineContext if plugin.offline else RunContext)
    assert plugin.ctx.rng is run.ctx.rng and plugin.ctx.history is run.ctx.history
    assert not hasattr(run.ctx, "demand") and not hasattr(run.ctx, "trace")


def test_offline_plugins_are_the_bounds_oracles_and_profiles() -> None:
    offline = {(r.family, c.kind) for r in FAMILIES for c in r.entries() if c.offline}
    assert offline == {
        ("eviction", "belady"),
        ("eviction", "belady-bypass"),
        ("eviction", "static-hot"),
        ("prefetch", "oracle"),
        ("prefetch", "pre-gated"),
        ("predictor", "noisy-oracle"),
    }


class ProbeConfig(PluginConfig):
    kind: Literal["probe"] = "probe"


class ProbeEviction(LRUEviction):
    Config = ProbeConfig


def test_config_and_kind_come_from_the_type_parameter() -> None:
    class Probe(EvictionPolicy[ProbeConfig]):
        description = source = "tests"

    assert (Probe.Config, Probe.kind) == (ProbeConfig, "probe")
    assert (ProbeEviction.Config, ProbeEviction.kind) == (ProbeConfig, "probe")
    assert (LRUEviction.Config, LRUEviction.kind) == (LRUConfig, "lru")


def test_registration_checks_the_family_and_the_kind() -> None:
    registry = Registry("eviction", "specmd_sim.policies.eviction", EvictionPolicy)
    registry.register(ProbeEviction)
    with pytest.raises(TypeError, match="expected a subclass of EvictionPolicy, got TopKPrefetch"):
        registry.register(TopKPrefetch)

    class Renamed(LRUEviction):
        kind = "renamed"
        Config = ProbeConfig

    with pytest.raises(ValueError, match=r"Config\.kind defaults to 'probe', not 'renamed'"):
        registry.register(Renamed)


def test_registration_checks_the_methods_a_family_needs() -> None:
    """A plug-in without a method its family's base only declares (it raises) is refused
    when registered, naming each one: not a NotImplementedError in the middle of a run."""
    registry = Registry("eviction", "specmd_sim.policies.eviction", EvictionPolicy)

    class Forgetful(EvictionPolicy[ProbeConfig]):
        description = source = "tests"

        def on_insert(self, key: int, reason: object) -> None:
            pass

    with pytest.raises(TypeError, match=r"^eviction .*:.*Forgetful: expected it to define "
                                        r"on_remove, choose_victim \(EvictionPolicy's own only "
                                        r"raise\)$"):  # fmt: skip
        registry.register(Forgetful)
    prefetch = Registry("prefetch", "specmd_sim.policies.prefetch", PrefetchPolicy)

    class Planless(PrefetchPolicy[ProbeConfig]):
        description = source = "tests"

    with pytest.raises(TypeError, match="expected it to define select or plan"):
        prefetch.register(Planless)


def test_a_plugin_checks_its_config_and_view() -> None:
    run = context.views()
    with pytest.raises(TypeError, match="LRUEviction: expected a LRUConfig, got FIFOConfig"):
        LRUEviction(FIFOConfig(), run.online)
    with pytest.raises(TypeError, match="BeladyEviction is offline: expected an OfflineContext"):
        BeladyEviction(BeladyConfig(), run.online)


@pytest.mark.parametrize("registry", [EVICTION, PREFETCH, PREDICTORS, MISS], ids=lambda r: r.family)
def test_every_built_in_kind_lives_in_the_module_its_name_gives(registry) -> None:
    """So that a run imports the plug-ins it uses (Registry.get looks there first)."""
    for cls in registry.entries():
        assert cls.__module__ == f"{registry.package}.{cls.kind.replace('-', '_')}", cls


def test_a_plugin_cannot_take_a_built_in_kind() -> None:
    class Shadow(EvictionPolicy[LRUConfig]):
        description = source = "tests"

    with pytest.raises(ValueError, match="eviction kind 'lru' is registered twice"):
        EVICTION.register(Shadow)
    assert EVICTION.get("lru") is LRUEviction
