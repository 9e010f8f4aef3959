"""Popularity: how often each expert of the target layer was selected so far in the run.

Learns online from the demand sets already seen (never the future); no prediction before the
target layer has been seen once. Scores are the counts normalized per layer. With ``fit_on`` it
starts from the counts of training routing (:mod:`specmd_sim.policies.fit`); with
``learn_online: false`` it keeps them fixed.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.fit import FittableConfig, TrainingRoutes
from specmd_sim.policies.observe import DemandObserver
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS


class PopularityConfig(FittableConfig):
    kind: Literal["popularity"] = "popularity"


@PREDICTORS.register
class PopularityPredictor(Predictor[PopularityConfig]):
    description = "Per-layer selection frequency so far in the run."
    source = "frequency-based prefetching (e.g. EdgeMoE's statistics, Fiddler's profile)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.counts = np.zeros((ctx.num_layers, ctx.num_experts))
        self.observer = DemandObserver(ctx, self._observe)

    def _observe(self, pass_index: int, layer: int, experts: np.ndarray) -> None:
        self.counts[layer, experts] += 1

    def fit(self, data: TrainingRoutes) -> None:
        for p, layer, experts in data.demand_sets():
            self._observe(p, layer, experts)

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        if self.config.learn_online:
            self.observer.advance(pass_index, layer)
        row = self.counts[target]
        total = row.sum()
        return row / total if total > 0 else None
