"""LRU: evict the least recently used expert.

Recency is refreshed by use (a router selection of a cached expert) and by admission; a
prefetcher asking for an already cached expert does not count as use. It is FIFO plus the
reordering on use.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from specmd_sim.policies.eviction.fifo import FIFOEviction
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class LRUConfig(PluginConfig):
    kind: Literal["lru"] = "lru"


@EVICTION.register
class LRUEviction(FIFOEviction):
    Config: ClassVar[type[PluginConfig]] = LRUConfig  # wide type: subclasses name theirs
    description = "Least recently used expert first."
    source = "classic; the default of mixtral-offloading and many offloading systems"

    def on_access(self, key: int) -> None:
        order = self.order
        del order[key]
        order[key] = None
