"""Transition ("route-aware"): layer-to-layer co-activation statistics learned online.

For every distance ``j = 1 .. max_distance`` it counts, within a pass, how often expert ``e``
at layer ``l`` was followed by expert ``e'`` at layer ``l + j``. To predict layer ``t`` from
layer ``l`` (``j = t - l``) it sums the rows of the current layer's selected experts and
normalizes; if those experts have never been seen before layer ``t``, it falls back to the
target layer's popularity; before anything was seen, no prediction. Memory:
``max_distance x L x E x E`` float32. With ``fit_on`` it starts from the counts of training
routing (:mod:`specmd_sim.policies.fit`); with ``learn_online: false`` the counts stay fixed
(it still reads the running pass's own experts, which is what it predicts from).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.fit import FittableConfig, TrainingRoutes
from specmd_sim.policies.observe import DemandObserver
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS


class TransitionConfig(FittableConfig):
    kind: Literal["transition"] = "transition"
    max_distance: int = Field(default=2, ge=1, description="Largest layer distance learned.")


@PREDICTORS.register
class TransitionPredictor(Predictor[TransitionConfig]):
    description = "Co-activation counts from layer l's experts to layer l+j's, learned online."
    source = "route-aware prediction (SpecMD); layer-transition statistics (ProMoE, MoE-Lightning)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        c = ctx
        self.d = self.config.max_distance
        self.table = np.zeros((self.d, c.num_layers, c.num_experts, c.num_experts), np.float32)
        self.popular = np.zeros((c.num_layers, c.num_experts))
        self.pass_sets: dict[int, np.ndarray] = {}
        self.pass_index = -1
        self.learning = self.config.learn_online
        self.observer = DemandObserver(c, self._observe)

    def _observe(self, pass_index: int, layer: int, experts: np.ndarray) -> None:
        self._track(pass_index, layer, experts)
        if self.learning:
            self._count(layer, experts)

    def _track(self, pass_index: int, layer: int, experts: np.ndarray) -> None:
        if pass_index != self.pass_index:
            self.pass_sets, self.pass_index = {}, pass_index
        self.pass_sets[layer] = experts

    def _count(self, layer: int, experts: np.ndarray) -> None:
        for j in range(1, self.d + 1):
            earlier = self.pass_sets.get(layer - j)
            if earlier is not None and earlier.size and experts.size:
                self.table[j - 1, layer - j][np.ix_(earlier, experts)] += 1
        self.popular[layer, experts] += 1

    def fit(self, data: TrainingRoutes) -> None:
        for p, layer, experts in data.demand_sets():
            self._track(p, layer, experts)
            self._count(layer, experts)
        self.pass_sets, self.pass_index = {}, -1

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        self.observer.advance(pass_index, layer)
        j = target - layer
        current = self.pass_sets.get(layer) if self.pass_index == pass_index else None
        if 1 <= j <= self.d and current is not None and current.size:
            row = self.table[j - 1, layer][current].sum(axis=0, dtype=np.float64)
            if row.sum() > 0:
                return row / row.sum()
        total = self.popular[target].sum()
        return self.popular[target] / total if total > 0 else None
