"""The timing engine's compiled core.

:func:`run_block` is :func:`specmd_sim.engine.sim.run.simulate` on one GPU, passes ``lo .. hi -
1``, written over flat arrays: the stream (:class:`~specmd_sim.engine.sim.stream.GpuStream`
and :class:`~specmd_sim.engine.layer.LayerStep` in both pin modes, with late hits, prefetch
plans and making room; with copies on the compute stream, the waits for them to drain), the
copy engines (:class:`~specmd_sim.engine.sim.copy_engines.CopyEngines`:
two queues, promotion, cancellation), the fetcher's callbacks
(:class:`~specmd_sim.engine.sim.fetch.Fetcher`), the flow network's progressive filling
(:class:`~specmd_sim.engine.sim.flows.FlowNetwork`), the cache (with :mod:`.kernel`'s
policies) and the tally, with the spans and counters they record. It keeps SimPy's event order
— by time, then priority (*urgent* before *normal*), then the order events were scheduled — and
schedules an event wherever the Python engine schedules one, with the same float operations, so
its results are the Python engine's bit for bit (``tests/engine/test_sim_compiled.py``).

Which runs it covers (one GPU, experts in host DRAM, one chunk per copy, ...) is
:func:`specmd_sim.engine.sim.compiled.compiled_unsupported`'s to say; the Python engine stays
the specification and the path for everything else.

Events are ``(time, priority, id, kind, argument)`` in a binary heap; ``kind`` names the
callback the Python engine would run:

============== =====================================================================
``EV_STREAM``  the stream resumes (its timeout ended, or the transfer it waits on)
``EV_COPY``    a copy engine starts a job's chunk (``soon`` in ``CopyEngines._dispatch``)
``EV_LATENCY`` a chunk's path latency has passed: its flow starts moving
``EV_ARM``     the flow network arms its wake-up (``soon`` in ``FlowNetwork._reschedule``)
``EV_WAKE``    the first flow to finish is done (stale unless no flow started or ended)
``EV_MOVED``   a flow's ``done`` event: the fetcher's and copy engines' callbacks
============== =====================================================================

Between two blocks the stream is about to begin pass ``hi``: the state arrays keep everything
else (prefetches may be in flight), and the next call continues from there; the last block
also processes what is left after the last pass, as ``env.run()`` does.

Jobs (a fetch on the copy engines; its flow has the job's number) live in a pool of rows and
go back to it once they ended or were cancelled and the stream no longer holds them (an expert
it runs keeps its job's ``done`` to look at): the jobs in flight are at most the experts
loading plus a layer's streamed ones, so the pool is bounded by the keys.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast import kernel as K
from specmd_sim.engine.jit import compiled

EV_STREAM, EV_COPY, EV_LATENCY, EV_ARM, EV_WAKE, EV_MOVED = range(6)
URGENT, NORMAL = 0, 1  # simpy.events.URGENT, NORMAL
_SLOT_BITS = 16  # an EV_COPY's argument: job << _SLOT_BITS | slot

# outcomes of run_block
OK, BLOCKED = 0, 1

# the stream's stages (where its generator would resume)
(ST_PASS, ST_ADMITTED, ST_LAYER, ST_STEP, ST_RESOLVE, ST_ONE, ST_ONE_RESOLVE, ST_RUN, ST_WAITED,
 ST_HEAD, ST_END, ST_FINISHED, ST_DRAINED) = range(13)  # fmt: skip

# span kinds (specmd_sim.timeline.KINDS)
SK_ATTENTION, SK_EXPERT, SK_LM_HEAD, SK_STALL, SK_DEMAND_FETCH, SK_PREFETCH = range(6)
LATE = 1  # AccessClass.LATE_HIT
LOADING = 1  # State.LOADING

# int scalars (IS)
(I_EID, I_GEN, I_COUNT, I_HEAP_N, I_STAGE, I_PASS, I_LAYER, I_IDX, I_NRUN, I_ONE, I_RETRY,
 I_NREADY, I_NWAIT, I_NACT, I_FIRST, I_IN_FLIGHT, I_BUSY_ACTIVE, I_NFREE, I_ACTIVE_JOBS,
 I_JFREE, I_NSPANS, I_NCIV, I_NSIV, I_NTIV, I_NUSED, I_NFLIGHT, I_NBW, I_USED_PATH, I_PHASE,
 I_NHELD, I_DEC_PASS, I_DEC_LAYER, I_STAMP, I_SPACE, I_IDLE, I_AFTER) = range(36)  # fmt: skip
I_SIZE = I_AFTER + 1
# float scalars (FS)
(F_NOW, F_NET_LAST, F_CSUM, F_SSUM, F_BEFORE_C, F_BEFORE_S, F_T0, F_BUSY_SINCE, F_DELAY,
 F_TSUM) = range(10)  # fmt: skip
F_SIZE = F_TSUM + 1
# static ints (X)
X_LAYERS, X_PINNED, X_RECORD, X_LANE, X_NUM_PASSES, X_PREFETCHING, X_DRAIN, X_CHUNK = range(8)
X_SIZE = X_CHUNK + 1
# per pass (PF floats, PI ints)
PF_ATTN, PF_DENSE, PF_HEAD, PF_WAIT = range(4)  # PF_DENSE, PF_HEAD < 0: none
PI_PHASE, PI_REQUEST, PI_GLOBAL = range(3)  # PI_GLOBAL: the pass's number in the spans
# per job (JB rows; the last four rows are the two queues' head and tail)
(J_KEY, J_BYPASS, J_PASS, J_LAYER, J_DONE, J_WAITER, J_SLOT, J_NBYTES, J_DEMAND, J_STARTED,
 J_QUEUE, J_HELD, J_RETIRED, J_LEFT, J_CHUNK, J_PREV, J_NEXT, J_ORDER) = range(18)  # fmt: skip
J_COLUMNS = 18
FL_NBYTES, FL_REMAINING, FL_RATE, FL_START = range(4)  # per job's flow (FL)
# per key (KR rows): its job (-1: none), LOADING for a prefetch, the Decide that demanded it
KR_JOB, KR_LOADPF, KR_DEMANDED = range(3)
# the network's per-resource rows (NF floats, NI ints; private rate caps after the resources)
N_CAP, N_THROUGH, N_BUSY, N_CARRIED, N_LAST, N_RESIDUAL = range(6)
NI_THROUGH, NI_BUSY, NI_HAS, NI_LAST_HAS, NI_USERS, NI_FROZEN = range(6)
# per layer sums (TL rows)
TL_STALL, TL_COMPUTE, TL_PHASE_COMPUTE, TL_PHASE_STALL = 0, 1, 2, 4  # the phase rows: + phase
# per pass times (TP columns)
TP_START, TP_END, TP_COMPUTE, TP_STALL = range(4)

_EPS = 1e-12  # flows.py's: a flow within this fraction of its size is done


def new_state(
    keys: int, jobs: int, engines: int, resources: int, run_rows: int
) -> dict[str, np.ndarray]:
    """The arrays that live from block to block: scalars, the event heap, the job pool and its
    queues, the keys' rows, the network's rows and the stream's lists."""
    IS = np.zeros(I_SIZE, np.int64)
    IS[I_NFREE], IS[I_STAGE], IS[I_JFREE] = engines, ST_PASS, jobs
    IS[I_DEC_PASS] = IS[I_DEC_LAYER] = -1
    JB = np.zeros((jobs + 4, J_COLUMNS), np.int64)
    for q in range(2):  # empty queues: head <-> tail
        JB[jobs + 2 * q, J_NEXT], JB[jobs + 2 * q + 1, J_PREV] = jobs + 2 * q + 1, jobs + 2 * q
    KR = np.zeros((3, keys), np.int64)
    KR[KR_JOB], KR[KR_DEMANDED] = -1, -1
    width = resources + engines + 1
    return {
        "IS": IS, "FS": np.zeros(F_SIZE), "hT": np.zeros(1 << 14),
        "hI": np.zeros((1 << 14, 4), np.int64), "JB": JB, "FL": np.zeros((jobs, 4)),
        "jfree": np.arange(jobs - 1, -1, -1, dtype=np.int64), "KR": KR,
        "free": np.arange(engines, dtype=np.int64), "act": np.zeros(engines + 1, np.int64),
        "NF": np.zeros((6, width)), "NI": np.zeros((6, width), np.int64),
        "run_i": np.zeros((run_rows, 4), np.int64), "run_t": np.zeros(run_rows),
        "held": np.zeros(run_rows, np.int64),
    }  # fmt: skip


