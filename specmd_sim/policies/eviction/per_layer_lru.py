"""Per-layer LRU (mixtral-offloading): a fixed number of slots per layer, LRU inside each.

Admitting an expert of layer ``l`` when ``l`` already holds ``slots_per_layer`` experts evicts
``l``'s least recently used evictable expert, even if the cache has room elsewhere. The quota is
soft when every expert of the layer is pinned or loading (the layer's own demand set may exceed
it). When the whole cache is full, the globally least recently used expert goes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy, first_evictable
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class PerLayerLRUConfig(PluginConfig):
    kind: Literal["per-layer-lru"] = "per-layer-lru"
    slots_per_layer: int | None = Field(
        default=None, ge=1, description="Slots of each layer; null = cache slots // layers."
    )


@EVICTION.register
class PerLayerLRUEviction(EvictionPolicy[PerLayerLRUConfig]):
    description = "A fixed number of slots per layer, LRU inside each layer."
    source = "mixtral-offloading (Eliseev & Mazur, 2023)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.num_experts = ctx.num_experts
        self.quota = self.config.slots_per_layer or max(1, ctx.slots // ctx.num_layers)
        self.layers: list[dict[int, None]] = [{} for _ in range(ctx.num_layers)]
        self.order: dict[int, None] = {}

    def _layer(self, key: int) -> dict[int, None]:
        return self.layers[key // self.num_experts]

    def on_access(self, key: int) -> None:
        for queue in (self._layer(key), self.order):
            del queue[key]
            queue[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._layer(key)[key] = None
        self.order[key] = None

    def on_remove(self, key: int) -> None:
        del self._layer(key)[key]
        del self.order[key]

    def quota_victim(self, incoming: int, evictable: Evictable) -> int | None:
        layer = self._layer(incoming)
        return first_evictable(layer, evictable) if len(layer) >= self.quota else None

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        return first_evictable(self.order, evictable)
