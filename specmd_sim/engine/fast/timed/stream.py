"""The timing engine's compiled core.

:func:`run_block` is :func:`specmd_sim.engine.sim.run.simulate` written over flat arrays, for
every GPU of the run: each GPU's stream (:class:`~specmd_sim.engine.sim.stream.GpuStream`
and :class:`~specmd_sim.engine.layer.LayerStep` in both pin modes, with late hits, prefetch
plans, making room, the host's issue of the copies and the kernels a moving copy lengthens; with
copies on the compute stream, the waits for them to drain), its copy engines
(:class:`~specmd_sim.engine.sim.copy_engines.CopyEngines`: two queues, promotion,
cancellation), its fetcher's callbacks (:class:`~specmd_sim.engine.sim.fetch.Fetcher`), its
cache (:mod:`specmd_sim.engine.fast.cache`; in expert-sharded mode its own shard always a hit) and
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

import numpy as np

from specmd_sim.engine.fast import cache as C
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.fast.timed.copy_engines import (
    _chunk_starts,
)
from specmd_sim.engine.fast.timed.events import (
    _pop,
    schedule,
)
from specmd_sim.engine.fast.timed.fetch import (
    _arrived,
    _plan,
    _resolve,
)
from specmd_sim.engine.fast.timed.flows import (
    _begin,
    _wake,
)
from specmd_sim.engine.fast.timed.state import (
    _SLOT_BITS,
    B_HI,
    B_KEY0,
    B_LANE,
    B_LO,
    B_NPASS,
    B_OFF0,
    B_PASS0,
    B_PKOFF,
    B_POFF,
    B_QB,
    B_T0,
    B_TOFF,
    B_WB_PATH,
    BLOCKED,
    EV_ARM,
    EV_COPY,
    EV_LATENCY,
    EV_MOVED,
    EV_STREAM,
    EV_WAKE,
    F_BEFORE_C,
    F_BEFORE_S,
    F_CSUM,
    F_SSUM,
    F_T0,
    FG_DELAY,
    FG_ISSUE,
    FG_NOW,
    FG_SLOWDOWN,
    G_GEN,
    G_HEAP_N,
    G_JFREE,
    G_NBW,
    G_NCIV,
    G_NFLIGHT,
    G_NSIV,
    G_NSPANS,
    G_NTIV,
    G_NUSED,
    G_RESUME,
    G_STARTED,
    I_ACTIVE2,
    I_ACTIVE_JOBS,
    I_AFTER,
    I_DEC_LAYER,
    I_DEC_PASS,
    I_IDLE,
    I_IDLE2,
    I_IDX,
    I_ISSUED,
    I_LAYER,
    I_NFREE,
    I_NFREE2,
    I_NHELD,
    I_NREADY,
    I_NRUN,
    I_NWAIT,
    I_ONE,
    I_PASS,
    I_PHASE,
    I_RETRY,
    I_SPACE,
    I_STAGE,
    I_STAMP,
    J_DONE,
    J_GPU,
    J_HELD,
    J_RETIRED,
    J_WAITER,
    KR_DEMANDED,
    KR_HOME,
    NORMAL,
    OK,
    PF_ATTN,
    PF_DEADLINE,
    PF_DENSE,
    PF_HEAD,
    PF_NOT_BEFORE,
    PF_WAIT,
    PI_PHASE,
    PI_REQUEST,
    REFILL,
    SK_ATTENTION,
    SK_COPY_ISSUE,
    SK_EXPERT,
    SK_LM_HEAD,
    ST_ADMITTED,
    ST_DRAINED,
    ST_END,
    ST_FINISHED,
    ST_HEAD,
    ST_LAYER,
    ST_ONE,
    ST_ONE_RESOLVE,
    ST_PASS,
    ST_RESOLVE,
    ST_RUN,
    ST_STEP,
    ST_WAITED,
    TL_COMPUTE,
    TL_PHASE_COMPUTE,
    TP_COMPUTE,
    TP_END,
    TP_STALL,
    TP_START,
    URGENT,
    X_DRAIN,
    X_GPUS,
    X_LAYERS,
    X_PINNED,
    X_PREFETCHING,
    X_RECORD,
    X_TENSORS,
    Block,
    Core,
    Flags,
    Gpu,
    Here,
    Out,
    Run,
    Tallies,
)
from specmd_sim.engine.fast.timed.tally import (
    _interval,
    _span,
    _stall,
)
from specmd_sim.engine.jit import compiled, compiled_inline

# what a stage of the stream does next: go on to the next stage, wait (for an event), run a
# kernel (then wait for it), or return for the GPU's next block
A_NEXT, A_WAIT, A_KERNEL, A_REFILL = range(4)
# a stage's outcome: the action and, for a kernel, its seconds, layer, span kind, expert, class
Step = tuple[int, float, int, int, int, int]


@compiled_inline
def _entry(run_i: np.ndarray, run_t: np.ndarray, JB: np.ndarray, row: int, key: int, job: int,
           klass: int, seconds: float) -> None:  # fmt: skip
    """An expert for the stream to run (``job``: the transfer it waits on, if >= 0)."""
    run_i[row, 0], run_i[row, 1], run_i[row, 2], run_t[row] = key, job, klass, seconds
    if job >= 0:
        JB[job, J_HELD] = 1


@compiled_inline
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


@compiled_inline
def _issue(IS: np.ndarray, fl: Flags) -> float:
    """GpuStream._issue: the host time of issuing the copies of experts the step issued since
    the stream last paid for them (0: none, or issuing is free), paid now."""
    copies = IS[I_ISSUED] * fl.tensors
    IS[I_ISSUED] = 0
    return copies * fl.issue_s


@compiled_inline
def _here(B: np.ndarray, g: int) -> Here:
    """GPU ``g``'s place in the call's arrays (its row of ``B``)."""
    return Here(g, B[g, B_KEY0], B[g, B_OFF0], B[g, B_PASS0], B[g, B_QB], B[g, B_LANE],
                B[g, B_TOFF] - B[g, B_T0], B[g, B_LO], B[g, B_WB_PATH])  # fmt: skip


@compiled_inline
def _pass_stages(run: Run, blk: Block, core: Core, tally: Tallies, gp: Gpu, here: Here,
                 stage: int, p: int, now: float) -> Step:  # fmt: skip
    """ST_PASS: the stream admits pass ``p`` (waiting for its arrival), finishes, or returns for
    its next block; ST_ADMITTED: the pass begins (tally, cache), with its dense layers' kernel.
    The stages return what the stream does next and, for a kernel, its seconds, layer, span
    kind, expert and class."""
    IS, row = gp.IS, here.row0 + p
    if stage == ST_PASS:
        if p >= blk.B[here.g, B_NPASS]:
            IS[I_STAGE] = ST_FINISHED
            return A_WAIT, 0.0, -1, -1, -1, -1
        lo, hi = run.PF[row, PF_NOT_BEFORE], run.PF[row, PF_DEADLINE]
        if p >= blk.B[here.g, B_HI] or now < lo or now >= hi:
            core.IG[G_RESUME] = here.g  # (formed ahead, for other arrivals than those by now)
            return A_REFILL, 0.0, -1, -1, -1, -1
        wait = run.PF[row, PF_WAIT]
        IS[I_STAGE] = ST_ADMITTED
        if wait > now:
            schedule(core.IG, core.hT, core.hI, now + (wait - now), NORMAL, EV_STREAM, here.g)
            return A_WAIT, 0.0, -1, -1, -1, -1
        return A_NEXT, 0.0, -1, -1, -1, -1
    tally.TP[row, TP_START] = now
    gp.FS[F_BEFORE_C], gp.FS[F_BEFORE_S] = gp.FS[F_CSUM], gp.FS[F_SSUM]
    IS[I_PHASE] = run.PI[row, PI_PHASE]
    C.begin_pass(gp.S, p)
    IS[I_LAYER] = 0
    IS[I_STAGE] = ST_LAYER
    if run.PF[row, PF_DENSE] < 0:
        return A_NEXT, 0.0, -1, -1, -1, -1
    return A_KERNEL, run.PF[row, PF_DENSE], -1, SK_ATTENTION, -1, -1


@compiled_inline
def _decide(run: Run, gp: Gpu, here: Here, fl: Flags, p: int, layer: int) -> None:
    """ST_STEP, the router decides (LayerStep.layer): the position and demand set prefetches
    see; pinned, the demand set is pinned and classified (its misses resolved next)."""
    IS, S, KR, keys = gp.IS, gp.S, gp.KR, run.keys
    at = here.o0 + p * fl.layers + layer
    lo, hi = run.offsets[at], run.offsets[at + 1]
    IS[I_STAMP] += 1
    for i in range(lo, hi):
        KR[KR_DEMANDED, keys[here.k0 + i]] = IS[I_STAMP]
    IS[I_DEC_PASS], IS[I_DEC_LAYER] = p, layer
    S[L.R_SC, L.SC_LAYER] = layer  # cache.begin_layer
    IS[I_RETRY] = 0  # set while a key's reservation waits for space
    if not fl.pinned:
        IS[I_ONE] = lo
        IS[I_STAGE] = ST_ONE
        return
    for i in range(lo, hi):
        S[L.K_PINS, keys[here.k0 + i]] += 1
    ready = 0
    for i in range(lo, hi):  # classify the demand set
        key = keys[here.k0 + i]
        if fl.next_use:
            C.advance(S, gp.after, key)
        klass = C.access(S, key, layer, p, KR[KR_HOME, key] == 1)
        gp.run_i[i - lo, 3] = klass  # (rows are filled below: classes apart)
        gp.held[i - lo] = key
        if klass == L.HIT:
            ready += 1
    IS[I_ONE], IS[I_NREADY], IS[I_NWAIT] = lo, 0, ready
    IS[I_STAGE] = ST_RESOLVE


@compiled_inline
def _plan_layer(run: Run, blk: Block, core: Core, out: Out, gp: Gpu, here: Here, fl: Flags,
                p: int, layer: int, now: float) -> None:  # fmt: skip
    """The layer's prefetch plan, once its demand set is resolved."""
    if not fl.prefetching:
        return
    B, g = blk.B, here.g
    r = B[g, B_POFF] + (p - here.p_lo) * fl.layers + layer
    a, b = blk.plan_offsets[r], blk.plan_offsets[r + 1]
    _plan(gp.S, gp.KR, core.JB, core.jfree, gp.IS, core.IG, core.hT, core.hI, gp.free, here.qb,
          blk.plan_keys, B[g, B_PKOFF] + a, B[g, B_PKOFF] + b, p, now, fl.record, out.used_out,
          gp.free_back, gp.WB, here.back, g)  # fmt: skip


