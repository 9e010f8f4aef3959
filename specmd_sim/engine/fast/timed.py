"""The timing engine's compiled core.

:func:`run_block` is :func:`specmd_sim.engine.sim.run.simulate` written over flat arrays, for
every GPU of the run: each GPU's stream (:class:`~specmd_sim.engine.sim.stream.GpuStream`
and :class:`~specmd_sim.engine.layer.LayerStep` in both pin modes, with late hits, prefetch
plans and making room; with copies on the compute stream, the waits for them to drain), its
copy engines (:class:`~specmd_sim.engine.sim.copy_engines.CopyEngines`: two queues, promotion,
cancellation), its fetcher's callbacks (:class:`~specmd_sim.engine.sim.fetch.Fetcher`), its
cache (with :mod:`.kernel`'s policies; in expert-sharded mode its own shard always a hit) and
its tally; and the machine's flow network shared by them all, progressive filling over each
flow's path (:class:`~specmd_sim.engine.sim.flows.FlowNetwork`), with the spans and counters
they record. It keeps SimPy's event order — by time, then priority (*urgent* before
*normal*), then the order events were scheduled — and schedules an event wherever the Python
engine schedules one, with the same float operations, so its results are the Python engine's
bit for bit (``tests/engine/test_sim_compiled.py``).

With memory parity each eviction queues a write-back (a ring per GPU, ``WB``) for the GPU's
device-to-host copy engines; a write-back takes a job row only while one of its chunks moves.
An NVMe drive's capacity is its bandwidth at the reads outstanding on it (``DTAB``).

Which runs it covers (experts in host DRAM, on a drive or in a peer's HBM, the compiled
replay's policies, ...) is :func:`specmd_sim.engine.sim.compiled.compiled_unsupported`'s to say;
the Python engine stays the specification and the path for everything else.

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

Each GPU runs its passes a block at a time. When one GPU's stream is about to begin the pass
after its block, the call returns; the state arrays keep everything else (the other streams
where they wait, prefetches in flight), and the next call, with that GPU's next block, resumes
its stream at once; the last call also processes what is left after the last pass, as
``env.run()`` does. The streams start as SimPy starts their processes: an urgent event each at
time 0, in GPU order.

Jobs (a fetch on a GPU's copy engines; its flow has the job's number) live in one pool of rows
and go back to it once they ended or were cancelled and the stream no longer holds them (an
expert it runs keeps its job's ``done`` to look at): the jobs in flight are at most the experts
loading plus a layer's streamed ones, so the pool is bounded by the keys.
"""

from __future__ import annotations

import math

import numpy as np

from specmd_sim.engine.fast import kernel as K
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.jit import compiled

EV_STREAM, EV_COPY, EV_LATENCY, EV_ARM, EV_WAKE, EV_MOVED = range(6)
URGENT, NORMAL = 0, 1  # simpy.events.URGENT, NORMAL
_SLOT_BITS = 16  # an EV_COPY's argument: job << _SLOT_BITS | slot

# outcomes of run_block: done, a stream blocked, or REFILL + g: GPU g's block is used up
OK, BLOCKED, REFILL = 0, 1, 2

# the stream's stages (where its generator would resume)
(ST_PASS, ST_ADMITTED, ST_LAYER, ST_STEP, ST_RESOLVE, ST_ONE, ST_ONE_RESOLVE, ST_RUN, ST_WAITED,
 ST_HEAD, ST_END, ST_FINISHED, ST_DRAINED) = range(13)  # fmt: skip

# span kinds (specmd_sim.timeline.KINDS)
SK_ATTENTION, SK_EXPERT, SK_LM_HEAD, SK_STALL, SK_DEMAND_FETCH, SK_PREFETCH = range(6)
SK_WRITE_BACK = 7
LATE = 1  # AccessClass.LATE_HIT
LOADING = 1  # State.LOADING

# the run's int scalars (IG): the event heap, the flow network, the job pool, the outputs
(G_EID, G_GEN, G_COUNT, G_HEAP_N, G_NACT, G_FIRST, G_JFREE, G_NSPANS, G_NCIV, G_NSIV, G_NTIV,
 G_NUSED, G_NFLIGHT, G_NBW, G_RESUME, G_STARTED) = range(16)  # fmt: skip
G_SIZE = G_STARTED + 1
# the run's float scalars (FG)
FG_NOW, FG_NET_LAST, FG_DELAY = range(3)
FG_SIZE = FG_DELAY + 1
# each GPU's int scalars (IS rows): its stream, copy engines and transfers
(I_STAGE, I_PASS, I_LAYER, I_IDX, I_NRUN, I_ONE, I_RETRY, I_NREADY, I_NWAIT, I_IN_FLIGHT,
 I_BUSY_ACTIVE, I_NFREE, I_ACTIVE_JOBS, I_PHASE, I_NHELD, I_DEC_PASS, I_DEC_LAYER, I_STAMP,
 I_SPACE, I_IDLE, I_AFTER, I_NFREE2, I_ACTIVE2, I_IDLE2, I_WB_HEAD,
 I_WB_COUNT, I_SHARED, I_SBUSY) = range(28)  # fmt: skip
I_SIZE = I_SBUSY + 1  # (..2: the device-to-host copy engines of memory parity's write-backs;
# I_SHARED: copies on the compute stream, one moving at a time (OneStream), I_SBUSY: one moves)
# each GPU's float scalars (FS rows)
F_CSUM, F_SSUM, F_BEFORE_C, F_BEFORE_S, F_T0, F_BUSY_SINCE, F_TSUM = range(7)
F_SIZE = F_TSUM + 1
# static ints (X)
X_LAYERS, X_PINNED, X_RECORD, X_PREFETCHING, X_DRAIN, X_CHUNK, X_GPUS = range(7)
X_SIZE = X_GPUS + 1
# each GPU's block (B rows): where its keys and offsets start in the run's arrays, its first
# pass's number, its passes; the block's passes, where its expert times start (the access and
# the index in the times) and its plans (offsets, keys); its compute lane and its queues' rows
(B_KEY0, B_OFF0, B_PASS0, B_NPASS, B_LO, B_HI, B_T0, B_TOFF, B_POFF, B_PKOFF, B_LANE,
 B_QB, B_WB_PATH) = range(13)  # fmt: skip
B_SIZE = B_WB_PATH + 1  # (B_WB_PATH: the path of its write-backs, -1: no memory parity)
# per pass, rows from each GPU's B_PASS0 (PF floats, PI ints)
PF_ATTN, PF_DENSE, PF_HEAD, PF_WAIT = range(4)  # PF_DENSE, PF_HEAD < 0: none
PI_PHASE, PI_REQUEST = range(2)
# per job (JB rows; after the pool, each GPU's two queues' heads and tails)
(J_KEY, J_BYPASS, J_PASS, J_LAYER, J_DONE, J_WAITER, J_SLOT, J_NBYTES, J_DEMAND, J_STARTED,
 J_QUEUE, J_HELD, J_RETIRED, J_LEFT, J_CHUNK, J_GPU, J_PATH, J_DEPTH, J_BACK, J_PREV, J_NEXT,
 J_ORDER) = range(22)  # fmt: skip
J_COLUMNS = 22  # (J_DEPTH: the reads its chunk keeps outstanding on a drive; J_BACK: a write-back)
# a queued write-back (WB rows, a ring per GPU): its key, pass, layer and bytes not yet copied
WB_KEY, WB_PASS, WB_LAYER, WB_LEFT = range(4)
FL_NBYTES, FL_REMAINING, FL_RATE, FL_START = range(4)  # per job's flow (FL)
# per GPU and key (KR rows): its job (-1: none), LOADING for a prefetch, the Decide that
# demanded it, in the GPU's own shard, the path it is fetched by (the run's path number)
KR_JOB, KR_LOADPF, KR_DEMANDED, KR_HOME, KR_PATH = range(5)
KR_ROWS = 5
# the network's per-resource rows (NF floats, NI ints; the flows' private rate caps after the
# resources, one column per active flow); NI_DYN: an NVMe drive, whose capacity depends on the
# reads outstanding on it (NI_DEPTH)
N_CAP, N_THROUGH, N_BUSY, N_CARRIED, N_LAST, N_RESIDUAL = range(6)
NI_THROUGH, NI_BUSY, NI_HAS, NI_LAST_HAS, NI_USERS, NI_FROZEN, NI_MARK, NI_DYN, NI_DEPTH = range(9)
# per GPU and layer sums (TL rows)
TL_STALL, TL_COMPUTE, TL_PHASE_COMPUTE, TL_PHASE_STALL = 0, 1, 2, 4  # the phase rows: + phase
# per pass times (TP columns)
TP_START, TP_END, TP_COMPUTE, TP_STALL = range(4)