# --- the event heap: (time, priority, id) smallest on top -----------------------------------


@compiled
def _before(hT: np.ndarray, hI: np.ndarray, a: int, b: int) -> bool:
    if hT[a] != hT[b]:
        return hT[a] < hT[b]
    if hI[a, 0] != hI[b, 0]:
        return hI[a, 0] < hI[b, 0]
    return hI[a, 1] < hI[b, 1]


@compiled
def _swap(hT: np.ndarray, hI: np.ndarray, a: int, b: int) -> None:
    hT[a], hT[b] = hT[b], hT[a]
    for c in range(4):
        hI[a, c], hI[b, c] = hI[b, c], hI[a, c]


@compiled
def schedule(IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, time: float, prio: int, kind: int,
             arg: int) -> None:  # fmt: skip
    """Push an event, numbered after every event scheduled before it."""
    i = IS[I_HEAP_N]
    if i == hT.size:
        raise RuntimeError("timing engine: more events pending at once than the heap holds")
    IS[I_HEAP_N] = i + 1
    hT[i] = time
    hI[i, 0], hI[i, 1], hI[i, 2], hI[i, 3] = prio, IS[I_EID], kind, arg
    IS[I_EID] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(hT, hI, i, parent):
            break
        _swap(hT, hI, i, parent)
        i = parent


@compiled
def _pop(IS: np.ndarray, hT: np.ndarray, hI: np.ndarray) -> None:
    size = IS[I_HEAP_N] - 1
    IS[I_HEAP_N] = size
    if size == 0:
        return
    _swap(hT, hI, 0, size)
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(hT, hI, child + 1, child):
            child += 1
        if not _before(hT, hI, child, i):
            break
        _swap(hT, hI, i, child)
        i = child


# --- the cache (ExpertCache with kernel.py's policies) -------------------------------------------


@compiled
def _sample(out: np.ndarray, IS: np.ndarray, counter: int, time: float, value: float) -> None:
    n = IS[counter]
    out[n, 0], out[n, 1] = time, value
    IS[counter] = n + 1


@compiled
def _access(S: np.ndarray, pos: np.ndarray, key: int, layer: int, p: int) -> int:
    """ExpertCache.access (no home shard)."""
    sc = S[K.R_SC]
    policy = sc[K.SC_POLICY]
    sc[K.SC_CLOCK] += 1
    S[K.K_SEEN, key] += 1
    state = S[K.K_STATE, key]
    if state != K.ABSENT:
        klass = K.HIT if state == K.RESIDENT else LATE
        if S[K.K_UNUSED, key]:
            S[K.K_UNUSED, key] = 0
            S[K.R_STATS, K.ST_PF_USED] += 1
        if policy == K.LRU:
            K.list_remove(S, key)
            K.list_append(S, sc[K.SC_KEYS], 0, key)
        elif policy == K.LFU or policy >= K.BELADY:
            K.heap_update(S, pos, key, S[K.K_FREQ, key] + 1)
        elif policy >= K.LS_FIFO:
            K.touch(S, key)
    elif not S[K.K_EVER, key]:
        klass = K.COMPULSORY
    elif S[K.K_EVICTED, key] == p:
        klass = K.COLLISION
    else:
        klass = K.CAPACITY
    S[K.R_BY_LAYER + klass, layer] += 1
    return klass


@compiled
def _victim(S: np.ndarray) -> int:
    sc = S[K.R_SC]
    policy, n = sc[K.SC_POLICY], sc[K.SC_KEYS]
    if policy == K.FIFO or policy == K.LRU:
        return K.first_evictable(S, n, 0)
    if policy == K.LFU or policy >= K.BELADY:
        return K.heap_victim(S)
    for q in range(2):  # Least-Stale: stale first, then current
        victim = K.pick_by_layer(S, n, q) if policy == K.LS_LAYER else K.first_evictable(S, n, q)
        if victim >= 0:
            return victim
    return -1


@compiled
def _on_remove(S: np.ndarray, key: int) -> None:
    policy = S[K.R_SC, K.SC_POLICY]
    if policy == K.LFU or policy >= K.BELADY:
        S[K.K_AUX, key] = -1
    else:
        K.list_remove(S, key)
        S[K.K_TOUCHED, key] = K.OUTSIDE


