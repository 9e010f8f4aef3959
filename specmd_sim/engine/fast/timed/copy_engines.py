"""Each GPU's copy engines in the compiled core (the twin of
:class:`~specmd_sim.engine.sim.copy_engines.CopyEngines` and memory parity's
:class:`~specmd_sim.engine.sim.fetch.WriteBacks`): two queues, promotion, cancellation, the
job pool, and the fetcher's callbacks the engines call (an obsolete prefetch cancelled, a
job retired).
"""

from __future__ import annotations

import math

import numpy as np

from specmd_sim.engine.fast import cache as C
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.fast.timed.events import (
    schedule,
)
from specmd_sim.engine.fast.timed.flows import (
    _begin,
)
from specmd_sim.engine.fast.timed.state import (
    _SLOT_BITS,
    B_PASS0,
    EV_COPY,
    EV_LATENCY,
    EV_STREAM,
    F_BUSY_SINCE,
    FL_START,
    G_JFREE,
    G_NFLIGHT,
    G_NUSED,
    I_ACTIVE2,
    I_ACTIVE_JOBS,
    I_BUSY_ACTIVE,
    I_DEC_LAYER,
    I_DEC_PASS,
    I_IDLE,
    I_IDLE2,
    I_IN_FLIGHT,
    I_NFREE,
    I_NFREE2,
    I_SBUSY,
    I_SHARED,
    I_SPACE,
    I_STAMP,
    I_WB_COUNT,
    I_WB_HEAD,
    J_BACK,
    J_CHUNK,
    J_DEMAND,
    J_DEPTH,
    J_DONE,
    J_GPU,
    J_HELD,
    J_KEY,
    J_LAYER,
    J_LEFT,
    J_NEXT,
    J_PASS,
    J_PATH,
    J_PREV,
    J_QUEUE,
    J_RETIRED,
    J_SLOT,
    J_STARTED,
    KR_DEMANDED,
    KR_JOB,
    KR_LOADPF,
    NORMAL,
    PI_REQUEST,
    SK_WRITE_BACK,
    URGENT,
    WB_KEY,
    WB_LAYER,
    WB_LEFT,
    WB_PASS,
    X_CHUNK,
    Core,
    Out,
    Run,
    Tallies,
)
from specmd_sim.engine.fast.timed.tally import (
    _sample,
    _span,
)
from specmd_sim.engine.jit import compiled, compiled_inline


@compiled
def _space_changed(IS: np.ndarray, IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, now: float,
                   g: int) -> None:  # fmt: skip
    """The fetcher's cache listener: the stream waiting for space (make_room) resumes."""
    if IS[I_SPACE]:
        IS[I_SPACE] = 0
        schedule(IG, hT, hI, now, NORMAL, EV_STREAM, g)


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


@compiled
def _cancel(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, jfree: np.ndarray, IS: np.ndarray,
            IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, job: int, now: float, record: bool,
            used_out: np.ndarray, g: int) -> None:  # fmt: skip
    """Fetcher._cancelled and the job's retirement: an unstarted prefetch abandoned."""
    key = JB[job, J_KEY]
    KR[KR_JOB, key] = -1
    C.cancel(S, key)
    if record:
        _sample(used_out, IG, G_NUSED, now, S[L.R_SC, L.SC_USED], g)
    KR[KR_LOADPF, key] = 0
    _space_changed(IS, IG, hT, hI, now, g)
    JB[job, J_DONE] = 1  # settle(job.done): nothing waits on a prefetch
    _retire(JB, jfree, IS, IG, hT, hI, job, now, g)


@compiled
def _obsolete(S: np.ndarray, KR: np.ndarray, JB: np.ndarray, IS: np.ndarray, job: int) -> bool:
    """Fetcher._prefetch_obsolete: its target layer's router has decided, and the layer now
    running does not use it."""
    key, tp, tl = JB[job, J_KEY], JB[job, J_PASS], JB[job, J_LAYER]
    dp, dl = IS[I_DEC_PASS], IS[I_DEC_LAYER]
    reached = dp > tp or (dp == tp and dl >= tl)
    return reached and S[L.K_PINS, key] == 0 and KR[KR_DEMANDED, key] != IS[I_STAMP]


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


@compiled_inline
def _chunk_starts(run: Run, core: Core, tally: Tallies, out: Out, IS: np.ndarray,
                  FS: np.ndarray, arg: int, now: float, R: int, record: bool,
                  h: int) -> None:  # fmt: skip
    """CopyEngines._run, Fetcher._move_chunk (``arg``: the job and its slot): the job's next
    chunk starts on the slot, its flow after the path's latency."""
    JB, FL, IG = core.JB, core.FL, core.IG
    job, slot = arg >> _SLOT_BITS, arg & ((1 << _SLOT_BITS) - 1)
    JB[job, J_SLOT], JB[job, J_STARTED] = slot, 1
    chunk = JB[job, J_LEFT]  # fetch.split: chunks of X_CHUNK bytes, the last shorter
    if run.X[X_CHUNK] > 0 and chunk > run.X[X_CHUNK]:
        chunk = run.X[X_CHUNK]
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
            _sample(out.flight_out, IG, G_NFLIGHT, now, IS[I_IN_FLIGHT], h)
        tally.used_paths[path] = 1
        if run.PREQ[path] > 0:  # from a drive: its reads outstanding
            JB[job, J_DEPTH] = math.ceil(chunk / run.PREQ[path])
    if run.PLAT[path] > 0:
        schedule(IG, core.hT, core.hI, now + run.PLAT[path], NORMAL, EV_LATENCY, job)
    else:
        _begin(IG, core.FG, core.hT, core.hI, job, JB, FL, core.act, run.PR, run.PL, run.PCAP,
               core.NF, core.NI, R, out.bw_out, record, run.DTAB)  # fmt: skip
