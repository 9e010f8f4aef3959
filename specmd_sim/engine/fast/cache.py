"""The compiled twin of :class:`~specmd_sim.cache.ExpertCache` and its eviction policies.

Written once, over the flat state ``S`` (:mod:`.layout`), and called by both compiled engines:
the replay kernel (:mod:`.kernel`) and the timing engine's core (:mod:`.timed.stream` and
:mod:`.timed.fetch`). The cache's operations are :func:`begin_pass`, :func:`access` (which
classifies), :func:`hint`, :func:`declines` (the policy's admission), :func:`reserve` (evict
until the key fits, then admit it ``LOADING``), :func:`stream` (past the cache) and
:func:`overflows` (a demand set larger than the cache), :func:`complete`, :func:`cancel` (a
cancelled prefetch) and :func:`preload`; numba inlines them into their callers (a call between
compiled functions that is not inlined costs an atomic reference count per array argument, more
than a hit's own work).

A policy is not a code here but the mechanisms it is made of, chosen by its
``compiled_form()`` (:class:`~specmd_sim.policies.eviction.base.CompiledForm`) and held in
``S``'s scalars (``SC_RECENCY``, ``SC_VICTIM``, ``SC_PRIORITY`` and the options'
``SC_PREFETCH_AT_HEAD``, ``SC_BYPASS``, ``SC_AGING``); each hook below branches on them
explicitly. The built-in policies are

============================ ==================== ================== ============== ===========
policy                       recency              victim             priority       other
============================ ==================== ================== ============== ===========
``fifo``                     insertion            first
``lru``                      last-use             first                             prefetch at
                                                                                    head (opt.)
``lfu``                      none                 least-priority     count
``least-stale`` fifo         pass-first-touch     first
``least-stale`` touch        pass                 first
``least-stale`` layer        pass                 farthest-layer
``belady``                   none                 least-priority     next-use
``belady-bypass``            none                 least-priority     next-use       bypass
``lfu-aging``                last-use             least-count                       aging
============================ ==================== ================== ============== ===========

Their data structures:

- a queue or two: doubly linked lists over keys (queue ``q``'s head sentinel is column
  ``n + 2q``, its tail ``n + 2q + 1``). With Least-Stale's recency, queue 0 is *stale* and
  queue 1 *current*; a key is in *current* exactly when it was touched in this pass
  (``TOUCHED == pass``), so moving *current* to the tail of *stale* at a pass start is one
  splice;
- a binary heap of priorities over the keys in the cache (rows ``R_HEAP``: priority, key), each
  key's entry updated in place (``K_HEAP_AT`` is its index): ``count`` is (uses since
  admission, stamp), the stamp ordering a count bucket by arrival as the Python class's buckets
  are ordered; ``next-use`` is (farthest next use, smallest key), a key's next use
  (``K_NEXT_USE``) being its first position at or after the clock, moved on at each of its
  accesses through ``after`` (each position's next position of the same key);
- aged lifetime counts (``K_COUNT``, float64 bits, for every key, kept across evictions):
  +1 at each use and admission, halved every ``SC_AGING`` passes.

Adding a policy whose rule these mechanisms express touches only its own module (its
``compiled_form``); a new mechanism touches this module and :mod:`.layout` (its name and
code): see ``docs/design.md``, "The compiled engines".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specmd_sim.engine.fast.layout import (
    ABSENT,
    CAPACITY,
    COLLISION,
    COMPULSORY,
    HIT,
    K_AUX,
    K_COUNT,
    K_EVER,
    K_EVICTED,
    K_FREQ,
    K_HEAP_AT,
    K_NBYTES,
    K_NEXT,
    K_NEXT_USE,
    K_PINS,
    K_PREV,
    K_STATE,
    K_TOUCHED,
    K_UNUSED,
    LOADING,
    OUTSIDE,
    PRIO_COUNT,
    R_BY_LAYER,
    R_EVICTED,
    R_HEAP,
    R_HELD,
    R_SC,
    R_STATS,
    REC_LAST_USE,
    REC_NONE,
    REC_PASS,
    REC_PASS_FIRST,
    RESIDENT,
    SC_AGING,
    SC_BYPASS,
    SC_CAPACITY,
    SC_HEAP_N,
    SC_KEYS,
    SC_LAYER,
    SC_NEVER,
    SC_NEVICTED,
    SC_NUM_EXPERTS,
    SC_NUM_LAYERS,
    SC_PASS,
    SC_PREFETCH_AT_HEAD,
    SC_PRIORITY,
    SC_RECENCY,
    SC_STAMP,
    SC_STAMP_SPAN,
    SC_USED,
    SC_VICTIM,
    SC_WRITE_BACK,
    ST_BYPASSED,
    ST_BYTES_DEMAND,
    ST_BYTES_PREFETCH,
    ST_BYTES_WRITTEN_BACK,
    ST_EV_PREFETCH,
    ST_EVICTIONS,
    ST_HITS_HOME,
    ST_OVERFLOWED,
    ST_PF_CANCELLED,
    ST_PF_COMPLETED,
    ST_PF_ISSUED,
    ST_PF_USED,
    ST_PF_WASTED,
    VIC_FARTHEST_LAYER,
    VIC_HEAP,
    VIC_LEAST_COUNT,
)
from specmd_sim.engine.jit import compiled, compiled_inline

LATE_HIT = 1  # AccessClass.LATE_HIT: a key still LOADING when its layer decides

# --- doubly linked lists --------------------------------------------------------------------------


@compiled_inline
def list_append(S: np.ndarray, n: int, q: int, key: int) -> None:
    tail = n + 2 * q + 1
    last = S[K_PREV, tail]
    S[K_NEXT, last], S[K_PREV, key] = key, last
    S[K_NEXT, key], S[K_PREV, tail] = tail, key


@compiled_inline
def list_prepend(S: np.ndarray, n: int, q: int, key: int) -> None:
    head = n + 2 * q
    first = S[K_NEXT, head]
    S[K_NEXT, head], S[K_PREV, key] = key, head
    S[K_NEXT, key], S[K_PREV, first] = first, key


@compiled_inline
def list_remove(S: np.ndarray, key: int) -> None:
    before, after = S[K_PREV, key], S[K_NEXT, key]
    S[K_NEXT, before], S[K_PREV, after] = after, before


@compiled
def list_move_all(S: np.ndarray, n: int, src: int, dst: int) -> None:
    """Append queue ``src``, in order, to the tail of queue ``dst``; ``src`` is left empty."""
    src_head, src_tail, dst_tail = n + 2 * src, n + 2 * src + 1, n + 2 * dst + 1
    first, last = S[K_NEXT, src_head], S[K_PREV, src_tail]
    if first == src_tail:
        return
    before = S[K_PREV, dst_tail]
    S[K_NEXT, before], S[K_PREV, first] = first, before
    S[K_NEXT, last], S[K_PREV, dst_tail] = dst_tail, last
    S[K_NEXT, src_head], S[K_PREV, src_tail] = src_tail, src_head


@compiled_inline
def evictable(S: np.ndarray, key: int) -> bool:
    return S[K_STATE, key] == RESIDENT and S[K_PINS, key] == 0


@compiled_inline
def first_evictable(S: np.ndarray, n: int, q: int) -> int:
    key = S[K_NEXT, n + 2 * q]
    while key < n:
        if evictable(S, key):
            return key
        key = S[K_NEXT, key]
    return -1


@compiled_inline
def farthest_layer(S: np.ndarray, n: int, q: int) -> int:
    """The evictable key of queue ``q`` whose layer the sweep reaches last from the layer now
    running; the first in queue order among equals."""
    experts, layers, now = S[R_SC, SC_NUM_EXPERTS], S[R_SC, SC_NUM_LAYERS], S[R_SC, SC_LAYER]
    best, best_dist = -1, -1
    key = S[K_NEXT, n + 2 * q]
    while key < n:
        dist = ((key // experts - now - 1) % layers + layers) % layers
        if dist > best_dist and evictable(S, key):
            best, best_dist = key, dist
            if dist == layers - 1:
                break
        key = S[K_NEXT, key]
    return best


@compiled_inline
def least_count(S: np.ndarray, n: int) -> int:
    """The evictable key of queue 0 with the least aged count; the first in queue order among
    equals."""
    best, best_count = -1, np.inf
    key = S[K_NEXT, n]
    while key < n:
        count = float_of_bits(S[K_COUNT, key])
        if count < best_count and evictable(S, key):
            best, best_count = key, count
        key = S[K_NEXT, key]
    return best


# --- aged lifetime counts: float64s kept as their bits in the int64 row K_COUNT -------------
# (not through a float view of the row: an inlined function must not create an array)


def _float_of_bits_py(bits: int) -> float:
    return float(np.array(bits, np.int64).view(np.float64))


def _bits_of_float_py(value: float) -> int:
    return int(np.array(value, np.float64).view(np.int64))


def _bit_casts() -> tuple[Callable[[int], float], Callable[[float], int]]:
    """The float64 whose bits are an int64's, and back: LLVM bit casts where numba compiles
    (callable from compiled code only), numpy's views where it does not."""
    try:
        from numba.core import config, types
        from numba.extending import intrinsic
    except ImportError:
        return _float_of_bits_py, _bits_of_float_py
    if getattr(config, "DISABLE_JIT", 0):  # (numba's switch for debugging kernels as Python)
        return _float_of_bits_py, _bits_of_float_py

    def cast(to: Any, source: Any) -> Any:
        @intrinsic
        def _cast(typingctx: Any, value: Any) -> Any:
            def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
                return builder.bitcast(args[0], context.get_value_type(to))

            return to(source), codegen

        return _cast

    return cast(types.float64, types.int64), cast(types.int64, types.float64)