@compiled
def _reserve(S: np.ndarray, pos: np.ndarray, KR: np.ndarray, key: int, prefetch: bool, p: int,
             now: float, record: bool, used_out: np.ndarray, IS: np.ndarray) -> bool:  # fmt: skip
    """ExpertCache.reserve: evict until it fits, then LOADING (False: not admitted, or nothing
    is evictable). Occupancy samples as the fetcher's hook takes them."""
    sc = S[K.R_SC]
    policy = sc[K.SC_POLICY]
    need = S[K.K_NBYTES, key]
    if prefetch and (policy == K.BELADY_BYPASS and sc[K.SC_CAPACITY] - sc[K.SC_USED] < need
                     and not K.bypass_admits(S, pos, key)):  # fmt: skip
        S[K.R_STATS, K.ST_PF_DROPPED] += 1
        return False
    while sc[K.SC_CAPACITY] - sc[K.SC_USED] < need:
        victim = _victim(S)
        if victim < 0:
            if prefetch:
                S[K.R_STATS, K.ST_PF_DROPPED] += 1
            return False
        S[K.K_STATE, victim] = K.ABSENT  # ExpertCache._evict
        sc[K.SC_USED] -= S[K.K_NBYTES, victim]
        if record:
            _sample(used_out, IS, I_NUSED, now, sc[K.SC_USED])
        S[K.K_EVICTED, victim] = p
        S[K.R_STATS, K.ST_EVICTIONS] += 1
        if S[K.K_UNUSED, victim]:
            S[K.K_UNUSED, victim] = 0
            S[K.R_STATS, K.ST_PF_WASTED] += 1
        _on_remove(S, victim)
    S[K.K_STATE, key] = LOADING
    sc[K.SC_USED] += need
    if record:
        _sample(used_out, IS, I_NUSED, now, sc[K.SC_USED])
    KR[KR_LOADPF, key] = prefetch
    if prefetch:
        S[K.K_UNUSED, key] = 1
        S[K.R_STATS, K.ST_PF_ISSUED] += 1
        S[K.R_STATS, K.ST_BYTES_PREFETCH] += need
    else:
        S[K.R_STATS, K.ST_BYTES_DEMAND] += need
    K.on_insert(S, pos, key, K.PREFETCH if prefetch else K.DEMAND)
    return True


@compiled
def _space_changed(IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, now: float) -> None:
    """The fetcher's cache listener: the stream waiting for space (make_room) resumes."""
    if IS[I_SPACE]:
        IS[I_SPACE] = 0
        schedule(IS, hT, hI, now, NORMAL, EV_STREAM, 0)


@compiled
def _cancel(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
            hT: np.ndarray, hI: np.ndarray, job: int, now: float, record: bool,
            used_out: np.ndarray) -> None:  # fmt: skip
    """Fetcher._cancelled and the job's retirement: an unstarted prefetch abandoned."""
    key = JB[job, J_KEY]
    KR[KR_JOB, key] = -1
    if not S[K.K_UNUSED, key]:  # ExpertCache.cancel
        S[K.R_STATS, K.ST_PF_USED] -= 1
    S[K.K_STATE, key] = K.ABSENT
    S[K.R_SC, K.SC_USED] -= S[K.K_NBYTES, key]
    if record:
        _sample(used_out, IS, I_NUSED, now, S[K.R_SC, K.SC_USED])
    S[K.R_STATS, K.ST_BYTES_PREFETCH] -= S[K.K_NBYTES, key]
    S[K.R_STATS, K.ST_PF_CANCELLED] += 1
    S[K.K_UNUSED, key] = 0
    KR[KR_LOADPF, key] = 0
    _on_remove(S, key)
    _space_changed(IS, hT, hI, now)
    JB[job, J_DONE] = 1  # settle(job.done): nothing waits on a prefetch
    _retire(JB, jfree, IS, hT, hI, job, now)


@compiled
def _retire(JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray, hT: np.ndarray, hI: np.ndarray,
            job: int, now: float) -> None:  # fmt: skip
    """CopyEngines._retired (the stream waiting for the copies to drain resumes once none is
    left); the job's row goes back to the pool unless the stream holds it."""
    IS[I_ACTIVE_JOBS] -= 1
    if IS[I_ACTIVE_JOBS] == 0 and IS[I_IDLE]:
        IS[I_IDLE] = 0
        schedule(IS, hT, hI, now, NORMAL, EV_STREAM, 0)
    JB[job, J_RETIRED] = 1
    if not JB[job, J_HELD]:
        jfree[IS[I_JFREE]] = job
        IS[I_JFREE] += 1


# --- the copy engines -----------------------------------------------------------------------------


@compiled
def _new_job(JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray, key: int, nbytes: int,
             demand: bool, bypass: bool, p: int, layer: int) -> int:  # fmt: skip
    if IS[I_JFREE] == 0:
        raise RuntimeError("timing engine: more jobs in flight than the pool holds")
    IS[I_JFREE] -= 1
    job = jfree[IS[I_JFREE]]
    for c in range(J_PREV):
        JB[job, c] = 0
    JB[job, J_KEY], JB[job, J_BYPASS], JB[job, J_PASS], JB[job, J_LAYER] = key, bypass, p, layer
    JB[job, J_NBYTES], JB[job, J_DEMAND], JB[job, J_QUEUE] = nbytes, demand, -1
    JB[job, J_LEFT] = nbytes  # bytes of chunks not yet started
    return job


@compiled
def _enqueue(JB: np.ndarray, job: int, q: int, front: bool = False) -> None:
    """Into queue ``q`` (0: demand, 1: prefetch) at its end, or its front."""
    if front:
        before = JB.shape[0] - 4 + 2 * q
        after = JB[before, J_NEXT]
    else:
        after = JB.shape[0] - 4 + 2 * q + 1
        before = JB[after, J_PREV]
    JB[before, J_NEXT], JB[job, J_PREV] = job, before
    JB[job, J_NEXT], JB[after, J_PREV] = after, job
    JB[job, J_QUEUE] = q


@compiled
def _dequeue(JB: np.ndarray, job: int) -> None:
    before, after = JB[job, J_PREV], JB[job, J_NEXT]
    JB[before, J_NEXT], JB[after, J_PREV] = after, before
    JB[job, J_QUEUE] = -1


@compiled
def _obsolete(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, IS: np.ndarray, job: int) -> bool:
    """Fetcher._prefetch_obsolete: its target layer's router has decided, and the layer now
    running does not use it."""
    key, tp, tl = JB[job, J_KEY], JB[job, J_PASS], JB[job, J_LAYER]
    dp, dl = IS[I_DEC_PASS], IS[I_DEC_LAYER]
    reached = dp > tp or (dp == tp and dl >= tl)
    return reached and S[K.K_PINS, key] == 0 and KR[KR_DEMANDED, key] != IS[I_STAMP]


