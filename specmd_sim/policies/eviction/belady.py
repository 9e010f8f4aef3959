"""Belady (MIN): evict the expert whose next use lies farthest in the future.

Offline: it reads the run's whole access sequence (the demand sets in engine order) before the
run. Always admits (the missed expert is inserted even if its next use is farthest), so with
``cache.pin_demand_set: false`` and no prefetching its miss count is the optimum of an
always-admit cache. Ties (experts never used again) go to the smallest flat id.
"""

from __future__ import annotations

import functools
import heapq
from typing import Literal

import numpy as np

from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import OfflineContext
from specmd_sim.policies.eviction.base import CompiledForm, Evictable, EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION

NEVER = np.iinfo(np.int64).max


class BeladyConfig(PluginConfig):
    kind: Literal["belady"] = "belady"


class NextUse:
    """For each key, the sorted positions at which the access sequence uses it."""

    def __init__(self, keys: np.ndarray, num_keys: int) -> None:
        order = np.argsort(keys, kind="stable")
        self.positions = order.astype(np.int64)
        counts = np.bincount(keys, minlength=num_keys)
        self.start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def after(self, key: int, clock: int) -> int:
        """The first position >= ``clock`` at which ``key`` is used, or NEVER."""
        lo, hi = int(self.start[key]), int(self.start[key + 1])
        i = lo + int(np.searchsorted(self.positions[lo:hi], clock))
        return int(self.positions[i]) if i < hi else NEVER


@EVICTION.register
class BeladyEviction(EvictionPolicy[BeladyConfig]):
    description = "Offline optimum (MIN): farthest next use first; always admits."
    source = "Belady 1966; the bound every online policy is compared to"
    offline = True

    def compiled_form(self) -> CompiledForm:
        return CompiledForm(victim="least-priority", priority="next-use")

    def __init__(self, config: PluginConfig, ctx: OfflineContext) -> None:
        super().__init__(config, ctx)
        self._sequence = (ctx.demand.keys, ctx.num_layers * ctx.num_experts)
        self.next_of: dict[int, int] = {}
        self.heap: list[tuple[int, int]] = []  # (-next use, key); stale entries skipped

    @functools.cached_property
    def next_use(self) -> NextUse:
        """Built at the first use (a sort of the whole access sequence, which a run that
        replays this policy on the compiled path never needs)."""
        return NextUse(*self._sequence)

    def _update(self, key: int) -> None:
        clock = self.cache.clock if self.cache is not None else 0
        nxt = self.next_use.after(key, clock)
        self.next_of[key] = nxt
        heapq.heappush(self.heap, (-nxt, key))

    def on_access(self, key: int) -> None:
        self._update(key)

    def on_insert(self, key: int, reason: FetchReason) -> None:
        self._update(key)

    def on_remove(self, key: int) -> None:
        del self.next_of[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        heap, held = self.heap, []
        victim = None
        while heap:
            neg, key = heap[0]
            if self.next_of.get(key) != -neg:
                heapq.heappop(heap)  # outdated entry: forget it (no semantic change)
                continue
            if evictable(key):
                victim = key
                break
            held.append(heapq.heappop(heap))
        for entry in held:
            heapq.heappush(heap, entry)
        return victim
