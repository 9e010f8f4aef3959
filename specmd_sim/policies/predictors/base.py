"""The predictor contract: scores over a target layer's experts, higher = more likely.

``scores(pass_index, layer, target)`` is asked at the router of ``layer`` for a later layer
``target`` of the same pass and returns a float array of length ``num_experts`` (NaN = no
opinion), or None when the predictor has nothing for that target. What a prefetch policy is
given is any :class:`ScoreSource` (the run's predictor, wrapped so that the eviction policy
sees its scores too).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from specmd_sim.policies.fit import TrainingRoutes
from specmd_sim.policies.plugin import C, Plugin


class ScoreSource(Protocol):
    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None: ...


class Predictor(Plugin[C]):
    required = (("scores",),)

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        raise NotImplementedError

    def fit(self, data: TrainingRoutes) -> None:
        """Start from training routing (the predictors whose config has ``fit_on``)."""
        raise NotImplementedError(f"predictor {self.kind} does not learn")
