"""The timing engine on its compiled core (:mod:`specmd_sim.engine.fast.timed`), for the runs it
covers: :func:`simulate <specmd_sim.engine.sim.run.simulate>` builds the run as always, and
where :func:`compiled_unsupported` is None, :func:`run_compiled` runs every GPU's passes on
the core instead of on SimPy processes, and fills the same tallies, network counters, spans,
counter samples and cache counters the processes would have: the results are the same, byte
for byte (``tests/engine/test_sim_compiled.py`` compares every field on random runs).

Covered: any number of GPUs (replicas or expert-sharded) whose experts sit in host DRAM, on an
NVMe drive (its bandwidth at the reads outstanding on it) or in a peer's HBM, the eviction
policies of the compiled replay
(:func:`specmd_sim.engine.fast.compiled_unsupported` says which), misses always fetched, no
prefetcher or one whose plans the replay draws in bulk (top-k and score-threshold over the
noisy oracle or the trace's scores: :mod:`specmd_sim.engine.fast.plans`), a copy per expert
(in chunks or not, on their own stream or on the compute stream, its issue paid by the stream
or free, slowing the kernels that start beside it or not), memory parity's write-backs (on the
device-to-host copy engines) and a fixed cache capacity. Everything else (the DRAM cache, CPU
experts, dropped or substituted experts, a capacity that follows the KV cache, users' plug-ins)
runs on SimPy, which stays the specification. An online schedule (``workload.schedule:
online``) forms its steps between the core's calls: the core returns for a refill where a GPU's
stream is ready for a pass not yet formed, and the step is formed at the core's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmd_sim.engine import jit
from specmd_sim.engine.common import Progress
from specmd_sim.engine.fast import compiled_unsupported as kernel_unsupported
from specmd_sim.engine.fast import kernel, kernel_state, kernel_stats
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.fast.plans import BulkPlans
from specmd_sim.engine.fast.timed import state as T
from specmd_sim.engine.fast.timed.events import schedule as push_event
from specmd_sim.engine.fast.timed.stream import run_block
from specmd_sim.engine.layer import bulk_plans_unsupported
from specmd_sim.engine.sim.fetch import Fetcher, WriteBacks, split
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.engine.sim.stream import pass_kernel_times
from specmd_sim.engine.sim.tally import GpuTally
from specmd_sim.hardware import write_back_path
from specmd_sim.hardware.schema import GPUNode
from specmd_sim.models import CostModel
from specmd_sim.scenario import RunObjects, Scenario
from specmd_sim.scenario.schedule import WAIT, Pace
from specmd_sim.timeline import COUNTER_DTYPE, SPAN_DTYPE, SpanRecorder

_BLOCK_ACCESSES = 1 << 16  # passes are run in blocks of about this many accesses
FORMED_AHEAD = 256
"""Steps an online schedule forms ahead of one whose requests an arrival may change, each for
the requests expected to have arrived when it starts (:meth:`_Core._pace`): the core gives
back, unstarted, the first of them that its stream reaches outside its window
(``PF_NOT_BEFORE``, ``PF_DEADLINE``), and the schedule forms again from there. Without it the
core would return to Python before every step at low arrival rates."""
_BLOCK_SCORES = 1 << 22  # ... and of at most this many predicted scores (the plans')
_EMPTY, _EMPTY_F = np.zeros(0, np.int64), np.zeros(0)


@dataclass(frozen=True)
class GpuParts:
    """What the core fills for one GPU: the run's objects and its stream's parts."""

    objs: RunObjects
    node: GPUNode
    cost: CostModel
    tally: GpuTally
    fetcher: Fetcher
    compute_lane: int
    write_backs: WriteBacks | None  # memory parity's


def compiled_unsupported(scenario: Scenario, runs: list[RunObjects]) -> str | None:
    """None when :func:`run_compiled` covers the run, else why not (a phrase). Asked before the
    run's parts are built (which attach the fetcher to the cache), by the one coverage check
    (:func:`specmd_sim.engine.coverage.simulate_path`)."""
    if not jit.available():
        return jit.UNCOMPILED
    engines = {(gpu.copy_engines_h2d.value, gpu.copy_engines_d2h.value) for gpu in scenario.gpus}
    if len(engines) > 1:
        return "GPUs with different numbers of copy engines"
    paths = []  # those the transfers take: the experts' sources, and the write-backs'
    if scenario.runtime.memory_parity.value:
        paths = [write_back_path(scenario.profile, gpu.id) for gpu in scenario.gpus]
    for run in runs:
        why = kernel_unsupported(run, home=True)  # the policies, plans, miss handler, capacity
        if why is None and run.prefetch.lookahead > 0:
            why = bulk_plans_unsupported(run)  # (the plans' draws, made a block ahead)
        if why is not None:
            return why
        paths += [run.ctx.paths[i] for i in np.unique(run.ctx.source[run.ctx.source >= 0])]
    for path in paths:
        if len(set(path.resources)) != len(path.resources) or any(r >= "~" for r in path.resources):
            return "a path through a resource twice, or one named after '~'"
    return None


def run_compiled(
    gpus: list[GpuParts],
    network: FlowNetwork,
    spans: SpanRecorder,
    progress: Progress | None = None,
) -> None:
    """Run every GPU's passes on the compiled core (:func:`compiled_unsupported` must be None),
    filling each GPU's tally and cache counters, ``network`` and ``spans`` as the SimPy
    processes would. Raises RuntimeError where the Python engine would: a stream left waiting
    on nothing."""
    core = _Core(gpus, network, spans)
    blocks = [
        _Blocks(g.objs, g.cost, k, o, len(gpus)) for g, k, o in zip(gpus, *core.demand, strict=True)
    ]
    for block in blocks:
        block.next()
    with jit.compiling("the timing engine's compiled core", "about a minute", run_block):
        outcome = core.run(blocks)
    while True:
        if outcome == T.BLOCKED:
            IS = core.state.IS
            g = next(h for h in range(len(gpus)) if IS[h, T.I_STAGE] != T.ST_FINISHED)
            raise RuntimeError(
                f"timing engine: {gpus[g].node.id}'s stream is blocked at pass "
                f"{int(IS[g, T.I_DEC_PASS])}, layer {int(IS[g, T.I_DEC_LAYER])} with nothing "
                "left to happen"
            )
        if progress is not None:  # (each return is a block's end: report_progress's filter
            progress(*core.progress)  # of every 64th pass would skip most of them)
        if outcome == T.OK:
            break
        g = outcome - T.REFILL
        if core.schedules[g] is not None:
            p = int(core.state.IS[g, T.I_PASS])
            late = p < blocks[g].hi  # formed ahead, reached too late: given back, unstarted
            if late:
                blocks[g].rewind(p)
            if late or p == blocks[g].passes.num_passes:
                core.form(g, float(core.state.FG[T.FG_NOW]), ahead=late)
        blocks[g].next()
        outcome = core.run(blocks)
    core.finish()


class _Core:
    """The core's arrays for a run's GPUs, the calls that run it, and what they fill."""

    def __init__(self, gpus: list[GpuParts], network: FlowNetwork, spans: SpanRecorder) -> None:
        self.gpus, self.network, self.spans = gpus, network, spans
        G = len(gpus)
        sc0 = gpus[0].objs.scenario
        self.layers = layers = sc0.trace.num_layers
        keys = [np.ascontiguousarray(g.objs.scenario.demand.keys, np.int64) for g in gpus]
        offsets = [np.ascontiguousarray(g.objs.scenario.demand.offsets, np.int64) for g in gpus]
        self.all_keys = keys[0] if G == 1 else np.concatenate(keys)
        self.all_offsets = offsets[0] if G == 1 else np.concatenate(offsets)
        # each GPU's, as views of the arrays the core reads (an online schedule's passes are
        # copied in as they are formed: :meth:`form`)
        self.demand = _views(self.all_keys, keys), _views(self.all_offsets, offsets)
        self.schedules = [g.objs.schedule for g in gpus]
        # (online) each GPU's pass durations by tokens and phase, from the passes seen so far
        self.paces: list[dict[tuple[int, int], float]] = [{} for _ in gpus]
        self.pace_seen = [0] * G
        # (numba is loaded for the core anyway: its JIT, not the replay's module built ahead)
        states = [kernel_state(g.objs, K=kernel) for g in gpus]
        self.S3 = np.stack([s for s, _ in states])
        # each GPU's next uses (Belady's; empty otherwise), padded to the longest
        self.after2 = np.zeros((G, max(1, max(a.size for _, a in states))), np.int64)
        for g, (_, after) in enumerate(states):
            self.after2[g, : after.size] = after
        # room for each GPU's passes (an online schedule's: for every pass it may form)
        room = [g.objs.scenario.passes.request.size for g in gpus]
        self.PF = np.full((sum(room), T.PF_SIZE), -1.0)
        self.PF[:, [T.PF_WAIT, T.PF_NOT_BEFORE]] = -np.inf
        self.PF[:, T.PF_DEADLINE] = np.inf
        self.PI = np.zeros((sum(room), 2), np.int64)
        B = self.B = np.zeros((G, T.B_SIZE), np.int64)
        B[:, T.B_KEY0] = np.cumsum([0] + [k.size for k in keys])[:-1]
        B[:, T.B_OFF0] = np.cumsum([0] + [o.size for o in offsets])[:-1]
        B[:, T.B_PASS0] = np.cumsum([0, *room])[:-1]
        for g, gpu in enumerate(gpus):
            _pass_tables(gpu.objs, gpu.cost, gpu.tally, self.table_rows(g), 0,
                         gpu.objs.scenario.passes.num_passes)  # fmt: skip
        # an online schedule's stream never ends at a count, until its last pass is formed
        B[:, T.B_NPASS] = [
            room[g] + 1 if s is not None else room[g] for g, s in enumerate(self.schedules)
        ]
        B[:, T.B_LANE] = [g.compute_lane for g in gpus]
        self._paths()
        engines = len(gpus[0].fetcher.copy_lanes)
        backs = gpus[0].write_backs
        self.writes_back = any(g.write_backs is not None for g in gpus)
        back_engines = 1 if backs is None else len(backs.lanes)
        self.n_keys = int(self.S3[0, L.R_SC, L.SC_KEYS])
        demand_rows = 1 + max(
            int(g.objs.scenario.demand.max_layer_demand()[0]) if k.size else 0
            for g, k in zip(gpus, keys, strict=True)
        )
        # jobs: loading keys, streamed and held ones; a write-back's chunk moving
        self.pool = pool = G * (self.n_keys + 2 * demand_rows + back_engines + 8)
        st = self.state = T.new_state(
            self.S3,
            self.after2,
            self.n_keys,
            pool,
            engines,
            len(self.names),
            demand_rows,
            back_engines,
        )
        B[:, T.B_QB] = pool + 4 * np.arange(G)
        for g, gpu in enumerate(gpus):
            source = gpu.objs.ctx.source
            st.KR[g, T.KR_HOME] = source < 0
            st.KR[g, T.KR_PATH] = np.where(source < 0, -1, self.path_base[g] + source)
        capacity = network.capacity
        st.NF[T.N_CAP, : len(self.names)] = [capacity.get(r, 0.0) for r in self.names]
        st.NI[T.NI_DYN, : len(self.names)] = [r == self.dynamic for r in self.names]
        X = self.X = np.zeros(T.X_SIZE, np.int64)
        X[T.X_LAYERS], X[T.X_PINNED] = layers, sc0.config.cache.pin_demand_set
        X[T.X_RECORD], X[T.X_GPUS] = spans.enabled, G
        X[T.X_PREFETCHING] = gpus[0].objs.prefetch.lookahead > 0
        X[T.X_DRAIN] = sc0.runtime.copy_stream.value == "compute"
        X[T.X_TENSORS] = sc0.runtime.h2d_tensors_per_expert.value
        st.FG[T.FG_ISSUE] = gpus[0].cost.copy_issue_time()  # (one runtime for every GPU)
        self.issuing = st.FG[T.FG_ISSUE] > 0
        st.FG[T.FG_SLOWDOWN] = gpus[0].cost.copy_slowdown()
        st.IS[:, T.I_SHARED] = X[T.X_DRAIN]  # (OneStream: one copy at a time)
        chunk_bytes = sc0.config.timing.chunk_bytes
        X[T.X_CHUNK] = chunk_bytes or 0
        self.per_job = max(
            len(split(n, chunk_bytes)) for g in gpus for n in set(g.objs.cache.nbytes)
        )
        back_lanes = np.array(
            [[0] * back_engines if g.write_backs is None else g.write_backs.lanes for g in gpus],
            np.int64,
        )
        self.arrays = T.Run(
            keys=self.all_keys, offsets=self.all_offsets, PF=self.PF, PI=self.PI, X=X,
            lanes=np.array([g.fetcher.copy_lanes for g in gpus], np.int64),
            back_lanes=back_lanes, PR=self.PR, PL=self.PL, PLAT=self.PLAT, PCAP=self.PCAP,
            PREQ=self.PREQ, DTAB=self.DTAB,
        )  # fmt: skip
        self.sums = T.Tallies(
            TL=np.zeros((G, 6, layers)), TP=np.zeros((int(self.PF.shape[0]), 4)),
            engine_busy=np.zeros((G, engines)), engine_bytes=np.zeros((G, engines), np.int64),
            back_busy=np.zeros((G, back_engines)),
            back_bytes=np.zeros((G, back_engines), np.int64), used_paths=self.used_paths,
        )  # fmt: skip
        for g, schedule in enumerate(self.schedules):  # (routed: the router reads pass ends)
            if schedule is not None and schedule.router is not None:
                base = int(B[g, T.B_PASS0])
                ends = self.sums.TP[base : base + room[g], T.TP_END]
                ends[:] = np.inf
                schedule.pass_end = ends

    def table_rows(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """GPU ``g``'s rows of the per-pass tables (views)."""
        base = int(self.B[g, T.B_PASS0])
        return self.PF[base:], self.PI[base:]

    def form(self, g: int, now: float, ahead: bool) -> bool:
        """GPU ``g``'s stream is ready, at ``now``, for a pass its online schedule has not
        formed (``ahead``: one formed ahead that it found too late, given back first): form
        the next step's passes, and those formed ahead of it, and copy them in; False (the
        stream ends there) when every request has left. Where its requests are routed and
        none is here to run (:data:`~specmd_sim.scenario.schedule.WAIT`), the stream waits
        for the next arrival, as SimPy's does, and returns for a refill then."""
        schedule = self.schedules[g]
        assert schedule is not None
        p = int(self.state.IS[g, T.I_PASS])  # (the pass the stream is ready for)
        if ahead:
            schedule.give_back(p)
        lo = schedule.passes.num_passes
        formed = schedule.form(now, ahead=FORMED_AHEAD, pace=self._pace(g, p))
        if formed == WAIT:  # (not resumed; woken as SimPy's timeout: at now + (wake - now))
            st = self.state
            st.IG[T.G_RESUME] = -1
            push_event(st.IG, st.hT, st.hI, now + (schedule.wake - now), T.NORMAL, T.EV_STREAM, g)
            return True
        if not formed:
            self.B[g, T.B_NPASS] = lo
            return False
        hi = schedule.passes.num_passes
        demand, layers = schedule.demand, self.layers
        keys, offsets = self.demand[0][g], self.demand[1][g]
        a, b = int(demand.offsets[lo * layers]), int(demand.offsets[hi * layers])
        keys[a:b] = demand.keys[a:b]
        offsets[lo * layers + 1 : hi * layers + 1] = demand.offsets[
            lo * layers + 1 : hi * layers + 1
        ]
        gpu = self.gpus[g]
        PF, _ = tables = self.table_rows(g)
        _pass_tables(gpu.objs, gpu.cost, gpu.tally, tables, lo, hi)
        PF[lo:hi, T.PF_NOT_BEFORE], PF[lo:hi, T.PF_DEADLINE] = -np.inf, np.inf
        at, not_before, before = schedule.windows
        PF[at, T.PF_NOT_BEFORE], PF[at, T.PF_DEADLINE] = not_before, before
        return True

    def _pace(self, g: int, p: int) -> Pace | None:
        """GPU ``g``'s expected duration of a pass of ``n`` tokens in a phase, from its passes
        before ``p`` (those that ran): the last of that many tokens and that phase; else the
        nearest known (of that phase if any), scaled up by the tokens where it had fewer; None
        before any pass ran."""
        seen, base = self.paces[g], int(self.B[g, T.B_PASS0])
        lo, self.pace_seen[g] = min(self.pace_seen[g], p), p
        if lo < p:
            passes = self.schedules[g].passes  # type: ignore[union-attr]
            TP = self.sums.TP[base + lo : base + p]
            keys = zip(passes.tokens_of[lo:p].tolist(), passes.phase[lo:p].tolist(), strict=True)
            seen.update(zip(keys, (TP[:, T.TP_END] - TP[:, T.TP_START]).tolist(), strict=True))
        if not seen:
            return None

        def pace(n: int, phase: int) -> float:
            if (n, phase) in seen:
                return seen[n, phase]
            m, q = min(seen, key=lambda k: (k[1] != phase, abs(k[0] - n), k[0]))
            return seen[m, q] * max(1.0, n / m)

        return pace

    def _paths(self) -> None:
        """The GPUs' transfer paths, numbered across the GPUs (``path_base``: each GPU's first),
        then their write-backs' (``B_WB_PATH``), over the resources indexed in name order (ties
        go to the lowest name)."""
        gpus = self.gpus
        paths = [path for g in gpus for path in g.objs.ctx.paths]
        self.path_base = np.cumsum([0] + [len(g.objs.ctx.paths) for g in gpus])[:-1]
        self.B[:, T.B_WB_PATH] = -1
        for g, gpu in enumerate(gpus):
            if gpu.write_backs is not None:
                self.B[g, T.B_WB_PATH] = len(paths)
                paths.append(gpu.write_backs.path)
        self.names = names = sorted({r for path in paths for r in path.resources})
        self.PL = np.array([len(path.resources) for path in paths], np.int64)
        self.PR = np.zeros((len(paths), int(self.PL.max())), np.int64)
        for i, path in enumerate(paths):
            self.PR[i, : self.PL[i]] = [names.index(r) for r in path.resources]
        self.PLAT = np.array([path.latency_s for path in paths], np.float64)
        self.PCAP = np.array([-1.0 if p.rate_cap is None else float(p.rate_cap) for p in paths])
        self.used_paths = np.zeros(len(paths), np.int64)
        # reads from the NVMe drive: its request size (0: not from it), its bandwidth at each
        # queue depth up to its cap
        drive = gpus[0].objs.scenario.placement.nvme
        self.PREQ = np.zeros(len(paths), np.int64)
        self.DTAB = np.zeros(1)
        self.dynamic = ""
        if drive is not None:
            self.dynamic = f"nvme:{drive.id}"
            request = drive.read_request_bytes.value
            self.PREQ[:] = [request if p.source == drive.id else 0 for p in paths]
            self.DTAB = np.array(
                [drive.read_bandwidth(q) for q in range(drive.max_queue_depth.value + 1)]
            )

    def run(self, blocks: list[_Blocks]) -> int:
        """One call of the core, with each GPU's block in hand; its outputs into the tallies
        and the recorder. Its outcome."""
        B, st, G = self.B, self.state, len(self.gpus)
        for g, block in enumerate(blocks):
            B[g, T.B_LO], B[g, T.B_HI], B[g, T.B_T0] = block.lo, block.hi, block.first_access
        t_exp = np.concatenate([b.times for b in blocks])
        plan_offsets = np.concatenate([b.plan_offsets for b in blocks])
        plan_keys = np.concatenate([b.plan_keys for b in blocks])
        B[:, T.B_TOFF] = np.cumsum([0] + [b.times.size for b in blocks])[:-1]
        B[:, T.B_POFF] = np.cumsum([0] + [b.plan_offsets.size for b in blocks])[:-1]
        B[:, T.B_PKOFF] = np.cumsum([0] + [b.plan_keys.size for b in blocks])[:-1]
        # room for every write-back the call can queue: of the keys cached when it starts and
        # of those it reserves
        st = self.state = T.grow_write_backs(st, self.n_keys + t_exp.size + plan_keys.size + 8)
        # the write-backs the call can move: those queued when it starts and one for each key
        # it reserves (those moving when it starts are among the pool's jobs)
        queued = int(st.IS[:, T.I_WB_COUNT].sum())
        write_backs = queued + t_exp.size + plan_keys.size if self.writes_back else 0
        out = _buffers(
            t_exp.size + plan_keys.size + self.pool, write_backs, self.per_job,
            sum(b.hi - b.lo for b in blocks), self.layers, G * self.n_keys, len(self.names),
            self.spans.enabled, self.issuing,
        )  # fmt: skip
        outcome = run_block(
            self.arrays, T.Block(B, t_exp, plan_offsets, plan_keys), st, self.sums, out
        )
        IG, gpus = st.IG, self.gpus
        for name, counter, intervals in (
            ("civ", T.G_NCIV, [g.tally.compute_iv for g in gpus]),
            ("siv", T.G_NSIV, [g.tally.stall_iv for g in gpus]),
            ("tiv", T.G_NTIV, [g.tally.transfers.intervals for g in gpus]),
        ):
            for g, rows in _by_gpu(getattr(out, name)[: IG[counter]], G):
                intervals[g].starts.frombytes(np.ascontiguousarray(rows[:, 0]).tobytes())
                intervals[g].ends.frombytes(np.ascontiguousarray(rows[:, 1]).tobytes())
        if self.spans.enabled:
            _record(out, IG, self.spans, [g.fetcher for g in gpus], self.names)
        return int(outcome)

    @property
    def progress(self) -> tuple[int, int]:
        """(passes run, passes in all) over the GPUs; with online schedules, (tokens run, tokens
        in all): how many passes they form is not known before the run."""
        done = self.state.IS[:, T.I_PASS]
        schedules = [s for s in self.schedules if s is not None]
        if not schedules:
            return int(done.sum()), int(self.B[:, T.B_NPASS].sum())
        rows = [s.passes.start[min(int(p), s.passes.num_passes)] for s, p in
                zip(schedules, done, strict=True)]  # fmt: skip
        total = sum(s.total_rows for s in schedules)
        return min(int(sum(rows)), total), total  # (recomputed tokens run again)

    def finish(self) -> None:
        """The tallies' sums, the paths used, the cache counters and the network's."""
        for g, gpu in enumerate(self.gpus):
            base, n = int(self.B[g, T.B_PASS0]), int(self.B[g, T.B_NPASS])
            sums = self.sums
            _fill_tally(gpu.tally, sums.TL[g], sums.TP[base : base + n], sums.engine_busy[g],
                        sums.engine_bytes[g], self.state.FS[g], n)  # fmt: skip
            first = int(self.path_base[g])
            used = self.used_paths[first : first + len(gpu.objs.ctx.paths)]
            gpu.fetcher.used_paths.update(np.flatnonzero(used).tolist())
            if gpu.write_backs is not None:
                gpu.tally.d2h_busy = sums.back_busy[g].tolist()
                gpu.tally.d2h_bytes = sums.back_bytes[g].tolist()
                gpu.write_backs.used = bool(self.S3[g, L.R_STATS, L.ST_BYTES_WRITTEN_BACK])
            # (its finish() adds nothing: it held no prefetch)
            gpu.objs.cache.stats = kernel_stats(self.S3[g], self.layers)
        NF, NI = self.state.NF, self.state.NI
        for r, name in enumerate(self.names):
            if NI[T.NI_THROUGH, r]:
                self.network.bytes_through[name] = float(NF[T.N_THROUGH, r])
            if NI[T.NI_BUSY, r]:
                self.network.busy_s[name] = float(NF[T.N_BUSY, r])


