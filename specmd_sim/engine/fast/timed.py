"""The timing engine's compiled core, for runs that only fetch on demand.

:func:`run_block` is :func:`specmd_sim.engine.sim.run.simulate` on one GPU, passes ``lo .. hi -
1``, written over flat arrays: the stream (:class:`~specmd_sim.engine.sim.stream.GpuStream`
and :class:`~specmd_sim.engine.layer.LayerStep` in both pin modes), the copy engines
(:class:`~specmd_sim.engine.sim.copy_engines.CopyEngines`), the fetcher's callbacks
(:class:`~specmd_sim.engine.sim.fetch.Fetcher`), the flow network's progressive filling
(:class:`~specmd_sim.engine.sim.flows.FlowNetwork`), the cache (with :mod:`.kernel`'s
policies) and the tally, with the spans and counters they record. It keeps SimPy's event order
— by time, then priority (*urgent* before *normal*), then the order events were scheduled — and
schedules an event wherever the Python engine schedules one, with the same float operations, so
its results are the Python engine's bit for bit (``tests/engine/test_sim_compiled.py``).

Which runs it covers (demand fetches only, one GPU, experts in host DRAM, one chunk per copy,
...) is :func:`specmd_sim.engine.sim.compiled.compiled_unsupported`'s to say; the Python engine
stays the specification and the path for everything else.

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

Between two blocks the stream is about to begin pass ``hi``: the state arrays keep
everything else, and the next call continues from there.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast import kernel as K
from specmd_sim.engine.jit import compiled

EV_STREAM, EV_COPY, EV_LATENCY, EV_ARM, EV_WAKE, EV_MOVED = range(6)
URGENT, NORMAL = 0, 1  # simpy.events.URGENT, NORMAL
_SLOT_BITS = 16  # an EV_COPY's argument: job << _SLOT_BITS | slot

# outcomes of run_block
OK, BLOCKED, HEAP_FULL = 0, 1, 2

# the stream's stages (where its generator would resume)
ST_PASS, ST_ADMITTED, ST_LAYER, ST_STEP, ST_ONE, ST_RUN, ST_WAITED, ST_HEAD, ST_END = range(9)

# span kinds (specmd_sim.timeline.KINDS)
SK_ATTENTION, SK_EXPERT, SK_LM_HEAD, SK_STALL, SK_DEMAND_FETCH = 0, 1, 2, 3, 4

# int scalars (IS)
(I_EID, I_GEN, I_COUNT, I_HEAP_N, I_STAGE, I_PASS, I_LAYER, I_IDX, I_NRUN, I_ONE, I_NACT,
 I_FIRST, I_IN_FLIGHT, I_BUSY_ACTIVE, I_NFREE, I_QHEAD, I_QTAIL, I_ACTIVE_JOBS, I_NJOBS,
 I_NFLOWS, I_NSPANS, I_NCIV, I_NSIV, I_NTIV, I_NUSED, I_NFLIGHT, I_NBW, I_USED_PATH,
 I_PHASE, I_NHELD) = range(30)  # fmt: skip
I_SIZE = 32
# float scalars (F)
F_NOW, F_NET_LAST, F_CSUM, F_SSUM, F_BEFORE_C, F_BEFORE_S, F_T0, F_BUSY_SINCE, F_DELAY = range(9)
F_SIZE = 16
# static ints (X)
X_LAYERS, X_PINNED, X_RECORD, X_ENGINES, X_LANE, X_ALONE, X_NUM_PASSES = range(7)
X_SIZE = 8
# per pass (PF floats, PI ints)
PF_ATTN, PF_DENSE, PF_HEAD, PF_WAIT = range(4)  # PF_DENSE, PF_HEAD < 0: none
PI_PHASE, PI_REQUEST, PI_GLOBAL = range(3)  # PI_GLOBAL: the pass's number in the spans
# per job (JB)
JB_KEY, JB_BYPASS, JB_PASS, JB_LAYER, JB_DONE, JB_WAITER, JB_SLOT, JB_NBYTES = range(8)
# per layer sums (TL rows)
TL_STALL, TL_COMPUTE, TL_PHASE_COMPUTE, TL_PHASE_STALL = 0, 1, 2, 4  # the phase rows: + phase
# per pass times (TP columns)
TP_START, TP_END, TP_COMPUTE, TP_STALL = range(4)

_EPS = 1e-12  # flows.py's: a flow within this fraction of its size is done


def new_int_state() -> np.ndarray:
    return np.zeros(I_SIZE, np.int64)


def new_float_state() -> np.ndarray:
    return np.zeros(F_SIZE, np.float64)


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
             arg: int) -> bool:  # fmt: skip
    """Push an event (False: the heap is full)."""
    i = IS[I_HEAP_N]
    if i == hT.size:
        return False
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
    return True


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


# --- the cache (ExpertCache with kernel.py's policies; demand fetches only) -------------------


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
        klass = K.HIT if state == K.RESIDENT else 1  # AccessClass.LATE_HIT
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
def _reserve(S: np.ndarray, pos: np.ndarray, key: int, p: int, now: float, record: bool,
             used_out: np.ndarray, IS: np.ndarray) -> bool:  # fmt: skip
    """ExpertCache.reserve(key, DEMAND): evict until it fits, then LOADING (False: nothing is
    evictable). Occupancy samples as the fetcher's hook takes them."""
    sc = S[K.R_SC]
    policy = sc[K.SC_POLICY]
    need = S[K.K_NBYTES, key]
    while sc[K.SC_CAPACITY] - sc[K.SC_USED] < need:
        victim = _victim(S)
        if victim < 0:
            return False
        S[K.K_STATE, victim] = K.ABSENT
        sc[K.SC_USED] -= S[K.K_NBYTES, victim]
        if record:
            _sample(used_out, IS, I_NUSED, now, sc[K.SC_USED])
        S[K.K_EVICTED, victim] = p
        S[K.R_STATS, K.ST_EVICTIONS] += 1
        if S[K.K_UNUSED, victim]:
            S[K.K_UNUSED, victim] = 0
            S[K.R_STATS, K.ST_PF_WASTED] += 1
        if policy == K.LFU or policy >= K.BELADY:
            S[K.K_AUX, victim] = -1
        else:
            K.list_remove(S, victim)
            S[K.K_TOUCHED, victim] = K.OUTSIDE
    S[K.K_STATE, key] = 1  # State.LOADING
    sc[K.SC_USED] += need
    if record:
        _sample(used_out, IS, I_NUSED, now, sc[K.SC_USED])
    S[K.R_STATS, K.ST_BYTES_DEMAND] += need
    if policy == K.FIFO or policy == K.LRU:
        K.list_append(S, sc[K.SC_KEYS], 0, key)
    elif policy == K.LFU or policy >= K.BELADY:
        K.heap_update(S, pos, key, 1)
    else:
        K.touch(S, key)
    return True


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
    IS: np.ndarray, X: np.ndarray, act: np.ndarray, flF: np.ndarray, flI: np.ndarray,
           pres: np.ndarray, rcap: np.ndarray, fcap: float, residual: np.ndarray,
           users: np.ndarray, frozen: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._rates: every active flow's rate (all move over the one path ``pres``, each
    with a private resource of capacity ``fcap`` when that is >= 0)."""
    nact, R = IS[I_NACT], rcap.size
    if nact == 1 and X[X_ALONE]:
        rate = rcap[pres[0]]
        for i in range(1, pres.size):
            if rcap[pres[i]] < rate:
                rate = rcap[pres[i]]
        if fcap >= 0 and fcap < rate:
            rate = fcap
        flF[act[0], 2] = rate
        return
    for r in range(R + nact):
        users[r] = 0
    for i in range(nact):
        for r in pres:
            users[r] += 1
            residual[r] = rcap[r]
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
            elif s == share:  # ties: the lowest name (shared ones sort before ~flow<n>)
                if r >= R and best >= R:
                    if _private_less(flI[act[r - R], 1], flI[act[best - R], 1]):
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
            flF[act[i], 2] = share
            frozen[i] = 1
            left -= 1
            for r in pres:
                residual[r] -= share
                users[r] -= 1
            if fcap >= 0:
                residual[R + i] -= share
                users[R + i] -= 1


@compiled
def _sample_bandwidth(IS: np.ndarray, act: np.ndarray, flF: np.ndarray, pres: np.ndarray,
                      at: float, carried: np.ndarray, has: np.ndarray, last: np.ndarray,
                      last_has: np.ndarray, bw_out: np.ndarray) -> None:  # fmt: skip
    """FlowNetwork._sample_bandwidth: a sample per resource whose bandwidth in use changed."""
    R, nact = carried.size, IS[I_NACT]
    for r in range(R):
        carried[r], has[r] = 0.0, 0
    if nact == 1:
        for r in pres:
            carried[r], has[r] = flF[act[0], 2], 1
    else:
        for i in range(nact):
            rate = flF[act[i], 2]
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


# --- one block of passes ------------------------------------------------------------------------


@compiled
def run_block(  # noqa: C901
    S: np.ndarray, pos: np.ndarray, keys: np.ndarray, offsets: np.ndarray, t_exp: np.ndarray,
    p_lo: int, p_hi: int, PF: np.ndarray, PI: np.ndarray, X: np.ndarray,
    lanes: np.ndarray, pres: np.ndarray, pbusy: np.ndarray, rcap: np.ndarray, latency: float,
    fcap: float, IS: np.ndarray, F: np.ndarray, hT: np.ndarray, hI: np.ndarray,
    JB: np.ndarray, jstart: np.ndarray, queue: np.ndarray, free: np.ndarray,
    flF: np.ndarray, flI: np.ndarray, act: np.ndarray, run_i: np.ndarray, run_t: np.ndarray,
    held: np.ndarray, TL: np.ndarray, TP: np.ndarray, engine_busy: np.ndarray,
    engine_bytes: np.ndarray, through: np.ndarray, busy_s: np.ndarray, touched: np.ndarray,
    carried: np.ndarray, has: np.ndarray, last: np.ndarray, last_has: np.ndarray,
    residual: np.ndarray, users: np.ndarray, frozen: np.ndarray,
    spF: np.ndarray, spI: np.ndarray, civ: np.ndarray, siv: np.ndarray, tiv: np.ndarray,
    used_out: np.ndarray, flight_out: np.ndarray, bw_out: np.ndarray,
) -> int:  # fmt: skip
    """Run the GPU's passes ``p_lo .. p_hi - 1`` (see the module docstring); OK, or BLOCKED (a
    demand fetch found nothing evictable: the Python engine's stream would wait for space
    that never comes), or HEAP_FULL. Jobs and flows are numbered from 0 in each block (none
    is in flight between passes when every fetch is a demand fetch the stream waits for)."""
    layers, pinned, record = X[X_LAYERS], X[X_PINNED] == 1, X[X_RECORD] == 1
    lane = X[X_LANE]
    sc = S[K.R_SC]
    heaped = sc[K.SC_POLICY] == K.LFU or sc[K.SC_POLICY] >= K.BELADY
    IS[I_NJOBS], IS[I_NFLOWS] = 0, 0
    IS[I_NSPANS] = IS[I_NCIV] = IS[I_NSIV] = IS[I_NTIV] = IS[I_NUSED] = IS[I_NFLIGHT] = IS[
        I_NBW
    ] = 0
    resume = True  # the stream runs first: it is about to begin pass p_lo
    while True:
        if resume:
            resume = False
            # --- the stream, from where it stopped to its next wait -------------------------
            while True:
                stage, p, now = IS[I_STAGE], IS[I_PASS], F[F_NOW]
                if stage == ST_PASS:
                    if p >= p_hi:
                        return OK
                    wait = PF[p, PF_WAIT]
                    IS[I_STAGE] = ST_ADMITTED
                    if wait > now:
                        if not schedule(IS, hT, hI, now + (wait - now), NORMAL, EV_STREAM, 0):
                            return HEAP_FULL
                        break
                    continue
                if stage == ST_ADMITTED:
                    TP[p, TP_START] = now
                    F[F_BEFORE_C], F[F_BEFORE_S] = F[F_CSUM], F[F_SSUM]
                    IS[I_PHASE] = PI[p, PI_PHASE]
                    sc[K.SC_PASS] = p  # cache.begin_pass
                    if sc[K.SC_POLICY] >= K.LS_FIFO and sc[K.SC_POLICY] <= K.LS_LAYER:
                        K.list_move_all(S, sc[K.SC_KEYS], 1, 0)
                    IS[I_LAYER] = 0
                    IS[I_STAGE] = ST_LAYER
                    if PF[p, PF_DENSE] >= 0:
                        seconds, layer, kind, key, klass = PF[p, PF_DENSE], -1, SK_ATTENTION, -1, -1
                    else:
                        continue
                elif stage == ST_LAYER:
                    if IS[I_LAYER] == layers:
                        IS[I_STAGE] = ST_HEAD
                        continue
                    IS[I_STAGE] = ST_STEP
                    seconds, kind, key, klass = PF[p, PF_ATTN], SK_ATTENTION, -1, -1
                    layer = IS[I_LAYER]
                elif stage == ST_STEP:  # the router decides: LayerStep.layer
                    layer = IS[I_LAYER]
                    sc[K.SC_LAYER] = layer  # cache.begin_layer
                    lo, hi = offsets[p * layers + layer], offsets[p * layers + layer + 1]
                    if heaped and sc[K.SC_HEAP_N] + 2 * (hi - lo) > S.shape[1]:
                        K.heap_compact(S)
                    if not pinned:
                        IS[I_ONE] = lo
                        IS[I_STAGE] = ST_ONE
                        continue
                    for i in range(lo, hi):
                        S[K.K_PINS, keys[i]] += 1
                    n_ready = 0
                    for i in range(lo, hi):  # classify the demand set
                        klass = _access(S, pos, keys[i], layer, p)
                        run_i[i - lo, 3] = klass  # (rows are reused below: classes apart)
                        if klass == K.HIT:
                            n_ready += 1
                    ready, waiting = 0, n_ready
                    for i in range(lo, hi):  # resolve the misses in gate order; run hits first
                        key, klass = keys[i], run_i[i - lo, 3]
                        held[i - lo] = key
                        if klass == K.HIT:
                            row, job = ready, -1
                            ready += 1
                        else:
                            job = _fetch(S, pos, key, p, layer, now, record, used_out, IS, JB)
                            if job == -2:
                                return BLOCKED
                            if not _submit(IS, hT, hI, JB, queue, free, job, now):
                                return HEAP_FULL
                            row = waiting
                            waiting += 1
                        run_i[row, 0], run_i[row, 1], run_i[row, 2] = key, job, klass
                        run_t[row] = t_exp[i]
                    IS[I_NHELD] = hi - lo
                    IS[I_NRUN], IS[I_IDX] = hi - lo, 0
                    IS[I_STAGE] = ST_RUN
                    continue
                elif stage == ST_ONE:  # one expert at a time: pin, access, resolve, run
                    layer = IS[I_LAYER]
                    i, hi = IS[I_ONE], offsets[p * layers + layer + 1]
                    if i == hi:
                        IS[I_LAYER] += 1
                        IS[I_STAGE] = ST_LAYER
                        continue
                    key = keys[i]
                    S[K.K_PINS, key] += 1
                    klass = _access(S, pos, key, layer, p)
                    job = -1
                    if klass != K.HIT:
                        job = _fetch(S, pos, key, p, layer, now, record, used_out, IS, JB)
                        if job == -2:
                            return BLOCKED
                        if not _submit(IS, hT, hI, JB, queue, free, job, now):
                            return HEAP_FULL
                    run_i[0, 0], run_i[0, 1], run_i[0, 2], run_t[0] = key, job, klass, t_exp[i]
                    held[0] = key
                    IS[I_NHELD] = 1
                    IS[I_NRUN], IS[I_IDX] = 1, 0
                    IS[I_STAGE] = ST_RUN
                    continue
                elif ST_RUN <= stage <= ST_WAITED:
                    idx, layer = IS[I_IDX], IS[I_LAYER]
                    if stage == ST_RUN:
                        if idx == IS[I_NRUN]:  # the layer's (or the expert's) pins released
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
                        if job >= 0 and not JB[job, JB_DONE]:  # wait: a stall
                            JB[job, JB_WAITER] = 1
                            F[F_T0] = now
                            IS[I_STAGE] = ST_WAITED
                            break
                    else:
                        t0, phase = F[F_T0], IS[I_PHASE]
                        if record:
                            _span(spF, spI, IS, lane, SK_STALL, t0, now, PI[p, PI_GLOBAL], layer,
                                  run_i[idx, 0], 0, PI[p, PI_REQUEST], run_i[idx, 2])  # fmt: skip
                        if now > t0:
                            n = IS[I_NSIV]
                            siv[n, 0], siv[n, 1] = t0, now
                            IS[I_NSIV] = n + 1
                            F[F_SSUM] += now - t0
                        TL[TL_STALL, layer] += now - t0
                        TL[TL_PHASE_STALL + phase, layer] += now - t0
                        IS[I_STAGE] = ST_RUN
                    IS[I_IDX] = idx + 1
                    seconds, kind, key, klass = run_t[idx], SK_EXPERT, run_i[idx, 0], run_i[idx, 2]
                elif stage == ST_HEAD:
                    IS[I_STAGE] = ST_END
                    if PF[p, PF_HEAD] >= 0:
                        seconds, layer, kind, key, klass = PF[p, PF_HEAD], -1, SK_LM_HEAD, -1, -1
                    else:
                        continue
                else:  # ST_END: tally.end_pass (the tokens are counted afterwards)
                    TP[p, TP_END] = now
                    TP[p, TP_COMPUTE] = F[F_CSUM] - F[F_BEFORE_C]
                    TP[p, TP_STALL] = F[F_SSUM] - F[F_BEFORE_S]
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
                    F[F_CSUM] += end - now
                if layer >= 0:
                    TL[TL_COMPUTE, layer] += seconds
                    TL[TL_PHASE_COMPUTE + IS[I_PHASE], layer] += seconds
                if not schedule(IS, hT, hI, end, NORMAL, EV_STREAM, 0):
                    return HEAP_FULL
                break
        # --- the next event ---------------------------------------------------------------
        if IS[I_HEAP_N] == 0:
            return BLOCKED  # the stream waits on nothing that can happen
        now = hT[0]
        kind, arg = hI[0, 2], hI[0, 3]
        _pop(IS, hT, hI)
        F[F_NOW] = now
        if kind == EV_STREAM:
            resume = True
        elif kind == EV_COPY:  # CopyEngines._run, Fetcher._move_chunk
            job, slot = arg >> _SLOT_BITS, arg & ((1 << _SLOT_BITS) - 1)
            nbytes = JB[job, JB_NBYTES]
            JB[job, JB_SLOT] = slot
            jstart[job] = now
            IS[I_IN_FLIGHT] += nbytes
            if IS[I_BUSY_ACTIVE] == 0:
                F[F_BUSY_SINCE] = now
            IS[I_BUSY_ACTIVE] += 1
            if record:
                _sample(flight_out, IS, I_NFLIGHT, now, IS[I_IN_FLIGHT])
            IS[I_USED_PATH] = 1
            if latency > 0:
                if not schedule(IS, hT, hI, now + latency, NORMAL, EV_LATENCY, job):
                    return HEAP_FULL
            elif not _begin(IS, X, F, hT, hI, job, JB, flF, flI, act, pres, pbusy, rcap, fcap,
                            busy_s, touched, carried, has, last, last_has, residual, users,
                            frozen, bw_out, record):  # fmt: skip
                return HEAP_FULL
        elif kind == EV_LATENCY:
            if not _begin(IS, X, F, hT, hI, arg, JB, flF, flI, act, pres, pbusy, rcap, fcap,
                          busy_s, touched, carried, has, last, last_has, residual, users,
                          frozen, bw_out, record):  # fmt: skip
                return HEAP_FULL
        elif kind == EV_ARM:
            if arg == IS[I_GEN] and not schedule(
                IS, hT, hI, now + F[F_DELAY], NORMAL, EV_WAKE, arg
            ):
                return HEAP_FULL
        elif kind == EV_WAKE:  # FlowNetwork._wake
            if arg != IS[I_GEN]:
                continue
            _advance(IS, F, act, flF, pres, pbusy, busy_s, touched, carried, has, last, last_has,
                     bw_out, record)  # fmt: skip
            first = IS[I_FIRST]
            flF[first, 1] = 0.0
            nact, kept = IS[I_NACT], 0
            for i in range(nact):
                f = act[i]
                if nact == 1 or flF[f, 1] <= _EPS * flF[f, 0]:
                    if not schedule(IS, hT, hI, now, NORMAL, EV_MOVED, f):
                        return HEAP_FULL
                else:
                    act[kept] = f
                    kept += 1
            IS[I_NACT] = kept
            if kept == 0 and record:
                _sample_bandwidth(IS, act, flF, pres, now, carried, has, last, last_has, bw_out)
            if not _reschedule(IS, X, F, hT, hI, act, flF, flI, pres, rcap, fcap, residual, users,
                               frozen):  # fmt: skip
                return HEAP_FULL
        else:  # EV_MOVED: FlowNetwork._end, Fetcher's moved, CopyEngines._moved, _arrived
            f = arg
            job = flI[f, 0]
            for r in pres:
                through[r] += flF[f, 0]
                touched[r, 0] = 1
            nbytes, slot, key = JB[job, JB_NBYTES], JB[job, JB_SLOT], JB[job, JB_KEY]
            IS[I_IN_FLIGHT] -= nbytes
            IS[I_BUSY_ACTIVE] -= 1
            if IS[I_BUSY_ACTIVE] == 0 and now > F[F_BUSY_SINCE]:
                n = IS[I_NTIV]
                tiv[n, 0], tiv[n, 1] = F[F_BUSY_SINCE], now
                IS[I_NTIV] = n + 1
            engine_busy[slot] += now - jstart[job]
            engine_bytes[slot] += nbytes
            if record:
                _sample(flight_out, IS, I_NFLIGHT, now, IS[I_IN_FLIGHT])
                tp = JB[job, JB_PASS]
                _span(spF, spI, IS, lanes[slot], SK_DEMAND_FETCH, jstart[job], now,
                      PI[tp, PI_GLOBAL], JB[job, JB_LAYER], key, nbytes, PI[tp, PI_REQUEST],
                      -1)  # fmt: skip
            n = IS[I_NFREE]  # the slot is free again: free.append(slot); free.sort()
            free[n] = slot
            while n > 0 and free[n - 1] > free[n]:
                free[n - 1], free[n] = free[n], free[n - 1]
                n -= 1
            IS[I_NFREE] += 1
            if not JB[job, JB_BYPASS]:  # cache.complete
                S[K.K_STATE, key] = K.RESIDENT
                S[K.K_EVER, key] = 1
            JB[job, JB_DONE] = 1  # settle(job.done)
            if JB[job, JB_WAITER] and not schedule(IS, hT, hI, now, NORMAL, EV_STREAM, 0):
                return HEAP_FULL
            IS[I_ACTIVE_JOBS] -= 1
            if not _dispatch(IS, hT, hI, queue, free, now):
                return HEAP_FULL


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
def _fetch(S: np.ndarray, pos: np.ndarray, key: int, p: int, layer: int, now: float,
           record: bool, used_out: np.ndarray, IS: np.ndarray, JB: np.ndarray) -> int:  # fmt: skip
    """LayerStep._fetch of a demand miss: the job (streamed past the cache where the policy
    does not admit it), or -2 where nothing is evictable."""
    sc = S[K.R_SC]
    need = S[K.K_NBYTES, key]
    bypass = 0
    if (sc[K.SC_POLICY] == K.BELADY_BYPASS and sc[K.SC_CAPACITY] - sc[K.SC_USED] < need
            and not K.bypass_admits(S, pos, key)):  # fmt: skip
        S[K.R_STATS, K.ST_BYPASSED] += 1  # cache.stream
        S[K.R_STATS, K.ST_BYTES_DEMAND] += need
        bypass = 1
    elif not _reserve(S, pos, key, p, now, record, used_out, IS):
        return -2
    job = IS[I_NJOBS]
    IS[I_NJOBS] = job + 1
    JB[job, JB_KEY], JB[job, JB_BYPASS], JB[job, JB_PASS], JB[job, JB_LAYER] = key, bypass, p, layer
    JB[job, JB_DONE], JB[job, JB_WAITER], JB[job, JB_NBYTES] = 0, 0, need
    return job


@compiled
def _submit(IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, JB: np.ndarray, queue: np.ndarray,
            free: np.ndarray, job: int, now: float) -> bool:  # fmt: skip
    """CopyEngines.submit (a demand job)."""
    IS[I_ACTIVE_JOBS] += 1
    queue[IS[I_QTAIL]] = job
    IS[I_QTAIL] += 1
    return _dispatch(IS, hT, hI, queue, free, now)


@compiled
def _dispatch(IS: np.ndarray, hT: np.ndarray, hI: np.ndarray, queue: np.ndarray,
              free: np.ndarray, now: float) -> bool:  # fmt: skip
    """CopyEngines._dispatch: queued jobs to free slots, the lowest slot first."""
    while IS[I_NFREE] > 0 and IS[I_QHEAD] < IS[I_QTAIL]:
        job = queue[IS[I_QHEAD]]
        IS[I_QHEAD] += 1
        slot = free[0]
        n = IS[I_NFREE] - 1
        for i in range(n):
            free[i] = free[i + 1]
        IS[I_NFREE] = n
        if not schedule(IS, hT, hI, now, URGENT, EV_COPY, (job << _SLOT_BITS) | slot):
            return False
    return True


@compiled
def _advance(IS: np.ndarray, F: np.ndarray, act: np.ndarray, flF: np.ndarray, pres: np.ndarray,
             pbusy: np.ndarray, busy_s: np.ndarray, touched: np.ndarray, carried: np.ndarray,
             has: np.ndarray, last: np.ndarray, last_has: np.ndarray, bw_out: np.ndarray,
             record: bool) -> None:  # fmt: skip
    """FlowNetwork._advance: the flows' bytes moved since the last change, and busy time."""
    now = F[F_NOW]
    dt = now - F[F_NET_LAST]
    if dt > 0:
        nact = IS[I_NACT]
        for i in range(nact):
            f = act[i]
            flF[f, 1] -= flF[f, 2] * dt
        if nact > 0:  # every flow moves over the one path: its resources, each once
            for r in pbusy:
                busy_s[r] += dt
                touched[r, 1] = 1
        if record:
            _sample_bandwidth(IS, act, flF, pres, F[F_NET_LAST], carried, has, last, last_has,
                              bw_out)  # fmt: skip
    F[F_NET_LAST] = now


