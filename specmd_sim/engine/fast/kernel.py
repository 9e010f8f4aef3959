"""The replay engine's decisions as one array kernel, for the built-in policies.

:func:`run_passes` is :meth:`~specmd_sim.engine.layer.LayerStep.layer` as
:func:`~specmd_sim.engine.replay.replay` drives it, with the
:class:`~specmd_sim.cache.ExpertCache` and the eviction policies ``fifo``, ``lru``, ``lfu``,
``least-stale`` (every order), ``belady`` and ``belady-bypass`` written over flat arrays: the
same states, pins, counters and victim order, step for step, so its counters equal the Python
engine's exactly (``tests/engine/test_fast_replay.py`` checks every counter on random traces).
The Python classes stay the specification and the path for every other plug-in.

It is plain Python over numpy arrays (:func:`specmd_sim.engine.jit.compiled`): numba compiles it
when installed; without numba it runs as written, slowly. In a replay nothing takes time, and a
transfer lands as the zero-time transfer of ``docs/design.md`` does: a demand fetch at once, a
layer's prefetches together after its plan (``LOADING`` until then, so that a plan's prefetches
never evict each other), so nothing is ``LOADING`` when a router decides (no late hits).

The policies' data structures:

- ``fifo``, ``lru``: one doubly linked list over keys in eviction order (head first);
- ``least-stale``: two lists, *stale* (queue 0) and *current* (queue 1); a key is in *current*
  exactly when it was touched in this pass (``TOUCHED == pass``), so moving *current* to the
  tail of *stale* at a pass start is one splice;
- ``lfu``: a binary heap of (count, stamp) over the keys in the cache, each key's entry updated
  in place (``K_HEAP_AT`` is its index); the stamp orders a count bucket by arrival, as the
  Python class's buckets are ordered;
- ``belady``, ``belady-bypass``: the same heap of (farthest next use, smallest key); a key's
  next use (``K_NEXT_USE``) is its first position at or after the clock, moved on at each of its
  accesses through ``after`` (each position's next position of the same key, the second array).

All state is one int64 array ``S`` (:func:`.layout.new_state`): a call between compiled functions
that numba does not inline costs an atomic reference count per array argument, several times a
hit's own work, so the helpers take one array, and :func:`run_passes` calls only those small
enough to be inlined on its hot path. ``S`` holds per-key rows (``K_*``; columns ``n .. n + 3``
are the lists' sentinels), the scalars (row ``R_SC``, columns ``SC_*``), the counters (row
``R_STATS``, ``ST_*`` in the order of :data:`.layout.STAT_NAMES`), the per-layer counts (rows
``R_BY_LAYER + AccessClass``) and the heap (rows ``R_HEAP``: priority, key) with a scratch row
(``R_HELD``, the victim search's stack).
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast.layout import (
    ABSENT,
    BELADY,
    BELADY_BYPASS,
    CAPACITY,
    COLLISION,
    COMPULSORY,
    DEMAND,
    FIFO,
    HIT,
    K_AUX,
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
    LFU,
    LOADING,
    LRU,
    LS_FIFO,
    LS_LAYER,
    NO_SPACE,
    OK,
    OUTSIDE,
    PREFETCH,
    PRELOAD,
    R_BY_LAYER,
    R_HEAP,
    R_HELD,
    R_SC,
    R_STATS,
    RESIDENT,
    SC_CAPACITY,
    SC_HEAP_N,
    SC_KEYS,
    SC_LAYER,
    SC_LRU_END,
    SC_NEVER,
    SC_NUM_EXPERTS,
    SC_NUM_LAYERS,
    SC_PASS,
    SC_PINNED,
    SC_POLICY,
    SC_STAMP,
    SC_STAMP_SPAN,
    SC_USED,
    SC_WRITE_BACK,
    ST_BYPASSED,
    ST_BYTES_DEMAND,
    ST_BYTES_PREFETCH,
    ST_BYTES_WRITTEN_BACK,
    ST_EVICTIONS,
    ST_PF_COMPLETED,
    ST_PF_DROPPED,
    ST_PF_ISSUED,
    ST_PF_USED,
    ST_PF_WASTED,
)
from specmd_sim.engine.jit import compiled, compiled_inline

# --- doubly linked lists: queue q's head sentinel is column n + 2q, its tail n + 2q + 1 -------


@compiled
def list_append(S: np.ndarray, n: int, q: int, key: int) -> None:
    tail = n + 2 * q + 1
    last = S[K_PREV, tail]
    S[K_NEXT, last], S[K_PREV, key] = key, last
    S[K_NEXT, key], S[K_PREV, tail] = tail, key


@compiled
def list_prepend(S: np.ndarray, n: int, q: int, key: int) -> None:
    head = n + 2 * q
    first = S[K_NEXT, head]
    S[K_NEXT, head], S[K_PREV, key] = key, head
    S[K_NEXT, key], S[K_PREV, first] = first, key


@compiled
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


@compiled
def first_evictable(S: np.ndarray, n: int, q: int) -> int:
    key = S[K_NEXT, n + 2 * q]
    while key < n:
        if S[K_STATE, key] == RESIDENT and S[K_PINS, key] == 0:
            return key
        key = S[K_NEXT, key]
    return -1


@compiled
def pick_by_layer(S: np.ndarray, n: int, q: int) -> int:
    """Least-Stale ``layer``: the evictable key of queue ``q`` whose layer the sweep reaches
    last from the layer now running; the first in queue order among equals."""
    experts, layers, now = S[R_SC, SC_NUM_EXPERTS], S[R_SC, SC_NUM_LAYERS], S[R_SC, SC_LAYER]
    best, best_dist = -1, -1
    key = S[K_NEXT, n + 2 * q]
    while key < n:
        dist = ((key // experts - now - 1) % layers + layers) % layers
        if dist > best_dist and S[K_STATE, key] == RESIDENT and S[K_PINS, key] == 0:
            best, best_dist = key, dist
            if dist == layers - 1:
                break
        key = S[K_NEXT, key]
    return best


# --- the heap of (priority, key), smallest on top: one entry per key in the cache -------------


@compiled_inline
def heap_sift_up(S: np.ndarray, i: int, value: int, key: int) -> None:
    """Place (``value``, ``key``) at ``i`` or above it. (The moves are written out, here and
    below: a helper called in a loop would not be inlined.)"""
    while i > 0:
        parent = (i - 1) >> 1
        if S[R_HEAP, parent] <= value:
            break
        moved = S[R_HEAP + 1, parent]
        S[R_HEAP, i], S[R_HEAP + 1, i], S[K_HEAP_AT, moved] = S[R_HEAP, parent], moved, i
        i = parent
    S[R_HEAP, i], S[R_HEAP + 1, i], S[K_HEAP_AT, key] = value, key, i


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
        moved = S[R_HEAP + 1, child]
        S[R_HEAP, i], S[R_HEAP + 1, i], S[K_HEAP_AT, moved] = S[R_HEAP, child], moved, i
        i = child
    S[R_HEAP, i], S[R_HEAP + 1, i], S[K_HEAP_AT, key] = value, key, i


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
    """``key``'s entry leaves the heap (the policy's on_remove)."""
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


@compiled
def priority(S: np.ndarray, key: int, value: int, count: int) -> int:
    """LFU: (count, stamp ``value``); Belady: (farthest next use ``value``, smallest key)."""
    if S[R_SC, SC_POLICY] == LFU:
        return count * S[R_SC, SC_STAMP_SPAN] + value
    return (S[R_SC, SC_NEVER] - value) * S[R_SC, SC_KEYS] + key


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
    if S[K_STATE, key] == RESIDENT and S[K_PINS, key] == 0:
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
        if S[K_STATE, key] == RESIDENT and S[K_PINS, key] == 0:
            best, best_value = key, value
            continue
        for child in range(2 * i + 1, min(2 * i + 3, size)):
            S[R_HELD, top] = child
            top += 1
    return best


@compiled
def next_uses(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Belady's next uses: ``after[i]``, the next position of ``keys[i]`` after ``i``, and
    ``first[k]``, key ``k``'s first position; ``keys.size`` (never) where there is none."""
    never = keys.size
    first = np.full(n, never, np.int64)
    after = np.empty(never, np.int64)
    for i in range(never - 1, -1, -1):
        key = keys[i]
        after[i] = first[key]
        first[key] = i
    return after, first


