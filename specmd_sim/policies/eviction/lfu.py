"""LFU: evict the least frequently used cached expert.

Frequency counts uses since admission (the admission counts as one) and is forgotten on
eviction (in-cache LFU). Ties go to the expert whose count reached its value earliest.
"""

from __future__ import annotations

from typing import Literal

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import CompiledForm, Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class LFUConfig(PluginConfig):
    kind: Literal["lfu"] = "lfu"


@EVICTION.register
class LFUEviction(EvictionPolicy[LFUConfig]):
    description = "Least frequently used expert first (in-cache counts; ties: oldest count)."
    source = "classic; MoE-Infinity and others build on expert frequency"

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(victim="least-priority", priority="count")

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.freq: dict[int, int] = {}
        self.buckets: dict[int, dict[int, None]] = {}

    def _unlink(self, key: int) -> None:
        count = self.freq.pop(key)
        bucket = self.buckets[count]
        del bucket[key]
        if not bucket:
            del self.buckets[count]

    def _move(self, key: int, new: int) -> None:
        if key in self.freq:
            self._unlink(key)
        self.freq[key] = new
        self.buckets.setdefault(new, {})[key] = None

    def on_access(self, key: int) -> None:
        self._move(key, self.freq[key] + 1)

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._move(key, 1)

    def on_remove(self, key: int) -> None:
        self._unlink(key)

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        for count in sorted(self.buckets):
            for key in self.buckets[count]:
                if evictable(key):
                    return key
        return None
