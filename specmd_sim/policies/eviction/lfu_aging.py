"""LFU with aging: evict the expert used least often, with old uses fading.

Counts are kept for every expert over the whole run (not forgotten on eviction, so they track
popularity), incremented on each use and on admission, and halved every ``period_passes``
passes. The victim is the evictable expert with the lowest count; ties go to the least recently
used.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import CompiledForm, Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class LFUAgingConfig(PluginConfig):
    kind: Literal["lfu-aging"] = "lfu-aging"
    period_passes: int = Field(default=16, ge=1, description="Halve all counts every N passes.")


@EVICTION.register
class LFUAgingEviction(EvictionPolicy[LFUAgingConfig]):
    description = "Least frequently used with counts halved every N passes (popularity that fades)."
    source = "LFU-Aging (Arlitt et al.); frequency-based expert caches"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.period = self.config.period_passes
        self.count = np.zeros(ctx.num_layers * ctx.num_experts)
        self.recency: dict[int, None] = {}

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(
            recency="last-use", victim="least-count", options={"aging_passes": self.period}
        )

    def on_pass_start(self, pass_index: int) -> None:
        if pass_index and pass_index % self.period == 0:
            self.count *= 0.5

    def _use(self, key: int) -> None:
        self.count[key] += 1
        self.recency.pop(key, None)
        self.recency[key] = None

    def on_access(self, key: int) -> None:
        self._use(key)

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._use(key)

    def on_remove(self, key: int) -> None:
        del self.recency[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        best, best_count = None, np.inf
        for key in self.recency:  # least recent first: ties keep the earliest
            c = self.count[key]
            if c < best_count and evictable(key):
                best, best_count = key, c
        return best
