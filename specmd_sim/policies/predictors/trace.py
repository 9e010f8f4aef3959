"""Recorded predictions: the trace's ``pred_scores`` for the target layer.

At the router of layer ``l`` the prediction for layer ``t`` is the one the trace recorded for
the pass's tokens ``t - l`` layers earlier, i.e. made at layer ``l``. For a pass with several
tokens the scores are the maximum over its tokens. Targets further ahead than the trace
records, or with all-NaN scores, give no prediction.

Online: it reads only what a predictor running at layer ``l`` on the tokens being processed
emitted then (through the run's history, which refuses predictions made at later layers). How
good those predictions are is the trace's: a recorded skip-gate predictor's, or, in a
synthetic trace, a noisy oracle's, which the generator made from the routing it drew.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS


class TracePredictorConfig(PluginConfig):
    kind: Literal["trace"] = "trace"


@PREDICTORS.register
class TracePredictor(Predictor[TracePredictorConfig]):
    description = "Scores recorded in the trace (pred_scores), e.g. a real skip-gate predictor."
    source = "the trace's own pred_scores array"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        if not ctx.history.records_scores:
            raise SpecmdError(
                "predictor.kind: 'trace' expected a trace with pred_scores, got a trace "
                "without them; use predictor.kind=noisy-oracle"
            )

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        recorded = self.ctx.history.recorded_scores(pass_index, layer, target)
        if recorded is None:
            return None
        block = np.asarray(recorded, np.float32)
        if np.isnan(block).all():
            return None
        if block.shape[0] == 1:
            return block[0]
        return np.nanmax(np.where(np.isnan(block), -np.inf, block), axis=0)
