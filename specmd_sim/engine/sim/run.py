"""The timing engine: per GPU one compute stream running its passes layer by layer, all GPUs
sharing one flow network (links, host DRAM, NVMe drives) and the host's CPU.

Per layer (DESIGN.md §4): attention runs; the router decides; the demand set is pinned; each
access is classified (a LOADING expert is a *late hit*, and a queued prefetch of it is promoted
to demand priority); misses are demand-fetched in gate order; the prefetcher's list is issued
(demand fetches keep priority on the copy engines); resident experts run first, then each
missing one as soon as it arrives (the wait is *stall*); pins are released. A prefetch whose
target layer has already started, and which that layer did not demand, is cancelled before it
starts. A demand fetch that finds nothing evictable first cancels queued prefetches, then waits
for a transfer to finish.

An expert is fetched from where it is stored (:mod:`specmd_sim.scenario.placement`): host DRAM,
an NVMe drive (whose bandwidth depends on the reads outstanding on it), or, in expert-sharded
mode, the HBM of the GPU owning its shard. Each GPU serves its own requests (round robin in
arrival order; :mod:`specmd_sim.scenario.passes`), with its own cache, plug-ins and copy engines.

Passes follow the pass table (batching and admission order are fixed before the run). A request
arrives, closed loop, when its first pass starts, or at its Poisson or recorded arrival time; a
pass that admits a request not yet arrived waits for it (idle time, the *other* part of the
breakdown in :mod:`.breakdown`).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from specmd_sim.cache import AccessClass, CacheStats, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.config import SimConfig
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.sim.breakdown import Busy, Intervals, mean_of, request_table
from specmd_sim.engine.sim.copy_engines import CopyEngines, Job
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.hardware import lowest_grade, transfer_path
from specmd_sim.hardware.schema import Quantity
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.miss.base import CPU, DROP, FETCH
from specmd_sim.scenario import RunObjects, Scenario, build_runs, build_scenario
from specmd_sim.scenario.placement import TIER_NVME
from specmd_sim.timeline import SpanRecorder, intersection_length

_HIT, _LATE = AccessClass.HIT, AccessClass.LATE_HIT
_ABSENT = int(State.ABSENT)


def simulate(config: SimConfig | Scenario, progress: Progress | None = None) -> RunResult:
    """Run the SimPy timing engine on a config (or an already built scenario)."""
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    return _TimingRun(scenario, progress).run()


class _TimingRun:
    """The shared machine (event loop, flow network, host CPU, spans) and its GPUs."""

    def __init__(self, scenario: Scenario, progress: Progress | None) -> None:
        self.sc = scenario
        self.progress = progress
        self.env = simpy.Environment()
        self.spans = SpanRecorder(scenario.config.timing.record_spans)
        self.host = scenario.profile.hosts[0]
        self.cpu = simpy.Resource(self.env, capacity=1)  # CPU expert execution, one at a time
        self.cpu_lane: int | None = None
        self.passes_total = scenario.num_passes
        self.passes_done = 0
        runs = build_runs(scenario)
        bases = np.concatenate(([0], np.cumsum([r.scenario.passes.num_passes for r in runs])))
        self.gpus = [_Gpu(self, g, objs, int(bases[g])) for g, objs in enumerate(runs)]
        capacity: dict[str, float] = {}
        for gpu in self.gpus:
            for path in gpu.paths:  # paths[0] is the host path: DRAM is always there
                capacity.update(path.capacity)
        self.dram = f"dram:{self.host.id}"
        nvme = scenario.placement.nvme
        # CPU reads of experts stored on NVMe (cpu-execute): along the drive's path, then DRAM
        self.nvme_cpu_read: tuple[tuple[str, ...], float] | None = None
        if nvme is not None:
            path = transfer_path(scenario.profile, nvme.id, self.host.id)
            capacity.update(path.capacity)
            self.nvme_cpu_read = tuple(dict.fromkeys((*path.resources, self.dram))), path.latency_s
        dynamic = {} if nvme is None else {f"nvme:{nvme.id}": nvme.read_bandwidth}
        self.network = FlowNetwork(self.env, capacity, dynamic)

    def pass_done(self) -> None:
        self.passes_done += 1
        report_progress(self.progress, self.passes_done, self.passes_total)

    def cpu_read_path(self, key: int) -> tuple[tuple[str, ...], float, int]:
        """Resources, latency and queue depth of the CPU reading expert ``key``: from the host's
        DRAM, or for an expert on NVMe along the drive's path to the host, then DRAM."""
        placement = self.sc.placement
        drive = placement.nvme
        if drive is None or self.nvme_cpu_read is None or placement.tier[key] != TIER_NVME:
            return (self.dram,), 0.0, 1
        depth = math.ceil(int(placement.nbytes[key]) / drive.read_request_bytes.value)
        return (*self.nvme_cpu_read, depth)

    # --- result ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        for gpu in self.gpus:
            self.env.process(gpu.stream())
        self.env.run()
        for gpu in self.gpus:
            gpu.cache.finish()
        sc, gpus = self.sc, self.gpus
        stats = CacheStats.combined([g.cache.stats for g in gpus])
        metrics = cache_metrics(stats)
        # the end of the last pass (prefetches or CPU experts may outlive it, unused)
        makespan = max((g.last_pass_end for g in gpus), default=0.0)
        tables = [g.request_table() for g in gpus]
        per_request = {k: [v for t in tables for v in t[k]] for k in tables[0]}
        order = np.argsort(per_request["request"], kind="stable").tolist()
        per_request = {k: [v[i] for i in order] for k, v in per_request.items()}
        decode = np.concatenate([g.passes.phase == 1 for g in gpus])
        pass_time = np.concatenate([g.pass_time for g in gpus])
        pass_compute = np.concatenate([g.pass_compute for g in gpus])
        pass_stall = np.concatenate([g.pass_stall for g in gpus])
        n_decode = int(decode.sum())
        first_tokens = sum(len(g.first_token) for g in gpus)
        tokens_out = first_tokens + sum(sum(g.decode_tokens.values()) for g in gpus)
        tokens_in = sum(int(g.passes.rows.size) for g in gpus)
        moved = metrics["bytes_demand"] + metrics["bytes_prefetch"]
        transfer_busy = sum(g.transfers.intervals.total() for g in gpus)
        overlap = sum(
            intersection_length(g.compute_iv.array(), g.transfers.intervals.array()) for g in gpus
        )
        tpot = float(pass_time[decode].mean()) if n_decode else None
        tpot_compute = float(pass_compute[decode].mean()) if n_decode else None
        tpot_stall = float(pass_stall[decode].mean()) if n_decode else None
        resources = self._resource_table(makespan)
        engine_busy = np.concatenate([g.engine_busy for g in gpus])
        layer_stall = sum(g.layer_stall for g in gpus)
        layer_compute = sum(g.layer_compute for g in gpus)
        phase_compute = sum(g.phase_compute for g in gpus)
        phase_stall = sum(g.phase_stall for g in gpus)
        metrics.update(
            ttft_s=mean_of(per_request["ttft_s"]),
            ttft_compute_s=mean_of(per_request["ttft_compute_s"]),
            ttft_stall_s=mean_of(per_request["ttft_stall_s"]),
            ttft_other_s=mean_of(per_request["ttft_other_s"]),
            tpot_s=tpot,
            tpot_compute_s=tpot_compute,
            tpot_stall_s=tpot_stall,
            tpot_other_s=None if tpot is None else _other(tpot, tpot_compute, tpot_stall),
            stall_s=float(layer_stall.sum()),
            makespan_s=makespan,
            compute_s=float(layer_compute.sum()),
            tokens_generated=tokens_out,
            throughput_tok_s=tokens_out / makespan if makespan > 0 else None,
            bytes_per_token=moved / tokens_in if tokens_in else None,
            transfer_busy_s=transfer_busy,
            overlap_s=overlap,
            overlap_fraction=overlap / transfer_busy if transfer_busy > 0 else None,
            copy_engine_utilization=_ratio(float(engine_busy.mean()), makespan),
            link_utilization_max=max(
                (u for u, k in zip(resources["utilization"], resources["kind"], strict=True)
                 if k != "copy-engine" and u is not None),
                default=None,
            ),
        )  # fmt: skip
        with_prefill = max(first_tokens, 1)
        per_layer = per_layer_cache_table(stats)
        per_layer["stall_s"] = layer_stall.tolist()
        per_layer["compute_s"] = layer_compute.tolist()
        per_layer["ttft_compute_s"] = (phase_compute[0] / with_prefill).tolist()
        per_layer["ttft_stall_s"] = (phase_stall[0] / with_prefill).tolist()
        per_layer["tpot_compute_s"] = (phase_compute[1] / max(n_decode, 1)).tolist()
        per_layer["tpot_stall_s"] = (phase_stall[1] / max(n_decode, 1)).tolist()
        used: dict[int, Quantity] = {}
        for g in gpus:
            used.update((id(q), q) for q in g.used_quantities())
        if metrics["activations_cpu"]:
            used.update((id(q), q) for q in (self.host.cpu_flops, self.host.cpu_compute_efficiency))
        result = RunResult(
            engine="simulate",
            metrics=metrics,
            per_layer=per_layer,
            per_request=per_request,
            config={},
            inputs={},
            hardware_grade=lowest_grade(list(used.values())),
            spans=self.spans.array() if self.spans.enabled else None,
            lanes=list(self.spans.lanes),
            counters=self.spans.counters(),
            per_resource=resources,
            per_gpu=_gpu_table(gpus, tables),
            per_pass=_pass_table(gpus),
        )
        return finish_result(sc, gpus[0].objs.eviction.initial_contents(), result)

    def _resource_table(self, makespan: float) -> dict[str, list[Any]]:
        """Links, DRAM, NVMe drives and copy engines: bytes moved, busy time and utilization."""
        net = self.network
        table: dict[str, list[Any]] = {
            k: [] for k in ("resource", "kind", "capacity_bytes_per_s", "bytes", "busy_s")
        }
        for r in net.capacity:
            table["resource"].append(r)
            prefix = r.split(":", 1)[0]
            table["kind"].append(prefix if prefix in ("dram", "nvme") else "link")
            table["capacity_bytes_per_s"].append(net.capacity[r])
            table["bytes"].append(net.bytes_through.get(r, 0.0))
            table["busy_s"].append(net.busy_s.get(r, 0.0))
        for gpu in self.gpus:
            for slot, lane in enumerate(gpu.copy_lane_names):
                table["resource"].append(lane)
                table["kind"].append("copy-engine")
                table["capacity_bytes_per_s"].append(None)
                table["bytes"].append(gpu.engine_bytes[slot])
                table["busy_s"].append(float(gpu.engine_busy[slot]))
        table["busy_fraction"] = [_ratio(b, makespan) for b in table["busy_s"]]
        table["utilization"] = [
            _ratio(n, c * makespan) if c is not None else _ratio(b, makespan)
            for n, c, b in zip(
                table["bytes"], table["capacity_bytes_per_s"], table["busy_s"], strict=True
            )
        ]
        return table


