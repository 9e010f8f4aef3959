"""The timing engine on its compiled core (:mod:`specmd_sim.engine.fast.timed`), for the runs it
covers: :func:`simulate <specmd_sim.engine.sim.run.simulate>` builds the run as always, and
where :func:`compiled_unsupported` is None, :func:`run_compiled` runs its one GPU's passes on
the core instead of on SimPy processes, and fills the same tally, network counters, spans,
counter samples and cache counters the processes would have: the results are the same, byte
for byte (``tests/engine/test_sim_compiled.py`` compares every field on random runs).

Covered: one GPU whose experts all sit in host DRAM, the eviction policies of the compiled
replay (:func:`specmd_sim.engine.fast.compiled_unsupported` says which), misses always
fetched, no prefetcher or one whose plans the replay draws in bulk (top-k and score-threshold
over the noisy oracle or the trace's scores: :mod:`specmd_sim.engine.fast.plans`), a copy per
expert (in chunks or not, on their own stream or on the compute stream), no memory parity, a
fixed cache capacity, and time that passes (not ``timing.ideal``). Everything else runs on SimPy,
which stays the specification.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine import jit
from specmd_sim.engine.common import Progress, report_progress
from specmd_sim.engine.fast import compiled_unsupported as kernel_unsupported
from specmd_sim.engine.fast import kernel as K
from specmd_sim.engine.fast import kernel_state, kernel_stats
from specmd_sim.engine.fast import timed as T
from specmd_sim.engine.fast.plans import BulkPlans
from specmd_sim.engine.layer import bulk_plans_unsupported
from specmd_sim.engine.sim.fetch import Fetcher, split
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.engine.sim.stream import pass_kernel_times
from specmd_sim.engine.sim.tally import GpuTally
from specmd_sim.hardware.schema import GPUNode
from specmd_sim.models import CostModel
from specmd_sim.scenario import RunObjects, Scenario
from specmd_sim.timeline import COUNTER_DTYPE, SPAN_DTYPE, SpanRecorder

_BLOCK_ACCESSES = 1 << 16  # passes are run in blocks of about this many accesses
_BLOCK_SCORES = 1 << 22  # ... and of at most this many predicted scores (the plans')
_EMPTY = np.zeros(0, np.int64)


def compiled_unsupported(scenario: Scenario, runs: list[RunObjects]) -> str | None:
    """None when :func:`run_compiled` covers the run, else why not (a phrase). Asked before the
    run's parts are built (which attach the fetcher to the cache)."""
    if not jit.available():
        return "kernels not compiled (numba is not installed)"
    if len(runs) != 1:
        return "more than one GPU"
    run, config, runtime = runs[0], scenario.config, scenario.runtime
    if config.timing.ideal:
        return "timing.ideal"
    why = kernel_unsupported(run)  # the policies, the plans, the miss handler, the capacity
    if why is None and run.prefetch.lookahead > 0:
        why = bulk_plans_unsupported(run)  # (the plans' draws, made a block ahead)
    if why is not None:
        return why
    if runtime.memory_parity.value:
        return "memory parity"
    if np.any(run.ctx.source != 0):
        return "experts outside host DRAM"
    path, drive = run.ctx.paths[0], scenario.placement.nvme
    if drive is not None and path.source == drive.id:
        return "experts on an NVMe drive"
    if len(set(path.resources)) != len(path.resources) or any(r >= "~" for r in path.resources):
        return "a path through a resource twice, or one named after '~'"
    return None