_EPS = 1e-12  # flows.py's: a flow within this fraction of its size is done


def new_state(
    gpus: int, keys: int, jobs: int, engines: int, resources: int, run_rows: int, backs: int
) -> dict[str, np.ndarray]:
    """The arrays that live from block to block: scalars, the event heap, the job pool and each
    GPU's queues, each GPU's keys' rows, the network's rows and each stream's lists; ``backs``:
    each GPU's device-to-host copy engines (memory parity's write-backs), whose queue is a ring
    (``WB``, grown between calls by :func:`grow_write_backs`)."""
    IS = np.zeros((gpus, I_SIZE), np.int64)
    IS[:, I_NFREE], IS[:, I_STAGE], IS[:, I_NFREE2] = engines, ST_PASS, backs
    IS[:, I_DEC_PASS] = IS[:, I_DEC_LAYER] = -1
    IG = np.zeros(G_SIZE, np.int64)
    IG[G_JFREE], IG[G_RESUME] = jobs, -1
    JB = np.zeros((jobs + 4 * gpus, J_COLUMNS), np.int64)
    for q in range(2 * gpus):  # empty queues: head <-> tail
        JB[jobs + 2 * q, J_NEXT], JB[jobs + 2 * q + 1, J_PREV] = jobs + 2 * q + 1, jobs + 2 * q
    KR = np.zeros((gpus, KR_ROWS, keys), np.int64)
    KR[:, KR_JOB], KR[:, KR_DEMANDED] = -1, -1
    width = resources + gpus * (engines + backs) + 1  # (a flow per slot at most)
    return {
        "IG": IG, "FG": np.zeros(FG_SIZE), "IS": IS, "FS": np.zeros((gpus, F_SIZE)),
        "hT": np.zeros(1 << 14), "hI": np.zeros((1 << 14, 4), np.int64), "JB": JB,
        "FL": np.zeros((jobs, 4)), "jfree": np.arange(jobs - 1, -1, -1, dtype=np.int64),
        "KR": KR, "free": np.tile(np.arange(engines, dtype=np.int64), (gpus, 1)),
        "act": np.zeros(gpus * (engines + backs) + 1, np.int64),
        "NF": np.zeros((6, width)), "NI": np.zeros((9, width), np.int64),
        "run_i": np.zeros((gpus, run_rows, 4), np.int64), "run_t": np.zeros((gpus, run_rows)),
        "held": np.zeros((gpus, run_rows), np.int64),
        "free_back": np.tile(np.arange(backs, dtype=np.int64), (gpus, 1)),
        "WB": np.zeros((gpus, 64, 4), np.int64),
    }  # fmt: skip


def grow_write_backs(st: dict[str, np.ndarray], room: int) -> None:
    """Make each GPU's ring of queued write-backs hold ``room`` more than it holds (each
    queue's entries moved to its start, in order)."""
    WB, IS = st["WB"], st["IS"]
    need = int(IS[:, I_WB_COUNT].max()) + room
    if need <= WB.shape[1]:
        return
    grown = np.zeros((WB.shape[0], max(need, 2 * WB.shape[1]), 4), np.int64)
    for g in range(WB.shape[0]):
        order = (IS[g, I_WB_HEAD] + np.arange(IS[g, I_WB_COUNT])) % WB.shape[1]
        grown[g, : order.size] = WB[g, order]
    IS[:, I_WB_HEAD] = 0
    st["WB"] = grown


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
def schedule(IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, time: float, prio: int, kind: int,
             arg: int) -> None:  # fmt: skip
    """Push an event, numbered after every event scheduled before it."""
    i = IG[G_HEAP_N]
    if i == hT.size:
        raise RuntimeError("timing engine: more events pending at once than the heap holds")
    IG[G_HEAP_N] = i + 1
    hT[i] = time
    hI[i, 0], hI[i, 1], hI[i, 2], hI[i, 3] = prio, IG[G_EID], kind, arg
    IG[G_EID] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(hT, hI, i, parent):
            break
        _swap(hT, hI, i, parent)
        i = parent


@compiled
def _pop(IG: np.ndarray, hT: np.ndarray, hI: np.ndarray) -> None:
    size = IG[G_HEAP_N] - 1
    IG[G_HEAP_N] = size
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
def _sample(out: np.ndarray, IG: np.ndarray, counter: int, time: float, value: float,
            g: int) -> None:  # fmt: skip
    n = IG[counter]
    out[n, 0], out[n, 1], out[n, 2] = time, value, g
    IG[counter] = n + 1


@compiled
def _access(S: np.ndarray, after: np.ndarray, KR: np.ndarray, key: int, layer: int, p: int) -> int:
    """ExpertCache.access."""
    sc = S[L.R_SC]
    policy = sc[L.SC_POLICY]
    K.advance(S, after, key)
    state = S[L.K_STATE, key]
    if KR[KR_HOME, key]:
        S[L.R_STATS, L.ST_HITS_HOME] += 1
        klass = L.HIT
    elif state != L.ABSENT:
        klass = L.HIT if state == L.RESIDENT else LATE
        if S[L.K_UNUSED, key]:
            S[L.K_UNUSED, key] = 0
            S[L.R_STATS, L.ST_PF_USED] += 1
        if policy == L.LRU:
            K.list_remove(S, key)
            K.list_append(S, sc[L.SC_KEYS], 0, key)
        elif policy == L.LFU or policy >= L.BELADY:
            K.heap_update(S, key, S[L.K_FREQ, key] + 1)
        elif policy >= L.LS_FIFO:
            K.touch(S, key)
    elif not S[L.K_EVER, key]:
        klass = L.COMPULSORY
    elif S[L.K_EVICTED, key] == p:
        klass = L.COLLISION
    else:
        klass = L.CAPACITY
    S[L.R_BY_LAYER + klass, layer] += 1
    return klass


@compiled
def _victim(S: np.ndarray) -> int:
    sc = S[L.R_SC]
    policy, n = sc[L.SC_POLICY], sc[L.SC_KEYS]
    if policy == L.FIFO or policy == L.LRU:
        return K.first_evictable(S, n, 0)
    if policy == L.LFU or policy >= L.BELADY:
        return K.heap_victim(S)
    for q in range(2):  # Least-Stale: stale first, then current
        victim = K.pick_by_layer(S, n, q) if policy == L.LS_LAYER else K.first_evictable(S, n, q)
        if victim >= 0:
            return victim
    return -1


@compiled
def _on_remove(S: np.ndarray, key: int) -> None:
    policy = S[L.R_SC, L.SC_POLICY]
    if policy == L.LFU or policy >= L.BELADY:
        K.heap_remove(S, key)
    else:
        K.list_remove(S, key)
        S[L.K_TOUCHED, key] = L.OUTSIDE


