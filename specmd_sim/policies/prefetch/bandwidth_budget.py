"""Bandwidth-budget prefetch: as many experts as the link can move while the layer computes.

At layer ``l``'s router, the expected compute time of ``l`` (its attention already ran; its
experts' compute is what remains: the sum of the expert times of its demand set, plus the next
layer's attention) times the host path's bandwidth gives a byte budget; the policy fetches
``max(min_experts, floor(budget / expert_bytes))`` experts, the most probable first across the
target layers (probability discounted by ``decay`` per layer of distance).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH, PluginConfig
from specmd_sim.policies.scores import as_probabilities


class BandwidthBudgetConfig(PluginConfig):
    kind: Literal["bandwidth-budget"] = "bandwidth-budget"
    min_experts: int = Field(default=0, ge=0, description="Fetch at least this many.")
    decay: float = Field(
        default=0.5, gt=0.0, le=1.0, description="Weight per layer of distance beyond the next."
    )
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class BandwidthBudgetPrefetch(PrefetchPolicy):
    kind = "bandwidth-budget"
    Config = BandwidthBudgetConfig
    description = "As many experts as fit in the current layer's expected compute time."
    source = "compute-overlap budgeting (HybriMoE, ProMoE, MoE-Lightning)"

    def budget(self, pass_index: int, layer: int) -> int:
        ctx = self.ctx
        cost, passes, demand = ctx.cost, ctx.passes, ctx.demand
        lo, hi = demand.span(pass_index, layer)
        seconds = sum(cost.expert_time(int(n)) for n in demand.tokens[lo:hi])
        seconds += cost.attention_time(
            passes.tokens(pass_index), int(passes.context_end[pass_index])
        )
        fit = int(seconds * ctx.path.bandwidth // ctx.model.expert_bytes)
        return max(self.config.min_experts, fit)  # type: ignore[attr-defined]

    def plan(self, pass_index: int, layer: int, predictor, cache) -> list[int]:
        n = self.budget(pass_index, layer)
        if n == 0:
            return []
        keys: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for distance, target in enumerate(self.targets(layer)):
            scores = predictor.scores(pass_index, layer, target)
            if scores is None:
                continue
            keys.append(target * self.num_experts + np.arange(self.num_experts))
            weights.append(as_probabilities(scores) * self.config.decay**distance)  # type: ignore[attr-defined]
        if not keys:
            return []
        k, w = np.concatenate(keys), np.concatenate(weights)
        order = np.lexsort((k, -w))
        order = order[w[order] > 0][:n]
        return [int(x) for x in k[order]]