@compiled_inline
def _fetch(core: Core, out: Out, gp: Gpu, here: Here, fl: Flags, key: int, klass: int, p: int,
           layer: int, now: float) -> int:  # fmt: skip
    """A demanded miss resolved (:func:`.fetch._resolve`): its job, or -1 (resident after all),
    or -3: the stream waits for space (and retries)."""
    IS = gp.IS
    job = _resolve(gp.S, gp.KR, core.JB, core.jfree, IS, core.IG, core.hT, core.hI, gp.free,
                   here.qb, key, klass, p, layer, now, fl.record, out.used_out,
                   IS[I_RETRY] == 1, gp.free_back, gp.WB, here.back, here.g)  # fmt: skip
    if job == -3:
        IS[I_RETRY], IS[I_SPACE] = 1, 1
    else:
        IS[I_RETRY] = 0
    return job


@compiled_inline
def _layer_stages(run: Run, blk: Block, core: Core, out: Out, gp: Gpu, here: Here, fl: Flags,
                  stage: int, p: int, now: float) -> Step:  # fmt: skip
    """ST_LAYER: the next layer's attention (after the copies drain, on the compute stream), or
    the LM head; ST_STEP: its router decides; ST_RESOLVE (pinned): the misses resolved in gate
    order, hits first in the list, then the plan."""
    IS, layer = gp.IS, gp.IS[I_LAYER]
    if stage == ST_LAYER:
        if layer == fl.layers:
            IS[I_STAGE] = ST_HEAD
            return A_NEXT, 0.0, -1, -1, -1, -1
        if fl.drain and _wait_drain(IS, gp.FS, ST_LAYER, now):  # copies on the stream
            return A_WAIT, 0.0, -1, -1, -1, -1
        IS[I_STAGE] = ST_STEP
        return A_KERNEL, run.PF[here.row0 + p, PF_ATTN], layer, SK_ATTENTION, -1, -1
    if stage == ST_STEP:
        _decide(run, gp, here, fl, p, layer)
        return A_NEXT, 0.0, -1, -1, -1, -1
    at = here.o0 + p * fl.layers + layer
    lo, hi = run.offsets[at], run.offsets[at + 1]
    while IS[I_ONE] < hi:
        i = IS[I_ONE]
        key, klass = run.keys[here.k0 + i], gp.run_i[i - lo, 3]
        seconds = blk.t_exp[i + here.t_shift]
        if klass == L.HIT:
            _entry(gp.run_i, gp.run_t, core.JB, IS[I_NREADY], key, -1, klass, seconds)
            IS[I_NREADY] += 1
        else:
            job = _fetch(core, out, gp, here, fl, key, klass, p, layer, now)
            if job == -3:
                return A_WAIT, 0.0, -1, -1, -1, -1
            _entry(gp.run_i, gp.run_t, core.JB, IS[I_NWAIT], key, job, klass, seconds)
            IS[I_NWAIT] += 1
        IS[I_ONE] = i + 1
    _plan_layer(run, blk, core, out, gp, here, fl, p, layer, now)
    IS[I_NHELD] = IS[I_NRUN] = hi - lo
    IS[I_IDX] = 0
    IS[I_STAGE] = ST_RUN
    return A_NEXT, 0.0, -1, -1, -1, -1


