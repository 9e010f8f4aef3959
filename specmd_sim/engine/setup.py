"""Build the objects one run needs (shared by both engines): context, cache and plug-ins."""

from __future__ import annotations

from dataclasses import dataclass

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import EVICTION, PREDICTORS, PREFETCH
from specmd_sim.scenario import Scenario, new_rng


@dataclass(eq=False)
class RunObjects:
    ctx: RunContext
    cache: ExpertCache
    eviction: EvictionPolicy
    prefetch: PrefetchPolicy
    predictor: Predictor | None  # None when the prefetcher never asks for scores


def build_run(scenario: Scenario) -> RunObjects:
    config = scenario.config
    ctx = RunContext(
        model=scenario.model,
        trace=scenario.trace,
        passes=scenario.passes,
        demand=scenario.demand,
        rng=new_rng(config),
        slots=scenario.slots,
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
    prefetch = PREFETCH.get(config.prefetch.kind)(config.prefetch, ctx)
    predictor = None
    if prefetch.lookahead > 0:
        predictor = PREDICTORS.get(config.predictor.kind)(config.predictor, ctx)
    return RunObjects(ctx, cache, eviction, prefetch, predictor)
