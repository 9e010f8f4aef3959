"""Least-Stale (SpecMD, arXiv 2602.03921): evict what no pass has touched recently.

Two queues. ``current`` holds experts touched in this pass; ``stale`` the rest. A touch is a
router selection of a cached expert, an admission (demand or prefetch), or a prefetcher asking
for an expert that is already cached. At each pass start all of ``current`` moves, in order, to
the tail of ``stale``. The victim is the head of ``stale``; if ``stale`` has nothing evictable,
the head of ``current``. What orders each queue (``order``):

- ``fifo`` (default): first in, first out. A touch moves a stale expert to the tail of
  ``current``; touching an expert that is already current does not move it. Since a pass
  sweeps its layers in order, each queue follows layer position within a pass. This is the
  reading of the paper that its public descriptions support ("current" = accessed in the
  ongoing forward pass, "stale" = in a previous one; stale first, FIFO, then current, FIFO;
  prefetched experts marked current): its text beyond the abstract was not available to check
  (docs/reproduction.md, "Which Least-Stale").
- ``touch``: each touch moves the expert to the tail of ``current`` (recency order). Demand-only
  it evicts exactly what LRU evicts.
- ``layer``: the victim is the expert whose layer the forward sweep reaches last from the
  layer now running (the layer just passed goes first), touch time breaking ties: a spatial
  rule for a cyclic layer sweep.

Counting a prefetcher's request for an already-cached expert as a touch is what protects
predicted upcoming-layer experts from the pass's own prefetches; LRU does not do that, which is
where their behaviour with prefetching differs (docs/design.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import (
    CompiledForm,
    Evictable,
    EvictionPolicy,
    first_evictable,
)
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class LeastStaleConfig(PluginConfig):
    kind: Literal["least-stale"] = "least-stale"
    order: Literal["fifo", "touch", "layer"] = Field(
        default="fifo",
        description=(
            "Order inside each queue: fifo (entry into the queue; the paper's reading), touch "
            "(recency) or layer (the layer the sweep reaches last goes first)."
        ),
    )


@EVICTION.register
class LeastStaleEviction(EvictionPolicy[LeastStaleConfig]):
    description = "SpecMD's Least-Stale: stale (untouched this pass) experts first, FIFO."
    source = "SpecMD (Hoang et al., arXiv 2602.03921)"

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(
            recency="pass" if self.refresh_current else "pass-first-touch",
            victim="farthest-layer" if self.by_layer else "first",
        )

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.by_layer = self.config.order == "layer"
        self.refresh_current = self.config.order != "fifo"
        self.num_experts = ctx.num_experts
        self.num_layers = ctx.num_layers
        self.current: dict[int, None] = {}
        self.stale: dict[int, None] = {}
        self.layer = 0

    def on_pass_start(self, pass_index: int) -> None:
        self.stale.update(self.current)
        self.current = {}

    def on_layer(self, layer: int) -> None:
        self.layer = layer

    def _touch(self, key: int) -> None:
        if key in self.current and not self.refresh_current:
            return
        self.stale.pop(key, None)
        self.current.pop(key, None)
        self.current[key] = None

    def on_access(self, key: int) -> None:
        self._touch(key)

    def on_prefetch_hint(self, key: int) -> None:
        self._touch(key)

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._touch(key)

    def on_remove(self, key: int) -> None:
        if key in self.stale:
            del self.stale[key]
        else:
            del self.current[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        for queue in (self.stale, self.current):
            victim = (
                self._pick_by_layer(queue, evictable)
                if self.by_layer
                else (first_evictable(queue, evictable))
            )
            if victim is not None:
                return victim
        return None

    def _pick_by_layer(self, queue: dict[int, None], evictable: Evictable) -> int | None:
        """Evictable key whose layer comes last in the sweep from ``self.layer``; FIFO ties."""
        best, best_dist = None, -1
        now, layers, experts = self.layer, self.num_layers, self.num_experts
        for key in queue:
            dist = (key // experts - now - 1) % layers
            if dist > best_dist and evictable(key):
                best, best_dist = key, dist
                if dist == layers - 1:
                    break
        return best
