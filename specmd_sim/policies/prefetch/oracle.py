"""Oracle prefetch: the exact demand sets of the next ``lookahead`` layers (default: all
remaining layers of the pass). An upper bound on what any predictor can give a prefetcher."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.context import OfflineContext
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import PREFETCH


class OracleConfig(PluginConfig):
    kind: Literal["oracle"] = "oracle"
    lookahead: int | None = Field(
        default=None, ge=1, description="Layers ahead; null = all remaining layers."
    )


@PREFETCH.register
class OraclePrefetch(PrefetchPolicy[OracleConfig]):
    description = "The exact experts of the next layers (perfect knowledge)."
    source = "upper bound for speculative prefetching"
    offline = True
    offline_within_pass = True  # the next layers of the pass running
    uses_predictor = False

    def __init__(self, config: PluginConfig, ctx: OfflineContext) -> None:
        super().__init__(config, ctx)
        self.lookahead = self.config.lookahead or self.num_layers
        self.demand = ctx.demand

    def plan(
        self, pass_index: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache
    ) -> list[int]:
        demand = self.demand
        return [int(k) for t in self.targets(layer) for k in demand.keys_of(pass_index, t)]