@compiled_inline
def _one_stages(run: Run, blk: Block, core: Core, out: Out, gp: Gpu, here: Here, fl: Flags,
                stage: int, p: int, now: float) -> Step:  # fmt: skip
    """One expert at a time (``cache.pin_demand_set: false``), ST_ONE: the next one pinned,
    accessed and, a hit, run (or, none left, the plan and the next layer); ST_ONE_RESOLVE: its
    miss resolved (or the stream waits for space: the stage stays)."""
    IS, S, layer, i = gp.IS, gp.S, gp.IS[I_LAYER], gp.IS[I_ONE]
    if stage == ST_ONE:
        if i == run.offsets[here.o0 + p * fl.layers + layer + 1]:
            _plan_layer(run, blk, core, out, gp, here, fl, p, layer, now)
            IS[I_LAYER] += 1
            IS[I_STAGE] = ST_LAYER
            if IS[I_ISSUED] > 0:  # the step ends: its prefetches' issue
                seconds = _issue(IS, fl)
                if seconds > 0:
                    return A_KERNEL, seconds, layer, SK_COPY_ISSUE, -1, -1
            return A_NEXT, 0.0, -1, -1, -1, -1
        key = run.keys[here.k0 + i]
        S[L.K_PINS, key] += 1
        if fl.next_use:
            C.advance(S, gp.after, key)
        klass = C.access(S, key, layer, p, gp.KR[KR_HOME, key] == 1)
        gp.run_i[0, 3] = klass
        gp.held[0] = key
        IS[I_NHELD] = IS[I_NRUN] = 1
        IS[I_IDX] = 0
        if klass == L.HIT:
            _entry(gp.run_i, gp.run_t, core.JB, 0, key, -1, klass, blk.t_exp[i + here.t_shift])
            IS[I_STAGE] = ST_RUN
        else:
            IS[I_STAGE] = ST_ONE_RESOLVE
        return A_NEXT, 0.0, -1, -1, -1, -1
    key, klass = run.keys[here.k0 + i], gp.run_i[0, 3]
    job = _fetch(core, out, gp, here, fl, key, klass, p, layer, now)
    if job == -3:
        return A_WAIT, 0.0, -1, -1, -1, -1
    _entry(gp.run_i, gp.run_t, core.JB, 0, key, job, klass, blk.t_exp[i + here.t_shift])
    IS[I_STAGE] = ST_RUN
    return A_NEXT, 0.0, -1, -1, -1, -1