@compiled
def _reserve(S: np.ndarray, KR: np.ndarray, key: int, prefetch: bool, p: int,
             now: float, record: bool, used_out: np.ndarray, IG: np.ndarray, IS: np.ndarray,
             WB: np.ndarray, g: int) -> bool:  # fmt: skip
    """ExpertCache.reserve: evict until it fits, then LOADING (False: not admitted, or nothing
    is evictable). Occupancy samples as the fetcher's hook takes them; with memory parity each
    eviction queues its write-back (``WriteBacks.submit``; :func:`_dispatch_back` starts it)."""
    sc = S[L.R_SC]
    policy = sc[L.SC_POLICY]
    need = S[L.K_NBYTES, key]
    if prefetch and (policy == L.BELADY_BYPASS and sc[L.SC_CAPACITY] - sc[L.SC_USED] < need
                     and not K.bypass_admits(S, key)):  # fmt: skip
        S[L.R_STATS, L.ST_PF_DROPPED] += 1
        return False
    while sc[L.SC_CAPACITY] - sc[L.SC_USED] < need:
        victim = _victim(S)
        if victim < 0:
            if prefetch:
                S[L.R_STATS, L.ST_PF_DROPPED] += 1
            return False
        S[L.K_STATE, victim] = L.ABSENT  # ExpertCache._evict
        sc[L.SC_USED] -= S[L.K_NBYTES, victim]
        if record:
            _sample(used_out, IG, G_NUSED, now, sc[L.SC_USED], g)
        S[L.K_EVICTED, victim] = p
        S[L.R_STATS, L.ST_EVICTIONS] += 1
        if sc[L.SC_WRITE_BACK]:
            nbytes = S[L.K_NBYTES, victim]
            S[L.R_STATS, L.ST_BYTES_WRITTEN_BACK] += nbytes
            IS[I_ACTIVE2] += 1
            w = (IS[I_WB_HEAD] + IS[I_WB_COUNT]) % WB.shape[0]
            WB[w, WB_KEY], WB[w, WB_PASS] = victim, sc[L.SC_PASS]
            WB[w, WB_LAYER], WB[w, WB_LEFT] = victim // sc[L.SC_NUM_EXPERTS], nbytes
            IS[I_WB_COUNT] += 1
        if S[L.K_UNUSED, victim]:
            S[L.K_UNUSED, victim] = 0
            S[L.R_STATS, L.ST_PF_WASTED] += 1
        _on_remove(S, victim)
    S[L.K_STATE, key] = LOADING
    sc[L.SC_USED] += need
    if record:
        _sample(used_out, IG, G_NUSED, now, sc[L.SC_USED], g)
    KR[KR_LOADPF, key] = prefetch
    if prefetch:
        S[L.K_UNUSED, key] = 1
        S[L.R_STATS, L.ST_PF_ISSUED] += 1
        S[L.R_STATS, L.ST_BYTES_PREFETCH] += need
    else:
        S[L.R_STATS, L.ST_BYTES_DEMAND] += need
    K.on_insert(S, key, L.PREFETCH if prefetch else L.DEMAND)
    return True


@compiled
def _space_changed(IS: np.ndarray, IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, now: float,
                   g: int) -> None:  # fmt: skip
    """The fetcher's cache listener: the stream waiting for space (make_room) resumes."""
    if IS[I_SPACE]:
        IS[I_SPACE] = 0
        schedule(IG, hT, hI, now, NORMAL, EV_STREAM, g)


@compiled
def _cancel(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
            IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, job: int, now: float, record: bool,
            used_out: np.ndarray, g: int) -> None:  # fmt: skip
    """Fetcher._cancelled and the job's retirement: an unstarted prefetch abandoned."""
    key = JB[job, J_KEY]
    KR[KR_JOB, key] = -1
    if not S[L.K_UNUSED, key]:  # ExpertCache.cancel
        S[L.R_STATS, L.ST_PF_USED] -= 1
    S[L.K_STATE, key] = L.ABSENT
    S[L.R_SC, L.SC_USED] -= S[L.K_NBYTES, key]
    if record:
        _sample(used_out, IG, G_NUSED, now, S[L.R_SC, L.SC_USED], g)
    S[L.R_STATS, L.ST_BYTES_PREFETCH] -= S[L.K_NBYTES, key]
    S[L.R_STATS, L.ST_PF_CANCELLED] += 1
    S[L.K_UNUSED, key] = 0
    KR[KR_LOADPF, key] = 0
    _on_remove(S, key)
    _space_changed(IS, IG, hT, hI, now, g)
    JB[job, J_DONE] = 1  # settle(job.done): nothing waits on a prefetch
    _retire(JB, jfree, IS, IG, hT, hI, job, now, g)


@compiled
def _retire(JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray, IG: np.ndarray, hT: np.ndarray,
            hI: np.ndarray, job: int, now: float, g: int) -> None:  # fmt: skip
    """CopyEngines._retired (the stream waiting for the copies to drain resumes once none is
    left); the job's row goes back to the pool unless the stream holds it."""
    IS[I_ACTIVE_JOBS] -= 1
    if IS[I_ACTIVE_JOBS] == 0 and IS[I_IDLE]:
        IS[I_IDLE] = 0
        schedule(IG, hT, hI, now, NORMAL, EV_STREAM, g)
    JB[job, J_RETIRED] = 1
    if not JB[job, J_HELD]:
        jfree[IG[G_JFREE]] = job
        IG[G_JFREE] += 1


# --- the copy engines -----------------------------------------------------------------------------


@compiled
def _start(IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, IS: np.ndarray, free: np.ndarray,
           count: int, job: int, now: float) -> None:  # fmt: skip
    """``soon(_run)``: the job's chunk starts on the lowest free slot (``free``, ``IS[count]``
    of them)."""
    slot = free[0]
    n = IS[count] - 1
    for i in range(n):
        free[i] = free[i + 1]
    IS[count] = n
    if IS[I_SHARED]:
        IS[I_SBUSY] = 1
    schedule(IG, hT, hI, now, URGENT, EV_COPY, (job << _SLOT_BITS) | slot)


@compiled
def _take_job(JB: np.ndarray, jfree: np.ndarray, IG: np.ndarray) -> int:
    """A row from the pool, its columns before the queue links cleared."""
    if IG[G_JFREE] == 0:
        raise RuntimeError("timing engine: more jobs in flight than the pool holds")
    IG[G_JFREE] -= 1
    job = jfree[IG[G_JFREE]]
    for c in range(J_PREV):
        JB[job, c] = 0
    return job


@compiled
def _new_job(JB: np.ndarray, jfree: np.ndarray, IG: np.ndarray, KR: np.ndarray, key: int,
             nbytes: int, demand: bool, bypass: bool, p: int, layer: int,
             g: int) -> int:  # fmt: skip
    job = _take_job(JB, jfree, IG)
    JB[job, J_KEY], JB[job, J_BYPASS], JB[job, J_PASS], JB[job, J_LAYER] = key, bypass, p, layer
    JB[job, J_NBYTES], JB[job, J_DEMAND], JB[job, J_QUEUE] = nbytes, demand, -1
    JB[job, J_LEFT] = nbytes  # bytes of chunks not yet started
    JB[job, J_GPU], JB[job, J_PATH] = g, KR[KR_PATH, key]
    return job


@compiled
def _enqueue(JB: np.ndarray, qb: int, job: int, q: int, front: bool = False) -> None:
    """Into queue ``q`` (0: demand, 1: prefetch; its rows from ``qb``) at its end, or its
    front."""
    if front:
        before = qb + 2 * q
        after = JB[before, J_NEXT]
    else:
        after = qb + 2 * q + 1
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
    return reached and S[L.K_PINS, key] == 0 and KR[KR_DEMANDED, key] != IS[I_STAMP]


@compiled
def _dispatch(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
              IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray, qb: int,
              now: float, record: bool, used_out: np.ndarray, g: int) -> None:  # fmt: skip
    """CopyEngines._dispatch: demand jobs first, then prefetches (an obsolete one cancelled),
    to free slots, the lowest first (one at a time when on the compute stream)."""
    while IS[I_NFREE] > 0 and not IS[I_SBUSY]:
        job = JB[qb, J_NEXT]  # the demand queue's first
        if job >= qb:
            job = JB[qb + 2, J_NEXT]
            if job >= qb:
                return
        _dequeue(JB, job)
        if not JB[job, J_STARTED] and not JB[job, J_DEMAND] and _obsolete(S, KR, JB, IS, job):
            _cancel(S, KR, JB, jfree, IS, IG, hT, hI, job, now, record, used_out, g)
            continue
        _start(IG, hT, hI, IS, free, I_NFREE, job, now)


@compiled
def _submit(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
            IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray, qb: int, job: int,
            now: float, record: bool, used_out: np.ndarray, g: int) -> None:  # fmt: skip
    """CopyEngines.submit."""
    IS[I_ACTIVE_JOBS] += 1
    _enqueue(JB, qb, job, 0 if JB[job, J_DEMAND] else 1)
    _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, used_out, g)


