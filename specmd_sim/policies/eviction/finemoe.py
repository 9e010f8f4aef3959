"""FineMoE-style eviction: predicted probability x frequency, protecting unused prefetches.

FineMoE (fine-grained expert offloading) keeps the experts it expects to need: each cached
expert is scored ``p(expert) * f(expert)``, where ``p`` is the latest probability the predictor
gave it (its layer's scores, normalized to sum to 1; ``1 / num_experts`` before any) and ``f``
is how often it has been used in the run (+1). Prefetched experts not yet used are protected:
they are evicted only when nothing unprotected is evictable. The victim is the lowest score;
ties go to the least recently used.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION
from specmd_sim.policies.scores import as_probabilities


class FineMoEConfig(PluginConfig):
    kind: Literal["finemoe"] = "finemoe"


@EVICTION.register
class FineMoEEviction(EvictionPolicy[FineMoEConfig]):
    description = "Lowest predicted probability x use frequency first; unused prefetches kept."
    source = "FineMoE / fine-grained expert offloading (Yu et al., arXiv 2502.05370)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        n = ctx.num_layers * ctx.num_experts
        self.num_experts = ctx.num_experts
        self.prob = np.full(n, 1.0 / self.num_experts)
        self.freq = np.ones(n)
        self.protected: set[int] = set()
        self.recency: dict[int, None] = {}

    def on_scores(self, layer: int, scores: np.ndarray) -> None:
        base = layer * self.num_experts
        self.prob[base : base + self.num_experts] = as_probabilities(scores)

    def on_access(self, key: int) -> None:
        self.freq[key] += 1
        self.protected.discard(key)
        del self.recency[key]
        self.recency[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        if reason == FetchReason.PREFETCH:
            self.protected.add(key)
        else:
            self.freq[key] += 1
        self.recency[key] = None

    def on_remove(self, key: int) -> None:
        self.protected.discard(key)
        del self.recency[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        best, best_rank = None, None
        for key in self.recency:
            rank = (key in self.protected, self.prob[key] * self.freq[key])
            if (best_rank is None or rank < best_rank) and evictable(key):
                best, best_rank = key, rank
        return best