@compiled_inline
def _let_go(core: Core, gp: Gpu, fl: Flags) -> None:
    """The layer's experts all ran: their jobs let go, their pins released; the next layer (or,
    one at a time, the next expert)."""
    IS, JB, IG = gp.IS, core.JB, core.IG
    for row in range(IS[I_NRUN]):
        job = gp.run_i[row, 1]
        if job >= 0:
            JB[job, J_HELD] = 0
            if JB[job, J_RETIRED]:
                core.jfree[IG[G_JFREE]] = job
                IG[G_JFREE] += 1
    for h in range(IS[I_NHELD]):
        gp.S[L.K_PINS, gp.held[h]] -= 1
    if fl.pinned:
        IS[I_LAYER] += 1
        IS[I_STAGE] = ST_LAYER
    else:
        IS[I_ONE] += 1
        IS[I_STAGE] = ST_ONE


@compiled_inline
def _run_stages(run: Run, core: Core, out: Out, gp: Gpu, here: Here, fl: Flags, stage: int,
                p: int, now: float) -> Step:  # fmt: skip
    """ST_RUN: the layer's next expert runs once its transfer is done (else the stream waits:
    a stall), the first after the issue of the copies the step issued; ST_WAITED: the stall
    ends, the expert runs; ST_DRAINED: the copies drained (a stall), back to the stage that
    waited."""
    IS, idx, layer = gp.IS, gp.IS[I_IDX], gp.IS[I_LAYER]
    if stage == ST_DRAINED:
        _stall(out.spF, out.spI, core.IG, IS, gp.FS, out.siv, gp.TL, run.PI, here.lane,
               here.row0 + p, layer, -1, -1, now, fl.record, here.g)  # fmt: skip
        IS[I_STAGE] = IS[I_AFTER]
        return A_NEXT, 0.0, -1, -1, -1, -1
    if stage == ST_RUN:
        if idx == 0 and IS[I_ISSUED] > 0:  # (the stage resumes once they are issued)
            seconds = _issue(IS, fl)
            if seconds > 0:
                return A_KERNEL, seconds, layer, SK_COPY_ISSUE, -1, -1
        if idx == 0 and fl.drain and _wait_drain(IS, gp.FS, ST_RUN, now):
            return A_WAIT, 0.0, -1, -1, -1, -1  # (as before attention)
        if idx == IS[I_NRUN]:
            _let_go(core, gp, fl)
            return A_NEXT, 0.0, -1, -1, -1, -1
        job = gp.run_i[idx, 1]
        if job >= 0 and not core.JB[job, J_DONE]:  # wait: a stall
            core.JB[job, J_WAITER] = 1
            gp.FS[F_T0] = now
            IS[I_STAGE] = ST_WAITED
            return A_WAIT, 0.0, -1, -1, -1, -1
    else:
        _stall(out.spF, out.spI, core.IG, IS, gp.FS, out.siv, gp.TL, run.PI, here.lane,
               here.row0 + p, layer, gp.run_i[idx, 0], gp.run_i[idx, 2], now, fl.record,
               here.g)  # fmt: skip
        IS[I_STAGE] = ST_RUN
    IS[I_IDX] = idx + 1
    return A_KERNEL, gp.run_t[idx], layer, SK_EXPERT, gp.run_i[idx, 0], gp.run_i[idx, 2]


