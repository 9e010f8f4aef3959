"""Drop: skip a missing expert's activation (its gate weight is lost); never fetch on demand.

Counted in ``activations_dropped`` as an accuracy proxy. The access is still classified (a
miss stays a miss).
"""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.miss.base import DROP, MissDecision, MissHandler
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import MISS


class DropConfig(PluginConfig):
    kind: Literal["drop"] = "drop"


@MISS.register
class DropMiss(MissHandler[DropConfig]):
    description = "Skip the missing expert's activation (no demand fetch)."
    source = "lossy expert skipping, e.g. AdapMoE / approximate offloading studies"

    @classmethod
    def fetches_on_demand(cls, config: PluginConfig) -> bool:
        return False

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> MissDecision:
        return DROP
