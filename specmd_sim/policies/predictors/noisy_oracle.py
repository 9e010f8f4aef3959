"""Noisy oracle: knows the target layer's demand set, keeping each expert with a set accuracy.

For the true demand set ``S`` (in gate order, size ``m``) each expert is kept with probability
``accuracy``; a dropped one is replaced, in its place, by a uniformly drawn expert outside
``S``. Scores are probabilities: a softmax over logits where

- the predicted expert in position ``i`` gets ``confidence + (m - i) / m``;
- a dropped true expert gets ``confidence - near_miss * u`` with ``u`` uniform in ``(0, 1]``:
  just below the predicted band, as real routers' k-th and (k+1)-th scores are near ties
  (``../shared/traces/README.md``: median ratio 1.07-1.13);
- every other expert gets a draw from ``[0, 1)``.

With ``confidence >= 1`` the predicted experts are exactly the top-``m`` scores, so the
predicted top-|S| holds each true expert with probability ``accuracy`` ("a predictor with X %
top-k accuracy"); ``confidence`` sets how much mass they carry, and ``near_miss`` how clearly
the missed true experts stand out from the rest: what score-based prefetchers react to.
``near_miss = confidence`` makes a missed expert look like any other.

Each prediction makes one draw of a fixed size, ``u = rng.random(E + 2 m)`` (``E`` experts),
and reads it by position: ``u[:E]`` the other experts' scores; ``u[E + i]`` whether position
``i`` is dropped (``>= accuracy``) and, if it is, its near miss (``u`` above is
``1 - (u[E + i] - accuracy) / (1 - accuracy)``, uniform given the drop); ``u[E + m + j]`` the
``j``-th dropped position's replacement, the ``floor(u[E + m + j] * R)``-th of the ``R``
outsiders not taken yet, in ascending id order (a uniform draw without replacement). Drawing
with ``rng.choice`` would consume a data-dependent amount of the stream that only numpy's own
sampler can reproduce; a fixed amount lets a run's predictions be drawn in bulk
(``specmd_sim.engine.fast.plans``) and still equal these calls one by one, generator state
included.

A stand-in, not a model of a real predictor: it reads the run's future, and its errors are
independent draws, uniform over the experts outside ``S``, at one accuracy for every layer,
distance and token. Real predictors miss in correlated ways (near ties at the top-k boundary,
accuracy that varies by layer and falls with distance, runs of hard tokens), so a study that
wants a real predictor's behaviour records one (``specmd trace record`` writes the pre-gated
predictions of a model's own routers as ``pred_scores``; ``predictor.kind: trace`` replays
them) and measures it (``specmd trace info TRACE --predictor trace``). Use this one as a
controlled knob: what a given accuracy would be worth.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.context import OfflineContext
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS


class NoisyOracleConfig(PluginConfig):
    kind: Literal["noisy-oracle"] = "noisy-oracle"
    accuracy: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Probability that a true expert is predicted."
    )
    confidence: float = Field(
        default=3.0, ge=1.0, description="Logit margin of predicted experts over the others."
    )
    near_miss: float = Field(
        default=1.0, gt=0.0, description="How far below the predicted band a missed expert sits."
    )


@PREDICTORS.register
class NoisyOraclePredictor(Predictor[NoisyOracleConfig]):
    description = "The true next experts, each kept with probability `accuracy`."
    source = "synthetic stand-in for gate-lookahead predictors (80-97 % in the literature)"
    offline = True
    offline_within_pass = True  # the next layers of the pass running

    def __init__(self, config: PluginConfig, ctx: OfflineContext) -> None:
        super().__init__(config, ctx)
        self.demand = ctx.demand

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray:
        ctx, config = self.ctx, self.config
        num_experts = ctx.num_experts
        truth = self.demand.keys_of(pass_index, target) - target * num_experts
        m = truth.size
        u = ctx.rng.random(num_experts + 2 * m)  # the module docstring's layout
        logits = u[:num_experts].copy()
        if m:
            predicted = truth.copy()
            keep = u[num_experts : num_experts + m]
            dropped = np.flatnonzero(keep >= config.accuracy)
            if dropped.size:
                available = np.ones(num_experts, bool)
                available[truth] = False
                outside = np.flatnonzero(available).tolist()  # ascending ids
                chosen = []
                for j in range(min(dropped.size, len(outside))):
                    pick = int(u[num_experts + m + j] * len(outside))
                    chosen.append(outside.pop(min(pick, len(outside) - 1)))
                dropped = dropped[: len(chosen)]  # no outsider left for the rest: predicted
                missed = truth[dropped]
                predicted[dropped] = chosen
            position = np.arange(m)
            logits[predicted] = config.confidence + (m - position) / m
            if dropped.size:
                near = 1.0 - (keep[dropped] - config.accuracy) / (1.0 - config.accuracy)
                logits[missed] = config.confidence - config.near_miss * near
        p = np.exp(logits - logits.max())
        return p / p.sum()