float_of_bits, bits_of_float = _bit_casts()


@compiled_inline
def count_use(S: np.ndarray, key: int) -> None:
    S[K_COUNT, key] = bits_of_float(float_of_bits(S[K_COUNT, key]) + 1.0)


@compiled_inline
def halve_counts(S: np.ndarray) -> None:
    for key in range(S[R_SC, SC_KEYS]):
        S[K_COUNT, key] = bits_of_float(float_of_bits(S[K_COUNT, key]) * 0.5)


# --- the heap of (priority, key), smallest on top: one entry per key in the cache -------------


@compiled_inline
def heap_place(S: np.ndarray, i: int, value: int, key: int) -> None:
    """(``value``, ``key``) at the heap's index ``i``, the key's index kept."""
    S[R_HEAP, i], S[R_HEAP + 1, i], S[K_HEAP_AT, key] = value, key, i


@compiled_inline
def heap_sift_up(S: np.ndarray, i: int, value: int, key: int) -> None:
    """Place (``value``, ``key``) at ``i`` or above it."""
    while i > 0:
        parent = (i - 1) >> 1
        if S[R_HEAP, parent] <= value:
            break
        heap_place(S, i, S[R_HEAP, parent], S[R_HEAP + 1, parent])  # the parent moves down
        i = parent
    heap_place(S, i, value, key)