@compiled_inline
def heap_update(S: np.ndarray, key: int, count: int) -> None:
    """LFU: ``key``'s count becomes ``count``, with a new stamp; Belady: its next use is
    read again (``K_NEXT_USE``, which each access of the key moves on)."""
    if S[R_SC, SC_POLICY] == LFU:
        value = S[R_SC, SC_STAMP]
        S[R_SC, SC_STAMP] = value + 1
        S[K_FREQ, key] = count
    else:
        value = S[K_NEXT_USE, key]
    S[K_AUX, key] = value
    heap_set(S, key, priority(S, key, value, count))


@compiled
def advance(S: np.ndarray, after: np.ndarray, key: int) -> None:
    """An access of ``key``: for Belady, its next use moves past it (accesses of a key come in
    the order of its positions, so its next use is the position being accessed)."""
    if S[R_SC, SC_POLICY] >= BELADY:
        use = S[K_NEXT_USE, key]
        if use < S[R_SC, SC_NEVER]:
            S[K_NEXT_USE, key] = after[use]


# --- the policy's hooks ------------------------------------------------------------------------


@compiled
def touch(S: np.ndarray, key: int) -> None:
    """Least-Stale's touch: to the tail of *current* (``fifo`` leaves a current key where it
    is). The list operations are written out: a helper that calls none is compiled into its
    callers."""
    if S[K_TOUCHED, key] == S[R_SC, SC_PASS] and S[R_SC, SC_POLICY] == LS_FIFO:
        return
    if S[K_TOUCHED, key] != OUTSIDE:  # list_remove
        before, after = S[K_PREV, key], S[K_NEXT, key]
        S[K_NEXT, before], S[K_PREV, after] = after, before
    S[K_TOUCHED, key] = S[R_SC, SC_PASS]
    tail = S[R_SC, SC_KEYS] + 3  # list_append to queue 1
    last = S[K_PREV, tail]
    S[K_NEXT, last], S[K_PREV, key] = key, last
    S[K_NEXT, key], S[K_PREV, tail] = tail, key


