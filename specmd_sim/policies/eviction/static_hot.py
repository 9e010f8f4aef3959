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
from specmd_sim.policies.context import OfflineContext
from specmd_sim.policies.eviction.base import ResidentAndLRU
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class StaticHotConfig(PluginConfig):
    kind: Literal["static-hot"] = "static-hot"
    hot_fraction: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Share of the cache's slots given to hot experts."
    )


@EVICTION.register
class StaticHotEviction(ResidentAndLRU[StaticHotConfig]):
    description = "The most popular experts pinned for good; the rest streamed (or LRU)."
    source = "Fiddler (Kamahori et al., 2024); kTransformers"
    offline = True
    may_bypass = True

    def __init__(self, config: PluginConfig, ctx: OfflineContext) -> None:
        super().__init__(config, ctx)
        counts = np.bincount(ctx.demand.keys, minlength=ctx.num_layers * ctx.num_experts)
        n_hot = max(1, int(ctx.slots * self.config.hot_fraction))
        order = np.lexsort((np.arange(counts.size), -counts))  # most popular, then lowest id
        order = order[ctx.source[order] >= 0]  # the GPU's own expert shard is resident anyway
        self.place([int(k) for k in order[:n_hot]])
        self.free_slots = ctx.slots - n_hot

    def admit(self, key: int, reason: FetchReason) -> bool:
        return key in self.resident_set or self.free_slots > 0