@compiled_inline
def heap_sift_down(S: np.ndarray, i: int, value: int, key: int) -> None:
    """Place (``value``, ``key``) at ``i`` or below it."""
    size = S[R_SC, SC_HEAP_N]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and S[R_HEAP, child + 1] < S[R_HEAP, child]:
            child += 1
        if S[R_HEAP, child] >= value:
            break
        heap_place(S, i, S[R_HEAP, child], S[R_HEAP + 1, child])  # the child moves up
        i = child
    heap_place(S, i, value, key)


@compiled_inline
def heap_set(S: np.ndarray, key: int, value: int) -> None:
    """``key``'s entry takes the priority ``value`` (added if the key has none)."""
    i = S[K_HEAP_AT, key]
    if i < 0:
        i = S[R_SC, SC_HEAP_N]
        S[R_SC, SC_HEAP_N] = i + 1
        heap_sift_up(S, i, value, key)
    elif value < S[R_HEAP, i]:
        heap_sift_up(S, i, value, key)
    else:
        heap_sift_down(S, i, value, key)


@compiled_inline
def heap_remove(S: np.ndarray, key: int) -> None:
    """``key``'s entry leaves the heap."""
    i = S[K_HEAP_AT, key]
    S[K_HEAP_AT, key], S[K_AUX, key] = -1, -1
    size = S[R_SC, SC_HEAP_N] - 1
    S[R_SC, SC_HEAP_N] = size
    if i == size:
        return
    value, last = S[R_HEAP, size], S[R_HEAP + 1, size]
    if value < S[R_HEAP, i]:
        heap_sift_up(S, i, value, last)
    else:
        heap_sift_down(S, i, value, last)


