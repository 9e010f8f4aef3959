"""The eviction-policy contract.

A policy observes the cache through hooks and ranks its contents; it never changes the cache.
``choose_victim(evictable, incoming)`` returns the key to evict, to make room for
``incoming``, among those for which ``evictable(key)`` is true, or None; it must not change
the policy's state (the cache may ask and then not evict). Optional decisions:

- ``admit(key, reason)``: False streams a demand fetch past the cache, or drops a prefetch
  (default True: always admit);
- ``quota_victim(incoming, evictable)``: a key to evict before ``incoming`` even if the cache
  has room (per-layer budgets; default None);
- ``stages(incoming)``: for a demand fetch that found no quota victim, True holds ``incoming``
  in the runtime's staging buffers, outside the capacity, until the layer step releases its
  pins; then the cache evicts ``quota_victim(incoming, evictable)`` for it (default False);
- ``initial_contents()``: keys placed in the cache before the run (default none).

The cache calls, for every key it holds:

- ``on_insert(key, reason)`` when a fetch reserves space (the entry is LOADING);
- ``on_access(key)`` when the router selects a cached key (hit or late hit);
- ``on_prefetch_hint(key)`` when a prefetcher asks for a key that is already cached;
- ``on_remove(key)`` when the key leaves (evicted, or its prefetch cancelled);

and, for the run, ``on_pass_start(pass_index)``, ``on_layer(layer)`` at each router decision
(the policy may read that layer's demand set, gates and tokens from
``ctx.history.demand_set(pass, layer)``), and ``on_scores(layer, scores)`` whenever the
predictor scores a layer's experts.

``may_bypass``: the policy may decline demand fetches (``admit``), so its Belady reference is
``belady-bypass``. ``compiled_form()``: where the policy's rule is made of the compiled
engines' mechanisms, which (:class:`CompiledForm`); the engines then run it compiled. Only a
class's own declaration counts: a subclass that overrides a hook and not this runs in Python.
The class satisfies :class:`specmd_sim.cache.CachePolicy`, what the cache calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from specmd_sim.cache.policy import Evictable
from specmd_sim.cache.states import FetchReason
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.plugin import C, Plugin, PluginConfig

if TYPE_CHECKING:
    from specmd_sim.cache.expert_cache import ExpertCache

__all__ = ["CompiledForm", "Evictable", "EvictionPolicy", "first_evictable"]


@dataclass(frozen=True)
class CompiledForm:
    """A policy as the compiled engines' mechanisms, by name (:mod:`specmd_sim.engine.fast.cache`
    documents them; :mod:`specmd_sim.engine.fast.layout` lists the names: ``RECENCY``,
    ``VICTIM``, ``PRIORITY``, ``OPTIONS``).

    ``recency``: how the cached keys' queue follows their uses; ``victim``: the rule that picks
    one; ``priority``: the heap's, for the ``least-priority`` victim; ``options``: the
    mechanisms' settings (a name the engines do not know makes the policy run in Python, and
    the run say why).
    """

    recency: str = "none"
    victim: str = "first"
    priority: str = "none"
    options: Mapping[str, int] = field(default_factory=dict)


class EvictionPolicy(Plugin[C]):
    required = (("on_insert",), ("on_remove",), ("choose_victim",))
    may_bypass: ClassVar[bool] = False

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.cache: ExpertCache | None = None

    def attach(self, cache: ExpertCache) -> None:
        """Called once by the cache that uses this policy (offline policies read its clock)."""
        self.cache = cache

    def compiled_form(self) -> CompiledForm | None:
        """The compiled engines' mechanisms this policy is made of, or None: it runs on the
        Python engines only."""
        return None

    def initial_contents(self) -> list[int]:
        """Keys to place in the cache before the run (moving no bytes)."""
        return []

    def admit(self, key: int, reason: FetchReason) -> bool:
        """Whether to cache ``key``; False streams a demand fetch / drops a prefetch."""
        return True

    def quota_victim(self, incoming: int, evictable: Evictable) -> int | None:
        """A key to evict before admitting ``incoming`` even if there is room."""
        return None

    def stages(self, incoming: int) -> bool:
        """Whether a demand fetch of ``incoming`` with no quota victim goes to staging."""
        return False

    def on_scores(self, layer: int, scores: np.ndarray) -> None:
        """The predictor scored ``layer``'s experts (higher = more likely)."""

    def on_pass_start(self, pass_index: int) -> None:
        """A new pass (decode step or prefill chunk) begins."""

    def on_layer(self, layer: int) -> None:
        """The router of ``layer`` decides (before its accesses)."""

    def on_access(self, key: int) -> None:
        """The router selected ``key``, which is cached."""

    def on_prefetch_hint(self, key: int) -> None:
        """A prefetcher asked for ``key``, which is already cached."""

    def on_insert(self, key: int, reason: FetchReason) -> None:
        """``key`` was admitted (space reserved, transfer starting)."""
        raise NotImplementedError

    def on_remove(self, key: int) -> None:
        """``key`` left the cache."""
        raise NotImplementedError

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        """The key to evict among evictable ones to make room for ``incoming`` (-1: for no
        key, the cache's capacity shrank), or None; no side effects."""
        raise NotImplementedError


def first_evictable(keys: Iterable[int], evictable: Evictable) -> int | None:
    """The first key of an ordered iterable that is evictable."""
    for key in keys:
        if evictable(key):
            return key
    return None


class ResidentAndLRU(EvictionPolicy[C]):
    """A fixed resident set placed before the run and never evicted (the subclass's ``__init__``
    calls :meth:`place`); every other expert cached under LRU in the slots left."""

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.others: dict[int, None] = {}
        self.place([])

    def place(self, keys: list[int]) -> None:
        """The resident set (before the run)."""
        self.resident, self.resident_set = keys, frozenset(keys)

    def initial_contents(self) -> list[int]:
        return self.resident

    def on_access(self, key: int) -> None:
        if key in self.others:
            del self.others[key]
            self.others[key] = None

    def on_insert(self, key: int, reason: FetchReason) -> None:
        if key not in self.resident_set:
            self.others[key] = None

    def on_remove(self, key: int) -> None:
        del self.others[key]

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None:
        return first_evictable(self.others, evictable)