def _gpu_table(gpus: list[_Gpu], tables: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    """Per GPU: its requests and passes, cache outcome, bytes fetched and latencies."""
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "gpu", "requests", "passes", "hit_rate", "hits_home", "misses", "bytes_fetched",
            "stall_s", "compute_s", "ttft_s", "tpot_s", "finish_s",
        )
    }  # fmt: skip
    for gpu, table in zip(gpus, tables, strict=True):
        totals = cache_metrics(gpu.cache.stats)
        decode = gpu.passes.phase == 1
        out["gpu"].append(gpu.node.id)
        out["requests"].append(len(table["request"]))
        out["passes"].append(gpu.passes.num_passes)
        out["hit_rate"].append(totals["hit_rate"] if totals["accesses"] else None)
        out["hits_home"].append(totals["hits_home"])
        out["misses"].append(totals["misses"])
        out["bytes_fetched"].append(totals["bytes_demand"] + totals["bytes_prefetch"])
        out["stall_s"].append(float(gpu.layer_stall.sum()))
        out["compute_s"].append(float(gpu.layer_compute.sum()))
        out["ttft_s"].append(mean_of(table["ttft_s"]))
        out["tpot_s"].append(float(gpu.pass_time[decode].mean()) if decode.any() else None)
        out["finish_s"].append(max(table["finish_s"], default=None))
    return out


