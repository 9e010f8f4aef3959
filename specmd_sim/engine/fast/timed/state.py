"""The state of the timing engine's compiled core: the layout of its arrays (their rows, columns
and codes), as :mod:`specmd_sim.engine.fast.layout` is the replay kernel's, and the arrays that
live from block to block. Numba-free.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

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
SK_PROMOTED = 9  # a prefetch needed before it completed (J_DEMAND == PROMOTED)
SK_STREAMED = 10  # a demand fetch streamed past the cache (J_BYPASS)
SK_COPY_ISSUE = 11  # the host issuing the copies of experts a layer step issued
PROMOTED = 2  # J_DEMAND of a promoted prefetch (truthy: it is in the demand class now)
LATE = 1  # AccessClass.LATE_HIT
LOADING = 1  # State.LOADING

# the run's int scalars (IG): the event heap, the flow network, the job pool, the outputs
(G_EID, G_GEN, G_COUNT, G_HEAP_N, G_NACT, G_FIRST, G_JFREE, G_NSPANS, G_NCIV, G_NSIV, G_NTIV,
 G_NUSED, G_NFLIGHT, G_NBW, G_RESUME, G_STARTED) = range(16)  # fmt: skip
G_SIZE = G_STARTED + 1
# the run's float scalars (FG; FG_ISSUE: the host time of issuing a tensor's copy; FG_SLOWDOWN:
# a kernel's time beside a moving copy over its time alone)
FG_NOW, FG_NET_LAST, FG_DELAY, FG_ISSUE, FG_SLOWDOWN = range(5)
FG_SIZE = FG_SLOWDOWN + 1
# each GPU's int scalars (IS rows): its stream, copy engines and transfers
(I_STAGE, I_PASS, I_LAYER, I_IDX, I_NRUN, I_ONE, I_RETRY, I_NREADY, I_NWAIT, I_IN_FLIGHT,
 I_BUSY_ACTIVE, I_NFREE, I_ACTIVE_JOBS, I_PHASE, I_NHELD, I_DEC_PASS, I_DEC_LAYER, I_STAMP,
 I_SPACE, I_IDLE, I_AFTER, I_NFREE2, I_ACTIVE2, I_IDLE2, I_WB_HEAD,
 I_WB_COUNT, I_SHARED, I_SBUSY, I_ISSUED) = range(29)  # fmt: skip
I_SIZE = I_ISSUED + 1  # (..2: the device-to-host copy engines of memory parity's write-backs;
# I_SHARED: copies on the compute stream, one moving at a time (OneStream), I_SBUSY: one moves;
# I_ISSUED: the copies of experts the layer step issued that the stream has not paid for)
# each GPU's float scalars (FS rows)
F_CSUM, F_SSUM, F_BEFORE_C, F_BEFORE_S, F_T0, F_BUSY_SINCE, F_TSUM = range(7)
F_SIZE = F_TSUM + 1
# static ints (X; X_TENSORS: the copies an expert takes)
X_LAYERS, X_PINNED, X_RECORD, X_PREFETCHING, X_DRAIN, X_CHUNK, X_GPUS, X_TENSORS = range(8)
X_SIZE = X_TENSORS + 1
# each GPU's block (B rows): where its keys and offsets start in the run's arrays, its first
# pass's number, its passes; the block's passes, where its expert times start (the access and
# the index in the times) and its plans (offsets, keys); its compute lane and its queues' rows
(B_KEY0, B_OFF0, B_PASS0, B_NPASS, B_LO, B_HI, B_T0, B_TOFF, B_POFF, B_PKOFF, B_LANE,
 B_QB, B_WB_PATH) = range(13)  # fmt: skip
B_SIZE = B_WB_PATH + 1  # (B_WB_PATH: the path of its write-backs, -1: no memory parity)
# per pass, rows from each GPU's B_PASS0 (PF floats, PI ints)
# (PF_DENSE, PF_HEAD < 0: none; PF_NOT_BEFORE, PF_DEADLINE: a pass formed ahead (an online
# schedule's) is given back, unstarted, where its stream reaches it before the one or at or
# after the other: -inf and +inf for the others)
PF_ATTN, PF_DENSE, PF_HEAD, PF_WAIT, PF_NOT_BEFORE, PF_DEADLINE = range(6)
PF_SIZE = PF_DEADLINE + 1
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


class Run(NamedTuple):
    """What a run's calls share: the GPUs' access sequences (``keys`` between ``offsets``, each
    GPU's from its block row's ``B_KEY0``/``B_OFF0``), the pass tables (``PF`` floats, ``PI``
    ints), the static ints ``X``, the copy engines' lanes, and the machine's transfer paths:
    their resources (``PR``, ``PL`` of them), latencies, private rate caps, drive request sizes
    and the drive's bandwidth table."""

    keys: np.ndarray
    offsets: np.ndarray
    PF: np.ndarray
    PI: np.ndarray
    X: np.ndarray
    lanes: np.ndarray
    back_lanes: np.ndarray
    PR: np.ndarray
    PL: np.ndarray
    PLAT: np.ndarray
    PCAP: np.ndarray
    PREQ: np.ndarray
    DTAB: np.ndarray


class Block(NamedTuple):
    """A call's blocks: each GPU's row of ``B`` (``B_*``), the expert times, the plans."""

    B: np.ndarray
    t_exp: np.ndarray
    plan_offsets: np.ndarray
    plan_keys: np.ndarray


