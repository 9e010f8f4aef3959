"""Static hot set (Fiddler, kTransformers): the most popular experts live on the GPU for good.

Before the run, the cache is filled with the ``hot_fraction`` of its slots' worth of the most
frequently selected experts of the trace (profiling on the run's own trace: an optimistic
stand-in for a calibration set; in expert-sharded runs, among the experts outside the GPU's own
shard). Hot experts are never evicted. The remaining slots, if any,
hold other experts under LRU; with none left, every other expert is streamed past the cache
for its single use (a staging buffer), never cached. Prefetches of experts that would not be
admitted are dropped. Its bound is ``belady-bypass`` started with the same hot set (what
``belady_gap`` does), not always-admit Belady.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy, first_evictable
from specmd_sim.policies.registry import EVICTION, PluginConfig


class StaticHotConfig(PluginConfig):
    kind: Literal["static-hot"] = "static-hot"
    hot_fraction: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Share of the cache's slots given to hot experts."
    )


@EVICTION.register
class StaticHotEviction(EvictionPolicy):
    kind = "static-hot"
    Config = StaticHotConfig
    description = "The most popular experts pinned for good; the rest streamed (or LRU)."
    source = "Fiddler (Kamahori et al., 2024); kTransformers"
    may_bypass = True

    def __init__(self, config: StaticHotConfig, ctx: object) -> None:
        super().__init__(config, ctx)  # type: ignore[arg-type]
        c = self.ctx
        counts = np.bincount(c.demand.keys, minlength=c.num_layers * c.num_experts)  # type: ignore[attr-defined]
        n_hot = max(1, int(c.slots * config.hot_fraction))  # type: ignore[attr-defined]
        order = np.lexsort((np.arange(counts.size), -counts))  # most popular, then lowest id
        source = getattr(c, "source", None)
        if source is not None:  # the GPU's own expert shard is resident anyway
            order = order[source[order] >= 0]
        self.hot = [int(k) for k in order[:n_hot]]
        self.hot_set = set(self.hot)
        self.free_slots = c.slots - n_hot  # type: ignore[attr-defined]
        self.others: dict[int, None] = {}

    def initial_contents(self) -> list[int]:
        return self.hot

    def admit(self, key: int, reason: FetchReason) -> bool:
        return key in self.hot_set or self.free_slots > 0

    def on_access(self, key: int) -> None:
        if key in self.others:
            del self.others[key]
            self.others[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        if key not in self.hot_set:
            self.others[key] = None

    def on_remove(self, key: int) -> None:
        del self.others[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        return first_evictable(self.others, evictable)
