"""The prefetch-policy contract.

After the router of layer ``l`` decides, the engine asks the policy for an ordered list of flat
expert ids to fetch for layers ``l+1 .. l+lookahead``; the policy reads the predictor's scores
(and may read the cache). The cache then treats listed experts that are already cached as
*hints* (a touch for policies that care) and fetches the absent ones in list order, dropping
those for which nothing can be evicted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from specmd_sim.policies.registry import Plugin, PluginConfig

if TYPE_CHECKING:
    from specmd_sim.cache.expert_cache import ExpertCache
    from specmd_sim.policies.context import RunContext
    from specmd_sim.policies.predictors.base import Predictor


class PrefetchPolicy(Plugin):
    Config: ClassVar[type[PluginConfig]]
    lookahead: int = 0

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx

    def plan(
        self, pass_index: int, layer: int, predictor: Predictor, cache: ExpertCache
    ) -> list[int]:
        """Flat expert ids to fetch, most wanted first."""
        raise NotImplementedError
