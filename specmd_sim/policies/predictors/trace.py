"""Recorded predictions: the trace's ``pred_scores`` for the target layer.

For a pass with several tokens the scores are the maximum over its tokens. Targets further
ahead than the trace records, or with all-NaN scores, give no prediction.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.registry import PREDICTORS, PluginConfig


class TracePredictorConfig(PluginConfig):
    kind: Literal["trace"] = "trace"


@PREDICTORS.register
class TracePredictor(Predictor):
    kind = "trace"
    Config = TracePredictorConfig
    description = "Scores recorded in the trace (pred_scores), e.g. a real skip-gate predictor."
    source = "the trace's own pred_scores array"

    def __init__(self, config: TracePredictorConfig, ctx: object) -> None:
        super().__init__(config, ctx)  # type: ignore[arg-type]
        trace = self.ctx.trace  # type: ignore[attr-defined]
        if trace.pred_scores is None:
            raise SpecmdError(
                f"predictor.kind: 'trace' expected a trace with pred_scores, got trace of model "
                f"{trace.model!r} without them; use predictor.kind=noisy-oracle"
            )
        self.pred = trace.pred_scores

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        j = target - layer
        if j > self.pred.shape[0]:
            return None
        passes = self.ctx.passes  # type: ignore[attr-defined]
        rows = passes.rows[passes.start[pass_index] : passes.start[pass_index + 1]]
        block = np.asarray(self.pred[j - 1, rows, target], np.float32)
        if np.isnan(block).all():
            return None
        if block.shape[0] == 1:
            return block[0]
        return np.nanmax(np.where(np.isnan(block), -np.inf, block), axis=0)