@compiled_inline
def _end_stages(run: Run, tally: Tallies, gp: Gpu, here: Here, stage: int, p: int,
                now: float) -> Step:  # fmt: skip
    """ST_HEAD: the LM head's kernel; ST_END: tally.end_pass (the tokens are counted
    afterwards), the next pass."""
    IS, row = gp.IS, here.row0 + p
    if stage == ST_HEAD:
        IS[I_STAGE] = ST_END
        if run.PF[row, PF_HEAD] < 0:
            return A_NEXT, 0.0, -1, -1, -1, -1
        return A_KERNEL, run.PF[row, PF_HEAD], -1, SK_LM_HEAD, -1, -1
    tally.TP[row, TP_END] = now
    tally.TP[row, TP_COMPUTE] = gp.FS[F_CSUM] - gp.FS[F_BEFORE_C]
    tally.TP[row, TP_STALL] = gp.FS[F_SSUM] - gp.FS[F_BEFORE_S]
    IS[I_PASS] = p + 1
    IS[I_STAGE] = ST_PASS
    return A_NEXT, 0.0, -1, -1, -1, -1


@compiled_inline
def _copying(gp: Gpu) -> bool:
    """GpuStream._copying: a copy of the GPU holds one of its copy engines (a fetch's, a
    write-back's: fewer free than there are; CopyEngines.moving)."""
    IS = gp.IS
    return IS[I_NFREE] < gp.free.shape[0] or IS[I_NFREE2] < gp.free_back.shape[0]


