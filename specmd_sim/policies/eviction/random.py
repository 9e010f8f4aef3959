"""Random: evict a uniformly drawn evictable expert (seeded by the run's generator).

To keep ``choose_victim`` free of side effects, the uniform number that picks the victim is
drawn in advance and replaced after each removal: the victim is the ``floor(u * n)``-th of the
``n`` evictable experts in admission order.
"""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class RandomConfig(PluginConfig):
    kind: Literal["random"] = "random"


@EVICTION.register
class RandomEviction(EvictionPolicy[RandomConfig]):
    description = "A uniformly random evictable expert (seeded)."
    source = "classic baseline"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.order: dict[int, None] = {}
        self.u = float(self.ctx.rng.random())

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self.order[key] = None

    def on_remove(self, key: int) -> None:
        del self.order[key]
        self.u = float(self.ctx.rng.random())

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        candidates = [k for k in self.order if evictable(k)]
        return candidates[int(self.u * len(candidates))] if candidates else None