@compiled
def _make_room(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
               IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, qb: int, now: float, record: bool,
               used_out: np.ndarray, g: int) -> bool:  # fmt: skip
    """Fetcher.make_room's first part: cancel the newest queued prefetch that the layer now
    running does not hold (False: none)."""
    job = JB[qb + 3, J_PREV]  # the prefetch queue's last
    while job < qb:
        before = JB[job, J_PREV]
        key = JB[job, J_KEY]
        if not JB[job, J_STARTED] and S[L.K_PINS, key] == 0 and KR[KR_DEMANDED, key] != IS[I_STAMP]:
            _dequeue(JB, job)
            _cancel(S, KR, JB, jfree, IS, IG, hT, hI, job, now, record, used_out, g)
            return True
        job = before
    return False


@compiled
def _dispatch_back(JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray, IG: np.ndarray,
                   hT: np.ndarray, hI: np.ndarray, free_back: np.ndarray, WB: np.ndarray,
                   path: int, now: float, g: int) -> None:  # fmt: skip
    """The write-backs' CopyEngines._dispatch: queued write-backs (FIFO, never cancelled) to
    free device-to-host slots, the lowest first; a job row each while its chunk moves."""
    while IS[I_NFREE2] > 0 and IS[I_WB_COUNT] > 0 and not IS[I_SBUSY]:
        w = IS[I_WB_HEAD]
        IS[I_WB_HEAD] = (w + 1) % WB.shape[0]
        IS[I_WB_COUNT] -= 1
        job = _take_job(JB, jfree, IG)
        JB[job, J_KEY], JB[job, J_PASS] = WB[w, WB_KEY], WB[w, WB_PASS]
        JB[job, J_LAYER] = WB[w, WB_LAYER]
        JB[job, J_LEFT], JB[job, J_DEMAND], JB[job, J_QUEUE] = WB[w, WB_LEFT], 1, -1
        JB[job, J_GPU], JB[job, J_PATH], JB[job, J_BACK] = g, path, 1
        _start(IG, hT, hI, IS, free_back, I_NFREE2, job, now)


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
    IG: np.ndarray, act: np.ndarray, FL: np.ndarray, JB: np.ndarray, PR: np.ndarray,
    PL: np.ndarray, PCAP: np.ndarray, NF: np.ndarray, NI: np.ndarray, R: int, DTAB: np.ndarray,
) -> None:  # fmt: skip
    """FlowNetwork._rates: every active flow's rate, by progressive filling over the resources
    of its path (``PR[path, :PL[path]]``) and, where the path's ``PCAP`` is >= 0, a private
    resource of that capacity; a drive's capacity is ``DTAB`` at the reads outstanding on it
    (``NVMeNode.read_bandwidth``, capped at the table's last depth)."""
    nact = IG[G_NACT]
    cap, residual, users, frozen = NF[N_CAP], NF[N_RESIDUAL], NI[NI_USERS], NI[NI_FROZEN]
    dyn, depth = NI[NI_DYN], NI[NI_DEPTH]
    alone = nact == 1
    if alone:
        path = JB[act[0], J_PATH]
        for j in range(PL[path]):
            if dyn[PR[path, j]]:
                alone = False  # (_rate_alone: None, filled)
    if alone:  # the rate of a flow alone: its narrowest resource's
        path = JB[act[0], J_PATH]
        rate = cap[PR[path, 0]]
        for i in range(1, PL[path]):
            if cap[PR[path, i]] < rate:
                rate = cap[PR[path, i]]
        if PCAP[path] >= 0 and PCAP[path] < rate:
            rate = PCAP[path]
        FL[act[0], FL_RATE] = rate
        return
    for r in range(R + nact):
        users[r] = 0
        depth[r] = 0
    drives = False
    for i in range(nact):
        path = JB[act[i], J_PATH]
        for j in range(PL[path]):
            r = PR[path, j]
            users[r] += 1
            residual[r] = cap[r]
            if dyn[r]:
                depth[r] += JB[act[i], J_DEPTH]
                drives = True
        if PCAP[path] >= 0:
            users[R + i] = 1
            residual[R + i] = PCAP[path]
        frozen[i] = 0
    if drives:
        for r in range(R):
            if dyn[r] and users[r] > 0:
                residual[r] = DTAB[min(max(depth[r], 1), DTAB.size - 1)]
    left = nact
    while left > 0:
        best, share = -1, 0.0
        for r in range(R + nact):
            if users[r] == 0:
                continue
            s = residual[r] / users[r]
            if best < 0 or s < share:
                best, share = r, s
            elif s == share:  # ties: the lowest name (the paths' sort before ~flow<n>)
                if r >= R and best >= R:
                    if _private_less(JB[act[r - R], J_ORDER], JB[act[best - R], J_ORDER]):
                        best = r
                elif r < best:
                    best = r
        for i in range(nact):
            if frozen[i]:
                continue
            path = JB[act[i], J_PATH]
            uses = best == R + i
            if not uses and best < R:
                for j in range(PL[path]):
                    if PR[path, j] == best:
                        uses = True
            if not uses:
                continue
            FL[act[i], FL_RATE] = share
            frozen[i] = 1
            left -= 1
            for j in range(PL[path]):
                r = PR[path, j]
                residual[r] -= share
                users[r] -= 1
            if PCAP[path] >= 0:
                residual[R + i] -= share
                users[R + i] -= 1


@compiled
def _sample_bandwidth(IG: np.ndarray, act: np.ndarray, FL: np.ndarray, JB: np.ndarray,
                      PR: np.ndarray, PL: np.ndarray, at: float, NF: np.ndarray, NI: np.ndarray,
                      R: int, bw_out: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._sample_bandwidth: a sample per resource whose bandwidth in use changed."""
    nact = IG[G_NACT]
    carried, has, last, last_has = NF[N_CARRIED], NI[NI_HAS], NF[N_LAST], NI[NI_LAST_HAS]
    for r in range(R):
        carried[r], has[r] = 0.0, 0
    for i in range(nact):  # the flows' rates summed per resource, in the flows' order
        rate, path = FL[act[i], FL_RATE], JB[act[i], J_PATH]
        for j in range(PL[path]):
            r = PR[path, j]
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
            n = IG[G_NBW]
            bw_out[n, 0], bw_out[n, 1] = r, at
            bw_out[n, 2] = carried[r] if has[r] else 0.0
            IG[G_NBW] = n + 1
        last[r], last_has[r] = carried[r], has[r]


@compiled
def _advance(IG: np.ndarray, FG: np.ndarray, act: np.ndarray, FL: np.ndarray, JB: np.ndarray,
             PR: np.ndarray, PL: np.ndarray, NF: np.ndarray, NI: np.ndarray, R: int,
             bw_out: np.ndarray, record: bool) -> None:  # fmt: skip
    """FlowNetwork._advance: the flows' bytes moved since the last change, and busy time (once
    per resource any flow moves over)."""
    now = FG[FG_NOW]
    dt = now - FG[FG_NET_LAST]
    if dt > 0:
        nact = IG[G_NACT]
        mark = NI[NI_MARK]
        if nact > 1:
            for r in range(R):
                mark[r] = 0
        for i in range(nact):
            f = act[i]
            FL[f, FL_REMAINING] -= FL[f, FL_RATE] * dt
            path = JB[f, J_PATH]
            for j in range(PL[path]):
                r = PR[path, j]
                if nact == 1 or not mark[r]:
                    mark[r] = 1
                    NF[N_BUSY, r] += dt
                    NI[NI_BUSY, r] = 1
        if record:
            _sample_bandwidth(IG, act, FL, JB, PR, PL, FG[FG_NET_LAST], NF, NI, R, bw_out)
    FG[FG_NET_LAST] = now


@compiled
def _reschedule(IG: np.ndarray, FG: np.ndarray, hT: np.ndarray, hI: np.ndarray, act: np.ndarray,
                FL: np.ndarray, JB: np.ndarray, PR: np.ndarray, PL: np.ndarray, PCAP: np.ndarray,
                NF: np.ndarray, NI: np.ndarray, R: int, DTAB: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._reschedule: new rates, and a wake-up armed for the first flow to end."""
    IG[G_GEN] += 1
    nact = IG[G_NACT]
    if nact == 0:
        return
    _rates(IG, act, FL, JB, PR, PL, PCAP, NF, NI, R, DTAB)
    first = act[0]
    first_t = FL[first, FL_REMAINING] / FL[first, FL_RATE]
    for i in range(nact):
        f = act[i]
        t = FL[f, FL_REMAINING] / FL[f, FL_RATE]
        if t < first_t or (t == first_t and JB[f, J_ORDER] < JB[first, J_ORDER]):
            first, first_t = f, t
    IG[G_FIRST] = first
    FG[FG_DELAY] = max(first_t, 0.0)
    schedule(IG, hT, hI, FG[FG_NOW], URGENT, EV_ARM, IG[G_GEN])


