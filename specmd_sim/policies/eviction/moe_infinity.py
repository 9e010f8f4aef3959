"""MoE-Infinity's activation-aware eviction: keep what the current request keeps using.

MoE-Infinity (Xue et al., 2024) traces each request's *expert activation matrix* (EAM: how
often each (layer, expert) was activated by the request so far) and evicts the cached expert
least likely to be needed by the current request, preferring experts of layers that come soon.
The rule here: the victim has the lowest activation count in the current request's EAM; among
equals, the one whose layer the forward sweep reaches last from the running layer; then the
least recently used. The EAM restarts with each request.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class MoEInfinityEvictionConfig(PluginConfig):
    kind: Literal["moe-infinity"] = "moe-infinity"


@EVICTION.register
class MoEInfinityEviction(EvictionPolicy[MoEInfinityEvictionConfig]):
    description = "Lowest activation count in the request's EAM first, then farthest layer."
    source = "MoE-Infinity (Xue et al., arXiv 2401.14361)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.num_layers, self.num_experts = ctx.num_layers, ctx.num_experts
        self.eam = np.zeros(self.num_layers * self.num_experts, np.int64)
        self.request = -1
        self.layer = 0
        self.recency: dict[int, None] = {}

    def on_pass_start(self, pass_index: int) -> None:
        request = self.ctx.history.pass_info(pass_index).request
        if request != self.request:
            self.request = request
            self.eam[:] = 0

    def on_layer(self, layer: int) -> None:
        self.layer = layer

    def on_access(self, key: int) -> None:
        self.eam[key] += 1
        del self.recency[key]
        self.recency[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        if reason == FetchReason.DEMAND:
            self.eam[key] += 1  # a demand admission is an activation
        self.recency[key] = None

    def on_remove(self, key: int) -> None:
        del self.recency[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        best, best_rank = None, None
        layers, experts, now = self.num_layers, self.num_experts, self.layer
        for key in self.recency:
            rank = (self.eam[key], -((key // experts - now - 1) % layers))
            if (best_rank is None or rank < best_rank) and evictable(key):
                best, best_rank = key, rank
        return best