class _Blocks:
    """One GPU's passes a block at a time: the block's passes ``lo .. hi - 1``, its accesses'
    expert times, its prefetch plans."""

    def __init__(
        self, objs: RunObjects, cost: CostModel, keys: np.ndarray, offsets: np.ndarray, gpus: int
    ) -> None:
        sc = objs.scenario
        self.offsets, self.layers = offsets, sc.trace.num_layers
        self.passes = sc.passes  # (an online schedule's grows: blocks are of passes formed)
        self.plans = BulkPlans(objs) if objs.prefetch.lookahead > 0 else None
        if self.plans is not None:  # (an online schedule's passes formed ahead may go back)
            self.plans.rewindable = objs.schedule is not None
        scores_per_pass = self.layers * objs.prefetch.lookahead * sc.trace.num_experts
        self.most = max(1, _BLOCK_SCORES // max(1, scores_per_pass))  # passes whose plans ...
        self.accesses = max(1, _BLOCK_ACCESSES // gpus)  # ... and accesses a block takes
        self.expert_times = _ExpertTimes(objs, cost, keys)
        self.lo = self.hi = 0
        self.first_access = 0
        self.times, self.plan_offsets, self.plan_keys = _EMPTY_F, _EMPTY, _EMPTY

    def rewind(self, p: int) -> None:
        """End the block in hand at its pass ``p``: the passes after were formed ahead and are
        given back; the plans' draws are those of the passes up to ``p``."""
        if self.plans is not None:
            self.plans.rewind(self.lo, p)
        self.hi = p

    def next(self) -> None:
        """Move on to the next block (the first, at the start)."""
        lo, layers, offsets = self.hi, self.layers, self.offsets
        total = self.passes.num_passes
        target = offsets[lo * layers] + self.accesses
        hi = int(np.searchsorted(offsets[::layers][: total + 1], target, side="right"))
        hi = min(total, max(lo + 1, hi - 1), lo + self.most)
        if self.plans is None or lo == hi:
            self.plan_offsets, self.plan_keys = np.zeros((hi - lo) * layers + 1, np.int64), _EMPTY
        else:
            self.plan_offsets, self.plan_keys = self.plans.block(lo, hi)
        self.first_access = int(offsets[lo * layers])
        self.times = self.expert_times.block(self.first_access, int(offsets[hi * layers]))
        self.lo, self.hi = lo, hi


def _views(whole: np.ndarray, parts: list[np.ndarray]) -> list[np.ndarray]:
    """``parts``, which ``whole`` concatenates (or is, with one), as views of it."""
    ends = np.cumsum([part.size for part in parts])
    return [whole[end - part.size : end] for part, end in zip(parts, ends, strict=True)]


def _by_gpu(rows: np.ndarray, gpus: int) -> list[tuple[int, np.ndarray]]:
    """Rows whose last column is a GPU's number, for each GPU that has some, in order."""
    if gpus == 1:
        return [(0, rows)] if rows.size else []
    gpu = rows[:, -1]
    return [(g, rows[gpu == g]) for g in range(gpus) if np.any(gpu == g)]


def _buffers(
    jobs: int,
    write_backs: int,
    per_job: int,
    passes: int,
    layers: int,
    keys: int,
    resources: int,
    record: bool,
    issuing: bool,
) -> T.Out:
    """A call's outputs, each as long as the call can fill: ``jobs`` bounds its accesses and
    the host-to-device transfers that end in it (those it starts and those in flight when it
    began), ``write_backs`` its device-to-host ones (queued, moving or reserved during it),
    each in at most ``per_job`` chunks. Every chunk of either kind records a span and moves
    the links' bandwidth samples. ``issuing``: the stream pays for issuing copies, once per
    run of experts (at most one per access) and at each layer step's end."""
    computes, chunks = jobs + passes * (layers + 2) + 8, (jobs + write_backs) * per_job + 8
    if issuing:
        computes += jobs + passes * layers
    spans = computes + jobs + chunks if record else 0
    return T.Out(
        spF=np.zeros((spans, 2)), spI=np.zeros((spans, 8), np.int64),
        civ=np.zeros((computes, 3)), siv=np.zeros((jobs + 8, 3)),
        tiv=np.zeros((chunks, 3)),
        used_out=np.zeros((3 * jobs + keys + 8 if record else 0, 3)),
        flight_out=np.zeros((2 * chunks if record else 0, 3)),
        bw_out=np.zeros((resources * 3 * chunks if record else 0, 3)),
    )  # fmt: skip


def _pass_tables(
    objs: RunObjects,
    cost: CostModel,
    tally: GpuTally,
    tables: tuple[np.ndarray, np.ndarray],
    lo: int,
    hi: int,
) -> None:
    """Into ``tables`` (PF, PI), for passes ``lo .. hi - 1``: the stream's kernel times
    (attention, dense layers and LM head; -1: none) and the arrival it waits for
    (:meth:`GpuStream._admit`; -inf: none), its phase and request, every column but the
    window written (a row may hold a pass given back); the arrivals of recorded or Poisson
    requests go into ``tally`` (a closed loop's once the passes' start times are known)."""
    sc = objs.scenario
    passes = sc.passes
    PF, PI = tables
    arrival, arrivals = tally.arrival, objs.arrivals
    for p in range(lo, hi):
        wait = -np.inf
        if passes.joins[p] and arrivals is not None:
            for r in passes.requests_of(p):
                if r not in arrival:
                    arrival[r] = arrivals.of(r)
                wait = max(wait, arrival[r])  # (its join may have been formed and given back)
        t_attn, t_dense, t_head = pass_kernel_times(cost, sc, p)
        PF[p, T.PF_ATTN], PF[p, T.PF_WAIT] = t_attn, wait
        PF[p, T.PF_DENSE] = -1.0 if t_dense is None else t_dense
        PF[p, T.PF_HEAD] = -1.0 if t_head is None else t_head
        PI[p] = int(passes.phase[p]), int(passes.request[p])


class _ExpertTimes:
    """Each access's expert kernel time (``cost.expert_time`` of its tokens and precision), a
    block at a time, computed once per distinct pair."""

    def __init__(self, objs: RunObjects, cost: CostModel, keys: np.ndarray) -> None:
        dtype_of = objs.scenario.placement.dtype
        self.kinds = sorted(set(dtype_of))
        self.code = np.array([self.kinds.index(d) for d in dtype_of], np.int64)
        self.tokens, self.keys, self.cost = objs.scenario.demand.tokens, keys, cost
        self.seconds: dict[int, float] = {}

    def block(self, lo: int, hi: int) -> np.ndarray:
        """The times of accesses ``lo .. hi - 1``."""
        n = len(self.kinds)
        pairs = np.asarray(self.tokens[lo:hi], np.int64) * n + self.code[self.keys[lo:hi]]
        unique, inverse = np.unique(pairs, return_inverse=True)
        for u in unique.tolist():
            if u not in self.seconds:
                self.seconds[u] = self.cost.expert_time(u // n, self.kinds[u % n])
        return np.array([self.seconds[u] for u in unique.tolist()], np.float64)[inverse]


def _record(
    out: T.Out,
    IG: np.ndarray,
    spans: SpanRecorder,
    fetchers: list[Fetcher],
    names: list[str],
) -> None:
    """A call's spans and counter samples into the recorder."""
    n = int(IG[T.G_NSPANS])
    rows = np.empty(n, SPAN_DTYPE)
    rows["start"], rows["end"] = out.spF[:n, 0], out.spF[:n, 1]
    for c, field in enumerate(("lane", "kind", "pass_", "layer", "expert", "bytes", "request",
                               "klass")):  # fmt: skip
        rows[field] = out.spI[:n, c]
    spans.extend(rows)
    for counter, name, series_of in (
        (T.G_NUSED, "used_out", lambda f: f.counter_used),
        (T.G_NFLIGHT, "flight_out", lambda f: f.counter_flight),
    ):
        for g, samples in _by_gpu(getattr(out, name)[: int(IG[counter])], len(fetchers)):
            series = spans.series(series_of(fetchers[g]))
            series.extend(_counter_rows(samples[:, 0], samples[:, 1]))
    bw = out.bw_out[: int(IG[T.G_NBW])]
    for r, resource in enumerate(names):
        mine = bw[bw[:, 0] == r]
        if mine.size:
            series = spans.series(f"network/{resource}_bytes_per_s")
            series.extend(_counter_rows(mine[:, 1], mine[:, 2]))


def _counter_rows(times: np.ndarray, values: np.ndarray) -> np.ndarray:
    rows = np.empty(times.size, COUNTER_DTYPE)
    rows["time"], rows["value"] = times, values
    return rows


def _fill_tally(
    tally: GpuTally,
    TL: np.ndarray,
    TP: np.ndarray,
    engine_busy: np.ndarray,
    engine_bytes: np.ndarray,
    FS: np.ndarray,
    num_passes: int,
) -> None:
    """The tally's sums and per-pass times (its intervals were appended block by block), and
    the tokens, as the stream's ``end_pass`` would have counted them."""
    tally._layer_stall = TL[T.TL_STALL].tolist()
    tally._layer_compute = TL[T.TL_COMPUTE].tolist()
    tally._phase_compute = [TL[T.TL_PHASE_COMPUTE + i].tolist() for i in range(2)]
    tally._phase_stall = [TL[T.TL_PHASE_STALL + i].tolist() for i in range(2)]
    tally.compute_iv.sum = float(FS[T.F_CSUM])
    tally.stall_iv.sum = float(FS[T.F_SSUM])
    tally.transfers.intervals.sum = float(FS[T.F_TSUM])
    tally.engine_busy = engine_busy.tolist()
    tally.engine_bytes = engine_bytes.tolist()
    tally.pass_start[:num_passes] = TP[:, T.TP_START]
    tally.pass_end[:num_passes] = TP[:, T.TP_END]
    tally.pass_compute[:num_passes] = TP[:, T.TP_COMPUTE]
    tally.pass_stall[:num_passes] = TP[:, T.TP_STALL]
    passes, arrival = tally.passes, tally.arrival
    for p in range(num_passes):
        if passes.joins[p]:  # a closed loop's requests arrive when their first pass starts
            for r in passes.requests_of(p):
                arrival.setdefault(r, float(TP[p, T.TP_START]))
        tally.count_tokens(p, float(TP[p, T.TP_END]))
    if num_passes:
        tally.last_pass_end = float(TP[num_passes - 1, T.TP_END])
