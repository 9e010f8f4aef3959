"""The expert cache: states, capacity accounting, pins and the miss taxonomy.

The cache owns all bookkeeping; an eviction policy only ranks (``choose_victim``) and observes
(hooks). Keys are flat expert ids ``layer * num_experts + expert``.

Invariants (checked by the contract tests for every policy):

- ``used_bytes <= capacity_bytes`` at all times (space is reserved when a fetch starts), but
  for a capacity that shrank (:meth:`ExpertCache.resize`) below what loading or pinned entries
  hold, until they can go;
- pinned and ``LOADING`` entries are never evicted;
- every access gets exactly one :class:`AccessClass`; hits + late hits + misses = accesses.

Miss taxonomy: a miss is *compulsory* if the expert was never resident before in this run,
*collision* if it was evicted earlier in the current pass, *capacity* otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specmd_sim.cache.policy import CachePolicy
from specmd_sim.cache.states import AccessClass, FetchReason, State
from specmd_sim.errors import SpecmdError

_ABSENT, _LOADING, _RESIDENT = int(State.ABSENT), int(State.LOADING), int(State.RESIDENT)
_HIT, _LATE, _COMP, _CAP, _COLL = (int(c) for c in AccessClass)
_DEMAND, _PREFETCH = int(FetchReason.DEMAND), int(FetchReason.PREFETCH)


class CacheStats:
    """Counters of one run. Per-layer arrays are indexed ``[layer, class]`` or ``[layer]``."""

    def __init__(self, num_layers: int) -> None:
        # per layer, counts by AccessClass; plain lists: the hot path increments them
        self.by_layer: list[list[int]] = [[0] * len(AccessClass) for _ in range(num_layers)]
        self.bytes_demand = 0
        self.bytes_prefetch = 0
        self.bytes_written_back = 0  # evicted experts copied back to the host (memory parity)
        self.prefetch_issued = 0
        self.prefetch_completed = 0
        self.prefetch_used = 0
        self.prefetch_wasted = 0
        self.prefetch_cancelled = 0
        self.prefetch_dropped = 0
        self.evictions = 0
        self.evictions_kv = 0  # ... of them, forced by the KV cache's growth (cache resized)
        self.evictions_prefetch = 0  # ... of them, made to reserve room for a prefetch
        self.bypassed = 0  # demand fetches streamed past the cache (not admitted)
        self.overflowed = 0  # ... streamed past it because the layer's pins left no room
        self.activations_dropped = 0  # expert activations skipped by miss handling
        self.activations_substituted = 0  # ... replaced by a cached expert of the same layer
        self.activations_cpu = 0  # ... run on the host CPU instead of being fetched
        self.hits_home = 0  # hits on experts of the GPU's own shard (expert-sharded mode)

    @classmethod
    def combined(cls, parts: list[CacheStats]) -> CacheStats:
        """The sum of several caches' counters (the GPUs of one run)."""
        out = cls(len(parts[0].by_layer))
        for part in parts:
            for mine, theirs in zip(out.by_layer, part.by_layer, strict=True):
                for c, n in enumerate(theirs):
                    mine[c] += n
            for name, value in vars(part).items():
                if name != "by_layer":
                    setattr(out, name, getattr(out, name) + value)
        return out

    @property
    def access_class(self) -> np.ndarray:
        """Counts as an int64 array ``[layer, AccessClass]``."""
        return np.array(self.by_layer, dtype=np.int64)

    def totals(self) -> dict[str, int]:
        by_class = self.access_class.sum(axis=0)
        misses = int(by_class[_COMP] + by_class[_CAP] + by_class[_COLL])
        return {
            "accesses": int(by_class.sum()),
            "hits": int(by_class[_HIT]),
            "late_hits": int(by_class[_LATE]),
            "misses": misses,
            "misses_compulsory": int(by_class[_COMP]),
            "misses_capacity": int(by_class[_CAP]),
            "misses_collision": int(by_class[_COLL]),
            "prefetch_issued": self.prefetch_issued,
            "prefetch_completed": self.prefetch_completed,
            "prefetch_used": self.prefetch_used,
            "prefetch_wasted": self.prefetch_wasted,
            "prefetch_cancelled": self.prefetch_cancelled,
            "prefetch_dropped": self.prefetch_dropped,
            "evictions": self.evictions,
            "evictions_kv": self.evictions_kv,
            "evictions_prefetch": self.evictions_prefetch,
            "bypassed": self.bypassed,
            "overflowed": self.overflowed,
            "activations_dropped": self.activations_dropped,
            "activations_substituted": self.activations_substituted,
            "activations_cpu": self.activations_cpu,
            "hits_home": self.hits_home,
            "bytes_demand": self.bytes_demand,
            "bytes_prefetch": self.bytes_prefetch,
            "bytes_written_back": self.bytes_written_back,
        }