@compiled
def _begin(IG: np.ndarray, FG: np.ndarray, hT: np.ndarray, hI: np.ndarray, job: int,
           JB: np.ndarray, FL: np.ndarray, act: np.ndarray, PR: np.ndarray, PL: np.ndarray,
           PCAP: np.ndarray, NF: np.ndarray, NI: np.ndarray, R: int, bw_out: np.ndarray,
           record: bool, DTAB: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._begin: a flow of the job's bytes starts moving."""
    _advance(IG, FG, act, FL, JB, PR, PL, NF, NI, R, bw_out, record)
    IG[G_COUNT] += 1
    nbytes = float(JB[job, J_CHUNK])
    FL[job, FL_NBYTES], FL[job, FL_REMAINING], FL[job, FL_RATE] = nbytes, nbytes, 0.0
    JB[job, J_ORDER] = IG[G_COUNT]
    act[IG[G_NACT]] = job
    IG[G_NACT] += 1
    _reschedule(IG, FG, hT, hI, act, FL, JB, PR, PL, PCAP, NF, NI, R, DTAB)


# --- the layer step ---------------------------------------------------------------------------


@compiled
def _resolve(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray,
             IS: np.ndarray, IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray,
             qb: int, key: int, klass: int, p: int, layer: int, now: float, record: bool,
             used_out: np.ndarray, retry: bool, free_back: np.ndarray, WB: np.ndarray,
             back: int, g: int) -> int:  # fmt: skip
    """LayerStep._fetch of a demanded, non-resident key: its job; -1 where it is resident after
    all (a late hit whose transfer ended meanwhile); -3 where nothing is evictable and no queued
    prefetch can be cancelled: the stream waits for space, then retries the reservation
    (``retry``: the policy's admission is not asked again)."""
    if klass == LATE:
        if S[L.K_STATE, key] == L.RESIDENT:
            return -1
        job = KR[KR_JOB, key]
        if not JB[job, J_DEMAND]:  # Fetcher.join: CopyEngines.promote
            JB[job, J_DEMAND] = 1
            if JB[job, J_QUEUE] == 1:
                _dequeue(JB, job)
                _enqueue(JB, qb, job, 0)
                _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, used_out, g)
        return job
    sc = S[L.R_SC]
    need = S[L.K_NBYTES, key]
    if not retry and (sc[L.SC_POLICY] == L.BELADY_BYPASS and sc[L.SC_CAPACITY] - sc[L.SC_USED]
                      < need and not K.bypass_admits(S, key)):  # fmt: skip
        S[L.R_STATS, L.ST_BYPASSED] += 1  # cache.stream
        S[L.R_STATS, L.ST_BYTES_DEMAND] += need
        job = _new_job(JB, jfree, IG, KR, key, need, True, True, p, layer, g)
        _submit(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, job, now, record, used_out, g)
        return job
    while True:
        reserved = _reserve(S, KR, key, False, p, now, record, used_out, IG, IS, WB, g)
        if back >= 0:  # the write-backs of its evictions start
            _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, g)
        if reserved:
            break
        if not _make_room(S, KR, JB, jfree, IS, IG, hT, hI, qb, now, record, used_out, g):
            return -3
    job = _new_job(JB, jfree, IG, KR, key, need, True, False, p, layer, g)
    KR[KR_JOB, key] = job
    _submit(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, job, now, record, used_out, g)
    return job


@compiled
def _plan(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray,
          IS: np.ndarray, IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray,
          qb: int, plan_keys: np.ndarray, lo: int, hi: int, p: int, now: float, record: bool,
          used_out: np.ndarray, free_back: np.ndarray, WB: np.ndarray, back: int,
          g: int) -> None:  # fmt: skip
    """LayerStep._plan_prefetches: cached keys of the plan are hints (Least-Stale counts
    them; the GPU's own shard is no hint), absent ones are fetched in plan order unless the
    cache drops them."""
    sc = S[L.R_SC]
    least_stale = L.LS_FIFO <= sc[L.SC_POLICY] <= L.LS_LAYER
    for i in range(lo, hi):
        key = plan_keys[i]
        if S[L.K_STATE, key] != L.ABSENT:
            if least_stale and not KR[KR_HOME, key]:
                K.touch(S, key)
        else:
            reserved = _reserve(S, KR, key, True, p, now, record, used_out, IG, IS, WB, g)
            if back >= 0:
                _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, g)
            if not reserved:
                continue
            layer = key // sc[L.SC_NUM_EXPERTS]
            job = _new_job(JB, jfree, IG, KR, key, S[L.K_NBYTES, key], False, False, p, layer, g)
            KR[KR_JOB, key] = job
            _submit(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, job, now, record, used_out, g)


@compiled
def _span(spF: np.ndarray, spI: np.ndarray, IG: np.ndarray, lane: int, kind: int, start: float,
          end: float, pass_: int, layer: int, expert: int, nbytes: int, request: int,
          klass: int) -> None:  # fmt: skip
    n = IG[G_NSPANS]
    spF[n, 0], spF[n, 1] = start, end
    spI[n, 0], spI[n, 1], spI[n, 2], spI[n, 3] = lane, kind, pass_, layer
    spI[n, 4], spI[n, 5], spI[n, 6], spI[n, 7] = expert, nbytes, request, klass
    IG[G_NSPANS] = n + 1


@compiled
def _interval(out: np.ndarray, IG: np.ndarray, counter: int, start: float, end: float,
              g: int) -> None:  # fmt: skip
    n = IG[counter]
    out[n, 0], out[n, 1], out[n, 2] = start, end, g
    IG[counter] = n + 1


@compiled
def _stall(spF: np.ndarray, spI: np.ndarray, IG: np.ndarray, IS: np.ndarray, FS: np.ndarray,
           siv: np.ndarray, TL: np.ndarray, PI: np.ndarray, lane: int, row: int, layer: int,
           key: int, klass: int, now: float, record: bool, g: int) -> None:  # fmt: skip
    """GpuStream._wait's end: the wait since ``FS[F_T0]`` is a stall (span and tally; ``row``:
    the pass's row in ``PI``, its number in the spans)."""
    t0, phase = FS[F_T0], IS[I_PHASE]
    if record:
        _span(spF, spI, IG, lane, SK_STALL, t0, now, row, layer, key, 0, PI[row, PI_REQUEST],
              klass)  # fmt: skip
    if now > t0:
        _interval(siv, IG, G_NSIV, t0, now, g)
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


@compiled
def _views(
    g: int, S3: np.ndarray, after2: np.ndarray, KR3: np.ndarray, IS2: np.ndarray,
    FS2: np.ndarray, free2: np.ndarray, run_i3: np.ndarray, run_t2: np.ndarray,
    held2: np.ndarray, TL3: np.ndarray, free_back2: np.ndarray, WB3: np.ndarray,
) -> tuple[np.ndarray, ...]:  # fmt: skip
    """GPU ``g``'s arrays."""
    return (S3[g], after2[g], KR3[g], IS2[g], FS2[g], free2[g], run_i3[g], run_t2[g], held2[g],
            TL3[g], free_back2[g], WB3[g])  # fmt: skip


