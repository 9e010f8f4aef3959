"""The timing-free engine: prefetches land instantly; gives hit rates and the miss taxonomy.

Per pass and layer, in the order of DESIGN.md §4: the router decides, the demand set is pinned,
hits are recorded, each miss is resolved in gate order — by the miss handler: fetched (or, if
the eviction policy does not admit it, streamed past the cache), dropped, or replaced by a
cached expert of the same layer — the prefetcher's list for the next layers is applied (cached
entries as hints, absent ones fetched unless nothing is evictable), and the pins are released.
With ``cache.pin_demand_set: false`` each access is looked up and resolved before the next one
(classic cache-simulator semantics).
"""

from __future__ import annotations

from specmd_sim.cache import ExpertCache, FetchReason
from specmd_sim.cache.states import AccessClass
from specmd_sim.config import SimConfig
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.miss.base import CPU, DROP, FETCH, MissHandler
from specmd_sim.scenario import Scenario, build_run, build_scenario

_FIRST_MISS = int(AccessClass.COMPULSORY)
_DEMAND, _PREFETCH = FetchReason.DEMAND, FetchReason.PREFETCH


def replay(
    config: SimConfig | Scenario, progress: Progress | None = None, warm: list[int] | None = None
) -> RunResult:
    """Run the timing-free engine on a config (or an already built scenario); ``warm`` are
    experts placed in the cache before the run (used to give the Belady reference the same
    warm start as the policy it bounds)."""
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    run = build_run(scenario, warm)
    cache, prefetch, predictor, miss = run.cache, run.prefetch, run.predictor, run.miss
    demand = scenario.demand
    keys_all, offsets = demand.keys, demand.offsets
    num_layers = scenario.trace.num_layers
    pin = scenario.config.cache.pin_demand_set
    access, reserve, complete = cache.access, cache.reserve, cache.complete
    state = cache.state
    fetch_all = miss.always_fetches
    prefetching = prefetch.lookahead > 0
    total = scenario.passes.num_passes

    for p in range(total):
        cache.begin_pass(p)
        base = p * num_layers
        pass_keys = keys_all[offsets[base] : offsets[base + num_layers]].tolist()
        lo0 = int(offsets[base])
        for layer in range(num_layers):
            lo, hi = int(offsets[base + layer]) - lo0, int(offsets[base + layer + 1]) - lo0
            keys = pass_keys[lo:hi]
            cache.begin_layer(layer)
            held = keys
            if pin:
                for key in keys:
                    cache.pin(key)
                misses = [key for key in keys if access(key, layer) >= _FIRST_MISS]
                if fetch_all:
                    for key in misses:
                        _fetch(cache, key)
                elif misses:
                    held = _resolve(cache, miss, p, layer, keys, misses, pin=True)
            else:
                for key in keys:
                    if access(key, layer) >= _FIRST_MISS:
                        if fetch_all:
                            _fetch(cache, key)
                        else:
                            _resolve(cache, miss, p, layer, keys, [key], pin=False)
            if prefetching:
                for key in prefetch.plan(p, layer, predictor, cache):
                    if state[key]:
                        cache.hint(key)
                    elif reserve(key, _PREFETCH):
                        complete(key)
            if pin:
                for key in held:
                    cache.unpin(key)
        report_progress(progress, p + 1, total)
    cache.finish()

    return finish_result(
        scenario,
        run.eviction.initial_contents(),
        RunResult(
            engine="replay",
            metrics=cache_metrics(cache.stats),
            per_layer=per_layer_cache_table(cache.stats),
            per_request={},
            config={},
            inputs={},
            hardware_grade=None,  # replay uses no hardware number
        ),
    )


def _fetch(cache: ExpertCache, key: int) -> None:
    """A demand fetch that lands at once; streamed past the cache if not admitted."""
    if not cache.admits(key, _DEMAND):
        cache.stream(key)
    elif cache.reserve(key, _DEMAND):
        cache.complete(key)
    else:
        raise RuntimeError("demand fetch found nothing evictable")


def _resolve(
    cache: ExpertCache,
    miss: MissHandler,
    p: int,
    layer: int,
    keys: list[int],
    misses: list[int],
    pin: bool,
) -> list[int]:
    """Resolve misses through the miss handler; returns the keys to unpin at layer end."""
    taken = set(keys)
    held = list(keys)
    for key in misses:
        decision = miss.decide(p, layer, key, cache, taken)
        target = decision.by
        if decision == FETCH:
            _fetch(cache, key)
        elif decision == DROP:
            cache.drop()
        elif decision == CPU:
            cache.run_on_cpu()
        else:
            cache.substitute(target)
            taken.add(target)
            if pin:
                cache.pin(target)
                held.append(target)
    return held
