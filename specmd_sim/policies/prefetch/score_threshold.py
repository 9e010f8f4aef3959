"""Score-threshold prefetch: every expert whose predicted probability reaches a threshold.

A confident predictor fetches few experts, an unsure one more (SpecMD's dynamic, score-based
prefetching). Probabilities are the predictor's scores normalized per layer
(``specmd_sim.policies.scores``); at most ``max_per_layer`` experts per target layer.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.prefetch.base import PrefetchPolicy, ranked
from specmd_sim.policies.registry import PREFETCH


class ScoreThresholdConfig(PluginConfig):
    kind: Literal["score-threshold"] = "score-threshold"
    threshold: float = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="Minimum probability (about 1.3 / E for OLMoE's 64 experts).",
    )
    max_per_layer: int | None = Field(
        default=None, ge=1, description="Cap per target layer; null = no cap."
    )
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class ScoreThresholdPrefetch(PrefetchPolicy[ScoreThresholdConfig]):
    description = "Every expert whose predicted probability >= threshold."
    source = "SpecMD's score-based prefetching"

    def select(self, probabilities: np.ndarray, scores: np.ndarray) -> np.ndarray:
        order = ranked(probabilities)
        chosen = order[probabilities[order] >= self.config.threshold]
        return chosen[: self.config.max_per_layer]
