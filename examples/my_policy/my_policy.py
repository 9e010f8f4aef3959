"""A user-defined eviction policy that lives outside specmd-sim.

``FarthestLayer`` evicts the expert whose layer the forward sweep reaches last: layers run in
order 0, 1, ..., L-1 every pass, so the expert of the layer just computed is needed again
furthest in the future. Experts of one layer go least recently used first (or lowest id first
with ``recency_ties: false``). It follows the plug-in contract of
``specmd_sim/policies/eviction/base.py``: a frozen ``Config`` whose ``kind`` default is the
policy's name, a description and a source, and registration with ``@EVICTION.register``. It
reuses LRU's bookkeeping, so it derives from ``LRUEviction`` and names its ``Config``; a policy
written from scratch derives from ``EvictionPolicy[FarthestLayerConfig]``, which sets both
``Config`` and the type of ``self.config``. ``ctx`` is the run's online view: the model's shape
and what the run has seen so far, never the future.

Name it in a config by its import path, so that any process (a sweep worker, CI) finds it::

    eviction: {kind: "my_policy:FarthestLayer"}

The module must be importable there: installed, or its folder on ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import Evictable
from specmd_sim.policies.eviction.lru import LRUEviction
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class FarthestLayerConfig(PluginConfig):
    kind: Literal["farthest-layer"] = "farthest-layer"
    recency_ties: bool = Field(
        default=True,
        description="Between experts of one layer, evict the least recently used (else the "
        "lowest expert id).",
    )


@EVICTION.register
class FarthestLayer(LRUEviction):
    Config = FarthestLayerConfig  # its kind, "farthest-layer", is the config's default
    description = "The expert whose layer the forward sweep reaches last goes first."
    source = "examples/my_policy (a user-defined policy)"

    def __init__(self, config: FarthestLayerConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.recency_ties = config.recency_ties
        self.num_layers = ctx.num_layers
        self.num_experts = ctx.num_experts
        self.layer = 0

    def on_layer(self, layer: int) -> None:
        self.layer = layer

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        best, best_rank = None, None
        for age, key in enumerate(self.order):  # least recently used first
            if not evictable(key):
                continue
            distance = (key // self.num_experts - self.layer - 1) % self.num_layers
            rank = (distance, -age if self.recency_ties else -key)
            if best_rank is None or rank > best_rank:
                best, best_rank = key, rank
        return best
