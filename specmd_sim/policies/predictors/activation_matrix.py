"""Activation-matrix predictor: the target layer's row of the past request whose expert
activation matrix best matches the running request's (MoE-Infinity's prediction, usable by
any prefetch policy). See :mod:`specmd_sim.policies.activation`. With ``fit_on`` the store starts
with the training requests' EAMs (:mod:`specmd_sim.policies.fit`); with ``learn_online: false``
finished requests of the run are not added to it."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.activation import ActivationMatrices
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.fit import FittableConfig, TrainingRoutes
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS


class ActivationMatrixConfig(FittableConfig):
    kind: Literal["activation-matrix"] = "activation-matrix"
    history: int = Field(default=32, ge=1, description="Finished requests' EAMs kept.")


@PREDICTORS.register
class ActivationMatrixPredictor(Predictor[ActivationMatrixConfig]):
    description = "The best-matching past request's activations for the target layer."
    source = "MoE-Infinity (Xue et al., arXiv 2401.14361)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.eams = ActivationMatrices(ctx, self.config.history, self.config.learn_online)

    def fit(self, data: TrainingRoutes) -> None:
        self.eams.fit(data)

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        return self.eams.predict(pass_index, layer, target)
