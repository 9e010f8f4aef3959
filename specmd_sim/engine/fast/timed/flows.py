"""The machine's flow network in the compiled core (the twin of
:class:`~specmd_sim.engine.sim.flows.FlowNetwork`): progressive filling over each flow's path.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast.timed.events import (
    schedule,
)
from specmd_sim.engine.fast.timed.state import (
    _EPS,
    EV_ARM,
    EV_MOVED,
    FG_DELAY,
    FG_NET_LAST,
    FG_NOW,
    FL_NBYTES,
    FL_RATE,
    FL_REMAINING,
    G_COUNT,
    G_FIRST,
    G_GEN,
    G_NACT,
    G_NBW,
    J_CHUNK,
    J_DEPTH,
    J_ORDER,
    J_PATH,
    N_BUSY,
    N_CAP,
    N_CARRIED,
    N_LAST,
    N_RESIDUAL,
    NI_BUSY,
    NI_DEPTH,
    NI_DYN,
    NI_FROZEN,
    NI_HAS,
    NI_LAST_HAS,
    NI_MARK,
    NI_USERS,
    NORMAL,
    URGENT,
    Core,
    Out,
    Run,
)
from specmd_sim.engine.jit import compiled, compiled_inline


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


@compiled_inline
def _rate_alone(JB: np.ndarray, act: np.ndarray, FL: np.ndarray, PR: np.ndarray, PL: np.ndarray,
                PCAP: np.ndarray, NF: np.ndarray, NI: np.ndarray) -> bool:  # fmt: skip
    """FlowNetwork._rate_alone: a flow alone moves at its narrowest resource's capacity (False:
    its path crosses a drive, whose capacity depends on the reads: it is filled)."""
    path = JB[act[0], J_PATH]
    cap = NF[N_CAP]
    for j in range(PL[path]):
        if NI[NI_DYN, PR[path, j]]:
            return False
    rate = cap[PR[path, 0]]
    for i in range(1, PL[path]):
        rate = min(rate, cap[PR[path, i]])
    if PCAP[path] >= 0 and PCAP[path] < rate:
        rate = PCAP[path]
    FL[act[0], FL_RATE] = rate
    return True


@compiled_inline
def _fill_start(nact: int, JB: np.ndarray, act: np.ndarray, PR: np.ndarray, PL: np.ndarray,
                PCAP: np.ndarray, NF: np.ndarray, NI: np.ndarray, R: int,
                DTAB: np.ndarray) -> None:  # fmt: skip
    """Progressive filling's start: each resource's users and residual capacity (a drive's at
    the reads outstanding on it), a private resource per capped flow, no flow frozen."""
    cap, residual, users, frozen = NF[N_CAP], NF[N_RESIDUAL], NI[NI_USERS], NI[NI_FROZEN]
    dyn, depth = NI[NI_DYN], NI[NI_DEPTH]
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


@compiled_inline
def _bottleneck(nact: int, JB: np.ndarray, act: np.ndarray, NF: np.ndarray, NI: np.ndarray,
                R: int) -> tuple[int, float]:  # fmt: skip
    """The resource with the least fair share (residual over users) and that share; ties go to
    the lowest name (the paths' resources sort before the private ``~flow<n>``)."""
    residual, users = NF[N_RESIDUAL], NI[NI_USERS]
    best, share = -1, 0.0
    for r in range(R + nact):
        if users[r] == 0:
            continue
        s = residual[r] / users[r]
        if best < 0 or s < share:
            best, share = r, s
        elif s == share:
            if r >= R and best >= R:
                if _private_less(JB[act[r - R], J_ORDER], JB[act[best - R], J_ORDER]):
                    best = r
            elif r < best:
                best = r
    return best, share


@compiled_inline
def _freeze(nact: int, best: int, share: float, JB: np.ndarray, act: np.ndarray,
            FL: np.ndarray, PR: np.ndarray, PL: np.ndarray, PCAP: np.ndarray, NF: np.ndarray,
            NI: np.ndarray, R: int) -> int:  # fmt: skip
    """Every unfrozen flow through the bottleneck ``best`` moves at ``share``, and leaves the
    filling (its resources give up that share); the flows frozen."""
    residual, users, frozen = NF[N_RESIDUAL], NI[NI_USERS], NI[NI_FROZEN]
    done = 0
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
        done += 1
        for j in range(PL[path]):
            r = PR[path, j]
            residual[r] -= share
            users[r] -= 1
        if PCAP[path] >= 0:
            residual[R + i] -= share
            users[R + i] -= 1
    return done


@compiled
def _rates(
    IG: np.ndarray, act: np.ndarray, FL: np.ndarray, JB: np.ndarray, PR: np.ndarray,
    PL: np.ndarray, PCAP: np.ndarray, NF: np.ndarray, NI: np.ndarray, R: int, DTAB: np.ndarray,
) -> None:  # fmt: skip
    """FlowNetwork._rates: every active flow's rate, by progressive filling over the resources
    of its path (``PR[path, :PL[path]]``) and, where the path's ``PCAP`` is >= 0, a private
    resource of that capacity; a drive's capacity is ``DTAB`` at the reads outstanding on it
    (``NVMeNode.read_bandwidth``, capped at the table's last depth)."""
    nact = IG[G_NACT]
    if nact == 1 and _rate_alone(JB, act, FL, PR, PL, PCAP, NF, NI):
        return
    _fill_start(nact, JB, act, PR, PL, PCAP, NF, NI, R, DTAB)
    left = nact
    while left > 0:
        best, share = _bottleneck(nact, JB, act, NF, NI, R)
        left -= _freeze(nact, best, share, JB, act, FL, PR, PL, PCAP, NF, NI, R)


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


@compiled_inline
def _wake(run: Run, core: Core, out: Out, arg: int, now: float, R: int, record: bool) -> None:
    """FlowNetwork._wake (``arg``: the generation it was armed in; stale unless no flow
    started or ended since): the first flow to finish, and those within ``_EPS`` of their
    size, are done."""
    IG, FL, act = core.IG, core.FL, core.act
    if arg != IG[G_GEN]:
        return
    _advance(IG, core.FG, act, FL, core.JB, run.PR, run.PL, core.NF, core.NI, R, out.bw_out,
             record)  # fmt: skip
    FL[IG[G_FIRST], FL_REMAINING] = 0.0
    nact, kept = IG[G_NACT], 0
    for i in range(nact):
        f = act[i]
        if nact == 1 or FL[f, FL_REMAINING] <= _EPS * FL[f, FL_NBYTES]:
            schedule(IG, core.hT, core.hI, now, NORMAL, EV_MOVED, f)
        else:
            act[kept] = f
            kept += 1
    IG[G_NACT] = kept
    if kept == 0 and record:
        _sample_bandwidth(IG, act, FL, core.JB, run.PR, run.PL, now, core.NF, core.NI, R,
                          out.bw_out)  # fmt: skip
    _reschedule(IG, core.FG, core.hT, core.hI, act, FL, core.JB, run.PR, run.PL, run.PCAP,
                core.NF, core.NI, R, run.DTAB)  # fmt: skip
