"""Stall: fetch the missing expert and wait for it (the default, and what every offloading
system without CPU fallback does)."""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.miss.base import FETCH, MissDecision, MissHandler
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import MISS


class StallConfig(PluginConfig):
    kind: Literal["stall"] = "stall"


@MISS.register
class StallMiss(MissHandler[StallConfig]):
    description = "Fetch the missing expert and wait for it."
    source = "baseline of all offloading systems"
    always_fetches = True

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> MissDecision:
        return FETCH
