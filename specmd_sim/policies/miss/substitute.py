"""Substitute: run the nearest cached expert of the same layer instead of a missing one.

"Nearest by gate score": traces record only the top-k gates, so the router's score of the other
experts is estimated by the trace's recorded one-layer-ahead prediction (``pred_scores[0]``,
max over the pass's tokens) when the trace has it, else by how often each expert of the layer
was selected so far in the run. Among resident experts of the layer that the layer does not
already run, the highest estimate wins (ties: lower expert id). With no such expert the
handler falls back to fetching (stall). Counted in ``activations_substituted``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.cache import ExpertCache
from specmd_sim.cache.states import State
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.miss.base import FETCH, MissDecision, MissHandler, substitute
from specmd_sim.policies.observe import DemandObserver
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import MISS


class SubstituteConfig(PluginConfig):
    kind: Literal["substitute"] = "substitute"


@MISS.register
class SubstituteMiss(MissHandler[SubstituteConfig]):
    description = "Run the most likely cached expert of the same layer instead."
    source = "expert substitution in lossy offloading (e.g. SwapMoE, Lina-style skipping)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.counts = np.zeros((ctx.num_layers, ctx.num_experts))
        self.observer = DemandObserver(ctx, self._observe)

    def _observe(self, pass_index: int, layer: int, experts: np.ndarray) -> None:
        self.counts[layer, experts] += 1

    def _estimate(self, pass_index: int, layer: int) -> np.ndarray:
        # the prediction for this layer made one layer earlier, for the pass's tokens
        recorded = self.ctx.history.recorded_scores(pass_index, layer - 1, layer)
        if recorded is not None:
            block = np.asarray(recorded, np.float64)
            if not np.isnan(block).all():
                return np.nanmax(np.where(np.isnan(block), -np.inf, block), axis=0)
        self.observer.advance(pass_index, layer)
        return self.counts[layer]

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> MissDecision:
        num_experts = self.ctx.num_experts
        base = layer * num_experts
        resident = [
            e
            for e in range(num_experts)
            if cache.state[base + e] == State.RESIDENT and base + e not in taken
        ]
        if not resident:
            return FETCH
        estimate = self._estimate(pass_index, layer)
        best = max(resident, key=lambda e: (estimate[e], -e))
        return substitute(base + best)
