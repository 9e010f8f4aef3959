"""No prefetching: every expert is fetched on demand."""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH


class NoPrefetchConfig(PluginConfig):
    kind: Literal["none"] = "none"


@PREFETCH.register
class NoPrefetch(PrefetchPolicy[NoPrefetchConfig]):
    description = "Demand fetching only."
    source = "baseline"
    uses_predictor = False

    def plan(
        self, pass_index: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache
    ) -> list[int]:
        return []
