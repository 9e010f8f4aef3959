"""Drive a bare ExpertCache by hand, one layer at a time, as the replay engine does."""

from __future__ import annotations

from collections.abc import Sequence

from specmd_sim.cache import AccessClass, ExpertCache, FetchReason, State


def step(
    cache: ExpertCache, layer: int, demand: list[int], prefetch: Sequence[int] = ()
) -> list[AccessClass]:
    """One layer with ``pin_demand_set: true`` (DESIGN.md §4): pin, classify, fetch misses
    (streamed if not admitted), apply the prefetch list (hints or fetches), unpin, settle the
    staged experts."""
    cache.begin_layer(layer)
    for key in demand:
        cache.pin(key)
    classes = [AccessClass(cache.access(key, layer)) for key in demand]
    for key, klass in zip(demand, classes, strict=True):
        if klass >= AccessClass.COMPULSORY:
            if not cache.admits(key, FetchReason.DEMAND):
                cache.stream(key)
            else:
                assert cache.reserve(key, FetchReason.DEMAND)
                cache.complete(key)
    for key in prefetch:
        if cache.state[key] != State.ABSENT:
            cache.hint(key)
        elif cache.reserve(key, FetchReason.PREFETCH):
            cache.complete(key)
    for key in demand:
        cache.unpin(key)
    if cache.staged_keys:
        cache.settle()
    return classes