@compiled
def on_insert(S: np.ndarray, key: int, reason: int) -> None:
    policy, n = S[R_SC, SC_POLICY], S[R_SC, SC_KEYS]
    if policy in (FIFO, LRU):
        if policy == LRU and reason == PREFETCH and S[R_SC, SC_LRU_END]:
            list_prepend(S, n, 0, key)
        else:
            list_append(S, n, 0, key)
    elif policy == LFU or policy >= BELADY:
        heap_update(S, key, 1)
    else:
        touch(S, key)


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
        on_insert(S, key, PRELOAD)
    return True


# --- the layer step ------------------------------------------------------------------------------


@compiled
def run_passes(S: np.ndarray, after: np.ndarray, keys: np.ndarray, offsets: np.ndarray,  # noqa: C901
               pass_lo: int, pass_hi: int, plan_offsets: np.ndarray,
               plan_keys: np.ndarray) -> int:  # fmt: skip
    """Passes ``pass_lo .. pass_hi - 1``: every layer's demand set (the passes' ``keys``
    between ``offsets``, as in :class:`~specmd_sim.policies.context.AccessSequence`, both
    indexed from ``pass_lo``), then the layer's prefetch plan (``plan_keys`` between
    ``plan_offsets``, likewise).

    One loop over a layer's steps, so that each of the cache's operations is written once (a
    compiled call to a helper that is not inlined costs more than the operation): with ``m``
    demanded keys, the first steps *access* and *resolve* the demand set — pinned (default):
    m accesses, then m resolutions in gate order; one at a time: m steps, each an access and, for
    a miss, its resolution (the key's pin is left out: it would keep only the key itself from
    being a victim, and an absent key is none) — and the steps after them fetch the plan's keys.
    ExpertCache.access, reserve, complete and _evict, LayerStep._fetch and the policies' hooks
    are inlined here, in that order of operations.
    """
    sc = S[R_SC]
    n, layers, pinned, policy = sc[SC_KEYS], sc[SC_NUM_LAYERS], sc[SC_PINNED], sc[SC_POLICY]
    least_stale = policy >= LS_FIFO and policy <= LS_LAYER
    heaped = policy == LFU or policy >= BELADY
    lru_end = policy == LRU and sc[SC_LRU_END]
    belady = policy >= BELADY
    for p in range(pass_lo, pass_hi):
        sc[SC_PASS] = p
        if least_stale:
            list_move_all(S, n, 1, 0)  # current joins the tail of stale
        for layer in range(layers):
            sc[SC_LAYER] = layer
            r = (p - pass_lo) * layers + layer
            lo, hi = offsets[r], offsets[r + 1]
            m = hi - lo
            plan_lo = plan_offsets[r]
            if pinned:
                for i in range(lo, hi):
                    S[K_PINS, keys[i]] += 1
            demand = 2 * m if pinned else m
            for step in range(demand + plan_offsets[r + 1] - plan_lo):
                if step < demand:
                    resolve = pinned and step >= m
                    key = keys[lo + step - m] if resolve else keys[lo + step]
                    if resolve:
                        if S[K_STATE, key] != ABSENT:  # a hit: nothing to resolve
                            continue
                    else:  # ExpertCache.access
                        if belady:  # (advance checks the policy too: here it is hoisted)
                            advance(S, after, key)
                        if S[K_STATE, key] != ABSENT:
                            if S[K_UNUSED, key]:
                                S[K_UNUSED, key] = 0
                                S[R_STATS, ST_PF_USED] += 1
                            if policy == LRU:
                                list_remove(S, key)
                                list_append(S, n, 0, key)
                            elif heaped:
                                heap_update(S, key, S[K_FREQ, key] + 1)
                            elif least_stale:
                                touch(S, key)
                            S[R_BY_LAYER + HIT, layer] += 1
                            continue
                        if not S[K_EVER, key]:
                            klass = COMPULSORY
                        elif S[K_EVICTED, key] == p:
                            klass = COLLISION
                        else:
                            klass = CAPACITY
                        S[R_BY_LAYER + klass, layer] += 1
                        if pinned:  # resolved once the whole set is accessed
                            continue
                    reason = DEMAND
                else:
                    key = plan_keys[plan_lo + step - demand]
                    if S[K_STATE, key] != ABSENT:  # a hint: only Least-Stale counts it
                        if least_stale:
                            touch(S, key)
                        continue
                    reason = PREFETCH
                need = S[K_NBYTES, key]
                if (policy == BELADY_BYPASS and sc[SC_CAPACITY] - sc[SC_USED] < need
                        and not bypass_admits(S, key)):  # fmt: skip
                    if reason == PREFETCH:
                        S[R_STATS, ST_PF_DROPPED] += 1
                        continue
                    S[R_STATS, ST_BYPASSED] += 1  # streamed past the cache
                    S[R_STATS, ST_BYTES_DEMAND] += need
                    continue
                while sc[SC_CAPACITY] - sc[SC_USED] < need:  # ExpertCache.reserve
                    if policy in (FIFO, LRU):
                        victim = first_evictable(S, n, 0)
                    elif heaped:
                        victim = heap_victim(S)
                    else:  # Least-Stale: stale first, then current
                        victim = -1
                        for q in range(2):
                            if policy == LS_LAYER:
                                victim = pick_by_layer(S, n, q)
                            else:
                                victim = first_evictable(S, n, q)
                            if victim >= 0:
                                break
                    if victim < 0:
                        break
                    S[K_STATE, victim] = ABSENT  # ExpertCache._evict
                    sc[SC_USED] -= S[K_NBYTES, victim]
                    S[K_EVICTED, victim] = p
                    S[R_STATS, ST_EVICTIONS] += 1
                    if sc[SC_WRITE_BACK]:
                        S[R_STATS, ST_BYTES_WRITTEN_BACK] += S[K_NBYTES, victim]
                    if S[K_UNUSED, victim]:
                        S[K_UNUSED, victim] = 0
                        S[R_STATS, ST_PF_WASTED] += 1
                    if heaped:  # the policy's on_remove
                        heap_remove(S, victim)
                    else:
                        list_remove(S, victim)
                        S[K_TOUCHED, victim] = OUTSIDE
                if sc[SC_CAPACITY] - sc[SC_USED] < need:  # nothing evictable
                    if reason == DEMAND:
                        return NO_SPACE
                    S[R_STATS, ST_PF_DROPPED] += 1
                    continue
                sc[SC_USED] += need
                if reason == PREFETCH:
                    S[K_UNUSED, key] = 1
                    S[R_STATS, ST_PF_ISSUED] += 1
                    S[R_STATS, ST_BYTES_PREFETCH] += need
                    S[K_STATE, key] = LOADING  # it lands after the plan
                else:
                    S[R_STATS, ST_BYTES_DEMAND] += need
                    S[K_STATE, key] = RESIDENT  # it lands at once
                    S[K_EVER, key] = 1
                if policy in (FIFO, LRU):  # the policy's on_insert
                    if reason == PREFETCH and lru_end:
                        list_prepend(S, n, 0, key)
                    else:
                        list_append(S, n, 0, key)
                elif heaped:
                    heap_update(S, key, 1)
                else:
                    touch(S, key)
            for i in range(plan_lo, plan_offsets[r + 1]):  # the plan's prefetches land
                key = plan_keys[i]
                if S[K_STATE, key] == LOADING:
                    S[K_STATE, key] = RESIDENT
                    S[K_EVER, key] = 1
                    S[R_STATS, ST_PF_COMPLETED] += 1
            if pinned:
                for i in range(lo, hi):
                    S[K_PINS, keys[i]] -= 1
    return OK