@compiled_inline
def _kernel(run: Run, core: Core, out: Out, gp: Gpu, here: Here, fl: Flags, p: int, now: float,
            seconds: float, layer: int, kind: int, key: int, klass: int) -> None:  # fmt: skip
    """A kernel of ``seconds`` on the stream (GpuStream._compute), longer where a copy moves as
    it starts (the host's copy issue excepted), which then waits for it."""
    if fl.slowdown != 1.0 and kind != SK_COPY_ISSUE and _copying(gp):
        seconds *= fl.slowdown
    end = now + seconds
    if fl.record:
        _span(out.spF, out.spI, core.IG, here.lane, kind, now, end, here.row0 + p, layer, key,
              0, run.PI[here.row0 + p, PI_REQUEST], klass)  # fmt: skip
    if end > now:
        _interval(out.civ, core.IG, G_NCIV, now, end, here.g)
        gp.FS[F_CSUM] += end - now
    if layer >= 0:
        gp.TL[TL_COMPUTE, layer] += seconds
        gp.TL[TL_PHASE_COMPUTE + gp.IS[I_PHASE], layer] += seconds
    schedule(core.IG, core.hT, core.hI, end, NORMAL, EV_STREAM, here.g)


@compiled_inline
def _stream(run: Run, blk: Block, core: Core, tally: Tallies, out: Out, gp: Gpu, here: Here,
            fl: Flags) -> int:  # fmt: skip
    """GPU ``here.g``'s stream, from where it stopped to its next wait (A_WAIT) or to the end of
    its block (A_REFILL)."""
    IS = gp.IS
    while True:
        stage, p, now = IS[I_STAGE], IS[I_PASS], core.FG[FG_NOW]
        if stage in (ST_PASS, ST_ADMITTED):
            step = _pass_stages(run, blk, core, tally, gp, here, stage, p, now)
        elif stage in (ST_LAYER, ST_STEP, ST_RESOLVE):
            step = _layer_stages(run, blk, core, out, gp, here, fl, stage, p, now)
        elif stage in (ST_ONE, ST_ONE_RESOLVE):
            step = _one_stages(run, blk, core, out, gp, here, fl, stage, p, now)
        elif stage in (ST_RUN, ST_WAITED, ST_DRAINED):
            step = _run_stages(run, core, out, gp, here, fl, stage, p, now)
        else:
            step = _end_stages(run, tally, gp, here, stage, p, now)
        action, seconds, layer, kind, key, klass = step
        if action == A_KERNEL:
            _kernel(run, core, out, gp, here, fl, p, now, seconds, layer, kind, key, klass)
            return A_WAIT
        if action != A_NEXT:
            return action


@compiled_inline
def _event_gpu(core: Core, kind: int, arg: int, cur: int) -> int:
    """The GPU an event is for (the network's: the one in hand)."""
    if kind == EV_STREAM:
        return arg
    if kind == EV_COPY:
        return core.JB[arg >> _SLOT_BITS, J_GPU]
    if kind == EV_MOVED:
        return core.JB[arg, J_GPU]
    return cur


@compiled_inline
def _event(run: Run, blk: Block, core: Core, tally: Tallies, out: Out, gp: Gpu, here: Here,
           fl: Flags, kind: int, arg: int, now: float) -> None:  # fmt: skip
    """The callback the Python engine would run for an event other than the stream's."""
    if kind == EV_COPY:
        _chunk_starts(run, core, tally, out, gp.IS, gp.FS, arg, now, fl.R, fl.record, here.g)
    elif kind == EV_LATENCY:
        _begin(core.IG, core.FG, core.hT, core.hI, arg, core.JB, core.FL, core.act, run.PR,
               run.PL, run.PCAP, core.NF, core.NI, fl.R, out.bw_out, fl.record,
               run.DTAB)  # fmt: skip
    elif kind == EV_ARM:
        if arg == core.IG[G_GEN]:
            schedule(core.IG, core.hT, core.hI, now + core.FG[FG_DELAY], NORMAL, EV_WAKE, arg)
    elif kind == EV_WAKE:
        _wake(run, core, out, arg, now, fl.R, fl.record)
    else:  # EV_MOVED
        _arrived(run, blk, core, tally, out, gp, here, arg, now, fl.record)


