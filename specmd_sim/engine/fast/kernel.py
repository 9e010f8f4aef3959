"""The replay engine's decisions as one array kernel, for the compiled policies.

:func:`run_passes` is :meth:`~specmd_sim.engine.layer.LayerStep.layer` as
:func:`~specmd_sim.engine.replay.replay` drives it, over :mod:`.cache` (the compiled
:class:`~specmd_sim.cache.ExpertCache` and policies, shared with the timing engine's core): the
same states, pins, counters and victim order, step for step, so its counters equal the Python
engine's exactly (``tests/engine/test_fast_replay.py`` checks every counter on random traces).
The Python classes stay the specification and the path for every other plug-in.

It is plain Python over numpy arrays (:func:`specmd_sim.engine.jit.compiled`): numba compiles it
when installed; without numba it runs as written, slowly. In a replay nothing takes time, and a
transfer lands as the zero-time transfer of ``docs/design.md`` does: a demand fetch at once, a
layer's prefetches together after its plan (``LOADING`` until then, so that a plan's prefetches
never evict each other), so nothing is ``LOADING`` when a router decides (no late hits).

All state is one int64 array ``S`` (:func:`.layout.new_state`): a call between compiled functions
that numba does not inline costs an atomic reference count per array argument, several times a
hit's own work, so the cache's operations take one array and are inlined.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast import cache as C
from specmd_sim.engine.fast.layout import (
    ABSENT,
    CAPACITY,
    COLLISION,
    COMPULSORY,
    HIT,
    K_EVER,
    K_EVICTED,
    K_NBYTES,
    K_NEXT,
    K_PINS,
    K_PREV,
    K_STATE,
    LOADING,
    NO_SPACE,
    OK,
    PRIO_NEXT_USE,
    R_BY_LAYER,
    R_SC,
    R_STATS,
    REC_LAST_USE,
    RESIDENT,
    SC_CAPACITY,
    SC_KEYS,
    SC_LAYER,
    SC_NUM_LAYERS,
    SC_PASS,
    SC_PINNED,
    SC_PRIORITY,
    SC_RECENCY,
    SC_USED,
    SC_WRITE_BACK,
    ST_BYTES_DEMAND,
    ST_BYTES_WRITTEN_BACK,
    ST_EVICTIONS,
    ST_PF_DROPPED,
)
from specmd_sim.engine.jit import compiled, compiled_inline

preload, next_uses = C.preload, C.next_uses  # (entry points of the module built ahead of time)


@compiled_inline
def fetch_demand(S: np.ndarray, key: int, p: int) -> int:
    """LayerStep._fetch of a demanded miss in a replay: streamed past the cache where the policy
    declines it, else admitted and landed at once, or streamed past it where the layer's pins
    leave no room (:func:`.cache.overflows`, which holds whenever a reservation fails here:
    nothing is loading); NO_SPACE where it does not (a bug)."""
    if C.declines(S, key):
        C.stream(S, key, False)
        return OK
    if not C.reserve(S, key, False, p):
        if not C.overflows(S, key):
            return NO_SPACE
        C.stream(S, key, True)
        return OK
    C.complete(S, key, False)
    return OK


@compiled_inline
def plan_step(S: np.ndarray, plan_keys: np.ndarray, lo: int, hi: int, p: int) -> None:
    """A layer's prefetch plan ``plan_keys[lo:hi]`` in pass ``p``: its cached keys are hints,
    its absent ones fetched in plan order unless dropped; they land together."""
    for i in range(lo, hi):
        key = plan_keys[i]
        if S[K_STATE, key] != ABSENT:
            C.hint(S, key)
        elif C.declines(S, key) or not C.reserve(S, key, True, p):
            S[R_STATS, ST_PF_DROPPED] += 1
    for i in range(lo, hi):  # the plan's prefetches land
        if S[K_STATE, plan_keys[i]] == LOADING:
            C.complete(S, plan_keys[i], True)


@compiled_inline
def layer_step(S: np.ndarray, after: np.ndarray, keys: np.ndarray, lo: int, hi: int,
               plan_keys: np.ndarray, plan_lo: int, plan_hi: int, layer: int,
               p: int) -> int:  # fmt: skip
    """One layer of pass ``p``: its demand set ``keys[lo:hi]``, then its plan
    ``plan_keys[plan_lo:plan_hi]`` (:func:`run_passes`)."""
    pinned = S[R_SC, SC_PINNED]
    S[R_SC, SC_LAYER] = layer
    if pinned:
        for i in range(lo, hi):
            S[K_PINS, keys[i]] += 1
    for i in range(lo, hi):
        key = keys[i]
        if S[R_SC, SC_PRIORITY] == PRIO_NEXT_USE:
            C.advance(S, after, key)
        miss = C.access(S, key, layer, p, False) != HIT
        if miss and not pinned and fetch_demand(S, key, p) == NO_SPACE:
            return NO_SPACE
    if pinned:  # the misses, once the whole set is accessed
        for i in range(lo, hi):
            key = keys[i]
            if S[K_STATE, key] == ABSENT and fetch_demand(S, key, p) == NO_SPACE:
                return NO_SPACE
    plan_step(S, plan_keys, plan_lo, plan_hi, p)
    if pinned:
        for i in range(lo, hi):
            S[K_PINS, keys[i]] -= 1
    return OK


@compiled
def run_passes(S: np.ndarray, after: np.ndarray, keys: np.ndarray, offsets: np.ndarray,
               pass_lo: int, pass_hi: int, plan_offsets: np.ndarray,
               plan_keys: np.ndarray) -> int:  # fmt: skip
    """Passes ``pass_lo .. pass_hi - 1``: every layer's demand set (the passes' ``keys``
    between ``offsets``, as in :class:`~specmd_sim.policies.context.AccessSequence`, both
    indexed from ``pass_lo``), then the layer's prefetch plan (``plan_keys`` between
    ``plan_offsets``, likewise). Pinned (default), the demand set is accessed, then its misses
    fetched in gate order; one at a time, each key is accessed and, a miss, fetched (its pin is
    left out: it would keep only the key itself from being a victim, and an absent key is
    none). Then the plan's absent keys are fetched in plan order (its cached keys are hints),
    and land together. OK, or NO_SPACE: a demand fetch found nothing evictable."""
    layers = S[R_SC, SC_NUM_LAYERS]
    for p in range(pass_lo, pass_hi):
        C.begin_pass(S, p)
        for layer in range(layers):
            r = (p - pass_lo) * layers + layer
            outcome = layer_step(S, after, keys, offsets[r], offsets[r + 1], plan_keys,
                                 plan_offsets[r], plan_offsets[r + 1], layer, p)  # fmt: skip
            if outcome != OK:
                return outcome
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
    reads them). The list moves are :mod:`.cache`'s ``list_remove``, ``list_append`` and
    ``first_evictable`` written out over rows of ``S`` (calling them measured 5% slower)."""
    sc = S[R_SC]
    n, layers, lru = sc[SC_KEYS], sc[SC_NUM_LAYERS], sc[SC_RECENCY] == REC_LAST_USE
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