@compiled_inline
def heap_victim(S: np.ndarray) -> int:
    """The evictable key of smallest priority, or -1; the heap is left as it is.

    Only a key whose every ancestor is not evictable can be it (an evictable ancestor would come
    first), so the search descends below the keys that are not evictable (pinned or loading),
    a few, and stops at the first evictable key of each branch; ``R_HELD`` is its stack."""
    size = S[R_SC, SC_HEAP_N]
    if size == 0:
        return -1
    key = S[R_HEAP + 1, 0]
    if evictable(S, key):
        return key
    best, best_value = -1, 0
    S[R_HELD, 0] = 0
    top = 1
    while top > 0:
        top -= 1
        i = S[R_HELD, top]
        value, key = S[R_HEAP, i], S[R_HEAP + 1, i]
        if best >= 0 and value >= best_value:
            continue
        if evictable(S, key):
            best, best_value = key, value
            continue
        for child in range(2 * i + 1, min(2 * i + 3, size)):
            S[R_HELD, top] = child
            top += 1
    return best


@compiled_inline
def heap_update(S: np.ndarray, key: int, count: int) -> None:
    """``count``: ``key``'s count becomes ``count``, with a new stamp; ``next-use``: its next
    use is read again (``K_NEXT_USE``, which each access of the key moves on)."""
    if S[R_SC, SC_PRIORITY] == PRIO_COUNT:
        value = S[R_SC, SC_STAMP]
        S[R_SC, SC_STAMP] = value + 1
        S[K_FREQ, key] = count
        S[K_AUX, key] = value
        heap_set(S, key, count * S[R_SC, SC_STAMP_SPAN] + value)
    else:  # (farthest next use, smallest key) first
        value = S[K_NEXT_USE, key]
        S[K_AUX, key] = value
        heap_set(S, key, (S[R_SC, SC_NEVER] - value) * S[R_SC, SC_KEYS] + key)