@compiled
def _begin(IS: np.ndarray, X: np.ndarray, F: np.ndarray, hT: np.ndarray, hI: np.ndarray,
           job: int, JB: np.ndarray, flF: np.ndarray, flI: np.ndarray, act: np.ndarray,
           pres: np.ndarray, pbusy: np.ndarray, rcap: np.ndarray, fcap: float,
           busy_s: np.ndarray, touched: np.ndarray, carried: np.ndarray, has: np.ndarray,
           last: np.ndarray, last_has: np.ndarray, residual: np.ndarray, users: np.ndarray,
           frozen: np.ndarray, bw_out: np.ndarray, record: bool) -> bool:  # fmt: skip
    """FlowNetwork._begin: a flow of the job's bytes starts moving."""
    _advance(IS, F, act, flF, pres, pbusy, busy_s, touched, carried, has, last, last_has, bw_out,
             record)  # fmt: skip
    IS[I_COUNT] += 1
    f = IS[I_NFLOWS]
    IS[I_NFLOWS] = f + 1
    nbytes = float(JB[job, JB_NBYTES])
    flF[f, 0], flF[f, 1], flF[f, 2] = nbytes, nbytes, 0.0
    flI[f, 0], flI[f, 1] = job, IS[I_COUNT]
    act[IS[I_NACT]] = f
    IS[I_NACT] += 1
    return _reschedule(IS, X, F, hT, hI, act, flF, flI, pres, rcap, fcap, residual, users, frozen)


@compiled
def _reschedule(IS: np.ndarray, X: np.ndarray, F: np.ndarray, hT: np.ndarray, hI: np.ndarray,
                act: np.ndarray, flF: np.ndarray, flI: np.ndarray, pres: np.ndarray,
                rcap: np.ndarray, fcap: float, residual: np.ndarray, users: np.ndarray,
                frozen: np.ndarray) -> bool:  # fmt: skip
    """FlowNetwork._reschedule: new rates, and a wake-up armed for the first flow to end."""
    IS[I_GEN] += 1
    nact = IS[I_NACT]
    if nact == 0:
        return True
    _rates(IS, X, act, flF, flI, pres, rcap, fcap, residual, users, frozen)
    first = act[0]
    first_t = flF[first, 1] / flF[first, 2]
    for i in range(nact):
        f = act[i]
        t = flF[f, 1] / flF[f, 2]
        if t < first_t or (t == first_t and flI[f, 1] < flI[first, 1]):
            first, first_t = f, t
    IS[I_FIRST] = first
    F[F_DELAY] = max(first_t, 0.0)
    return schedule(IS, hT, hI, F[F_NOW], URGENT, EV_ARM, IS[I_GEN])