@compiled
def run_classic(S: np.ndarray, keys: np.ndarray, offsets: np.ndarray, pass_lo: int,
                pass_hi: int) -> int:  # fmt: skip
    """:func:`run_passes` (its arrays indexed likewise) for ``fifo`` and ``lru`` resolving each
    key at its access (``cache.pin_demand_set: false``) with no prefetch plan — the classic
    cache — without the steps' dispatch: the same operations in the same order, a layer's
    per-layer counts added at its end (a quarter faster on ten million accesses;
    ``tests/engine/test_fast_replay.py`` checks it against :func:`run_passes`). No key is ever
    an unused prefetch here, and the queues' touch stamps are left alone (only Least-Stale
    reads them). The list moves are :func:`list_remove`, :func:`list_append` and
    :func:`first_evictable` written out over rows of ``S`` (calling them measured 5% slower)."""
    sc = S[R_SC]
    n, layers, lru = sc[SC_KEYS], sc[SC_NUM_LAYERS], sc[SC_POLICY] == LRU
    state, pins, ever, evicted = S[K_STATE], S[K_PINS], S[K_EVER], S[K_EVICTED]
    prev, succ, nbytes, stats = S[K_PREV], S[K_NEXT], S[K_NBYTES], S[R_STATS]
    head, tail = n, n + 1  # queue 0's sentinels
    capacity, used, write_back = sc[SC_CAPACITY], sc[SC_USED], sc[SC_WRITE_BACK]
    for p in range(pass_lo, pass_hi):
        for layer in range(layers):
            r = (p - pass_lo) * layers + layer
            lo, hi = offsets[r], offsets[r + 1]
            compulsory = collisions = 0  # the layer's counts (capacity misses: the rest)
            hits = hi - lo
            for i in range(lo, hi):
                key = keys[i]
                if state[key] != ABSENT:
                    if lru:  # to the tail
                        before, behind = prev[key], succ[key]
                        succ[before], prev[behind] = behind, before
                        last = prev[tail]
                        succ[last], prev[key], succ[key], prev[tail] = key, last, tail, key
                    continue
                hits -= 1
                if not ever[key]:
                    compulsory += 1
                elif evicted[key] == p:
                    collisions += 1
                need = nbytes[key]
                while capacity - used < need:
                    victim = succ[head]  # the first evictable from the head
                    while victim < n and (state[victim] != RESIDENT or pins[victim] != 0):
                        victim = succ[victim]
                    if victim >= n:
                        break
                    state[victim] = ABSENT
                    used -= nbytes[victim]
                    evicted[victim] = p
                    stats[ST_EVICTIONS] += 1
                    if write_back:
                        stats[ST_BYTES_WRITTEN_BACK] += nbytes[victim]
                    before, behind = prev[victim], succ[victim]
                    succ[before], prev[behind] = behind, before
                if capacity - used < need:  # nothing evictable
                    sc[SC_USED] = used
                    return NO_SPACE
                used += need
                stats[ST_BYTES_DEMAND] += need
                state[key] = RESIDENT
                last = prev[tail]  # to the tail
                succ[last], prev[key], succ[key], prev[tail] = key, last, tail, key
                ever[key] = 1
            S[R_BY_LAYER + HIT, layer] += hits
            S[R_BY_LAYER + COMPULSORY, layer] += compulsory
            S[R_BY_LAYER + COLLISION, layer] += collisions
            S[R_BY_LAYER + CAPACITY, layer] += hi - lo - hits - compulsory - collisions
        sc[SC_PASS] = p
    sc[SC_USED] = used
    return OK


@compiled
def bypass_admits(S: np.ndarray, key: int) -> bool:
    """``belady-bypass`` admits a key (the cache being full) unless its next use is not
    nearer than its victim's, or nothing is evictable."""
    victim = heap_victim(S)
    return victim < 0 or S[K_NEXT_USE, key] < S[K_AUX, victim]