@compiled
def next_uses(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Next uses (the ``next-use`` priority): ``after[i]``, the next position of ``keys[i]``
    after ``i``, and ``first[k]``, key ``k``'s first position; ``keys.size`` (never) where there
    is none."""
    never = keys.size
    first = np.full(n, never, np.int64)
    after = np.empty(never, np.int64)
    for i in range(never - 1, -1, -1):
        key = keys[i]
        after[i] = first[key]
        first[key] = i
    return after, first


# --- the policy's hooks ------------------------------------------------------------------------


@compiled_inline
def two_queues(S: np.ndarray) -> bool:
    """Least-Stale's recency: *stale* and *current*."""
    recency = S[R_SC, SC_RECENCY]
    return recency in (REC_PASS, REC_PASS_FIRST)


@compiled_inline
def touch(S: np.ndarray, key: int) -> None:
    """Least-Stale's touch: to the tail of *current* (``pass-first-touch`` leaves a current
    key where it is)."""
    if S[K_TOUCHED, key] == S[R_SC, SC_PASS] and S[R_SC, SC_RECENCY] == REC_PASS_FIRST:
        return
    if S[K_TOUCHED, key] != OUTSIDE:
        list_remove(S, key)
    S[K_TOUCHED, key] = S[R_SC, SC_PASS]
    list_append(S, S[R_SC, SC_KEYS], 1, key)


@compiled_inline
def use(S: np.ndarray, key: int) -> None:
    """A use of a key of the recency queue: to its tail; with aging, its count grows."""
    n = S[R_SC, SC_KEYS]
    list_remove(S, key)
    list_append(S, n, 0, key)
    if S[R_SC, SC_AGING]:
        count_use(S, key)


@compiled_inline
def on_access(S: np.ndarray, key: int) -> None:
    """The router selected the cached ``key`` (a hit or a late hit)."""
    recency = S[R_SC, SC_RECENCY]
    if recency == REC_LAST_USE:
        use(S, key)
    elif recency == REC_NONE:
        heap_update(S, key, S[K_FREQ, key] + 1)
    elif two_queues(S):
        touch(S, key)


@compiled_inline
def on_insert(S: np.ndarray, key: int, prefetch: bool) -> None:
    """``key`` was admitted (space reserved, the transfer starting)."""
    recency = S[R_SC, SC_RECENCY]
    if recency == REC_NONE:
        heap_update(S, key, 1)
    elif two_queues(S):
        touch(S, key)
    else:
        n = S[R_SC, SC_KEYS]
        if prefetch and S[R_SC, SC_PREFETCH_AT_HEAD]:
            list_prepend(S, n, 0, key)
        else:
            list_append(S, n, 0, key)
        if S[R_SC, SC_AGING]:
            count_use(S, key)


@compiled_inline
def on_remove(S: np.ndarray, key: int) -> None:
    if S[R_SC, SC_RECENCY] == REC_NONE:
        heap_remove(S, key)
    else:
        list_remove(S, key)
        S[K_TOUCHED, key] = OUTSIDE


@compiled_inline
def victim(S: np.ndarray) -> int:
    """The policy's victim among the evictable keys, or -1."""
    rule, n = S[R_SC, SC_VICTIM], S[R_SC, SC_KEYS]
    if rule == VIC_HEAP:
        return heap_victim(S)
    if rule == VIC_LEAST_COUNT:
        return least_count(S, n)
    queues = 2 if two_queues(S) else 1  # stale first, then current
    for q in range(queues):
        key = farthest_layer(S, n, q) if rule == VIC_FARTHEST_LAYER else first_evictable(S, n, q)
        if key >= 0:
            return key
    return -1


@compiled_inline
def bypass_admits(S: np.ndarray, key: int) -> bool:
    """``bypass`` admits a key (the cache being full) unless its next use is not nearer than
    its victim's, or nothing is evictable."""
    key_victim = heap_victim(S)
    return key_victim < 0 or S[K_NEXT_USE, key] < S[K_AUX, key_victim]


# --- the cache's operations -----------------------------------------------------------------------


@compiled_inline
def begin_pass(S: np.ndarray, p: int) -> None:
    """ExpertCache.begin_pass: *current* joins the tail of *stale*; counts age."""
    S[R_SC, SC_PASS] = p
    if two_queues(S):
        list_move_all(S, S[R_SC, SC_KEYS], 1, 0)
    aging = S[R_SC, SC_AGING]
    if aging and p and p % aging == 0:
        halve_counts(S)


@compiled_inline
def advance(S: np.ndarray, after: np.ndarray, key: int) -> None:
    """An access of ``key`` with the ``next-use`` priority: its next use moves past it
    (accesses of a key come in the order of its positions, so its next use is the position being
    accessed). Its callers call it before :func:`access`, and only with that priority: passing
    ``after`` to a function numba inlines costs a reference count on every call."""
    at = S[K_NEXT_USE, key]
    if at < S[R_SC, SC_NEVER]:
        S[K_NEXT_USE, key] = after[at]


@compiled_inline
def access(S: np.ndarray, key: int, layer: int, p: int, home: bool) -> int:
    """ExpertCache.access: ``key``'s class (a ``home`` key, in the GPU's own shard, is a hit
    outside the cache), counted in ``layer``'s row, and the policy's hook for a cached key
    (with the ``next-use`` priority, :func:`advance` first)."""
    state = S[K_STATE, key]
    klass = np.int64(CAPACITY)  # (an int64, not a literal: the branches' values unify)
    if home:
        S[R_STATS, ST_HITS_HOME] += 1
        klass = np.int64(HIT)
    elif state != ABSENT:
        klass = np.int64(HIT if state == RESIDENT else LATE_HIT)
        if S[K_UNUSED, key]:
            S[K_UNUSED, key] = 0
            S[R_STATS, ST_PF_USED] += 1
        on_access(S, key)
    elif not S[K_EVER, key]:
        klass = np.int64(COMPULSORY)
    elif S[K_EVICTED, key] == p:
        klass = np.int64(COLLISION)
    S[R_BY_LAYER + klass, layer] += 1
    return int(klass)


@compiled_inline
def hint(S: np.ndarray, key: int) -> None:
    """A prefetcher asked for the cached ``key``: only Least-Stale's recency counts it."""
    if two_queues(S):
        touch(S, key)


@compiled_inline
def declines(S: np.ndarray, key: int) -> bool:
    """The policy's admission: False unless it may bypass, the cache has no room for ``key``
    and the key's next use is not nearer than its victim's."""
    return (S[R_SC, SC_BYPASS] == 1 and S[R_SC, SC_CAPACITY] - S[R_SC, SC_USED] < S[K_NBYTES, key]
            and not bypass_admits(S, key))  # fmt: skip


@compiled_inline
def evict(S: np.ndarray, key: int, p: int) -> None:
    """ExpertCache._evict, in pass ``p``."""
    S[K_STATE, key] = ABSENT
    S[R_SC, SC_USED] -= S[K_NBYTES, key]
    S[K_EVICTED, key] = p
    S[R_STATS, ST_EVICTIONS] += 1
    if S[R_SC, SC_WRITE_BACK]:
        S[R_STATS, ST_BYTES_WRITTEN_BACK] += S[K_NBYTES, key]
    if S[K_UNUSED, key]:
        S[K_UNUSED, key] = 0
        S[R_STATS, ST_PF_WASTED] += 1
    on_remove(S, key)


@compiled_inline
def reserve(S: np.ndarray, key: int, prefetch: bool, p: int) -> bool:
    """ExpertCache.reserve: evict until ``key`` fits (the victims, in order, are
    ``S[R_EVICTED, :S[R_SC, SC_NEVICTED]]``), then admit it ``LOADING``; False where nothing
    more is evictable (the evictions made stand). The policy's admission is the caller's
    (:func:`declines`)."""
    need = S[K_NBYTES, key]
    S[R_SC, SC_NEVICTED] = 0
    while S[R_SC, SC_CAPACITY] - S[R_SC, SC_USED] < need:
        key_victim = victim(S)
        if key_victim < 0:
            return False
        S[R_EVICTED, S[R_SC, SC_NEVICTED]] = key_victim
        S[R_SC, SC_NEVICTED] += 1
        evict(S, key_victim, p)
        if prefetch:
            S[R_STATS, ST_EV_PREFETCH] += 1
    S[K_STATE, key] = LOADING
    S[R_SC, SC_USED] += need
    if prefetch:
        S[K_UNUSED, key] = 1
        S[R_STATS, ST_PF_ISSUED] += 1
        S[R_STATS, ST_BYTES_PREFETCH] += need
    else:
        S[R_STATS, ST_BYTES_DEMAND] += need
    on_insert(S, key, prefetch)
    return True


@compiled_inline
def overflows(S: np.ndarray, key: int) -> bool:
    """ExpertCache.overflows, after a failed :func:`reserve`: no wait can make room for the
    demanded ``key`` (the free bytes and those of unpinned keys still loading are fewer than it
    needs). A scan of the keys, made only when a reservation failed."""
    free = S[R_SC, SC_CAPACITY] - S[R_SC, SC_USED]
    for k in range(S[R_SC, SC_KEYS]):
        if S[K_STATE, k] == LOADING and S[K_PINS, k] == 0:
            free += S[K_NBYTES, k]
    return free < S[K_NBYTES, key]


@compiled_inline
def stream(S: np.ndarray, key: int, overflow: bool) -> None:
    """ExpertCache.stream: a demand fetch of ``key`` streamed past the cache, not admitted or
    (``overflow``) past the pinned, full cache."""
    S[R_STATS, ST_OVERFLOWED if overflow else ST_BYPASSED] += 1
    S[R_STATS, ST_BYTES_DEMAND] += S[K_NBYTES, key]


@compiled_inline
def complete(S: np.ndarray, key: int, prefetch: bool) -> None:
    """ExpertCache.complete: ``key``'s transfer landed."""
    S[K_STATE, key] = RESIDENT
    S[K_EVER, key] = 1
    if prefetch:
        S[R_STATS, ST_PF_COMPLETED] += 1


@compiled_inline
def cancel(S: np.ndarray, key: int) -> None:
    """ExpertCache.cancel: an unstarted prefetch of ``key`` abandoned, its space given back."""
    if not S[K_UNUSED, key]:
        S[R_STATS, ST_PF_USED] -= 1
    S[K_STATE, key] = ABSENT
    S[R_SC, SC_USED] -= S[K_NBYTES, key]
    S[R_STATS, ST_BYTES_PREFETCH] -= S[K_NBYTES, key]
    S[R_STATS, ST_PF_CANCELLED] += 1
    S[K_UNUSED, key] = 0
    on_remove(S, key)


@compiled
def preload(S: np.ndarray, keys: np.ndarray) -> bool:
    """ExpertCache.preload; False if the keys do not fit."""
    for key in keys:
        if S[K_STATE, key] != ABSENT:
            continue
        if S[R_SC, SC_CAPACITY] - S[R_SC, SC_USED] < S[K_NBYTES, key]:
            return False
        S[K_STATE, key] = RESIDENT
        S[K_EVER, key] = 1
        S[R_SC, SC_USED] += S[K_NBYTES, key]
        on_insert(S, key, False)
    return True
