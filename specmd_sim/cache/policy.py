"""What the cache asks of its eviction policy.

The cache sits below the policies: it knows its policy only through this protocol, which
:class:`specmd_sim.policies.eviction.base.EvictionPolicy` satisfies (and documents: when each
hook is called, what a victim may be). ``Evictable`` is the predicate the cache hands to the
victim choices: true for a key that is resident and unpinned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specmd_sim.cache.states import FetchReason

Evictable = Callable[[int], bool]


class CachePolicy(Protocol):
    def on_pass_start(self, pass_index: int) -> None: ...

    def on_layer(self, layer: int) -> None: ...

    def on_access(self, key: int) -> None: ...

    def on_prefetch_hint(self, key: int) -> None: ...

    def on_insert(self, key: int, reason: FetchReason) -> None: ...

    def on_remove(self, key: int) -> None: ...

    def admit(self, key: int, reason: FetchReason) -> bool: ...

    def quota_victim(self, incoming: int, evictable: Evictable) -> int | None: ...

    def stages(self, incoming: int) -> bool: ...

    def choose_victim(self, evictable: Evictable, incoming: int) -> int | None: ...
