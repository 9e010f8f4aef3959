"""Build the objects one run needs (shared by both engines): context, cache and plug-ins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmd_sim.cache import ExpertCache
from specmd_sim.hardware import host_path
from specmd_sim.models import CostModel
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.miss.base import MissHandler
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.scenario import Scenario, new_rng


@dataclass(eq=False)
class RunObjects:
    ctx: RunContext
    cache: ExpertCache
    eviction: EvictionPolicy
    prefetch: PrefetchPolicy
    predictor: Predictor | None  # None when the prefetcher asks for no scores
    miss: MissHandler
    arrivals: (
        np.ndarray | None
    )  # arrival time of each request in admission order, s; None = closed loop


def build_run(scenario: Scenario, warm: list[int] | None = None) -> RunObjects:
    """The run's objects; ``warm`` adds experts to place in the cache before the run."""
    config = scenario.config
    profile = scenario.profile
    rng = new_rng(config)
    arrivals = None
    workload = config.workload
    if workload.arrivals == "poisson":
        # drawn first, in both engines, so that the plug-ins see the same random stream
        requests = int(scenario.passes.joins.sum())
        gaps = rng.exponential(1.0 / workload.arrival_rate_per_s, requests)
        arrivals = np.cumsum(gaps)
    ctx = RunContext(
        model=scenario.model,
        trace=scenario.trace,
        passes=scenario.passes,
        demand=scenario.demand,
        rng=rng,
        slots=scenario.slots,
        profile=profile,
        cost=CostModel(scenario.model, profile.gpus[0]),
        path=host_path(profile),
    )
    eviction = EVICTION.get(config.eviction.kind)(config.eviction, ctx)
    cache = ExpertCache(
        scenario.trace.num_layers,
        scenario.trace.num_experts,
        scenario.model.expert_bytes,
        scenario.capacity_bytes,
        eviction,
    )
    eviction.attach(cache)
    cache.preload(eviction.initial_contents() + list(warm or []))
    prefetch = PREFETCH.get(config.prefetch.kind)(config.prefetch, ctx)
    predictor = None
    if prefetch.lookahead > 0 and prefetch.uses_predictor:
        predictor = PREDICTORS.get(config.predictor.kind)(config.predictor, ctx)
        predictor = _Tapped(predictor, eviction)
    miss = MISS.get(config.miss.kind)(config.miss, ctx)
    return RunObjects(ctx, cache, eviction, prefetch, predictor, miss, arrivals)


class _Tapped:
    """A predictor whose every score vector is also shown to the eviction policy."""

    def __init__(self, inner: Predictor, eviction: EvictionPolicy) -> None:
        self.inner = inner
        self.eviction = eviction
        self.kind = inner.kind

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        out = self.inner.scores(pass_index, layer, target)
        if out is not None:
            self.eviction.on_scores(target, out)
        return out