@compiled
def _written_back(JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray, IG: np.ndarray,
                  hT: np.ndarray, hI: np.ndarray, free_back: np.ndarray, WB: np.ndarray,
                  FL: np.ndarray, PI: np.ndarray, B: np.ndarray, spF: np.ndarray,
                  spI: np.ndarray, back_lanes2: np.ndarray, back_busy: np.ndarray,
                  back_bytes: np.ndarray, job: int, back: int, now: float, record: bool,
                  g: int) -> None:  # fmt: skip
    """A write-back's chunk arrived: its engine's time and bytes, its span; its slot free
    again; the rest of it back at the front of the queue, or its end (the stream waiting for
    the write-backs to drain resumes once none is left); the next ones start."""
    nbytes, slot, key = JB[job, J_CHUNK], JB[job, J_SLOT], JB[job, J_KEY]
    back_busy[g, slot] += now - FL[job, FL_START]
    back_bytes[g, slot] += nbytes
    if record:
        row = B[g, B_PASS0] + JB[job, J_PASS]
        _span(spF, spI, IG, back_lanes2[g, slot], SK_WRITE_BACK, FL[job, FL_START], now, row,
              JB[job, J_LAYER], key, nbytes, PI[row, PI_REQUEST], -1)  # fmt: skip
    n = IS[I_NFREE2]  # free.append(slot); free.sort()
    free_back[n] = slot
    while n > 0 and free_back[n - 1] > free_back[n]:
        free_back[n - 1], free_back[n] = free_back[n], free_back[n - 1]
        n -= 1
    IS[I_NFREE2] += 1
    if JB[job, J_LEFT] > 0:  # chunks left: back to the queue's front
        w = (IS[I_WB_HEAD] - 1) % WB.shape[0]
        IS[I_WB_HEAD] = w
        IS[I_WB_COUNT] += 1
        WB[w, WB_KEY], WB[w, WB_PASS] = key, JB[job, J_PASS]
        WB[w, WB_LAYER], WB[w, WB_LEFT] = JB[job, J_LAYER], JB[job, J_LEFT]
    else:
        IS[I_ACTIVE2] -= 1
        if IS[I_ACTIVE2] == 0 and IS[I_IDLE2]:
            IS[I_IDLE2] = 0
            schedule(IG, hT, hI, now, NORMAL, EV_STREAM, g)
    jfree[IG[G_JFREE]] = job
    IG[G_JFREE] += 1
    IS[I_SBUSY] = 0  # (then, on the compute stream, the fetches' engines: the caller)
    _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, g)


@compiled
def _wait_drain(IS: np.ndarray, FS: np.ndarray, after: int, now: float) -> bool:
    """GpuStream._drain: whether the stream waits for the copies (then the write-backs) to
    drain, until ``_retire`` (or the write-backs' end) resumes it at ST_DRAINED."""
    if IS[I_ACTIVE_JOBS] > 0:
        IS[I_IDLE] = 1
    elif IS[I_ACTIVE2] > 0:
        IS[I_IDLE2] = 1
    else:
        return False
    IS[I_AFTER], IS[I_STAGE] = after, ST_DRAINED
    FS[F_T0] = now
    return True


@compiled
def _block_of(B: np.ndarray, g: int) -> tuple[int, int, int, int, int, int, int, int]:
    """GPU ``g``'s first key, offset and pass row, its queues' rows, its compute lane, the shift
    from an access to its time (``t_exp[i + shift]``), its block's first pass and its
    write-backs' path."""
    return (B[g, B_KEY0], B[g, B_OFF0], B[g, B_PASS0], B[g, B_QB], B[g, B_LANE],
            B[g, B_TOFF] - B[g, B_T0], B[g, B_LO], B[g, B_WB_PATH])  # fmt: skip


# --- one block of passes ------------------------------------------------------------------------


