"""Belady with bypass: the offline optimum when an expert may be streamed past the cache.

Like ``belady`` it evicts the farthest next use, but on a miss it first compares: if the
missing expert's own next use is at least as far as that of every evictable cached expert, it
is not admitted (streamed for this one use; a prefetch of it is dropped). For equal-size
objects this is the optimal policy with optional admission, so its miss count bounds every
policy started with the same cache contents, including those that stream (``static-hot``,
whose preloaded hot set ``belady_gap`` gives the optimum too).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.eviction.base import CompiledForm
from specmd_sim.policies.eviction.belady import BeladyEviction
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class BeladyBypassConfig(PluginConfig):
    kind: Literal["belady-bypass"] = "belady-bypass"


@EVICTION.register
class BeladyBypassEviction(BeladyEviction):
    Config: ClassVar[type[PluginConfig]] = BeladyBypassConfig  # wide type: subclasses name theirs
    description = "Offline optimum with bypass: farthest next use, or don't cache at all."
    source = "Belady 1966 with optional admission (MIN with bypass)"
    may_bypass = True

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(victim="least-priority", priority="next-use", options={"bypass": 1})

    def admit(self, key: int, reason: FetchReason) -> bool:
        cache = self.cache
        if cache is None or cache.capacity_bytes - cache.used_bytes >= cache.nbytes[key]:
            return True
        victim = self.choose_victim(cache.evictable, key)
        if victim is None:
            return True  # nothing evictable: let the cache decide (a prefetch is dropped)
        return self.next_use.after(key, cache.clock) < self.next_of[victim]
