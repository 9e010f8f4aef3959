"""Per-layer LRU (mixtral-offloading): a fixed number of slots per layer, LRU inside each.

Admitting an expert of layer ``l`` when ``l`` already holds ``slots_per_layer`` experts evicts
``l``'s least recently used evictable expert, even if the cache has room elsewhere. When the
whole cache is full, the globally least recently used expert goes.

A layer that needs more experts than its slots (one slot per layer, top-2 routing) does what
mixtral-offloading's ``ExpertCache.load_experts`` does (src/expert_cache.py, dvmazur/
mixtral-offloading at ce54518): every requested expert on the GPU is marked used and kept for
the step first, then each missing one is swapped in for the layer's least recently used
expert, which may be one the step is using: the step keeps it in a spare device buffer
(``device_expert_buffers``, outside the cache's slots). So a demand fetch into a layer whose
slots all hold experts in use is *staged* (held outside the capacity) and, once the step
releases its pins, the layer gives up its least recently used experts until it holds its quota
again: it ends the step with the experts it loaded last. (The released code loads the misses
in ascending expert id, the layer step in gate order: on the shared Mixtral routing at one
slot per layer that moves the hit rate by 0.011.) A prefetch into a layer whose experts are all
in use or loading is admitted beyond the quota, which the layer's next admission restores.

With ``preload``, the run starts as mixtral-offloading's ``build_model`` leaves the GPU
(src/build_model.py at ce54518: ``do_offload = expert_idx < offload_per_layer``, registered in
expert order): each layer's last ``slots_per_layer`` experts resident, the lowest id least
recently used (as many as the cache's slots hold, layer 0 first).
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
    preload: bool = Field(
        default=False,
        description=(
            "Start with each layer's last slots_per_layer experts on the GPU, least recently "
            "used first, as mixtral-offloading's build_model places them (experts with "
            "expert_idx >= offload_per_layer stay on the device); false = start empty."
        ),
    )


@EVICTION.register
class PerLayerLRUEviction(EvictionPolicy[PerLayerLRUConfig]):
    description = "A fixed number of slots per layer, LRU inside each layer."
    source = "mixtral-offloading (Eliseev & Mazur, 2023)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.num_experts = ctx.num_experts
        self.slots = ctx.slots
        self.quota = self.config.slots_per_layer or max(1, ctx.slots // ctx.num_layers)
        self.layers: list[dict[int, None]] = [{} for _ in range(ctx.num_layers)]
        self.order: dict[int, None] = {}

    def _layer(self, key: int) -> dict[int, None]:
        return self.layers[key // self.num_experts]

    def on_access(self, key: int) -> None:
        for queue in (self._layer(key), self.order):
            del queue[key]
            queue[key] = None

    def initial_contents(self) -> list[int]:
        if not self.config.preload:
            return []
        first = max(0, self.num_experts - self.quota)
        keys = [layer * self.num_experts + e for layer in range(len(self.layers))
                for e in range(first, self.num_experts)]  # fmt: skip
        return keys[: self.slots]  # (fewer slots than layers: the first layers' only)

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._layer(key)[key] = None
        self.order[key] = None

    def on_remove(self, key: int) -> None:
        del self._layer(key)[key]
        del self.order[key]

    def quota_victim(self, incoming: int, evictable: Evictable) -> int | None:
        layer = self._layer(incoming)
        return first_evictable(layer, evictable) if len(layer) >= self.quota else None

    def stages(self, incoming: int) -> bool:
        return len(self._layer(incoming)) >= self.quota

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        return first_evictable(self.order, evictable)
