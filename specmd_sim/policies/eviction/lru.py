"""LRU: evict the least recently used expert.

Recency is refreshed by use (a router selection of a cached expert) and by admission; a
prefetcher asking for an already cached expert does not count as use. It is FIFO plus the
reordering on use. ``prefetch_insert: lru`` is the baseline that counts only demand as use: a
prefetched expert enters at the least-recent end and is the next victim until its layer uses
it (which of the two SpecMD compares with is not known; docs/reproduction.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import CompiledForm
from specmd_sim.policies.eviction.fifo import FIFOEviction
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class LRUConfig(PluginConfig):
    kind: Literal["lru"] = "lru"
    prefetch_insert: Literal["mru", "lru"] = Field(
        default="mru",
        description=(
            "Where a prefetched expert enters the recency order: mru (admission counts as use) "
            "or lru (only demand counts; the next victim until used)."
        ),
    )


@EVICTION.register
class LRUEviction(FIFOEviction):
    Config: ClassVar[type[PluginConfig]] = LRUConfig  # wide type: subclasses name theirs
    description = "Least recently used expert first."
    source = "classic; the default of mixtral-offloading and many offloading systems"

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(
            recency="last-use",
            victim="first",
            options={"prefetch_at_head": int(self.prefetch_at_lru_end)},
        )

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        # a subclass's config may lack the field: then mru, as before it existed
        self.prefetch_at_lru_end = getattr(self.config, "prefetch_insert", "mru") == "lru"

    def on_insert(self, key: int, reason: FetchReason) -> None:
        if reason == FetchReason.PREFETCH and self.prefetch_at_lru_end:
            self.order = {key: None, **self.order}
        else:
            self.order[key] = None

    def on_access(self, key: int) -> None:
        order = self.order
        del order[key]
        order[key] = None