@compiled
def _dispatch(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
              hT: np.ndarray, hI: np.ndarray, free: np.ndarray, now: float, record: bool,
              used_out: np.ndarray) -> None:  # fmt: skip
    """CopyEngines._dispatch: demand jobs first, then prefetches (an obsolete one cancelled),
    to free slots, the lowest first."""
    base = JB.shape[0] - 4
    while IS[I_NFREE] > 0:
        job = JB[base, J_NEXT]  # the demand queue's first
        if job >= base:
            job = JB[base + 2, J_NEXT]
            if job >= base:
                return
        _dequeue(JB, job)
        if not JB[job, J_STARTED] and not JB[job, J_DEMAND] and _obsolete(S, KR, JB, IS, job):
            _cancel(S, KR, JB, jfree, IS, hT, hI, job, now, record, used_out)
            continue
        slot = free[0]
        n = IS[I_NFREE] - 1
        for i in range(n):
            free[i] = free[i + 1]
        IS[I_NFREE] = n
        schedule(IS, hT, hI, now, URGENT, EV_COPY, (job << _SLOT_BITS) | slot)


@compiled
def _submit(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
            hT: np.ndarray, hI: np.ndarray, free: np.ndarray, job: int, now: float,
            record: bool, used_out: np.ndarray) -> None:  # fmt: skip
    """CopyEngines.submit."""
    IS[I_ACTIVE_JOBS] += 1
    _enqueue(JB, job, 0 if JB[job, J_DEMAND] else 1)
    _dispatch(S, KR, JB, jfree, IS, hT, hI, free, now, record, used_out)


@compiled
def _make_room(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
               hT: np.ndarray, hI: np.ndarray, now: float, record: bool,
               used_out: np.ndarray) -> bool:  # fmt: skip
    """Fetcher.make_room's first part: cancel the newest queued prefetch that the layer now
    running does not hold (False: none)."""
    base = JB.shape[0] - 4
    job = JB[base + 3, J_PREV]  # the prefetch queue's last
    while job < base:
        before = JB[job, J_PREV]
        key = JB[job, J_KEY]
        if not JB[job, J_STARTED] and S[K.K_PINS, key] == 0 and KR[KR_DEMANDED, key] != IS[I_STAMP]:
            _dequeue(JB, job)
            _cancel(S, KR, JB, jfree, IS, hT, hI, job, now, record, used_out)
            return True
        job = before
    return False


# --- the flow network ---------------------------------------------------------------------------