class Core(NamedTuple):
    """The arrays that live from call to call (per GPU where the first axis is the GPU's):
    each GPU's cache state ``S`` (:mod:`specmd_sim.engine.fast.layout`) and next uses, the
    scalars, the event heap, the job pool and its flows, each GPU's keys' rows, copy slots and
    stream lists, the network's rows and the write-backs' rings."""

    S: np.ndarray
    after: np.ndarray
    IG: np.ndarray
    FG: np.ndarray
    IS: np.ndarray
    FS: np.ndarray
    hT: np.ndarray
    hI: np.ndarray
    JB: np.ndarray
    FL: np.ndarray
    jfree: np.ndarray
    KR: np.ndarray
    free: np.ndarray
    act: np.ndarray
    NF: np.ndarray
    NI: np.ndarray
    run_i: np.ndarray
    run_t: np.ndarray
    held: np.ndarray
    free_back: np.ndarray
    WB: np.ndarray


class Tallies(NamedTuple):
    """The sums the core adds to: per GPU and layer (``TL``), per pass (``TP``), each copy
    engine's busy time and bytes, the paths used."""

    TL: np.ndarray
    TP: np.ndarray
    engine_busy: np.ndarray
    engine_bytes: np.ndarray
    back_busy: np.ndarray
    back_bytes: np.ndarray
    used_paths: np.ndarray


class Out(NamedTuple):
    """A call's records (counted in ``IG``): spans (``spF`` floats, ``spI`` ints), compute,
    stall and transfer intervals, occupancy, bytes in flight and bandwidth samples."""

    spF: np.ndarray
    spI: np.ndarray
    civ: np.ndarray
    siv: np.ndarray
    tiv: np.ndarray
    used_out: np.ndarray
    flight_out: np.ndarray
    bw_out: np.ndarray


class Gpu(NamedTuple):
    """One GPU's rows of :class:`Core` and :class:`Tallies` (views, taken once per run of its
    events)."""

    S: np.ndarray
    after: np.ndarray
    KR: np.ndarray
    IS: np.ndarray
    FS: np.ndarray
    free: np.ndarray
    run_i: np.ndarray
    run_t: np.ndarray
    held: np.ndarray
    TL: np.ndarray
    free_back: np.ndarray
    WB: np.ndarray


class Here(NamedTuple):
    """One GPU's place in the call's arrays: its number, its first key, offset and pass row,
    its queues' rows, its compute lane, the shift from an access to its expert time
    (``t_exp[i + t_shift]``), its block's first pass and its write-backs' path (-1: none)."""

    g: int
    k0: int
    o0: int
    row0: int
    qb: int
    lane: int
    t_shift: int
    p_lo: int
    back: int


class Flags(NamedTuple):
    """The run's settings the core branches on: layers, pinned demand sets, spans recorded,
    Belady's next uses, prefetching, copies on the compute stream (waits for them to drain),
    GPUs, the network's resources (the flows' private caps come after them), the copies an
    expert takes, the host time of issuing one (0: issuing is free) and the factor a kernel
    that starts beside a moving copy is lengthened by (1: copies cost the compute nothing)."""

    layers: int
    pinned: bool
    record: bool
    next_use: bool
    prefetching: bool
    drain: bool
    gpus: int
    R: int
    tensors: int
    issue_s: float
    slowdown: float


def new_state(
    S: np.ndarray, after: np.ndarray, keys: int, jobs: int, engines: int, resources: int,
    run_rows: int, backs: int,
) -> Core:  # fmt: skip
    """The arrays that live from call to call, for GPUs whose cache states are ``S`` (and next
    uses ``after``): the scalars, the event heap, the job pool and each GPU's queues, each GPU's
    keys' rows, the network's rows and each stream's lists; ``backs``: each GPU's device-to-host
    copy engines (memory parity's write-backs), whose queue is a ring (``WB``, grown between
    calls by :func:`grow_write_backs`)."""
    gpus = S.shape[0]
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
    return Core(
        S=S, after=after, IG=IG, FG=np.zeros(FG_SIZE), IS=IS, FS=np.zeros((gpus, F_SIZE)),
        hT=np.zeros(1 << 14), hI=np.zeros((1 << 14, 4), np.int64), JB=JB,
        FL=np.zeros((jobs, 4)), jfree=np.arange(jobs - 1, -1, -1, dtype=np.int64),
        KR=KR, free=np.tile(np.arange(engines, dtype=np.int64), (gpus, 1)),
        act=np.zeros(gpus * (engines + backs) + 1, np.int64),
        NF=np.zeros((6, width)), NI=np.zeros((9, width), np.int64),
        run_i=np.zeros((gpus, run_rows, 4), np.int64), run_t=np.zeros((gpus, run_rows)),
        held=np.zeros((gpus, run_rows), np.int64),
        free_back=np.tile(np.arange(backs, dtype=np.int64), (gpus, 1)),
        WB=np.zeros((gpus, 64, 4), np.int64),
    )  # fmt: skip


def grow_write_backs(core: Core, room: int) -> Core:
    """``core`` with each GPU's ring of queued write-backs holding ``room`` more than it holds
    (each queue's entries moved to its start, in order)."""
    WB, IS = core.WB, core.IS
    need = int(IS[:, I_WB_COUNT].max()) + room
    if need <= WB.shape[1]:
        return core
    grown = np.zeros((WB.shape[0], max(need, 2 * WB.shape[1]), 4), np.int64)
    for g in range(WB.shape[0]):
        order = (IS[g, I_WB_HEAD] + np.arange(IS[g, I_WB_COUNT])) % WB.shape[1]
        grown[g, : order.size] = WB[g, order]
    IS[:, I_WB_HEAD] = 0
    return core._replace(WB=grown)