def run_compiled(
    objs: RunObjects,
    node: GPUNode,
    cost: CostModel,
    tally: GpuTally,
    fetcher: Fetcher,
    compute_lane: int,
    network: FlowNetwork,
    spans: SpanRecorder,
    progress: Progress | None = None,
) -> None:
    """Run the GPU's passes on the compiled core (:func:`compiled_unsupported` must be None),
    filling ``tally``, ``network``, ``spans`` and ``objs.cache.stats`` as the SimPy processes
    would. Raises RuntimeError where the Python engine would: a stream left waiting on
    nothing."""
    sc, cache = objs.scenario, objs.cache
    passes, layers = sc.passes, sc.trace.num_layers
    keys = np.ascontiguousarray(sc.demand.keys, dtype=np.int64)
    offsets = np.ascontiguousarray(sc.demand.offsets, dtype=np.int64)
    S, pos = kernel_state(objs, keys)
    PF, PI = _pass_tables(objs, cost, tally)
    path = objs.ctx.paths[0]
    names = sorted(path.resources)  # indexed in name order: ties go to the lowest name
    pres = np.array([names.index(r) for r in path.resources], np.int64)
    engines, record, R = len(fetcher.copy_lanes), spans.enabled, len(names)
    n_keys = int(S[K.R_SC, K.SC_KEYS])
    demand_rows = int(sc.demand.max_layer_demand()[0]) + 1 if keys.size else 1
    pool = n_keys + 2 * demand_rows + 8  # loading keys, streamed and held jobs
    st = T.new_state(n_keys, pool, engines, R, demand_rows)
    st["NF"][T.N_CAP, :R] = [network.capacity[r] for r in names]
    X = np.zeros(T.X_SIZE, np.int64)
    X[T.X_LAYERS], X[T.X_PINNED], X[T.X_RECORD] = layers, sc.config.cache.pin_demand_set, record
    X[T.X_LANE], X[T.X_NUM_PASSES] = compute_lane, passes.num_passes
    X[T.X_PREFETCHING] = objs.prefetch.lookahead > 0
    X[T.X_DRAIN] = sc.runtime.copy_stream.value == "compute"
    X[T.X_CHUNK] = sc.config.timing.chunk_bytes or 0
    per_job = max(len(split(nbytes, sc.config.timing.chunk_bytes)) for nbytes in set(cache.nbytes))
    TL, TP = np.zeros((6, layers)), np.zeros((passes.num_passes, 4))
    engine_busy, engine_bytes = np.zeros(engines), np.zeros(engines, np.int64)
    lanes = np.array(fetcher.copy_lanes, np.int64)
    fcap = -1.0 if path.rate_cap is None else float(path.rate_cap)
    plans = BulkPlans(objs) if objs.prefetch.lookahead > 0 else None
    scores_per_pass = layers * objs.prefetch.lookahead * sc.trace.num_experts
    most = max(1, _BLOCK_SCORES // max(1, scores_per_pass))  # passes a block's plans may score
    times = _ExpertTimes(objs, cost, keys)
    total, lo = passes.num_passes, 0
    while True:
        hi = min(_block_end(offsets, layers, lo, total), lo + most)
        if plans is None or lo == hi:
            plan_offsets, plan_keys = np.zeros((hi - lo) * layers + 1, np.int64), _EMPTY
        else:
            plan_offsets, plan_keys = plans.block(lo, hi)
        a = int(offsets[hi * layers] - offsets[lo * layers]) + plan_keys.size + pool  # jobs
        b = hi - lo
        out = _buffers(a, per_job, b, layers, n_keys, R, record)
        base = int(offsets[lo * layers])
        block_times = times.block(base, int(offsets[hi * layers]))
        outcome = T.run_block(
            S, pos, keys, offsets, block_times, base, lo, hi, plan_offsets, plan_keys, PF, PI,
            X, lanes, pres, path.latency_s, fcap, st["IS"], st["FS"], st["hT"], st["hI"], st["JB"],
            st["FL"], st["jfree"], st["KR"], st["free"], st["act"], st["NF"], st["NI"],
            st["run_i"], st["run_t"], st["held"], TL, TP, engine_busy, engine_bytes,
            out["spF"], out["spI"], out["civ"], out["siv"], out["tiv"], out["used_out"],
            out["flight_out"], out["bw_out"],
        )  # fmt: skip
        IS = st["IS"]
        if outcome == T.BLOCKED:
            raise RuntimeError(
                f"timing engine: {node.id}'s stream is blocked at pass {int(IS[T.I_DEC_PASS])}, "
                f"layer {int(IS[T.I_DEC_LAYER])} with nothing left to happen"
            )
        for intervals, name, counter in (
            (tally.compute_iv, "civ", T.I_NCIV),
            (tally.stall_iv, "siv", T.I_NSIV),
            (tally.transfers.intervals, "tiv", T.I_NTIV),
        ):
            done = out[name][: IS[counter]]
            intervals.starts.frombytes(np.ascontiguousarray(done[:, 0]).tobytes())
            intervals.ends.frombytes(np.ascontiguousarray(done[:, 1]).tobytes())
        if record:
            _record(out, IS, spans, fetcher, names)
        report_progress(progress, hi, total)
        if hi == total:
            break
        lo = hi
    _fill_tally(tally, TL, TP, engine_busy, engine_bytes, st["FS"], passes.num_passes)
    NF, NI = st["NF"], st["NI"]
    for r, name in enumerate(names):
        if NI[T.NI_THROUGH, r]:
            network.bytes_through[name] = float(NF[T.N_THROUGH, r])
        if NI[T.NI_BUSY, r]:
            network.busy_s[name] = float(NF[T.N_BUSY, r])
    if st["IS"][T.I_USED_PATH]:
        fetcher.used_paths.add(0)
    cache.stats = kernel_stats(S, layers)  # (its finish() adds nothing: it held no prefetch)


def _buffers(
    jobs: int, per_job: int, passes: int, layers: int, keys: int, resources: int, record: bool
) -> dict[str, np.ndarray]:
    """A block's outputs, each as long as the block can fill: ``jobs`` bounds its accesses and
    the transfers that end in it (those it starts and those in flight when it began), each in
    at most ``per_job`` chunks."""
    computes, chunks = jobs + passes * (layers + 2) + 8, jobs * per_job + 8
    spans = computes + jobs + chunks if record else 0
    return {
        "spF": np.zeros((spans, 2)), "spI": np.zeros((spans, 8), np.int64),
        "civ": np.zeros((computes, 2)), "siv": np.zeros((jobs + 8, 2)),
        "tiv": np.zeros((chunks, 2)),
        "used_out": np.zeros((3 * jobs + keys + 8 if record else 0, 2)),
        "flight_out": np.zeros((2 * chunks if record else 0, 2)),
        "bw_out": np.zeros((resources * 3 * chunks if record else 0, 3)),
    }  # fmt: skip


def _block_end(offsets: np.ndarray, layers: int, lo: int, total: int) -> int:
    """The pass after the block that starts at ``lo`` (about ``_BLOCK_ACCESSES`` accesses)."""
    target = offsets[lo * layers] + _BLOCK_ACCESSES
    hi = int(np.searchsorted(offsets[::layers][: total + 1], target, side="right"))
    return min(total, max(lo + 1, hi - 1))


def _pass_tables(
    objs: RunObjects, cost: CostModel, tally: GpuTally
) -> tuple[np.ndarray, np.ndarray]:
    """Per pass, the stream's kernel times (attention, dense layers and LM head; -1: none) and
    the arrival it waits for (:meth:`GpuStream._admit`), its phase, request and number in the
    spans; the arrivals of recorded or Poisson requests go into ``tally`` (a closed loop's
    once the passes' start times are known)."""
    sc = objs.scenario
    passes = sc.passes
    n = passes.num_passes
    PF = np.full((n, 4), -1.0)
    PI = np.zeros((n, 3), np.int64)
    PF[:, T.PF_WAIT] = -np.inf
    arrival, arrivals = tally.arrival, objs.arrivals
    for p in range(n):
        if passes.joins[p] and arrivals is not None:
            for r in passes.requests_of(p):
                if r not in arrival:
                    arrival[r] = float(arrivals[len(arrival)])
                    PF[p, T.PF_WAIT] = max(PF[p, T.PF_WAIT], arrival[r])
        t_attn, t_dense, t_head = pass_kernel_times(cost, sc, p)
        PF[p, T.PF_ATTN] = t_attn
        if t_dense is not None:
            PF[p, T.PF_DENSE] = t_dense
        if t_head is not None:
            PF[p, T.PF_HEAD] = t_head
        PI[p] = int(passes.phase[p]), int(passes.request[p]), p
    return PF, PI


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
    out: dict[str, np.ndarray],
    IS: np.ndarray,
    spans: SpanRecorder,
    fetcher: Fetcher,
    names: list[str],
) -> None:
    """A block's spans and counter samples into the recorder."""
    n = int(IS[T.I_NSPANS])
    rows = np.empty(n, SPAN_DTYPE)
    rows["start"], rows["end"] = out["spF"][:n, 0], out["spF"][:n, 1]
    for c, field in enumerate(("lane", "kind", "pass_", "layer", "expert", "bytes", "request",
                               "klass")):  # fmt: skip
        rows[field] = out["spI"][:n, c]
    spans.extend(rows)
    for counter, name, series_name in (
        (T.I_NUSED, "used_out", fetcher.counter_used),
        (T.I_NFLIGHT, "flight_out", fetcher.counter_flight),
    ):
        m = int(IS[counter])
        if m:
            spans.series(series_name).extend(_counter_rows(out[name][:m, 0], out[name][:m, 1]))
    m = int(IS[T.I_NBW])
    bw = out["bw_out"][:m]
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
    tally.pass_start[:] = TP[:, T.TP_START]
    tally.pass_end[:] = TP[:, T.TP_END]
    tally.pass_compute[:] = TP[:, T.TP_COMPUTE]
    tally.pass_stall[:] = TP[:, T.TP_STALL]
    passes, arrival = tally.passes, tally.arrival
    for p in range(num_passes):
        if passes.joins[p]:  # a closed loop's requests arrive when their first pass starts
            for r in passes.requests_of(p):
                arrival.setdefault(r, float(TP[p, T.TP_START]))
        tally.count_tokens(p, float(TP[p, T.TP_END]))
    if num_passes:
        tally.last_pass_end = float(TP[num_passes - 1, T.TP_END])