class ExpertCache:
    """GPU expert cache of ``capacity_bytes`` over ``num_layers * num_experts`` keys.

    ``expert_bytes`` is one size for every expert, or a size per key (experts stored at
    different precisions); ``expert_bytes`` then names the largest.
    """

    def __init__(
        self,
        num_layers: int,
        num_experts: int,
        expert_bytes: int | Sequence[int],
        capacity_bytes: int,
        policy: CachePolicy,
    ) -> None:
        n = num_layers * num_experts
        sizes = [expert_bytes] * n if isinstance(expert_bytes, int) else list(expert_bytes)
        if len(sizes) != n or min(sizes) <= 0:
            raise SpecmdError(
                f"cache: expected {n} expert sizes > 0, got {len(sizes)} "
                f"(smallest {min(sizes, default=0)})"
            )
        largest = max(sizes)
        if capacity_bytes < largest:
            raise SpecmdError(
                f"cache.capacity: expected room for at least one expert ({largest} bytes), "
                f"got {capacity_bytes} bytes"
            )
        self.num_layers = num_layers
        self.num_experts = num_experts
        self.nbytes = sizes  # bytes of each key
        self.expert_bytes = largest
        self.capacity_bytes = capacity_bytes
        self.policy = policy
        self.state = bytearray(n)
        self.pins = bytearray(n)
        self.ever_resident = bytearray(n)
        self.prefetched_unused = bytearray(n)
        self.home = bytearray(n)  # 1: stored in this GPU's HBM outside the cache (its shard)
        self.loading_prefetch = bytearray(n)  # 1 while a prefetch of the key is in flight
        # held in the runtime's staging buffers, outside the capacity, and pinned there (its
        # layer was at the policy's quota, all in use): :meth:`settle` makes room for them
        self.staged_keys: list[int] = []
        self.evicted_pass = [-1] * n
        self.used_bytes = 0
        self.pass_index = -1
        self.clock = 0  # number of accesses so far: the position in the access sequence
        self.stats = CacheStats(num_layers)
        self.listeners: list[Callable[[], None]] = []  # told when space may have been freed
        self.occupancy_hook: Callable[[int], None] | None = None  # told used_bytes on change
        # memory parity (the host keeps no copy of a cached expert): told each evicted key, whose
        # bytes must be copied back; None = the host keeps every expert
        self.write_back: Callable[[int], None] | None = None
        # told (pass, layer) at each router decision, and (pass, -1) at each pass start, before
        # the policy: the run's history (policies/context.py) follows the run's position
        self.position_listeners: list[Callable[[int, int], None]] = []

    # --- queries -------------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return self.capacity_bytes // self.expert_bytes

    def evictable(self, key: int) -> bool:
        return self.state[key] == _RESIDENT and not self.pins[key]

    def contents(self) -> list[int]:
        """Keys currently cached (resident or loading, not the home shard), ascending."""
        return [k for k, s in enumerate(self.state) if s != _ABSENT and not self.home[k]]

    def add_home(self, keys: list[int]) -> None:
        """Make ``keys`` permanently resident outside the cache's capacity (the GPU's own
        expert shard): every access is a hit the eviction policy never sees."""
        for key in keys:
            self.home[key] = 1
            self.state[key] = _RESIDENT
            self.ever_resident[key] = 1
            self.pins[key] += 1

    # --- pass and layer lifecycle ----------------------------------------------------------

    def begin_pass(self, pass_index: int) -> None:
        self.pass_index = pass_index
        for listener in self.position_listeners:
            listener(pass_index, -1)
        self.policy.on_pass_start(pass_index)

    def begin_layer(self, layer: int) -> None:
        """The router of ``layer`` (of the current pass) decides."""
        for listener in self.position_listeners:
            listener(self.pass_index, layer)
        self.policy.on_layer(layer)

    def pin(self, key: int) -> None:
        self.pins[key] += 1

    def unpin(self, key: int) -> None:
        self.pins[key] -= 1
        if not self.pins[key] and self.listeners:
            self._notify()

    # --- accesses --------------------------------------------------------------------------

    def access(self, key: int, layer: int) -> int:
        """Record the router's selection of ``key``; return its :class:`AccessClass` value.

        Does not fetch. Returns a plain int (an AccessClass value) to keep the hot path cheap.
        """
        self.clock += 1
        state = self.state[key]
        if self.home[key]:
            self.stats.hits_home += 1
            klass = _HIT
        elif state != _ABSENT:
            klass = _HIT if state == _RESIDENT else _LATE
            if self.prefetched_unused[key]:
                self.prefetched_unused[key] = 0
                self.stats.prefetch_used += 1
            self.policy.on_access(key)
        elif not self.ever_resident[key]:
            klass = _COMP
        elif self.evicted_pass[key] == self.pass_index:
            klass = _COLL
        else:
            klass = _CAP
        self.stats.by_layer[layer][klass] += 1
        return klass

    def substitute(self, key: int) -> None:
        """A resident ``key`` runs in place of a missing expert: counted, and a use."""
        self.stats.activations_substituted += 1
        if not self.home[key]:
            self.policy.on_access(key)

    def drop(self) -> None:
        """A missing expert's activation is skipped."""
        self.stats.activations_dropped += 1

    def run_on_cpu(self) -> None:
        """A missing expert runs on the host CPU from DRAM; nothing moves to the GPU cache."""
        self.stats.activations_cpu += 1

    def hint(self, key: int) -> None:
        """A prefetcher asked for ``key`` while it is already cached."""
        if self.state[key] != _ABSENT and not self.home[key]:
            self.policy.on_prefetch_hint(key)

    # --- fetches ---------------------------------------------------------------------------

    def admits(self, key: int, reason: FetchReason) -> bool:
        """Whether the policy would cache ``key`` (False: stream it past the cache)."""
        return self.policy.admit(key, reason)

    def stream(self, key: int, overflow: bool = False) -> None:
        """A demand fetch of ``key`` that bypasses the cache (into a staging buffer): the policy
        did not admit it, or (``overflow``) the layer's pinned demand set leaves it no room
        (:meth:`overflows`)."""
        if overflow:
            self.stats.overflowed += 1
        else:
            self.stats.bypassed += 1
        self.stats.bytes_demand += self.nbytes[key]

    def overflows(self, key: int) -> bool:
        """Whether no wait can make room for the demanded ``key`` (after a failed
        :meth:`reserve`): the free bytes and those of the unpinned experts still loading (each
        evictable once it lands) are fewer than it needs; the rest is pinned by the layer now
        running (a demand set larger than the cache: ``docs/design.md``, *Overflow*)."""
        free = self.capacity_bytes - self.used_bytes
        state, pins, nbytes = self.state, self.pins, self.nbytes
        k = state.find(_LOADING)
        while k >= 0:
            if not pins[k]:
                free += nbytes[k]
            k = state.find(_LOADING, k + 1)
        return free < nbytes[key]

    def preload(self, keys: list[int]) -> None:
        """Make ``keys`` resident before the run, moving no bytes (a warm start)."""
        for key in keys:
            if self.state[key] != _ABSENT:
                continue
            if self.capacity_bytes - self.used_bytes < self.nbytes[key]:
                raise SpecmdError(
                    f"cache: expected the preloaded experts to fit in {self.capacity_bytes} "
                    f"bytes ({self.slots} slots), got {len(set(keys))} experts"
                )
            self.state[key] = _RESIDENT
            self.ever_resident[key] = 1
            self.used_bytes += self.nbytes[key]
            self.policy.on_insert(key, FetchReason.PRELOAD)

    def resize(self, capacity_bytes: int) -> None:
        """The capacity becomes ``capacity_bytes`` (the KV cache grew or shrank). While the cache
        holds more, the policy's victims (``choose_victim(evictable, -1)``) are evicted and
        counted in ``evictions_kv`` too; loading and pinned entries stay, so it may hold more
        until they can go: every reservation first evicts down to the capacity, and counts
        those evictions in ``evictions_kv`` as well."""
        grew = capacity_bytes > self.capacity_bytes
        self.capacity_bytes = capacity_bytes
        while self.used_bytes > capacity_bytes:
            victim = self.policy.choose_victim(self.evictable, -1)
            if victim is None:
                break
            self._evict(victim)
            self.stats.evictions_kv += 1
        if grew and self.listeners:
            self._notify()

    def reserve(self, key: int, reason: FetchReason) -> bool:
        """Make room for ``key`` and mark it LOADING. False if nothing evictable frees room,
        or if the policy does not admit a prefetch.

        The policy may first name a *quota victim* (a per-layer budget); when it names none for
        a demand fetch and ``policy.stages`` the key (its layer holds its quota, all of it in use),
        the key is held (pinned) in the runtime's staging buffers, outside the capacity, until
        :meth:`settle`. Otherwise, while the cache is full, victims are chosen among evictable
        entries. The evictions already made stand
        even when the reservation then fails (with uniform expert sizes one eviction always
        suffices; with sizes per key a larger expert may need several).
        """
        if self.state[key] != _ABSENT:
            raise RuntimeError(f"reserve({key}) while it is {State(self.state[key]).name}")
        policy, stats, prefetch = self.policy, self.stats, reason == _PREFETCH
        if prefetch and not policy.admit(key, reason):
            stats.prefetch_dropped += 1
            return False
        need = self.nbytes[key]
        evictable = self.evictable
        evictions = stats.evictions
        quota = policy.quota_victim(key, evictable)
        if quota is not None:
            self._evict(quota)
        elif not prefetch and policy.stages(key):
            self.staged_keys.append(key)
            self.pins[key] += 1  # (held outside the capacity until settle())
            need = 0
        room = self._make_room(need, key)
        if prefetch:
            stats.evictions_prefetch += stats.evictions - evictions
        if not room:
            if prefetch:
                stats.prefetch_dropped += 1
            return False
        self.state[key] = _LOADING
        self.used_bytes += need
        if self.occupancy_hook is not None:
            self.occupancy_hook(self.used_bytes)
        self.loading_prefetch[key] = prefetch
        if prefetch:
            self.prefetched_unused[key] = 1
            stats.prefetch_issued += 1
            stats.bytes_prefetch += need
        else:
            stats.bytes_demand += self.nbytes[key]
        policy.on_insert(key, reason)
        return True

    def settle(self) -> None:
        """The layer step released its pins: for each staged expert in turn, its layer gives up
        its quota victim (the layer's least recently used evictable expert), and the staged
        expert, unpinned, takes the capacity that freed. One whose layer has nothing evictable
        yet stays staged until the next step settles; so does one larger than what its victim
        and every other evictable expert free (sizes per key), its victim's eviction standing
        (as a failed reservation's do): the cache never holds more than its capacity."""
        staged, self.staged_keys = self.staged_keys, []
        for key in staged:
            victim = self.policy.quota_victim(key, self.evictable)
            if victim is None:
                self.staged_keys.append(key)
                continue
            self._evict(victim)
            if not self._make_room(self.nbytes[key], key):  # (one victim may not do)
                self.staged_keys.append(key)
                continue
            self.used_bytes += self.nbytes[key]
            if self.occupancy_hook is not None:
                self.occupancy_hook(self.used_bytes)
            self.unpin(key)

    def complete(self, key: int) -> None:
        """The transfer of ``key`` finished: LOADING -> RESIDENT."""
        self.state[key] = _RESIDENT
        self.ever_resident[key] = 1
        if self.loading_prefetch[key]:
            self.loading_prefetch[key] = 0
            self.stats.prefetch_completed += 1
        if self.listeners:
            self._notify()

    def cancel(self, key: int) -> None:
        """Abandon an unstarted prefetch of ``key``: LOADING -> ABSENT, space returned.

        A prefetch already counted as used (a late hit whose activation the miss handler then
        dropped or ran elsewhere) delivered nothing: it moves from *used* to *cancelled*.
        """
        if not self.prefetched_unused[key]:
            self.stats.prefetch_used -= 1
        self.state[key] = _ABSENT
        self.used_bytes -= self.nbytes[key]
        if self.occupancy_hook is not None:
            self.occupancy_hook(self.used_bytes)
        self.stats.bytes_prefetch -= self.nbytes[key]
        self.stats.prefetch_cancelled += 1
        self.prefetched_unused[key] = 0
        self.loading_prefetch[key] = 0
        self.policy.on_remove(key)
        if self.listeners:
            self._notify()

    def _not_evictable(self, key: object) -> str:
        """The line for a victim that a policy (a plug-in's, most likely) should not have
        chosen: what it returned and what it must return."""
        policy = type(self.policy)  # (the cache sits below the policies: named as they name it)
        what = f"eviction policy {policy.__module__}:{policy.__qualname__}"
        expected = (
            f"expected a key of the evictable set (a resident, unpinned expert, 0 to "
            f"{len(self.state) - 1}) or None"
        )
        if isinstance(key, int | np.integer) and 0 <= key < len(self.state):
            state = "pinned" if self.pins[key] else State(self.state[key]).name.lower()
            return f"{what}: chose victim {key}, which is {state}; {expected}"
        return f"{what}: chose victim {key!r}; {expected}"

    def finish(self) -> None:
        """End of run: prefetched experts never used count as wasted."""
        self.stats.prefetch_wasted += sum(self.prefetched_unused)
        self.prefetched_unused = bytearray(len(self.state))

    def _make_room(self, need: int, incoming: int) -> bool:
        """Evict the policy's victims until ``need`` bytes are free (those evicted while the
        cache holds more than a shrunk capacity count in ``evictions_kv`` too); False when
        nothing evictable is left first."""
        while self.capacity_bytes - self.used_bytes < need:
            victim = self.policy.choose_victim(self.evictable, incoming)
            if victim is None:
                return False
            over = self.used_bytes > self.capacity_bytes  # a shrunk capacity's excess
            self._evict(victim)
            self.stats.evictions_kv += over
        return True

    def _evict(self, key: int) -> None:
        if not (isinstance(key, int | np.integer) and 0 <= key < len(self.state)) or (
            self.state[key] != _RESIDENT or self.pins[key]
        ):
            raise SpecmdError(self._not_evictable(key))
        self.state[key] = _ABSENT
        self.used_bytes -= self.nbytes[key]
        if self.occupancy_hook is not None:
            self.occupancy_hook(self.used_bytes)
        self.evicted_pass[key] = self.pass_index
        self.stats.evictions += 1
        if self.write_back is not None:
            self.stats.bytes_written_back += self.nbytes[key]
            self.write_back(key)
        if self.prefetched_unused[key]:
            self.prefetched_unused[key] = 0
            self.stats.prefetch_wasted += 1
        self.policy.on_remove(key)

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()
