"""Noisy oracle: knows the target layer's demand set, keeping each expert with a set accuracy.

For the true demand set ``S`` (in gate order, size ``m``) each expert is kept with probability
``accuracy``; a dropped one is replaced, in its place, by a uniformly drawn expert outside
``S``. Scores are probabilities: a softmax over logits where the predicted expert in position
``i`` gets ``confidence + (m - i) / m`` and every other expert a draw from ``[0, 1)``. With
``confidence >= 1`` the predicted experts are exactly the top-``m`` scores, so the predicted
top-|S| holds each true expert with probability ``accuracy`` ("a predictor with X % top-k
accuracy"); ``confidence`` sets how much probability mass they carry (higher: more certain),
which is what score-based prefetchers react to.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS, PluginConfig


class NoisyOracleConfig(PluginConfig):
    kind: Literal["noisy-oracle"] = "noisy-oracle"
    accuracy: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Probability that a true expert is predicted."
    )
    confidence: float = Field(
        default=3.0, ge=1.0, description="Logit margin of predicted experts over the others."
    )


@PREDICTORS.register
class NoisyOraclePredictor(Predictor):
    kind = "noisy-oracle"
    Config = NoisyOracleConfig
    description = "The true next experts, each kept with probability `accuracy`."
    source = "synthetic; stands for gate-lookahead predictors (80-97 % in the literature)"

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray:
        ctx, config = self.ctx, self.config
        num_experts, rng = ctx.num_experts, ctx.rng
        truth = ctx.demand.keys_of(pass_index, target) - target * num_experts
        logits = rng.random(num_experts)
        m = truth.size
        if m:
            predicted = truth.copy()
            dropped = np.flatnonzero(rng.random(m) >= config.accuracy)  # type: ignore[attr-defined]
            if dropped.size:
                outside = np.setdiff1d(np.arange(num_experts), truth, assume_unique=True)
                n = min(dropped.size, outside.size)
                predicted[dropped[:n]] = rng.choice(outside, size=n, replace=False)
                predicted = np.delete(predicted, dropped[n:])  # no outsider left for them
            rank = np.arange(predicted.size)
            logits[predicted] = config.confidence + (m - rank) / m  # type: ignore[attr-defined]
        p = np.exp(logits - logits.max())
        return p / p.sum()
