"""The miss-handling contract.

When the router of a layer selects an expert that is not resident (a miss, or in the timing
engine also a late hit), the engine asks ``decide(pass_index, layer, key, cache, taken)``:

- return ``key`` to fetch it (or wait for its transfer) and run it: the classic *stall*;
- return :data:`DROP` to skip this expert activation (an accuracy cost, counted);
- return :data:`CPU` to run it on the host CPU, reading its weights from DRAM (counted);
- return another resident key of the same layer to run instead (a substitution, counted);
  ``taken`` holds the keys this layer already runs, which must not be chosen again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from specmd_sim.policies.registry import Plugin, PluginConfig

if TYPE_CHECKING:
    from specmd_sim.cache.expert_cache import ExpertCache
    from specmd_sim.policies.context import RunContext

DROP = -1
CPU = -2


class MissHandler(Plugin):
    Config: ClassVar[type[PluginConfig]]
    always_fetches: ClassVar[bool] = False  # lets engines skip the call on their hot path

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> int:
        raise NotImplementedError
