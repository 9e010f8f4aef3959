"""Each GPU's fetcher in the compiled core (the twin of
:class:`~specmd_sim.engine.sim.fetch.Fetcher` and the layer step's fetches): a demanded miss
resolved, a prefetch plan issued, room made by cancelling a queued prefetch.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast import cache as C
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.fast.timed.copy_engines import (
    _cancel,
    _dequeue,
    _dispatch,
    _dispatch_back,
    _enqueue,
    _retire,
    _space_changed,
    _submit,
    _take_job,
    _written_back,
)
from specmd_sim.engine.fast.timed.events import (
    schedule,
)
from specmd_sim.engine.fast.timed.state import (
    B_PASS0,
    EV_STREAM,
    F_BUSY_SINCE,
    F_TSUM,
    FL_NBYTES,
    FL_START,
    G_NFLIGHT,
    G_NTIV,
    G_NUSED,
    I_ACTIVE2,
    I_BUSY_ACTIVE,
    I_IN_FLIGHT,
    I_ISSUED,
    I_NFREE,
    I_SBUSY,
    I_SHARED,
    I_STAMP,
    I_WB_COUNT,
    I_WB_HEAD,
    J_BACK,
    J_BYPASS,
    J_CHUNK,
    J_DEMAND,
    J_DONE,
    J_GPU,
    J_KEY,
    J_LAYER,
    J_LEFT,
    J_NBYTES,
    J_PASS,
    J_PATH,
    J_PREV,
    J_QUEUE,
    J_SLOT,
    J_STARTED,
    J_WAITER,
    KR_DEMANDED,
    KR_HOME,
    KR_JOB,
    KR_LOADPF,
    KR_PATH,
    LATE,
    N_THROUGH,
    NI_THROUGH,
    NORMAL,
    PI_REQUEST,
    PROMOTED,
    SK_DEMAND_FETCH,
    SK_PREFETCH,
    SK_PROMOTED,
    SK_STREAMED,
    WB_KEY,
    WB_LAYER,
    WB_LEFT,
    WB_PASS,
    Block,
    Core,
    Gpu,
    Here,
    Out,
    Run,
    Tallies,
)
from specmd_sim.engine.fast.timed.tally import (
    _interval,
    _sample,
    _span,
)
from specmd_sim.engine.jit import compiled, compiled_inline


@compiled
def _reserve(S: np.ndarray, KR: np.ndarray, key: int, prefetch: bool, p: int,
             now: float, record: bool, used_out: np.ndarray, IG: np.ndarray, IS: np.ndarray,
             WB: np.ndarray, g: int) -> bool:  # fmt: skip
    """ExpertCache.reserve (:func:`.cache.reserve`; False: nothing is evictable), with the
    policy's admission of a prefetch: occupancy samples as the fetcher's hook takes them, and
    with memory parity each eviction queues its write-back (``WriteBacks.submit``;
    :func:`_dispatch_back` starts it), a copy the stream pays the issue of."""
    sc = S[L.R_SC]
    if prefetch and C.declines(S, key):
        S[L.R_STATS, L.ST_PF_DROPPED] += 1
        return False
    used = sc[L.SC_USED]
    reserved = C.reserve(S, key, prefetch, p)
    for i in range(sc[L.SC_NEVICTED]):
        victim = S[L.R_EVICTED, i]
        nbytes = S[L.K_NBYTES, victim]
        used -= nbytes
        if record:
            _sample(used_out, IG, G_NUSED, now, used, g)
        if sc[L.SC_WRITE_BACK]:
            IS[I_ACTIVE2] += 1
            w = (IS[I_WB_HEAD] + IS[I_WB_COUNT]) % WB.shape[0]
            WB[w, WB_KEY], WB[w, WB_PASS] = victim, sc[L.SC_PASS]
            WB[w, WB_LAYER], WB[w, WB_LEFT] = victim // sc[L.SC_NUM_EXPERTS], nbytes
            IS[I_WB_COUNT] += 1
            IS[I_ISSUED] += 1
    if not reserved:
        if prefetch:
            S[L.R_STATS, L.ST_PF_DROPPED] += 1
        return False
    if record:
        _sample(used_out, IG, G_NUSED, now, sc[L.SC_USED], g)
    KR[KR_LOADPF, key] = prefetch
    return True


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
def _resolve(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray,
             IS: np.ndarray, IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, free: np.ndarray,
             qb: int, key: int, klass: int, p: int, layer: int, now: float, record: bool,
             used_out: np.ndarray, retry: bool, free_back: np.ndarray, WB: np.ndarray,
             back: int, g: int) -> int:  # fmt: skip
    """LayerStep._fetch of a demanded, non-resident key: its job; -1 where it is resident after
    all (a late hit whose transfer ended meanwhile); -3 where nothing is evictable and no queued
    prefetch can be cancelled: the stream waits for space, then retries the reservation
    (``retry``: the policy's admission is not asked again). A key the policy declines, or for
    which the layer's pins leave no room (:func:`.cache.overflows`), is streamed past the
    cache."""
    if klass == LATE:
        if S[L.K_STATE, key] == L.RESIDENT:
            return -1
        job = KR[KR_JOB, key]
        if not JB[job, J_DEMAND]:  # Fetcher.join: CopyEngines.promote
            JB[job, J_DEMAND] = PROMOTED
            if JB[job, J_QUEUE] == 1:
                _dequeue(JB, job)
                _enqueue(JB, qb, job, 0)
                _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, used_out, g)
        return job
    need = S[L.K_NBYTES, key]
    streamed = not retry and C.declines(S, key)
    if streamed:
        C.stream(S, key, False)
    while not streamed:
        reserved = _reserve(S, KR, key, False, p, now, record, used_out, IG, IS, WB, g)
        if back >= 0:  # the write-backs of its evictions start
            _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, g)
        if reserved:
            break
        if C.overflows(S, key):  # the layer's pins fill the cache
            C.stream(S, key, True)
            streamed = True
        elif not _make_room(S, KR, JB, jfree, IS, IG, hT, hI, qb, now, record, used_out, g):
            return -3
    IS[I_ISSUED] += 1  # (GpuStream: a Fetch)
    if streamed:  # past the cache, into a staging buffer
        job = _new_job(JB, jfree, IG, KR, key, need, True, True, p, layer, g)
        _submit(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, job, now, record, used_out, g)
        return job
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
    experts = S[L.R_SC, L.SC_NUM_EXPERTS]
    for i in range(lo, hi):
        key = plan_keys[i]
        if S[L.K_STATE, key] != L.ABSENT:
            if not KR[KR_HOME, key]:
                C.hint(S, key)
        else:
            reserved = _reserve(S, KR, key, True, p, now, record, used_out, IG, IS, WB, g)
            if back >= 0:
                _dispatch_back(JB, jfree, IS, IG, hT, hI, free_back, WB, back, now, g)
            if not reserved:
                continue
            layer = key // experts
            job = _new_job(JB, jfree, IG, KR, key, S[L.K_NBYTES, key], False, False, p, layer, g)
            KR[KR_JOB, key] = job
            IS[I_ISSUED] += 1
            _submit(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, job, now, record, used_out, g)


@compiled_inline
def _arrived(run: Run, blk: Block, core: Core, tally: Tallies, out: Out, gp: Gpu, here: Here,
             job: int, now: float, record: bool) -> None:  # fmt: skip
    """A flow's ``done`` (FlowNetwork._end, the fetcher's moved, CopyEngines._moved,
    ``_arrived``): the bytes through its path; a write-back's chunk, or a fetch's: its
    engine's time and bytes, its span, its slot free again; the rest of it back at the front of
    its queue, or its expert resident and the stream waiting on it resumed; the next ones
    start."""
    JB, FL, IG, hT, hI, jfree = core.JB, core.FL, core.IG, core.hT, core.hI, core.jfree
    S, KR, IS, FS, free, h, qb, back = (
        gp.S,
        gp.KR,
        gp.IS,
        gp.FS,
        gp.free,
        here.g,
        here.qb,
        here.back,
    )
    path = JB[job, J_PATH]
    for j in range(run.PL[path]):
        core.NF[N_THROUGH, run.PR[path, j]] += FL[job, FL_NBYTES]
        core.NI[NI_THROUGH, run.PR[path, j]] = 1
    nbytes, slot, key = JB[job, J_CHUNK], JB[job, J_SLOT], JB[job, J_KEY]
    if JB[job, J_BACK]:  # WriteBacks' moved, CopyEngines._moved
        _written_back(JB, jfree, IS, IG, hT, hI, gp.free_back, gp.WB, FL, run.PI, blk.B,
                      out.spF, out.spI, run.back_lanes, tally.back_busy, tally.back_bytes, job,
                      back, now, record, h)  # fmt: skip
        if IS[I_SHARED]:
            _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, out.used_out, h)
        return
    IS[I_IN_FLIGHT] -= nbytes
    IS[I_BUSY_ACTIVE] -= 1
    if IS[I_BUSY_ACTIVE] == 0 and now > FS[F_BUSY_SINCE]:
        _interval(out.tiv, IG, G_NTIV, FS[F_BUSY_SINCE], now, h)
        FS[F_TSUM] += now - FS[F_BUSY_SINCE]
    tally.engine_busy[h, slot] += now - FL[job, FL_START]
    tally.engine_bytes[h, slot] += nbytes
    if record:
        _sample(out.flight_out, IG, G_NFLIGHT, now, IS[I_IN_FLIGHT], h)
        demand = JB[job, J_DEMAND]  # the kind it was issued as (copy_engines.transfer_kind)
        kind = SK_PROMOTED if demand == PROMOTED else SK_DEMAND_FETCH if demand else SK_PREFETCH
        if JB[job, J_BYPASS]:
            kind = SK_STREAMED
        row = blk.B[h, B_PASS0] + JB[job, J_PASS]
        _span(out.spF, out.spI, IG, run.lanes[h, slot], kind, FL[job, FL_START], now, row,
              JB[job, J_LAYER], key, nbytes, run.PI[row, PI_REQUEST], -1)  # fmt: skip
    n = IS[I_NFREE]  # the slot is free again: free.append(slot); free.sort()
    free[n] = slot
    while n > 0 and free[n - 1] > free[n]:
        free[n - 1], free[n] = free[n], free[n - 1]
        n -= 1
    IS[I_NFREE] += 1
    IS[I_SBUSY] = 0
    if JB[job, J_LEFT] > 0:  # chunks left: back to the front of its class
        _enqueue(JB, qb, job, 0 if JB[job, J_DEMAND] else 1, True)
    else:
        if not JB[job, J_BYPASS]:  # del jobs[key]; cache.complete
            KR[KR_JOB, key] = -1
            C.complete(S, key, KR[KR_LOADPF, key] == 1)
            KR[KR_LOADPF, key] = 0
            _space_changed(IS, IG, hT, hI, now, h)
        JB[job, J_DONE] = 1  # settle(job.done)
        if JB[job, J_WAITER]:
            schedule(IG, hT, hI, now, NORMAL, EV_STREAM, h)
        _retire(JB, jfree, IS, IG, hT, hI, job, now, h)
    if IS[I_SHARED] and back >= 0:  # OneStream: write-backs first
        _dispatch_back(JB, jfree, IS, IG, hT, hI, gp.free_back, gp.WB, back, now, h)
    _dispatch(S, KR, JB, jfree, IS, IG, hT, hI, free, qb, now, record, out.used_out, h)
