"""Cumulative-mass prefetch: the most likely experts until their probability mass reaches p.

Experts are taken by descending probability until the running sum reaches ``mass`` (the
expert that crosses it included), at most ``max_per_layer`` per target layer.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.prefetch.base import PrefetchPolicy, ranked
from specmd_sim.policies.registry import PREFETCH


class CumulativeMassConfig(PluginConfig):
    kind: Literal["cumulative-mass"] = "cumulative-mass"
    mass: float = Field(default=0.8, gt=0.0, le=1.0, description="Probability mass to cover.")
    max_per_layer: int | None = Field(
        default=None, ge=1, description="Cap per target layer; null = no cap."
    )
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class CumulativeMassPrefetch(PrefetchPolicy[CumulativeMassConfig]):
    description = "Most likely experts until their probability mass reaches `mass`."
    source = "top-p (nucleus) selection applied to expert prediction"

    def select(self, probabilities: np.ndarray, scores: np.ndarray) -> np.ndarray:
        order = ranked(probabilities)
        cumulative = np.cumsum(probabilities[order])
        n = int(np.searchsorted(cumulative, self.config.mass - 1e-12)) + 1
        return order[: min(n, self.config.max_per_layer or n)]
