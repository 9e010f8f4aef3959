"""No prefetching: every expert is fetched on demand."""

from __future__ import annotations

from typing import Literal

from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH, PluginConfig


class NoPrefetchConfig(PluginConfig):
    kind: Literal["none"] = "none"


@PREFETCH.register
class NoPrefetch(PrefetchPolicy):
    kind = "none"
    Config = NoPrefetchConfig
    description = "Demand fetching only."
    source = "baseline"
    uses_predictor = False

    def plan(self, pass_index: int, layer: int, predictor: object, cache: object) -> list[int]:
        return []