@compiled
def run_block(  # noqa: C901
    S3: np.ndarray, after2: np.ndarray, keys: np.ndarray, offsets: np.ndarray, t_exp: np.ndarray,
    plan_offsets: np.ndarray, plan_keys: np.ndarray, B: np.ndarray, PF: np.ndarray,
    PI: np.ndarray, X: np.ndarray, lanes2: np.ndarray, PR: np.ndarray, PL: np.ndarray,
    PLAT: np.ndarray, PCAP: np.ndarray, PREQ: np.ndarray, DTAB: np.ndarray,
    used_paths: np.ndarray, IG: np.ndarray, FG: np.ndarray,
    IS2: np.ndarray, FS2: np.ndarray, hT: np.ndarray, hI: np.ndarray, JB: np.ndarray,
    FL: np.ndarray, jfree: np.ndarray, KR3: np.ndarray, free2: np.ndarray, act: np.ndarray,
    NF: np.ndarray, NI: np.ndarray, run_i3: np.ndarray, run_t2: np.ndarray, held2: np.ndarray,
    TL3: np.ndarray, TP: np.ndarray, engine_busy: np.ndarray, engine_bytes: np.ndarray,
    free_back2: np.ndarray, WB3: np.ndarray, back_lanes2: np.ndarray, back_busy: np.ndarray,
    back_bytes: np.ndarray,
    spF: np.ndarray, spI: np.ndarray, civ: np.ndarray, siv: np.ndarray, tiv: np.ndarray,
    used_out: np.ndarray, flight_out: np.ndarray, bw_out: np.ndarray,
) -> int:  # fmt: skip
    """Run every GPU's passes up to the end of its block ``B[g, B_LO] .. B[g, B_HI] - 1`` (see
    the module docstring; GPU ``g``'s arrays are ``S3[g]``, ``KR3[g]``, ``IS2[g]`` ...; its keys
    and offsets start at ``B[g, B_KEY0]`` and ``B[g, B_OFF0]``, its block's expert times at
    ``B[g, B_TOFF]`` for access ``B[g, B_T0]``, its plans' offsets at ``B[g, B_POFF]`` (indexed
    from its block's first layer, into its keys from ``B[g, B_PKOFF]``). OK; BLOCKED: a stream
    waits on nothing that can happen (as SimPy's run would end); or REFILL + g: GPU ``g``'s
    stream is about to begin the pass after its block, to continue once it has a new one."""
    layers, pinned, record = X[X_LAYERS], X[X_PINNED] == 1, X[X_RECORD] == 1
    R, prefetching, drain, gpus = (
        NF.shape[1] - act.size,
        X[X_PREFETCHING] == 1,
        X[X_DRAIN] == 1,
        X[X_GPUS],
    )
    IG[G_NSPANS] = IG[G_NCIV] = IG[G_NSIV] = IG[G_NTIV] = 0
    IG[G_NUSED] = IG[G_NFLIGHT] = IG[G_NBW] = 0
    if not IG[G_STARTED]:  # each stream's process starts: an urgent event each, in GPU order
        IG[G_STARTED] = 1
        for h in range(gpus):
            schedule(IG, hT, hI, 0.0, URGENT, EV_STREAM, h)
    g = IG[G_RESUME]  # the GPU whose block was refilled continues at once
    IG[G_RESUME] = -1
    resume = g >= 0
    cur = g if resume else 0  # the GPU whose arrays are in hand
    while True:  # (each GPU's arrays taken once per run of its events, not per event)
        S, after, KR, IS, FS, free, run_i, run_t, held, TL, free_back, WB = _views(
            cur, S3, after2, KR3, IS2, FS2, free2, run_i3, run_t2, held2, TL3, free_back2, WB3
        )
        sc = S[L.R_SC]
        k0, o0, row0, qb, lane, t_shift, p_lo, back = _block_of(B, cur)
        while True:
            if resume:
                resume = False
                # --- GPU g's stream, from where it stopped to its next wait ---------------------
                while True:
                    stage, p, now = IS[I_STAGE], IS[I_PASS], FG[FG_NOW]
                    if stage == ST_PASS:
                        if p >= B[g, B_NPASS]:
                            IS[I_STAGE] = ST_FINISHED
                            break
                        if p >= B[g, B_HI]:
                            IG[G_RESUME] = g
                            return REFILL + g
                        wait = PF[row0 + p, PF_WAIT]
                        IS[I_STAGE] = ST_ADMITTED
                        if wait > now:
                            schedule(IG, hT, hI, now + (wait - now), NORMAL, EV_STREAM, g)
                            break
                        continue
                    if stage == ST_ADMITTED:
                        TP[row0 + p, TP_START] = now
                        FS[F_BEFORE_C], FS[F_BEFORE_S] = FS[F_CSUM], FS[F_SSUM]
                        IS[I_PHASE] = PI[row0 + p, PI_PHASE]
                        sc[L.SC_PASS] = p  # cache.begin_pass
                        if L.LS_FIFO <= sc[L.SC_POLICY] <= L.LS_LAYER:
                            K.list_move_all(S, sc[L.SC_KEYS], 1, 0)
                        IS[I_LAYER] = 0
                        IS[I_STAGE] = ST_LAYER
                        if PF[row0 + p, PF_DENSE] < 0:
                            continue
                        seconds, layer, kind, key, klass = (
                            PF[row0 + p, PF_DENSE],
                            -1,
                            SK_ATTENTION,
                            -1,
                            -1,
                        )
                    elif stage == ST_LAYER:
                        if IS[I_LAYER] == layers:
                            IS[I_STAGE] = ST_HEAD
                            continue
                        if drain and _wait_drain(IS, FS, ST_LAYER, now):  # copies on the stream
                            break
                        IS[I_STAGE] = ST_STEP
                        seconds, kind, key, klass = PF[row0 + p, PF_ATTN], SK_ATTENTION, -1, -1
                        layer = IS[I_LAYER]
                    elif stage == ST_STEP:  # the router decides: LayerStep.layer
                        layer = IS[I_LAYER]
                        lo, hi = (
                            offsets[o0 + p * layers + layer],
                            offsets[o0 + p * layers + layer + 1],
                        )
                        IS[I_STAMP] += 1  # Decide: the position and demand set prefetches see
                        for i in range(lo, hi):
                            KR[KR_DEMANDED, keys[k0 + i]] = IS[I_STAMP]
                        IS[I_DEC_PASS], IS[I_DEC_LAYER] = p, layer
                        sc[L.SC_LAYER] = layer  # cache.begin_layer
                        IS[I_RETRY] = 0  # set while a key's reservation waits for space
                        if not pinned:
                            IS[I_ONE] = lo
                            IS[I_STAGE] = ST_ONE
                            continue
                        for i in range(lo, hi):
                            S[L.K_PINS, keys[k0 + i]] += 1
                        ready = 0
                        for i in range(lo, hi):  # classify the demand set
                            klass = _access(S, after, KR, keys[k0 + i], layer, p)
                            run_i[i - lo, 3] = klass  # (rows are filled below: classes apart)
                            held[i - lo] = keys[k0 + i]
                            if klass == L.HIT:
                                ready += 1
                        IS[I_ONE], IS[I_NREADY], IS[I_NWAIT] = lo, 0, ready
                        IS[I_STAGE] = ST_RESOLVE
                        continue
                    elif stage == ST_RESOLVE:  # resolve the misses in gate order; hits run first
                        layer = IS[I_LAYER]
                        lo, hi = (
                            offsets[o0 + p * layers + layer],
                            offsets[o0 + p * layers + layer + 1],
                        )
                        waits = False
                        while IS[I_ONE] < hi:
                            i = IS[I_ONE]
                            key, klass, seconds = keys[k0 + i], run_i[i - lo, 3], t_exp[i + t_shift]
                            if klass == L.HIT:
                                _entry(run_i, run_t, JB, IS[I_NREADY], key, -1, klass, seconds)
                                IS[I_NREADY] += 1
                            else:
                                retry = IS[I_RETRY] == 1
                                job = _resolve(S, KR, JB, jfree, IS, IG, hT, hI, free, qb,
                                               key, klass, p, layer, now, record, used_out, retry,
                                               free_back, WB, back, g)  # fmt: skip
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
                            r = B[g, B_POFF] + (p - p_lo) * layers + layer
                            a, b = plan_offsets[r], plan_offsets[r + 1]
                            _plan(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, plan_keys,
                                  B[g, B_PKOFF] + a, B[g, B_PKOFF] + b, p, now, record, used_out,
                                  free_back, WB, back, g)  # fmt: skip
                        IS[I_NHELD] = IS[I_NRUN] = hi - lo
                        IS[I_IDX] = 0
                        IS[I_STAGE] = ST_RUN
                        continue
                    elif stage == ST_ONE:  # one expert at a time: pin, access, resolve, run
                        layer = IS[I_LAYER]
                        i, hi = IS[I_ONE], offsets[o0 + p * layers + layer + 1]
                        if i == hi:
                            if prefetching:
                                r = B[g, B_POFF] + (p - p_lo) * layers + layer
                                a, b = plan_offsets[r], plan_offsets[r + 1]
                                _plan(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, plan_keys,
                                      B[g, B_PKOFF] + a, B[g, B_PKOFF] + b, p, now, record,
                                      used_out, free_back, WB, back, g)  # fmt: skip
                            IS[I_LAYER] += 1
                            IS[I_STAGE] = ST_LAYER
                            continue
                        key = keys[k0 + i]
                        S[L.K_PINS, key] += 1
                        klass = _access(S, after, KR, key, layer, p)
                        run_i[0, 3] = klass
                        held[0] = key
                        IS[I_NHELD] = IS[I_NRUN] = 1
                        IS[I_IDX] = 0
                        if klass == L.HIT:
                            _entry(run_i, run_t, JB, 0, key, -1, klass, t_exp[i + t_shift])
                            IS[I_STAGE] = ST_RUN
                        else:
                            IS[I_STAGE] = ST_ONE_RESOLVE
                        continue
                    elif stage == ST_ONE_RESOLVE:
                        layer = IS[I_LAYER]
                        i = IS[I_ONE]
                        key, klass = keys[k0 + i], run_i[0, 3]
                        job = _resolve(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, key, klass,
                                       p, layer, now, record, used_out, IS[I_RETRY] == 1,
                                       free_back, WB, back, g)  # fmt: skip
                        if job == -3:
                            IS[I_RETRY], IS[I_SPACE] = 1, 1
                            break
                        IS[I_RETRY] = 0
                        _entry(run_i, run_t, JB, 0, key, job, klass, t_exp[i + t_shift])
                        IS[I_STAGE] = ST_RUN
                        continue
                    elif ST_RUN <= stage <= ST_WAITED:
                        idx, layer = IS[I_IDX], IS[I_LAYER]
                        if stage == ST_RUN:
                            if idx == 0 and drain and _wait_drain(IS, FS, ST_RUN, now):
                                break  # (as before attention)
                            if idx == IS[I_NRUN]:  # done: the jobs let go, the pins released
                                for row in range(IS[I_NRUN]):
                                    job = run_i[row, 1]
                                    if job >= 0:
                                        JB[job, J_HELD] = 0
                                        if JB[job, J_RETIRED]:
                                            jfree[IG[G_JFREE]] = job
                                            IG[G_JFREE] += 1
                                for h in range(IS[I_NHELD]):
                                    S[L.K_PINS, held[h]] -= 1
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
                            _stall(spF, spI, IG, IS, FS, siv, TL, PI, lane, row0 + p, layer,
                                   run_i[idx, 0], run_i[idx, 2], now, record, g)  # fmt: skip
                            IS[I_STAGE] = ST_RUN
                        IS[I_IDX] = idx + 1
                        seconds, kind, key, klass = (
                            run_t[idx],
                            SK_EXPERT,
                            run_i[idx, 0],
                            run_i[idx, 2],
                        )
                    elif stage == ST_DRAINED:  # the copies drained: a stall
                        _stall(spF, spI, IG, IS, FS, siv, TL, PI, lane, row0 + p, IS[I_LAYER], -1,
                               -1, now, record, g)  # fmt: skip
                        IS[I_STAGE] = IS[I_AFTER]
                        continue
                    elif stage == ST_HEAD:
                        IS[I_STAGE] = ST_END
                        if PF[row0 + p, PF_HEAD] < 0:
                            continue
                        seconds, layer, kind, key, klass = (
                            PF[row0 + p, PF_HEAD],
                            -1,
                            SK_LM_HEAD,
                            -1,
                            -1,
                        )
                    else:  # ST_END: tally.end_pass (the tokens are counted afterwards)
                        TP[row0 + p, TP_END] = now
                        TP[row0 + p, TP_COMPUTE] = FS[F_CSUM] - FS[F_BEFORE_C]
                        TP[row0 + p, TP_STALL] = FS[F_SSUM] - FS[F_BEFORE_S]
                        IS[I_PASS] = p + 1
                        IS[I_STAGE] = ST_PASS
                        continue
                    # a kernel of `seconds` on the stream (GpuStream._compute), then wait for it
                    end = now + seconds
                    if record:
                        _span(spF, spI, IG, lane, kind, now, end, row0 + p, layer, key, 0,
                              PI[row0 + p, PI_REQUEST], klass)  # fmt: skip
                    if end > now:
                        _interval(civ, IG, G_NCIV, now, end, g)
                        FS[F_CSUM] += end - now
                    if layer >= 0:
                        TL[TL_COMPUTE, layer] += seconds
                        TL[TL_PHASE_COMPUTE + IS[I_PHASE], layer] += seconds
                    schedule(IG, hT, hI, end, NORMAL, EV_STREAM, g)
                    break
            # --- the next event ---------------------------------------------------------------
            if IG[G_HEAP_N] == 0:
                for h in range(gpus):
                    if IS2[h, I_STAGE] != ST_FINISHED:
                        return BLOCKED
                return OK
            kind, arg = hI[0, 2], hI[0, 3]
            if kind == EV_STREAM:  # the GPU the event is for (none: the network's)
                g = arg
            elif kind == EV_COPY:
                g = JB[arg >> _SLOT_BITS, J_GPU]
            elif kind == EV_MOVED:
                g = JB[arg, J_GPU]
            else:
                g = cur
            if g != cur:  # another GPU's: take its arrays, then the event
                cur = g
                break
            now = hT[0]
            _pop(IG, hT, hI)
            FG[FG_NOW] = now
            if kind == EV_STREAM:
                resume = True
            elif kind == EV_COPY:  # CopyEngines._run, Fetcher._move_chunk
                job, slot = arg >> _SLOT_BITS, arg & ((1 << _SLOT_BITS) - 1)
                h = cur
                JB[job, J_SLOT], JB[job, J_STARTED] = slot, 1
                chunk = JB[job, J_LEFT]  # fetch.split: chunks of X_CHUNK bytes, the last shorter
                if X[X_CHUNK] > 0 and chunk > X[X_CHUNK]:
                    chunk = X[X_CHUNK]
                JB[job, J_CHUNK] = chunk
                JB[job, J_LEFT] -= chunk
                FL[job, FL_START] = now
                path = JB[job, J_PATH]
                JB[job, J_DEPTH] = 1
                if not JB[job, J_BACK]:  # (WriteBacks._move_chunk: the flow only)
                    IS[I_IN_FLIGHT] += chunk
                    if IS[I_BUSY_ACTIVE] == 0:
                        FS[F_BUSY_SINCE] = now
                    IS[I_BUSY_ACTIVE] += 1
                    if record:
                        _sample(flight_out, IG, G_NFLIGHT, now, IS[I_IN_FLIGHT], h)
                    used_paths[path] = 1
                    if PREQ[path] > 0:  # from a drive: its reads outstanding
                        JB[job, J_DEPTH] = math.ceil(chunk / PREQ[path])
                if PLAT[path] > 0:
                    schedule(IG, hT, hI, now + PLAT[path], NORMAL, EV_LATENCY, job)
                else:
                    _begin(IG, FG, hT, hI, job, JB, FL, act, PR, PL, PCAP, NF, NI, R, bw_out,
                           record, DTAB)  # fmt: skip
            elif kind == EV_LATENCY:
                _begin(IG, FG, hT, hI, arg, JB, FL, act, PR, PL, PCAP, NF, NI, R, bw_out,
                       record, DTAB)  # fmt: skip
            elif kind == EV_ARM:
                if arg == IG[G_GEN]:
                    schedule(IG, hT, hI, now + FG[FG_DELAY], NORMAL, EV_WAKE, arg)
            elif kind == EV_WAKE:  # FlowNetwork._wake
                if arg != IG[G_GEN]:
                    continue
                _advance(IG, FG, act, FL, JB, PR, PL, NF, NI, R, bw_out, record)
                FL[IG[G_FIRST], FL_REMAINING] = 0.0
                nact, kept = IG[G_NACT], 0
                for i in range(nact):
                    f = act[i]
                    if nact == 1 or FL[f, FL_REMAINING] <= _EPS * FL[f, FL_NBYTES]:
                        schedule(IG, hT, hI, now, NORMAL, EV_MOVED, f)
                    else:
                        act[kept] = f
                        kept += 1
                IG[G_NACT] = kept
                if kept == 0 and record:
                    _sample_bandwidth(IG, act, FL, JB, PR, PL, now, NF, NI, R, bw_out)
                _reschedule(IG, FG, hT, hI, act, FL, JB, PR, PL, PCAP, NF, NI, R, DTAB)
            else:  # EV_MOVED: FlowNetwork._end, the fetcher's moved, CopyEngines._moved, _arrived
                job = arg
                h = cur
                path = JB[job, J_PATH]
                for j in range(PL[path]):
                    NF[N_THROUGH, PR[path, j]] += FL[job, FL_NBYTES]
                    NI[NI_THROUGH, PR[path, j]] = 1
                nbytes, slot, key = JB[job, J_CHUNK], JB[job, J_SLOT], JB[job, J_KEY]
                if JB[job, J_BACK]:  # WriteBacks' moved, CopyEngines._moved
                    _written_back(JB, jfree, IS, IG, hT, hI, free_back, WB, FL, PI, B, spF, spI,
                                  back_lanes2, back_busy, back_bytes, job, back, now, record,
                                  h)  # fmt: skip
                    if IS[I_SHARED]:
                        _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record,
                                  used_out, h)  # fmt: skip
                    continue
                IS[I_IN_FLIGHT] -= nbytes
                IS[I_BUSY_ACTIVE] -= 1
                if IS[I_BUSY_ACTIVE] == 0 and now > FS[F_BUSY_SINCE]:
                    _interval(tiv, IG, G_NTIV, FS[F_BUSY_SINCE], now, h)
                    FS[F_TSUM] += now - FS[F_BUSY_SINCE]
                engine_busy[h, slot] += now - FL[job, FL_START]
                engine_bytes[h, slot] += nbytes
                if record:
                    _sample(flight_out, IG, G_NFLIGHT, now, IS[I_IN_FLIGHT], h)
                    tp, kind = (
                        JB[job, J_PASS],
                        SK_DEMAND_FETCH if JB[job, J_DEMAND] else SK_PREFETCH,
                    )
                    row = B[h, B_PASS0] + tp
                    _span(spF, spI, IG, lanes2[h, slot], kind, FL[job, FL_START], now, row,
                          JB[job, J_LAYER], key, nbytes, PI[row, PI_REQUEST], -1)  # fmt: skip
                n = IS[I_NFREE]  # the slot is free again: free.append(slot); free.sort()
                free[n] = slot
                while n > 0 and free[n - 1] > free[n]:
                    free[n - 1], free[n] = free[n], free[n - 1]
                    n -= 1
                IS[I_NFREE] += 1
                IS[I_SBUSY] = 0
                if JB[job, J_LEFT] > 0:  # chunks left: back to the front of its class
                    _enqueue(JB, qb, job, 0 if JB[job, J_DEMAND] else 1, True)
                    if IS[I_SHARED] and back >= 0:  # OneStream: write-backs first
                        _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, h)
                    _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, used_out, h)
                    continue
                if not JB[job, J_BYPASS]:  # del jobs[key]; cache.complete
                    KR[KR_JOB, key] = -1
                    S[L.K_STATE, key] = L.RESIDENT
                    S[L.K_EVER, key] = 1
                    if KR[KR_LOADPF, key]:
                        KR[KR_LOADPF, key] = 0
                        S[L.R_STATS, L.ST_PF_COMPLETED] += 1
                    _space_changed(IS, IG, hT, hI, now, h)
                JB[job, J_DONE] = 1  # settle(job.done)
                if JB[job, J_WAITER]:
                    schedule(IG, hT, hI, now, NORMAL, EV_STREAM, h)
                _retire(JB, jfree, IS, IG, hT, hI, job, now, h)
                if IS[I_SHARED] and back >= 0:  # OneStream: write-backs first
                    _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, h)
                _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, used_out, h)
