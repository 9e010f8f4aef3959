"""Fixed top-k prefetch: the k highest-scored experts of each of the next ``lookahead`` layers.

Ties in score go to the lower expert id; experts with a NaN score are never chosen.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH


class TopKConfig(PluginConfig):
    kind: Literal["top-k"] = "top-k"
    k: int | None = Field(default=None, ge=1, description="Experts per layer; null = top_k.")
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class TopKPrefetch(PrefetchPolicy[TopKConfig]):
    description = "The k highest-scored experts of each of the next `lookahead` layers."
    source = "fixed top-k speculative prefetch (SpecMD's baseline; MoE-Lightning, ProMoE)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.k = self.config.k or ctx.model.top_k

    def select(self, probabilities: np.ndarray, scores: np.ndarray) -> np.ndarray:
        valid = np.flatnonzero(~np.isnan(scores))
        return valid[np.argsort(-scores[valid], kind="stable")[: self.k]]