@compiled
def _private_less(a: int, b: int) -> bool:
    """Whether ``~flow<a>`` sorts before ``~flow<b>`` (the names compared as strings)."""
    da, db = 1, 1
    while a // (da * 10) > 0:
        da *= 10
    while b // (db * 10) > 0:
        db *= 10
    while da > 0 and db > 0:
        ca, cb = (a // da) % 10, (b // db) % 10
        if ca != cb:
            return ca < cb
        da //= 10
        db //= 10
    return da == 0 and db > 0


@compiled
def _rates(  # noqa: C901
    IS: np.ndarray, act: np.ndarray, FL: np.ndarray, JB: np.ndarray, pres: np.ndarray,
    fcap: float, NF: np.ndarray, NI: np.ndarray, R: int,
) -> None:  # fmt: skip
    """FlowNetwork._rates: every active flow's rate (all move over the one path ``pres``, each
    with a private resource of capacity ``fcap`` when that is >= 0)."""
    nact = IS[I_NACT]
    cap, residual, users, frozen = NF[N_CAP], NF[N_RESIDUAL], NI[NI_USERS], NI[NI_FROZEN]
    if nact == 1:  # the rate of a flow alone: its narrowest resource's
        rate = cap[pres[0]]
        for i in range(1, pres.size):
            if cap[pres[i]] < rate:
                rate = cap[pres[i]]
        if fcap >= 0 and fcap < rate:
            rate = fcap
        FL[act[0], FL_RATE] = rate
        return
    for r in range(R + nact):
        users[r] = 0
    for i in range(nact):
        for r in pres:
            users[r] += 1
            residual[r] = cap[r]
        if fcap >= 0:
            users[R + i] = 1
            residual[R + i] = fcap
        frozen[i] = 0
    left = nact
    while left > 0:
        best, share = -1, 0.0
        for r in range(R + nact):
            if users[r] == 0:
                continue
            s = residual[r] / users[r]
            if best < 0 or s < share:
                best, share = r, s
            elif s == share:  # ties: the lowest name (the path's sort before ~flow<n>)
                if r >= R and best >= R:
                    if _private_less(JB[act[r - R], J_ORDER], JB[act[best - R], J_ORDER]):
                        best = r
                elif r < best:
                    best = r
        for i in range(nact):
            if frozen[i]:
                continue
            uses = best == R + i
            if not uses and best < R:
                for r in pres:
                    if r == best:
                        uses = True
            if not uses:
                continue
            FL[act[i], FL_RATE] = share
            frozen[i] = 1
            left -= 1
            for r in pres:
                residual[r] -= share
                users[r] -= 1
            if fcap >= 0:
                residual[R + i] -= share
                users[R + i] -= 1


@compiled
def _sample_bandwidth(IS: np.ndarray, act: np.ndarray, FL: np.ndarray, pres: np.ndarray,
                      at: float, NF: np.ndarray, NI: np.ndarray, R: int,
                      bw_out: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._sample_bandwidth: a sample per resource whose bandwidth in use changed."""
    nact = IS[I_NACT]
    carried, has, last, last_has = NF[N_CARRIED], NI[NI_HAS], NF[N_LAST], NI[NI_LAST_HAS]
    for r in range(R):
        carried[r], has[r] = 0.0, 0
    if nact == 1:
        for r in pres:
            carried[r], has[r] = FL[act[0], FL_RATE], 1
    else:
        for i in range(nact):
            rate = FL[act[i], FL_RATE]
            for r in pres:
                carried[r] = carried[r] + rate if has[r] else rate
                has[r] = 1
    same = True
    for r in range(R):
        if has[r] != last_has[r] or (has[r] and carried[r] != last[r]):
            same = False
    if same:
        return
    for r in range(R):
        if (has[r] and (not last_has[r] or carried[r] != last[r])) or (last_has[r] and not has[r]):
            n = IS[I_NBW]
            bw_out[n, 0], bw_out[n, 1] = r, at
            bw_out[n, 2] = carried[r] if has[r] else 0.0
            IS[I_NBW] = n + 1
        last[r], last_has[r] = carried[r], has[r]


@compiled
def _advance(IS: np.ndarray, FS: np.ndarray, act: np.ndarray, FL: np.ndarray, pres: np.ndarray,
             NF: np.ndarray, NI: np.ndarray, R: int, bw_out: np.ndarray,
             record: bool) -> None:  # fmt: skip
    """FlowNetwork._advance: the flows' bytes moved since the last change, and busy time."""
    now = FS[F_NOW]
    dt = now - FS[F_NET_LAST]
    if dt > 0:
        nact = IS[I_NACT]
        for i in range(nact):
            f = act[i]
            FL[f, FL_REMAINING] -= FL[f, FL_RATE] * dt
        if nact > 0:  # every flow moves over the one path: its resources, each once
            for r in pres:
                NF[N_BUSY, r] += dt
                NI[NI_BUSY, r] = 1
        if record:
            _sample_bandwidth(IS, act, FL, pres, FS[F_NET_LAST], NF, NI, R, bw_out)
    FS[F_NET_LAST] = now


@compiled
def _reschedule(IS: np.ndarray, FS: np.ndarray, hT: np.ndarray, hI: np.ndarray, act: np.ndarray,
                FL: np.ndarray, JB: np.ndarray, pres: np.ndarray, fcap: float, NF: np.ndarray,
                NI: np.ndarray, R: int) -> None:  # fmt: skip
    """FlowNetwork._reschedule: new rates, and a wake-up armed for the first flow to end."""
    IS[I_GEN] += 1
    nact = IS[I_NACT]
    if nact == 0:
        return
    _rates(IS, act, FL, JB, pres, fcap, NF, NI, R)
    first = act[0]
    first_t = FL[first, FL_REMAINING] / FL[first, FL_RATE]
    for i in range(nact):
        f = act[i]
        t = FL[f, FL_REMAINING] / FL[f, FL_RATE]
        if t < first_t or (t == first_t and JB[f, J_ORDER] < JB[first, J_ORDER]):
            first, first_t = f, t
    IS[I_FIRST] = first
    FS[F_DELAY] = max(first_t, 0.0)
    schedule(IS, hT, hI, FS[F_NOW], URGENT, EV_ARM, IS[I_GEN])


@compiled
def _begin(IS: np.ndarray, FS: np.ndarray, hT: np.ndarray, hI: np.ndarray, job: int,
           JB: np.ndarray, FL: np.ndarray, act: np.ndarray, pres: np.ndarray, fcap: float,
           NF: np.ndarray, NI: np.ndarray, R: int, bw_out: np.ndarray,
           record: bool) -> None:  # fmt: skip
    """FlowNetwork._begin: a flow of the job's bytes starts moving."""
    _advance(IS, FS, act, FL, pres, NF, NI, R, bw_out, record)
    IS[I_COUNT] += 1
    nbytes = float(JB[job, J_CHUNK])
    FL[job, FL_NBYTES], FL[job, FL_REMAINING], FL[job, FL_RATE] = nbytes, nbytes, 0.0
    JB[job, J_ORDER] = IS[I_COUNT]
    act[IS[I_NACT]] = job
    IS[I_NACT] += 1
    _reschedule(IS, FS, hT, hI, act, FL, JB, pres, fcap, NF, NI, R)


# --- the layer step ---------------------------------------------------------------------------


@compiled
def _resolve(S: np.ndarray, pos: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray,
             IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray, key: int,
             klass: int, p: int, layer: int, now: float, record: bool, used_out: np.ndarray,
             retry: bool) -> int:  # fmt: skip
    """LayerStep._fetch of a demanded, non-resident key: its job; -1 where it is resident after
    all (a late hit whose transfer ended meanwhile); -3 where nothing is evictable and no queued
    prefetch can be cancelled: the stream waits for space, then retries the reservation
    (``retry``: the policy's admission is not asked again)."""
    if klass == LATE:
        if S[K.K_STATE, key] == K.RESIDENT:
            return -1
        job = KR[KR_JOB, key]
        if not JB[job, J_DEMAND]:  # Fetcher.join: CopyEngines.promote
            JB[job, J_DEMAND] = 1
            if JB[job, J_QUEUE] == 1:
                _dequeue(JB, job)
                _enqueue(JB, job, 0)
                _dispatch(S, KR, JB, jfree, IS, hT, hI, free, now, record, used_out)
        return job
    sc = S[K.R_SC]
    need = S[K.K_NBYTES, key]
    if not retry and (sc[K.SC_POLICY] == K.BELADY_BYPASS and sc[K.SC_CAPACITY] - sc[K.SC_USED]
                      < need and not K.bypass_admits(S, pos, key)):  # fmt: skip
        S[K.R_STATS, K.ST_BYPASSED] += 1  # cache.stream
        S[K.R_STATS, K.ST_BYTES_DEMAND] += need
        job = _new_job(JB, jfree, IS, key, need, True, True, p, layer)
        _submit(S, KR, JB, jfree, IS, hT, hI, free, job, now, record, used_out)
        return job
    while not _reserve(S, pos, KR, key, False, p, now, record, used_out, IS):
        if not _make_room(S, KR, JB, jfree, IS, hT, hI, now, record, used_out):
            return -3
    job = _new_job(JB, jfree, IS, key, need, True, False, p, layer)
    KR[KR_JOB, key] = job
    _submit(S, KR, JB, jfree, IS, hT, hI, free, job, now, record, used_out)
    return job


@compiled
def _plan(S: np.ndarray, pos: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray,
          IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray,
          plan_keys: np.ndarray, lo: int, hi: int, p: int, now: float, record: bool,
          used_out: np.ndarray) -> None:  # fmt: skip
    """LayerStep._plan_prefetches: cached keys of the plan are hints (Least-Stale counts
    them), absent ones are fetched in plan order unless the cache drops them."""
    sc = S[K.R_SC]
    least_stale = K.LS_FIFO <= sc[K.SC_POLICY] <= K.LS_LAYER
    for i in range(lo, hi):
        key = plan_keys[i]
        if S[K.K_STATE, key] != K.ABSENT:
            if least_stale:
                K.touch(S, key)
        elif _reserve(S, pos, KR, key, True, p, now, record, used_out, IS):
            layer = key // sc[K.SC_NUM_EXPERTS]
            job = _new_job(JB, jfree, IS, key, S[K.K_NBYTES, key], False, False, p, layer)
            KR[KR_JOB, key] = job
            _submit(S, KR, JB, jfree, IS, hT, hI, free, job, now, record, used_out)


@compiled
def _span(spF: np.ndarray, spI: np.ndarray, IS: np.ndarray, lane: int, kind: int, start: float,
          end: float, pass_: int, layer: int, expert: int, nbytes: int, request: int,
          klass: int) -> None:  # fmt: skip
    n = IS[I_NSPANS]
    spF[n, 0], spF[n, 1] = start, end
    spI[n, 0], spI[n, 1], spI[n, 2], spI[n, 3] = lane, kind, pass_, layer
    spI[n, 4], spI[n, 5], spI[n, 6], spI[n, 7] = expert, nbytes, request, klass
    IS[I_NSPANS] = n + 1


@compiled
def _stall(spF: np.ndarray, spI: np.ndarray, IS: np.ndarray, FS: np.ndarray, siv: np.ndarray,
           TL: np.ndarray, PI: np.ndarray, lane: int, p: int, layer: int, key: int, klass: int,
           now: float, record: bool) -> None:  # fmt: skip
    """GpuStream._wait's end: the wait since ``FS[F_T0]`` is a stall (span and tally)."""
    t0, phase = FS[F_T0], IS[I_PHASE]
    if record:
        _span(spF, spI, IS, lane, SK_STALL, t0, now, PI[p, PI_GLOBAL], layer, key, 0,
              PI[p, PI_REQUEST], klass)  # fmt: skip
    if now > t0:
        n = IS[I_NSIV]
        siv[n, 0], siv[n, 1] = t0, now
        IS[I_NSIV] = n + 1
        FS[F_SSUM] += now - t0
    TL[TL_STALL, layer] += now - t0
    TL[TL_PHASE_STALL + phase, layer] += now - t0


@compiled
def _entry(run_i: np.ndarray, run_t: np.ndarray, JB: np.ndarray, row: int, key: int, job: int,
           klass: int, seconds: float) -> None:  # fmt: skip
    """An expert for the stream to run (``job``: the transfer it waits on, if >= 0)."""
    run_i[row, 0], run_i[row, 1], run_i[row, 2], run_t[row] = key, job, klass, seconds
    if job >= 0:
        JB[job, J_HELD] = 1


# --- one block of passes ------------------------------------------------------------------------


@compiled
def run_block(  # noqa: C901
    S: np.ndarray, pos: np.ndarray, keys: np.ndarray, offsets: np.ndarray, t_exp: np.ndarray,
    t_base: int, p_lo: int, p_hi: int, plan_offsets: np.ndarray, plan_keys: np.ndarray,
    PF: np.ndarray, PI: np.ndarray, X: np.ndarray, lanes: np.ndarray, pres: np.ndarray,
    latency: float, fcap: float, IS: np.ndarray, FS: np.ndarray, hT: np.ndarray, hI: np.ndarray,
    JB: np.ndarray, FL: np.ndarray, jfree: np.ndarray, KR: np.ndarray, free: np.ndarray,
    act: np.ndarray, NF: np.ndarray, NI: np.ndarray, run_i: np.ndarray, run_t: np.ndarray,
    held: np.ndarray, TL: np.ndarray, TP: np.ndarray, engine_busy: np.ndarray,
    engine_bytes: np.ndarray, spF: np.ndarray, spI: np.ndarray, civ: np.ndarray,
    siv: np.ndarray, tiv: np.ndarray, used_out: np.ndarray, flight_out: np.ndarray,
    bw_out: np.ndarray,
) -> int:  # fmt: skip
    """Run the GPU's passes ``p_lo .. p_hi - 1`` (see the module docstring; ``t_exp``: the
    block's expert kernel times, from access ``t_base``; ``plan_keys`` between
    ``plan_offsets``: each layer's prefetch plan, indexed from ``p_lo``). OK, or
    BLOCKED: the stream waits on nothing that can happen (as SimPy's run would end)."""
    layers, pinned, record = X[X_LAYERS], X[X_PINNED] == 1, X[X_RECORD] == 1
    lane, R, prefetching, drain = X[X_LANE], pres.size, X[X_PREFETCHING] == 1, X[X_DRAIN] == 1
    sc = S[K.R_SC]
    heaped = sc[K.SC_POLICY] == K.LFU or sc[K.SC_POLICY] >= K.BELADY
    IS[I_NSPANS] = IS[I_NCIV] = IS[I_NSIV] = IS[I_NTIV] = 0
    IS[I_NUSED] = IS[I_NFLIGHT] = IS[I_NBW] = 0
    resume = IS[I_STAGE] != ST_FINISHED  # the stream is about to begin pass p_lo
    while True:
        if resume:
            resume = False
            # --- the stream, from where it stopped to its next wait -------------------------
            while True:
                stage, p, now = IS[I_STAGE], IS[I_PASS], FS[F_NOW]
                if stage == ST_PASS:
                    if p >= X[X_NUM_PASSES]:
                        IS[I_STAGE] = ST_FINISHED
                        break
                    if p >= p_hi:
                        return OK
                    wait = PF[p, PF_WAIT]
                    IS[I_STAGE] = ST_ADMITTED
                    if wait > now:
                        schedule(IS, hT, hI, now + (wait - now), NORMAL, EV_STREAM, 0)
                        break
                    continue
                if stage == ST_ADMITTED:
                    TP[p, TP_START] = now
                    FS[F_BEFORE_C], FS[F_BEFORE_S] = FS[F_CSUM], FS[F_SSUM]
                    IS[I_PHASE] = PI[p, PI_PHASE]
                    sc[K.SC_PASS] = p  # cache.begin_pass
                    if K.LS_FIFO <= sc[K.SC_POLICY] <= K.LS_LAYER:
                        K.list_move_all(S, sc[K.SC_KEYS], 1, 0)
                    IS[I_LAYER] = 0
                    IS[I_STAGE] = ST_LAYER
                    if PF[p, PF_DENSE] < 0:
                        continue
                    seconds, layer, kind, key, klass = PF[p, PF_DENSE], -1, SK_ATTENTION, -1, -1
                elif stage == ST_LAYER:
                    if IS[I_LAYER] == layers:
                        IS[I_STAGE] = ST_HEAD
                        continue
                    if drain and IS[I_ACTIVE_JOBS] > 0:  # copies on the compute stream
                        IS[I_IDLE], IS[I_AFTER], IS[I_STAGE] = 1, ST_LAYER, ST_DRAINED
                        FS[F_T0] = now
                        break
                    IS[I_STAGE] = ST_STEP
                    seconds, kind, key, klass = PF[p, PF_ATTN], SK_ATTENTION, -1, -1
                    layer = IS[I_LAYER]
                elif stage == ST_STEP:  # the router decides: LayerStep.layer
                    layer = IS[I_LAYER]
                    lo, hi = offsets[p * layers + layer], offsets[p * layers + layer + 1]
                    r = (p - p_lo) * layers + layer
                    planned = plan_offsets[r + 1] - plan_offsets[r]
                    IS[I_STAMP] += 1  # Decide: the position and demand set prefetches see
                    for i in range(lo, hi):
                        KR[KR_DEMANDED, keys[i]] = IS[I_STAMP]
                    IS[I_DEC_PASS], IS[I_DEC_LAYER] = p, layer
                    sc[K.SC_LAYER] = layer  # cache.begin_layer
                    if heaped and sc[K.SC_HEAP_N] + 2 * (hi - lo) + planned > S.shape[1]:
                        K.heap_compact(S)
                    IS[I_RETRY] = 0  # set while a key's reservation waits for space
                    if not pinned:
                        IS[I_ONE] = lo
                        IS[I_STAGE] = ST_ONE
                        continue
                    for i in range(lo, hi):
                        S[K.K_PINS, keys[i]] += 1
                    ready = 0
                    for i in range(lo, hi):  # classify the demand set
                        klass = _access(S, pos, keys[i], layer, p)
                        run_i[i - lo, 3] = klass  # (rows are filled below: classes apart)
                        held[i - lo] = keys[i]
                        if klass == K.HIT:
                            ready += 1
                    IS[I_ONE], IS[I_NREADY], IS[I_NWAIT] = lo, 0, ready
                    IS[I_STAGE] = ST_RESOLVE
                    continue
                elif stage == ST_RESOLVE:  # resolve the misses in gate order; hits run first
                    layer = IS[I_LAYER]
                    lo, hi = offsets[p * layers + layer], offsets[p * layers + layer + 1]
                    waits = False
                    while IS[I_ONE] < hi:
                        i = IS[I_ONE]
                        key, klass, seconds = keys[i], run_i[i - lo, 3], t_exp[i - t_base]
                        if klass == K.HIT:
                            _entry(run_i, run_t, JB, IS[I_NREADY], key, -1, klass, seconds)
                            IS[I_NREADY] += 1
                        else:
                            retry = IS[I_RETRY] == 1
                            job = _resolve(S, pos, KR, JB, jfree, IS, hT, hI, free, key, klass,
                                           p, layer, now, record, used_out, retry)  # fmt: skip
                            if job == -3:
                                IS[I_RETRY], IS[I_SPACE] = 1, 1
                                waits = True
                                break
                            IS[I_RETRY] = 0
                            _entry(run_i, run_t, JB, IS[I_NWAIT], key, job, klass, seconds)
                            IS[I_NWAIT] += 1
                        IS[I_ONE] = i + 1
                    if waits:
                        break
                    if prefetching:
                        r = (p - p_lo) * layers + layer
                        a, b = plan_offsets[r], plan_offsets[r + 1]
                        _plan(S, pos, KR, JB, jfree, IS, hT, hI, free, plan_keys, a, b, p, now,
                              record, used_out)  # fmt: skip
                    IS[I_NHELD] = IS[I_NRUN] = hi - lo
                    IS[I_IDX] = 0
                    IS[I_STAGE] = ST_RUN
                    continue
                elif stage == ST_ONE:  # one expert at a time: pin, access, resolve, run
                    layer = IS[I_LAYER]
                    i, hi = IS[I_ONE], offsets[p * layers + layer + 1]
                    if i == hi:
                        if prefetching:
                            r = (p - p_lo) * layers + layer
                            _plan(S, pos, KR, JB, jfree, IS, hT, hI, free, plan_keys,
                                  plan_offsets[r], plan_offsets[r + 1], p, now, record,
                                  used_out)  # fmt: skip
                        IS[I_LAYER] += 1
                        IS[I_STAGE] = ST_LAYER
                        continue
                    key = keys[i]
                    S[K.K_PINS, key] += 1
                    klass = _access(S, pos, key, layer, p)
                    run_i[0, 3] = klass
                    held[0] = key
                    IS[I_NHELD] = IS[I_NRUN] = 1
                    IS[I_IDX] = 0
                    if klass == K.HIT:
                        _entry(run_i, run_t, JB, 0, key, -1, klass, t_exp[i - t_base])
                        IS[I_STAGE] = ST_RUN
                    else:
                        IS[I_STAGE] = ST_ONE_RESOLVE
                    continue
                elif stage == ST_ONE_RESOLVE:
                    layer = IS[I_LAYER]
                    i = IS[I_ONE]
                    key, klass = keys[i], run_i[0, 3]
                    job = _resolve(S, pos, KR, JB, jfree, IS, hT, hI, free, key, klass, p,
                                   layer, now, record, used_out, IS[I_RETRY] == 1)  # fmt: skip
                    if job == -3:
                        IS[I_RETRY], IS[I_SPACE] = 1, 1
                        break
                    IS[I_RETRY] = 0
                    _entry(run_i, run_t, JB, 0, key, job, klass, t_exp[i - t_base])
                    IS[I_STAGE] = ST_RUN
                    continue
                elif ST_RUN <= stage <= ST_WAITED:
                    idx, layer = IS[I_IDX], IS[I_LAYER]
                    if stage == ST_RUN:
                        if idx == 0 and drain and IS[I_ACTIVE_JOBS] > 0:  # (as before attention)
                            IS[I_IDLE], IS[I_AFTER], IS[I_STAGE] = 1, ST_RUN, ST_DRAINED
                            FS[F_T0] = now
                            break
                        if idx == IS[I_NRUN]:  # done: the jobs let go, the pins released
                            for row in range(IS[I_NRUN]):
                                job = run_i[row, 1]
                                if job >= 0:
                                    JB[job, J_HELD] = 0
                                    if JB[job, J_RETIRED]:
                                        jfree[IS[I_JFREE]] = job
                                        IS[I_JFREE] += 1
                            for h in range(IS[I_NHELD]):
                                S[K.K_PINS, held[h]] -= 1
                            if pinned:
                                IS[I_LAYER] += 1
                                IS[I_STAGE] = ST_LAYER
                            else:
                                IS[I_ONE] += 1
                                IS[I_STAGE] = ST_ONE
                            continue
                        job = run_i[idx, 1]
                        if job >= 0 and not JB[job, J_DONE]:  # wait: a stall
                            JB[job, J_WAITER] = 1
                            FS[F_T0] = now
                            IS[I_STAGE] = ST_WAITED
                            break
                    else:
                        _stall(spF, spI, IS, FS, siv, TL, PI, lane, p, layer, run_i[idx, 0],
                               run_i[idx, 2], now, record)  # fmt: skip
                        IS[I_STAGE] = ST_RUN
                    IS[I_IDX] = idx + 1
                    seconds, kind, key, klass = run_t[idx], SK_EXPERT, run_i[idx, 0], run_i[idx, 2]
                elif stage == ST_DRAINED:  # the copies drained: a stall
                    _stall(spF, spI, IS, FS, siv, TL, PI, lane, p, IS[I_LAYER], -1, -1, now,
                           record)  # fmt: skip
                    IS[I_STAGE] = IS[I_AFTER]
                    continue
                elif stage == ST_HEAD:
                    IS[I_STAGE] = ST_END
                    if PF[p, PF_HEAD] < 0:
                        continue
                    seconds, layer, kind, key, klass = PF[p, PF_HEAD], -1, SK_LM_HEAD, -1, -1
                else:  # ST_END: tally.end_pass (the tokens are counted afterwards)
                    TP[p, TP_END] = now
                    TP[p, TP_COMPUTE] = FS[F_CSUM] - FS[F_BEFORE_C]
                    TP[p, TP_STALL] = FS[F_SSUM] - FS[F_BEFORE_S]
                    IS[I_PASS] = p + 1
                    IS[I_STAGE] = ST_PASS
                    continue
                # a kernel of `seconds` on the stream (GpuStream._compute), then wait for it
                end = now + seconds
                if record:
                    _span(spF, spI, IS, lane, kind, now, end, PI[p, PI_GLOBAL], layer, key, 0,
                          PI[p, PI_REQUEST], klass)  # fmt: skip
                if end > now:
                    n = IS[I_NCIV]
                    civ[n, 0], civ[n, 1] = now, end
                    IS[I_NCIV] = n + 1
                    FS[F_CSUM] += end - now
                if layer >= 0:
                    TL[TL_COMPUTE, layer] += seconds
                    TL[TL_PHASE_COMPUTE + IS[I_PHASE], layer] += seconds
                schedule(IS, hT, hI, end, NORMAL, EV_STREAM, 0)
                break
        # --- the next event ---------------------------------------------------------------
        if IS[I_HEAP_N] == 0:
            return OK if IS[I_STAGE] == ST_FINISHED else BLOCKED
        now = hT[0]
        kind, arg = hI[0, 2], hI[0, 3]
        _pop(IS, hT, hI)
        FS[F_NOW] = now
        if kind == EV_STREAM:
            resume = True
        elif kind == EV_COPY:  # CopyEngines._run, Fetcher._move_chunk
            job, slot = arg >> _SLOT_BITS, arg & ((1 << _SLOT_BITS) - 1)
            JB[job, J_SLOT], JB[job, J_STARTED] = slot, 1
            chunk = JB[job, J_LEFT]  # fetch.split: chunks of X_CHUNK bytes, the last shorter
            if X[X_CHUNK] > 0 and chunk > X[X_CHUNK]:
                chunk = X[X_CHUNK]
            JB[job, J_CHUNK] = chunk
            JB[job, J_LEFT] -= chunk
            FL[job, FL_START] = now
            IS[I_IN_FLIGHT] += chunk
            if IS[I_BUSY_ACTIVE] == 0:
                FS[F_BUSY_SINCE] = now
            IS[I_BUSY_ACTIVE] += 1
            if record:
                _sample(flight_out, IS, I_NFLIGHT, now, IS[I_IN_FLIGHT])
            IS[I_USED_PATH] = 1
            if latency > 0:
                schedule(IS, hT, hI, now + latency, NORMAL, EV_LATENCY, job)
            else:
                _begin(IS, FS, hT, hI, job, JB, FL, act, pres, fcap, NF, NI, R, bw_out, record)
        elif kind == EV_LATENCY:
            _begin(IS, FS, hT, hI, arg, JB, FL, act, pres, fcap, NF, NI, R, bw_out, record)
        elif kind == EV_ARM:
            if arg == IS[I_GEN]:
                schedule(IS, hT, hI, now + FS[F_DELAY], NORMAL, EV_WAKE, arg)
        elif kind == EV_WAKE:  # FlowNetwork._wake
            if arg != IS[I_GEN]:
                continue
            _advance(IS, FS, act, FL, pres, NF, NI, R, bw_out, record)
            FL[IS[I_FIRST], FL_REMAINING] = 0.0
            nact, kept = IS[I_NACT], 0
            for i in range(nact):
                f = act[i]
                if nact == 1 or FL[f, FL_REMAINING] <= _EPS * FL[f, FL_NBYTES]:
                    schedule(IS, hT, hI, now, NORMAL, EV_MOVED, f)
                else:
                    act[kept] = f
                    kept += 1
            IS[I_NACT] = kept
            if kept == 0 and record:
                _sample_bandwidth(IS, act, FL, pres, now, NF, NI, R, bw_out)
            _reschedule(IS, FS, hT, hI, act, FL, JB, pres, fcap, NF, NI, R)
        else:  # EV_MOVED: FlowNetwork._end, the fetcher's moved, CopyEngines._moved, _arrived
            job = arg
            for r in pres:
                NF[N_THROUGH, r] += FL[job, FL_NBYTES]
                NI[NI_THROUGH, r] = 1
            nbytes, slot, key = JB[job, J_CHUNK], JB[job, J_SLOT], JB[job, J_KEY]
            IS[I_IN_FLIGHT] -= nbytes
            IS[I_BUSY_ACTIVE] -= 1
            if IS[I_BUSY_ACTIVE] == 0 and now > FS[F_BUSY_SINCE]:
                n = IS[I_NTIV]
                tiv[n, 0], tiv[n, 1] = FS[F_BUSY_SINCE], now
                IS[I_NTIV] = n + 1
                FS[F_TSUM] += now - FS[F_BUSY_SINCE]
            engine_busy[slot] += now - FL[job, FL_START]
            engine_bytes[slot] += nbytes
            if record:
                _sample(flight_out, IS, I_NFLIGHT, now, IS[I_IN_FLIGHT])
                tp, kind = JB[job, J_PASS], SK_DEMAND_FETCH if JB[job, J_DEMAND] else SK_PREFETCH
                _span(spF, spI, IS, lanes[slot], kind, FL[job, FL_START], now, PI[tp, PI_GLOBAL],
                      JB[job, J_LAYER], key, nbytes, PI[tp, PI_REQUEST], -1)  # fmt: skip
            n = IS[I_NFREE]  # the slot is free again: free.append(slot); free.sort()
            free[n] = slot
            while n > 0 and free[n - 1] > free[n]:
                free[n - 1], free[n] = free[n], free[n - 1]
                n -= 1
            IS[I_NFREE] += 1
            if JB[job, J_LEFT] > 0:  # chunks left: back to the front of its class
                _enqueue(JB, job, 0 if JB[job, J_DEMAND] else 1, True)
                _dispatch(S, KR, JB, jfree, IS, hT, hI, free, now, record, used_out)
                continue
            if not JB[job, J_BYPASS]:  # del jobs[key]; cache.complete
                KR[KR_JOB, key] = -1
                S[K.K_STATE, key] = K.RESIDENT
                S[K.K_EVER, key] = 1
                if KR[KR_LOADPF, key]:
                    KR[KR_LOADPF, key] = 0
                    S[K.R_STATS, K.ST_PF_COMPLETED] += 1
                _space_changed(IS, hT, hI, now)
            JB[job, J_DONE] = 1  # settle(job.done)
            if JB[job, J_WAITER]:
                schedule(IS, hT, hI, now, NORMAL, EV_STREAM, 0)
            _retire(JB, jfree, IS, hT, hI, job, now)
            _dispatch(S, KR, JB, jfree, IS, hT, hI, free, now, record, used_out)
