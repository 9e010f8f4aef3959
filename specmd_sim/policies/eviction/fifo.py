"""FIFO: evict the expert admitted earliest; uses do not reorder."""

from __future__ import annotations

from typing import Literal

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


class FIFOConfig(PluginConfig):
    kind: Literal["fifo"] = "fifo"


@EVICTION.register
class FIFOEviction(EvictionPolicy[FIFOConfig]):
    description = "First in, first out: the earliest admitted expert first."
    source = "classic"

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(recency="insertion", victim="first")

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.order: dict[int, None] = {}

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self.order[key] = None

    def on_remove(self, key: int) -> None:
        del self.order[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        return first_evictable(self.order, evictable)
