"""Noisy oracle: knows the target layer's demand set, keeping each expert with a set accuracy.

For the true demand set ``S`` (in gate order) each expert is kept with probability
``accuracy``; a dropped one is replaced, in its place, by a uniformly drawn expert outside
``S``. Predicted experts score ``1 + (m - i) / m`` by position ``i``; all others score a draw
from ``[0, 0.5)``. So the predicted top-|S| holds each true expert with probability
``accuracy``, as the literature's "a predictor with X % top-k accuracy".
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


@PREDICTORS.register
class NoisyOraclePredictor(Predictor):
    kind = "noisy-oracle"
    Config = NoisyOracleConfig
    description = "The true next experts, each kept with probability `accuracy`."
    source = "synthetic; stands for gate-lookahead predictors (80-97 % in the literature)"

    def __init__(self, config: NoisyOracleConfig, ctx: object) -> None:
        super().__init__(config, ctx)  # type: ignore[arg-type]
        self.accuracy = config.accuracy

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray:
        ctx = self.ctx
        num_experts = ctx.num_experts
        rng = ctx.rng
        truth = ctx.demand.keys_of(pass_index, target) - target * num_experts
        scores = rng.random(num_experts) * 0.5
        m = truth.size
        if m == 0:
            return scores
        predicted = truth.copy()
        dropped = np.flatnonzero(rng.random(m) >= self.accuracy)
        if dropped.size:
            outside = np.setdiff1d(np.arange(num_experts), truth, assume_unique=True)
            n = min(dropped.size, outside.size)
            predicted[dropped[:n]] = rng.choice(outside, size=n, replace=False)
            predicted = np.delete(predicted, dropped[n:])  # no outsider left to replace them
        scores[predicted] = 1.0 + (m - np.arange(predicted.size)) / m
        return scores
