"""LRU: evict the least recently used expert.

Recency is refreshed by use (a router selection of a cached expert) and by admission; a
prefetcher asking for an already cached expert does not count as use.
"""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy, first_evictable
from specmd_sim.policies.registry import EVICTION, PluginConfig


class LRUConfig(PluginConfig):
    kind: Literal["lru"] = "lru"


@EVICTION.register
class LRUEviction(EvictionPolicy):
    kind = "lru"
    Config = LRUConfig
    description = "Least recently used expert first."
    source = "classic; the default of mixtral-offloading and many offloading systems"

    def __init__(self, config: LRUConfig, ctx: object) -> None:
        super().__init__(config, ctx)  # type: ignore[arg-type]
        self.order: dict[int, None] = {}  # insertion-ordered: least recent first

    def on_access(self, key: int) -> None:
        order = self.order
        del order[key]
        order[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self.order[key] = None

    def on_remove(self, key: int) -> None:
        del self.order[key]

    def choose_victim(self, evictable: Evictable) -> int | None:
        return first_evictable(self.order, evictable)
