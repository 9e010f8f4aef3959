"""HybriMoE's score-aware caching: a moving average of router gates; evict the lowest.

Each expert has a score ``S`` (0 at the start). At every router decision of a layer, all
experts of that layer update ``S <- 0.5 * g + 0.5 * S``, where ``g`` is the expert's gate in
the pass (its highest over the pass's tokens) if it was selected and 0 otherwise, so unselected
experts decay. Traces without gates use ``g = 1 / k`` for selected experts. The victim is the
cached expert with the lowest score; ties go to the least recently used.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class HybriMoEConfig(PluginConfig):
    kind: Literal["hybrimoe"] = "hybrimoe"


@EVICTION.register
class HybriMoEEviction(EvictionPolicy[HybriMoEConfig]):
    description = "Lowest moving average of router gates (S <- 0.5 g + 0.5 S) first."
    source = "HybriMoE (Zhong et al., arXiv 2504.05897)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.num_experts = ctx.num_experts
        self.score = np.zeros((ctx.num_layers, ctx.num_experts))
        self.default_gate = 1.0 / ctx.top_k
        self.pass_index = 0
        self.recency: dict[int, None] = {}

    def on_pass_start(self, pass_index: int) -> None:
        self.pass_index = pass_index

    def on_layer(self, layer: int) -> None:
        chosen = self.ctx.history.demand_set(self.pass_index, layer)
        experts = chosen.keys - layer * self.num_experts
        gates = np.nan_to_num(chosen.gates, nan=self.default_gate)
        row = self.score[layer]
        row *= 0.5
        row[experts] += 0.5 * gates

    def on_access(self, key: int) -> None:
        del self.recency[key]
        self.recency[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self.recency[key] = None

    def on_remove(self, key: int) -> None:
        del self.recency[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        best, best_score = None, np.inf
        flat = self.score.reshape(-1)
        for key in self.recency:
            s = flat[key]
            if s < best_score and evictable(key):
                best, best_score = key, s
        return best
