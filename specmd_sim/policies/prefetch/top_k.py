"""Fixed top-k prefetch: the k highest-scored experts of each of the next ``lookahead`` layers.

Ties in score go to the lower expert id; experts with a NaN score are never chosen. Layers past
the last one are not prefetched (no prefetching across passes).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH, PluginConfig


class TopKConfig(PluginConfig):
    kind: Literal["top-k"] = "top-k"
    k: int | None = Field(default=None, ge=1, description="Experts per layer; null = top_k.")
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class TopKPrefetch(PrefetchPolicy):
    kind = "top-k"
    Config = TopKConfig
    description = "The k highest-scored experts of each of the next `lookahead` layers."
    source = "fixed top-k speculative prefetch (e.g. Pre-gated MoE, SpecMD's baseline)"

    def __init__(self, config: TopKConfig, ctx: object) -> None:
        super().__init__(config, ctx)  # type: ignore[arg-type]
        self.k = config.k or self.ctx.model.top_k  # type: ignore[attr-defined]
        self.lookahead = config.lookahead
        self.num_layers = self.ctx.num_layers  # type: ignore[attr-defined]
        self.num_experts = self.ctx.num_experts  # type: ignore[attr-defined]

    def plan(self, pass_index: int, layer: int, predictor: object, cache: object) -> list[int]:
        out: list[int] = []
        last = min(layer + self.lookahead, self.num_layers - 1)
        for target in range(layer + 1, last + 1):
            scores = predictor.scores(pass_index, layer, target)  # type: ignore[attr-defined]
            if scores is None:
                continue
            valid = np.flatnonzero(~np.isnan(scores))
            best = valid[np.argsort(-scores[valid], kind="stable")[: self.k]]
            base = target * self.num_experts
            out.extend(int(base + e) for e in best)
        return out
