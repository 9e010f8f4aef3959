"""MoE-Infinity prefetch: match the request's activation matrix against past requests and
prefetch for all remaining layers, nearer layers first.

At layer ``l`` the running request's EAM is matched against a bounded store of finished
requests' EAMs (:mod:`specmd_sim.policies.activation`); the best match's row for each later
layer ``t`` gives probabilities, weighted by ``decay ** (t - l - 1)``. Experts whose weighted
probability reaches ``threshold`` are fetched in descending order, at most ``max_experts`` per
trigger (default: twice the model's top-k). It learns online from the run: the first request
has only its own history to match.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.activation import ActivationMatrices
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH


class MoEInfinityPrefetchConfig(PluginConfig):
    kind: Literal["moe-infinity"] = "moe-infinity"
    history: int = Field(default=32, ge=1, description="Finished requests' EAMs kept.")
    decay: float = Field(default=0.5, gt=0.0, le=1.0, description="Weight per layer of distance.")
    threshold: float = Field(
        default=0.02, ge=0.0, le=1.0, description="Minimum weighted probability."
    )
    max_experts: int | None = Field(
        default=None, ge=1, description="Cap per trigger; null = 2 x top_k."
    )


@PREFETCH.register
class MoEInfinityPrefetch(PrefetchPolicy[MoEInfinityPrefetchConfig]):
    description = "Activation-matrix matching over past requests; all remaining layers, decayed."
    source = "MoE-Infinity (Xue et al., arXiv 2401.14361)"
    uses_predictor = False

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.lookahead = self.num_layers
        self.eams = ActivationMatrices(ctx, self.config.history)
        self.cap = self.config.max_experts or 2 * ctx.model.top_k

    def plan(
        self, pass_index: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache
    ) -> list[int]:
        match = self.eams.best_match(pass_index, layer)
        if match is None or layer + 1 >= self.num_layers:
            return []
        rows = match[layer + 1 :]
        totals = rows.sum(axis=1, keepdims=True)
        probs = np.divide(rows, totals, out=np.zeros_like(rows), where=totals > 0)
        weighted = probs * self.config.decay ** np.arange(rows.shape[0])[:, None]
        flat = weighted.reshape(-1)
        keys = (layer + 1) * self.num_experts + np.arange(flat.size)
        order = np.lexsort((keys, -flat))
        order = order[flat[order] >= max(self.config.threshold, 1e-12)][: self.cap]
        return [int(k) for k in keys[order]]
