"""The predictor contract: scores over a target layer's experts, higher = more likely.

``scores(pass_index, layer, target)`` is asked at the router of ``layer`` for a later layer
``target`` of the same pass and returns a float array of length ``num_experts`` (NaN = no
opinion), or None when the predictor has nothing for that target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from specmd_sim.policies.registry import Plugin, PluginConfig

if TYPE_CHECKING:
    from specmd_sim.policies.context import RunContext


class Predictor(Plugin):
    Config: ClassVar[type[PluginConfig]]

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        raise NotImplementedError