def _pass_table(gpus: list[_Gpu]) -> dict[str, list[Any]]:
    """One row per pass of every GPU, in span numbering: its GPU, request (the first of a
    batch), phase (``prefill``/``decode``), start and end (s)."""
    out: dict[str, list[Any]] = {k: [] for k in ("gpu", "pass", "request", "phase")}
    for gpu in gpus:
        n = gpu.passes.num_passes
        out["gpu"] += [gpu.node.id] * n
        out["pass"] += list(range(gpu.pass_base, gpu.pass_base + n))
        out["request"] += gpu.passes.request.tolist()
        out["phase"] += ["decode" if ph else "prefill" for ph in gpu.passes.phase.tolist()]
    out["start_s"] = np.concatenate([g.pass_start for g in gpus]).tolist()
    out["end_s"] = np.concatenate([g.pass_end for g in gpus]).tolist()
    return out


class _Gpu:
    """One GPU: its compute stream, copy engines, expert cache and plug-ins."""

    def __init__(self, run: _TimingRun, g: int, objs: RunObjects, pass_base: int) -> None:
        self.run = run
        self.env = run.env
        self.objs = objs
        self.sc = objs.scenario
        self.passes = self.sc.passes
        self.pass_base = pass_base  # this GPU's passes are numbered from here in the spans
        self.cache = objs.cache
        self.cost = objs.ctx.cost
        self.node = gpu = self.sc.gpus[g]
        self.paths, self.source = objs.ctx.paths, objs.ctx.source
        self.spans = run.spans
        suffix = "" if len(self.sc.shards) == 1 else f"{gpu.id}/"
        self.counter_used = f"{suffix}cache_used_bytes"
        self.counter_flight = f"{suffix}bytes_in_flight"
        engines = gpu.copy_engines_h2d.value
        self.compute_lane = self.spans.lane(f"{gpu.id}/compute")
        self.copy_lane_names = [f"{gpu.id}/copy-h2d-{i}" for i in range(engines)]
        self.copy_lanes = [self.spans.lane(name) for name in self.copy_lane_names]
        self.engines = CopyEngines(
            self.env,
            engines,
            run_chunk=self._move_chunk,
            should_cancel=self._prefetch_obsolete,
            on_cancel=self._cancelled,
            on_done=self._arrived,
        )
        self.jobs: dict[int, Job] = {}
        self.position = (-1, -1)  # (pass, layer) whose router decided last
        self.chunk_bytes = self.sc.config.timing.chunk_bytes
        num_layers = self.sc.trace.num_layers
        self.layer_stall = np.zeros(num_layers)
        self.layer_compute = np.zeros(num_layers)
        self.phase_compute = np.zeros((2, num_layers))  # [prefill/decode, layer]
        self.phase_stall = np.zeros((2, num_layers))
        self.compute_iv = Intervals()
        self.stall_iv = Intervals()
        self.transfers = Busy()
        self.engine_busy = np.zeros(engines)
        self.engine_bytes = [0] * engines
        self.arrivals = objs.arrivals
        self.space_event: simpy.Event | None = None
        self.cache.listeners.append(self._space_changed)
        self.in_flight = 0
        self.arrival: dict[int, float] = {}
        self.first_token: dict[int, float] = {}
        self.last_token: dict[int, float] = {}
        self.decode_tokens: dict[int, int] = {}
        self.pass_time = np.zeros(self.passes.num_passes)
        self.pass_start = np.zeros(self.passes.num_passes)
        self.pass_end = np.zeros(self.passes.num_passes)
        self.last_pass_end = 0.0
        self.pass_compute = np.zeros(self.passes.num_passes)
        self.pass_stall = np.zeros(self.passes.num_passes)
        if self.spans.enabled:
            self.cache.occupancy_hook = self._occupancy

    def used_quantities(self) -> list[Quantity]:
        """The hardware numbers this GPU's run depends on (for the result's grade)."""
        gpu = self.node
        used = [
            gpu.hbm_bandwidth_bytes_per_s, gpu.dense_bf16_flops, gpu.compute_efficiency,
            gpu.memory_efficiency, gpu.kernel_launch_overhead_s, gpu.copy_engines_h2d,
            self.run.host.dram_bandwidth_bytes_per_s,
        ]  # fmt: skip
        if "fp8" in self.sc.placement.dtype and gpu.dense_fp8_flops is not None:
            used.append(gpu.dense_fp8_flops)
        fetched = set(np.unique(self.source[self.source >= 0]).tolist())
        for i, path in enumerate(self.paths):
            if i in fetched or i == 0:
                for hop in path.hops:
                    used += [hop.link.bandwidth_bytes_per_s, hop.link.latency_s]
        drive = self.sc.placement.nvme
        if drive is not None and (self.sc.placement.tier == TIER_NVME).any():
            used += [drive.read_bandwidth_bytes_per_s, drive.read_latency_s]
            used += [drive.read_request_bytes, drive.max_queue_depth]
        return used

    def request_table(self) -> dict[str, list[Any]]:
        return request_table(
            sorted(self.arrival), self.arrival, self.first_token, self.last_token,
            self.decode_tokens, self.compute_iv, self.stall_iv,
        )  # fmt: skip

    # --- transfers -------------------------------------------------------------------------

    def _start_fetch(
        self, key: int, demand: bool, target: tuple[int, int], bypass: bool = False
    ) -> Job:
        """Queue a transfer of ``key``; ``bypass`` moves it to a staging buffer, not the cache."""
        nbytes = self.cache.nbytes[key]
        step = self.chunk_bytes or nbytes
        chunks = [min(step, nbytes - off) for off in range(0, nbytes, step)]
        job = Job(key, demand, target, nbytes, chunks, self.env.event(), bypass=bypass)
        if not bypass:
            self.jobs[key] = job
        self.engines.submit(job)
        return job

    def _occupancy(self, used_bytes: int) -> None:
        self.spans.sample(self.counter_used, self.env.now, used_bytes)

    def _move_chunk(self, job: Job, slot: int, nbytes: int) -> Generator[Any, Any, None]:
        start = self.env.now
        self.in_flight += nbytes
        self.transfers.start(start)
        self.spans.sample(self.counter_flight, start, self.in_flight)
        path = self.paths[self.source[job.key]]
        depth = 1
        drive = self.sc.placement.nvme
        if drive is not None and path.source == drive.id:
            depth = math.ceil(nbytes / drive.read_request_bytes.value)
        yield from self.run.network.transfer(nbytes, path.resources, path.latency_s, depth)
        self.in_flight -= nbytes
        self.transfers.stop(self.env.now)
        self.engine_busy[slot] += self.env.now - start
        self.engine_bytes[slot] += nbytes
        self.spans.sample(self.counter_flight, self.env.now, self.in_flight)
        kind = "demand_fetch" if job.demand else "prefetch"
        self.spans.add(
            self.copy_lanes[slot], kind, start, self.env.now, self.pass_base + job.target[0],
            job.target[1], job.key, nbytes, int(self.passes.request[job.target[0]]),
        )  # fmt: skip

    def _prefetch_obsolete(self, job: Job) -> bool:
        return self.position >= job.target and not self.cache.pins[job.key]

    def _cancelled(self, job: Job) -> None:
        del self.jobs[job.key]
        self.cache.cancel(job.key)

    def _arrived(self, job: Job) -> None:
        if not job.bypass:
            del self.jobs[job.key]
            self.cache.complete(job.key)
        job.done.succeed()

    def _start_cpu(self, key: int, tokens: int, klass: int, where: dict[str, int]) -> simpy.Process:
        """Run expert ``key`` on the host CPU: one at a time (all GPUs share the CPU); its
        compute overlaps its weight reads, a flow over the host's DRAM (and the NVMe drive
        holding it) shared with the copy engines' DMA reads."""
        run, env = self.run, self.env
        if run.cpu_lane is None:
            run.cpu_lane = self.spans.lane(f"{run.host.id}/cpu-experts")
        resources, latency, depth = run.cpu_read_path(key)
        nbytes = self.cache.nbytes[key]

        def execute() -> Generator[Any, Any, None]:
            with run.cpu.request() as turn:
                yield turn
                start = env.now
                flops = env.timeout(self.cost.cpu_expert_flops_time(run.host, tokens))
                read = env.process(run.network.transfer(nbytes, resources, latency, depth))
                yield flops & read
                self.spans.add(
                    run.cpu_lane, "cpu_expert", start, env.now, expert=key, klass=int(klass),
                    bytes_=nbytes, **where,
                )  # fmt: skip

        return env.process(execute())

    def _space_changed(self) -> None:
        if self.space_event is not None and not self.space_event.triggered:
            self.space_event.succeed()

    def _reserve_demand(self, key: int) -> Generator[Any, Any, None]:
        cache = self.cache
        while not cache.reserve(key, FetchReason.DEMAND):
            if self.engines.cancel_queued_prefetches(1, self._cancel_job):
                continue
            self.space_event = self.env.event()
            yield self.space_event
            self.space_event = None

    def _cancel_job(self, job: Job) -> bool:
        if self.cache.pins[job.key]:
            return False
        self._cancelled(job)
        return True

    # --- compute stream --------------------------------------------------------------------

    def _compute(self, lane: int, kind: str, seconds: float, **where: int) -> simpy.Timeout:
        now = self.env.now
        self.spans.add(lane, kind, now, now + seconds, **where)
        self.compute_iv.add(now, now + seconds)
        return self.env.timeout(seconds)

    def stream(self) -> Generator[Any, Any, None]:
        sc, cache, env, cost = self.sc, self.cache, self.env, self.cost
        passes, demand = sc.passes, sc.demand
        dtype_of = sc.placement.dtype
        prefetch, predictor, miss = self.objs.prefetch, self.objs.predictor, self.objs.miss
        fetch_all = miss.always_fetches
        prefetching = prefetch.lookahead > 0
        num_layers, lane = sc.trace.num_layers, self.compute_lane
        pin = sc.config.cache.pin_demand_set
        for p in range(passes.num_passes):
            gp = self.pass_base + p  # the pass's number in the spans (unique over GPUs)
            req = int(passes.request[p])
            members = passes.requests_of(p)
            if passes.joins[p]:
                yield from self._admit(members)
            t_pass = env.now
            compute_before, stall_before = self.compute_iv.sum, self.stall_iv.sum
            phase = int(passes.phase[p])
            cache.begin_pass(p)
            tokens = passes.tokens(p)
            attended, kv_tokens = int(passes.attended[p]), int(passes.kv_tokens[p])
            t_attn = cost.batch_attention_time(tokens, attended, kv_tokens)
            if sc.model.dense_layers:
                t_dense = cost.dense_layers_time(tokens, attended, kv_tokens)
                yield self._compute(lane, "attention", t_dense, pass_=gp, request=req)
            for layer in range(num_layers):
                where = {"pass_": gp, "layer": layer, "request": req}
                self.layer_compute[layer] += t_attn
                self.phase_compute[phase, layer] += t_attn
                yield self._compute(lane, "attention", t_attn, **where)
                self.position = (p, layer)
                cache.begin_layer(layer)
                lo, hi = demand.span(p, layer)
                keys = demand.keys[lo:hi].tolist()
                ntok = demand.tokens[lo:hi].tolist()
                ready: list[tuple[int, int, int, Job | None]] = []
                on_cpu: list[tuple[int, int, simpy.Process]] = []
                waiting: list[tuple[int, int, int, Job | None]] = []
                held = list(keys)  # pinned until the layer ends (pin_demand_set)
                taken = set(keys)
                for key in keys:
                    cache.pin(key)
                for key, n in zip(keys, ntok, strict=True):
                    klass = cache.access(key, layer)
                    if klass == _HIT:
                        ready.append((key, n, klass, None))
                        continue
                    decision = FETCH if fetch_all else miss.decide(p, layer, key, cache, taken)
                    if decision != FETCH:
                        target = decision.by
                        if not pin:
                            cache.unpin(key)
                        if decision == DROP:
                            cache.drop()
                            continue
                        if decision == CPU:
                            cache.run_on_cpu()
                            on_cpu.append((key, klass, self._start_cpu(key, n, klass, where)))
                            continue
                        cache.substitute(target)
                        cache.pin(target)
                        taken.add(target)
                        held.append(target)
                        ready.append((target, n, klass, None))
                        continue
                    if klass == _LATE:
                        job = self.jobs[key]
                        self.engines.promote(job)
                    elif cache.admits(key, FetchReason.DEMAND):
                        yield from self._reserve_demand(key)
                        job = self._start_fetch(key, True, (p, layer))
                    else:
                        cache.stream(key)
                        job = self._start_fetch(key, True, (p, layer), bypass=True)
                    waiting.append((key, n, klass, job))
                if prefetching:
                    for key in prefetch.plan(p, layer, predictor, cache):
                        if cache.state[key] != _ABSENT:
                            cache.hint(key)
                        elif cache.reserve(key, FetchReason.PREFETCH):
                            self._start_fetch(key, False, (p, key // sc.trace.num_experts))
                for key, n, klass, job in ready + waiting:
                    if job is not None and not job.done.triggered:
                        t0 = env.now
                        yield job.done
                        self.spans.add(lane, "stall", t0, env.now, gp, layer, key, 0, req, klass)
                        self.stall_iv.add(t0, env.now)
                        self.layer_stall[layer] += env.now - t0
                        self.phase_stall[phase, layer] += env.now - t0
                    t_exp = cost.expert_time(n, dtype_of[key])
                    self.layer_compute[layer] += t_exp
                    self.phase_compute[phase, layer] += t_exp
                    yield self._compute(
                        lane, "expert", t_exp, expert=key, klass=int(klass), **where
                    )
                    if not pin:
                        cache.unpin(key)
                for key, klass, op in on_cpu:
                    if not op.triggered:
                        t0 = env.now
                        yield op
                        self.spans.add(lane, "stall", t0, env.now, gp, layer, key, 0, req, klass)
                        self.stall_iv.add(t0, env.now)
                        self.layer_stall[layer] += env.now - t0
                        self.phase_stall[phase, layer] += env.now - t0
                if pin:
                    for key in held:
                        cache.unpin(key)
            if phase == 1 or passes.first_token[p]:
                t_head = cost.lm_head_time(len(members))
                yield self._compute(lane, "lm_head", t_head, pass_=gp, request=req)
            if passes.first_token[p]:
                self.first_token[req] = env.now
            elif phase == 1:
                for r in members:
                    self.last_token[r] = env.now
                    self.decode_tokens[r] = self.decode_tokens.get(r, 0) + 1
            self.pass_start[p] = t_pass
            self.pass_end[p] = env.now
            self.pass_time[p] = env.now - t_pass
            self.last_pass_end = env.now
            self.pass_compute[p] = self.compute_iv.sum - compute_before
            self.pass_stall[p] = self.stall_iv.sum - stall_before
            self.run.pass_done()

    def _admit(self, members: list[int]) -> Generator[Any, Any, None]:
        """Record the arrival of the pass's new requests; wait until all have arrived."""
        latest = self.env.now
        for r in members:
            if r in self.arrival:
                continue
            if self.arrivals is None:
                self.arrival[r] = self.env.now
            else:
                self.arrival[r] = float(self.arrivals[len(self.arrival)])
            latest = max(latest, self.arrival[r])
        if latest > self.env.now:
            yield self.env.timeout(latest - self.env.now)


def _other(total: float, compute: float, stall: float) -> float:
    other = total - compute - stall
    return other if other > 1e-9 * total else 0.0


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None