@compiled
def _finished(core: Core, gpus: int) -> int:
    """No event left: OK where every stream finished, else BLOCKED (as SimPy's run ends)."""
    for h in range(gpus):
        if core.IS[h, I_STAGE] != ST_FINISHED:
            return BLOCKED
    return OK


@compiled
def run_block(run: Run, blk: Block, core: Core, tally: Tallies, out: Out) -> int:
    """Run every GPU's passes up to the end of its block ``B[g, B_LO] .. B[g, B_HI] - 1`` (see
    the module docstring; GPU ``g``'s rows are ``core.S[g]``, ``core.KR[g]``, ``core.IS[g]``
    ...; its keys and offsets start at ``B[g, B_KEY0]`` and ``B[g, B_OFF0]``, its block's
    expert times at ``B[g, B_TOFF]`` for access ``B[g, B_T0]``, its plans' offsets at
    ``B[g, B_POFF]`` (indexed from its block's first layer, into its keys from
    ``B[g, B_PKOFF]``). OK; BLOCKED: a stream waits on nothing that can happen (as SimPy's run
    would end); or REFILL + g: GPU ``g``'s stream is about to begin the pass after its block,
    to continue once it has a new one."""
    X, IG, hT, hI = run.X, core.IG, core.hT, core.hI
    fl = Flags(X[X_LAYERS], X[X_PINNED] == 1, X[X_RECORD] == 1,
               core.S[0, L.R_SC, L.SC_PRIORITY] == L.PRIO_NEXT_USE,  # (one policy for all)
               X[X_PREFETCHING] == 1, X[X_DRAIN] == 1, X[X_GPUS],
               core.NF.shape[1] - core.act.size, X[X_TENSORS], core.FG[FG_ISSUE],
               core.FG[FG_SLOWDOWN])  # fmt: skip
    IG[G_NSPANS] = IG[G_NCIV] = IG[G_NSIV] = IG[G_NTIV] = 0
    IG[G_NUSED] = IG[G_NFLIGHT] = IG[G_NBW] = 0
    if not IG[G_STARTED]:  # each stream's process starts: an urgent event each, in GPU order
        IG[G_STARTED] = 1
        for h in range(fl.gpus):
            schedule(IG, hT, hI, 0.0, URGENT, EV_STREAM, h)
    cur = IG[G_RESUME]  # the GPU whose block was refilled continues at once
    IG[G_RESUME] = -1
    resume = cur >= 0
    cur = max(cur, 0)  # the GPU whose arrays are in hand
    while True:  # (each GPU's arrays taken once per run of its events, not per event)
        gp = Gpu(core.S[cur], core.after[cur], core.KR[cur], core.IS[cur], core.FS[cur],
                 core.free[cur], core.run_i[cur], core.run_t[cur], core.held[cur],
                 tally.TL[cur], core.free_back[cur], core.WB[cur])  # fmt: skip
        here = _here(blk.B, cur)
        while True:
            if resume:
                resume = False
                if _stream(run, blk, core, tally, out, gp, here, fl) == A_REFILL:
                    return REFILL + cur
            if IG[G_HEAP_N] == 0:
                return _finished(core, fl.gpus)
            kind, arg = hI[0, 2], hI[0, 3]
            g = _event_gpu(core, kind, arg, cur)
            if g != cur:  # another GPU's: take its arrays, then the event
                cur = g
                break
            now = hT[0]
            _pop(IG, hT, hI)
            core.FG[FG_NOW] = now
            if kind == EV_STREAM:
                resume = True
            else:
                _event(run, blk, core, tally, out, gp, here, fl, kind, arg, now)
