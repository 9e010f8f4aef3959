"""The layout of the replay kernel's state ``S``: its rows, scalars, counters and codes.

Numba-free, so that a process running the kernel compiled ahead of time
(:mod:`specmd_sim.engine.fast.aot`) never imports numba; :mod:`.cache` describes the structures.
"""

from __future__ import annotations

import numpy as np

# A compiled eviction policy is made of mechanisms of :mod:`.cache`, named by its
# ``compiled_form()`` (:class:`~specmd_sim.policies.eviction.base.CompiledForm`) and held in S's
# scalars. How a cached key's place in the queues follows its uses (S[R_SC, SC_RECENCY]):
# none (a heap orders the keys), insertion order, last use, or Least-Stale's two queues (a key
# touched this pass is *current*; ``pass-first-touch``: a current key keeps its place)
REC_NONE, REC_INSERTION, REC_LAST_USE, REC_PASS, REC_PASS_FIRST = range(5)
RECENCY = {"none": REC_NONE, "insertion": REC_INSERTION, "last-use": REC_LAST_USE,
           "pass": REC_PASS, "pass-first-touch": REC_PASS_FIRST}  # fmt: skip
# the victim (S[R_SC, SC_VICTIM]): the first evictable in queue order (stale before current),
# the one whose layer the sweep reaches last, the least lifetime count (aged; ties: queue
# order), or the least priority of the heap
VIC_FIRST, VIC_FARTHEST_LAYER, VIC_HEAP = range(3)
VIC_LEAST_COUNT = 3
VICTIM = {"first": VIC_FIRST, "farthest-layer": VIC_FARTHEST_LAYER, "least-priority": VIC_HEAP,
          "least-count": VIC_LEAST_COUNT}  # fmt: skip
# the heap's priority (S[R_SC, SC_PRIORITY]): none, uses since admission (ties: the earlier
# count), or the next use (farthest first; Belady)
PRIO_NONE, PRIO_COUNT, PRIO_NEXT_USE = range(3)
PRIORITY = {"none": PRIO_NONE, "count": PRIO_COUNT, "next-use": PRIO_NEXT_USE}
# the mechanisms' settings (CompiledForm.options) and the scalar each is held in: a prefetch
# enters the queue at its head; a key whose next use is not nearer than its victim's is
# declined (needs the next-use priority); least-count's counts are halved every N passes
OPTIONS = {"prefetch_at_head": "SC_PREFETCH_AT_HEAD", "bypass": "SC_BYPASS",
           "aging_passes": "SC_AGING"}  # fmt: skip

# rows of S: per key, then the scalars, counters, per-layer counts and the heap
K_STATE, K_PINS, K_EVER, K_EVICTED, K_UNUSED, K_PREV, K_NEXT = range(7)
K_TOUCHED, K_AUX, K_FREQ, K_NEXT_USE, K_NBYTES, K_HEAP_AT = range(7, 13)
R_SC, R_STATS, R_BY_LAYER = 13, 14, 15  # R_BY_LAYER + AccessClass: 5 rows
R_HEAP, R_HELD, R_EVICTED = 20, 22, 23  # the heap: 2 rows (priority, key); two scratch rows
K_COUNT = 24  # least-count's aged counts: float64 bits, per key
ROWS = 25

# scalars (columns of row R_SC)
SC_USED, SC_CAPACITY, SC_PASS, SC_LAYER, SC_RECENCY, SC_VICTIM, SC_PRIORITY = range(7)
SC_PREFETCH_AT_HEAD, SC_BYPASS, SC_NEVICTED = range(7, 10)
SC_WRITE_BACK, SC_PINNED, SC_HEAP_N, SC_STAMP, SC_STAMP_SPAN, SC_NEVER = range(10, 16)
SC_NUM_EXPERTS, SC_NUM_LAYERS, SC_KEYS = range(16, 19)
SC_AGING = 19
SCALARS = SC_AGING + 1

# counters (columns of row R_STATS): the CacheStats attributes of the same names
STAT_NAMES = (
    "bytes_demand",
    "bytes_prefetch",
    "bytes_written_back",
    "prefetch_issued",
    "prefetch_completed",
    "prefetch_used",
    "prefetch_wasted",
    "prefetch_dropped",
    "evictions",
    "bypassed",
    "prefetch_cancelled",  # (the replay cancels none: the timing engine's core does)
    "hits_home",  # (the replay covers no home shard: the timing engine's core does)
    "overflowed",
    "evictions_prefetch",
)
(
    ST_BYTES_DEMAND,
    ST_BYTES_PREFETCH,
    ST_BYTES_WRITTEN_BACK,
    ST_PF_ISSUED,
    ST_PF_COMPLETED,
    ST_PF_USED,
    ST_PF_WASTED,
    ST_PF_DROPPED,
    ST_EVICTIONS,
    ST_BYPASSED,
    ST_PF_CANCELLED,
    ST_HITS_HOME,
    ST_OVERFLOWED,
    ST_EV_PREFETCH,
) = range(len(STAT_NAMES))

ABSENT, LOADING, RESIDENT = 0, 1, 2  # State; LOADING: a replayed prefetch until its plan ends
HIT, COMPULSORY, CAPACITY, COLLISION = 0, 2, 3, 4  # AccessClass
DEMAND, PREFETCH, PRELOAD = 0, 1, 2  # FetchReason
OK, NO_SPACE = 0, 1  # run_passes' outcome: done, or a pinned demand fetch found no victim
OUTSIDE = -2  # TOUCHED of a key in no queue


def new_state(n: int, layers: int) -> np.ndarray:
    """``S`` for ``n`` keys over ``layers`` layers: an empty cache, both queues empty, an empty
    heap (room for every key)."""
    S = np.zeros((ROWS, max(n + 4, layers, SCALARS, len(STAT_NAMES))), np.int64)
    S[K_EVICTED], S[K_TOUCHED], S[K_AUX], S[K_HEAP_AT] = -1, OUTSIDE, -1, -1
    S[R_SC, SC_PASS] = -1
    S[R_SC, SC_KEYS], S[R_SC, SC_NUM_LAYERS] = n, layers
    for q in range(2):  # both queues empty: each head sentinel next to its tail
        head, tail = n + 2 * q, n + 2 * q + 1
        S[K_NEXT, head], S[K_PREV, tail] = tail, head
    return S
