"""The timing engine's main process: one GPU compute stream running passes layer by layer.

Per layer (DESIGN.md §4): attention runs; the router decides; the demand set is pinned; each
access is classified (a LOADING expert is a *late hit*, and a queued prefetch of it is promoted
to demand priority); misses are demand-fetched in gate order; the prefetcher's list is issued
(demand fetches keep priority on the copy engines); resident experts run first, then each
missing one as soon as it arrives (the wait is *stall*); pins are released. A prefetch whose
target layer has already started, and which that layer did not demand, is cancelled before it
starts. A demand fetch that finds nothing evictable first cancels queued prefetches, then waits
for a transfer to finish.

Passes follow the pass table of :mod:`specmd_sim.engine.demand` (batching and admission order are
fixed before the run). A request arrives, closed loop, when its first pass starts, or at its
Poisson arrival time; a pass that admits a request not yet arrived waits for it (idle time, the
*other* part of the breakdown in :mod:`.breakdown`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from specmd_sim.cache import AccessClass, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.config import SimConfig
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.setup import build_run
from specmd_sim.engine.sim.breakdown import Busy, Intervals, mean_of, request_table
from specmd_sim.engine.sim.copy_engines import CopyEngines, Job
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.hardware import lowest_grade
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.miss.base import CPU, DROP
from specmd_sim.scenario import Scenario, build_scenario
from specmd_sim.timeline import SpanRecorder, intersection_length

_HIT, _LATE = AccessClass.HIT, AccessClass.LATE_HIT
_RESIDENT, _ABSENT = int(State.RESIDENT), int(State.ABSENT)


def simulate(config: SimConfig | Scenario, progress: Progress | None = None) -> RunResult:
    """Run the SimPy timing engine on a config (or an already built scenario)."""
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    return _TimingRun(scenario, progress).run()


class _TimingRun:
    def __init__(self, scenario: Scenario, progress: Progress | None) -> None:
        self.sc = scenario
        self.progress = progress
        self.objs = build_run(scenario)
        self.cache = self.objs.cache
        self.env = simpy.Environment()
        profile = scenario.profile
        gpu, host = profile.gpus[0], profile.hosts[0]
        path = self.objs.ctx.path
        hops = path.hops
        self.resources = path.resources
        self.latency = path.latency_s
        self.network = FlowNetwork(self.env, dict(path.capacity))
        self.cost = self.objs.ctx.cost
        self.used = [
            gpu.hbm_bandwidth_bytes_per_s, gpu.dense_bf16_flops, gpu.compute_efficiency,
            gpu.memory_efficiency, gpu.kernel_launch_overhead_s, gpu.copy_engines_h2d,
            host.dram_bandwidth_bytes_per_s,
            *(q for h in hops for q in (h.link.bandwidth_bytes_per_s, h.link.latency_s)),
        ]  # fmt: skip
        if scenario.model.expert_dtype == "fp8" and gpu.dense_fp8_flops is not None:
            self.used.append(gpu.dense_fp8_flops)
        self.spans = SpanRecorder(scenario.config.timing.record_spans)
        self.compute_lane = self.spans.lane(f"{gpu.id}/compute")
        self.copy_lanes = [
            self.spans.lane(f"{gpu.id}/copy-h2d-{i}") for i in range(gpu.copy_engines_h2d.value)
        ]
        self.engines = CopyEngines(
            self.env,
            gpu.copy_engines_h2d.value,
            run_chunk=self._move_chunk,
            should_cancel=self._prefetch_obsolete,
            on_cancel=self._cancelled,
            on_done=self._arrived,
        )
        self.jobs: dict[int, Job] = {}
        self.position = (-1, -1)  # (pass, layer) whose router decided last
        self.request_of_pass = scenario.passes.request
        self.chunk_bytes = scenario.config.timing.chunk_bytes
        num_layers = scenario.trace.num_layers
        self.layer_stall = np.zeros(num_layers)
        self.layer_compute = np.zeros(num_layers)
        self.phase_compute = np.zeros((2, num_layers))  # [prefill/decode, layer]
        self.phase_stall = np.zeros((2, num_layers))
        self.compute_iv = Intervals()
        self.stall_iv = Intervals()
        self.transfers = Busy()
        self.engine_busy = np.zeros(gpu.copy_engines_h2d.value)
        self.engine_bytes = [0] * gpu.copy_engines_h2d.value
        self.copy_lane_names = [f"{gpu.id}/copy-h2d-{i}" for i in range(gpu.copy_engines_h2d.value)]
        self.arrivals = self.objs.arrivals
        self.host = host
        self.cpu = simpy.Resource(self.env, capacity=1)  # CPU expert execution, one at a time
        self.cpu_lane: int | None = None
        self.space_event: simpy.Event | None = None
        self.cache.listeners.append(self._space_changed)
        self.in_flight = 0
        if self.spans.enabled:
            self.cache.occupancy_hook = self._occupancy

    # --- transfers -------------------------------------------------------------------------

    def _start_fetch(
        self, key: int, demand: bool, target: tuple[int, int], bypass: bool = False
    ) -> Job:
        """Queue a transfer of ``key``; ``bypass`` moves it to a staging buffer, not the cache."""
        nbytes = self.cache.expert_bytes
        step = self.chunk_bytes or nbytes
        chunks = [min(step, nbytes - off) for off in range(0, nbytes, step)]
        job = Job(key, demand, target, nbytes, chunks, self.env.event(), bypass=bypass)
        if not bypass:
            self.jobs[key] = job
        self.engines.submit(job)
        return job

    def _occupancy(self, used_bytes: int) -> None:
        self.spans.sample("cache_used_bytes", self.env.now, used_bytes)

    def _move_chunk(self, job: Job, slot: int, nbytes: int) -> Generator[Any, Any, None]:
        start = self.env.now
        self.in_flight += nbytes
        self.transfers.start(start)
        self.spans.sample("bytes_in_flight", start, self.in_flight)
        yield from self.network.transfer(nbytes, self.resources, self.latency)
        self.in_flight -= nbytes
        self.transfers.stop(self.env.now)
        self.engine_busy[slot] += self.env.now - start
        self.engine_bytes[slot] += nbytes
        self.spans.sample("bytes_in_flight", self.env.now, self.in_flight)
        kind = "demand_fetch" if job.demand else "prefetch"
        self.spans.add(
            self.copy_lanes[slot], kind, start, self.env.now, job.target[0], job.target[1],
            job.key, nbytes, int(self.request_of_pass[job.target[0]]),
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
        """Run expert ``key`` on the host CPU: one at a time; its compute overlaps its weight
        reads, a flow over the host's DRAM shared with the copy engines' DMA reads."""
        if self.cpu_lane is None:
            self.cpu_lane = self.spans.lane(f"{self.host.id}/cpu-experts")
        env, dram = self.env, self.resources[-1]

        def run() -> Generator[Any, Any, None]:
            with self.cpu.request() as turn:
                yield turn
                start = env.now
                flops = env.timeout(self.cost.cpu_expert_flops_time(self.host, tokens))
                read = env.process(self.network.transfer(self.cache.expert_bytes, (dram,), 0.0))
                yield flops & read
                self.spans.add(
                    self.cpu_lane, "cpu_expert", start, env.now, expert=key, klass=int(klass),
                    bytes_=self.cache.expert_bytes, **where,
                )  # fmt: skip

        return env.process(run())

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

    def _stream(self) -> Generator[Any, Any, None]:
        sc, cache, env, cost = self.sc, self.cache, self.env, self.cost
        passes, demand = sc.passes, sc.demand
        prefetch, predictor, miss = self.objs.prefetch, self.objs.predictor, self.objs.miss
        fetch_all = miss.always_fetches
        prefetching = prefetch.lookahead > 0
        num_layers, lane = sc.trace.num_layers, self.compute_lane
        pin = sc.config.cache.pin_demand_set
        self.arrival: dict[int, float] = {}
        self.first_token: dict[int, float] = {}
        self.last_token: dict[int, float] = {}
        self.decode_tokens: dict[int, int] = {}
        self.pass_time = np.zeros(passes.num_passes)
        self.pass_compute = np.zeros(passes.num_passes)
        self.pass_stall = np.zeros(passes.num_passes)
        total = passes.num_passes
        for p in range(total):
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
                yield self._compute(lane, "attention", t_dense, pass_=p, request=req)
            for layer in range(num_layers):
                where = {"pass_": p, "layer": layer, "request": req}
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
                    target = key if fetch_all else miss.decide(p, layer, key, cache, taken)
                    if target != key:
                        if not pin:
                            cache.unpin(key)
                        if target == DROP:
                            cache.drop()
                            continue
                        if target == CPU:
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
                        self.spans.add(lane, "stall", t0, env.now, p, layer, key, 0, req, klass)
                        self.stall_iv.add(t0, env.now)
                        self.layer_stall[layer] += env.now - t0
                        self.phase_stall[phase, layer] += env.now - t0
                    t_exp = cost.expert_time(n)
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
                        self.spans.add(lane, "stall", t0, env.now, p, layer, key, 0, req, klass)
                        self.stall_iv.add(t0, env.now)
                        self.layer_stall[layer] += env.now - t0
                        self.phase_stall[phase, layer] += env.now - t0
                if pin:
                    for key in held:
                        cache.unpin(key)
            if phase == 1 or passes.first_token[p]:
                t_head = cost.lm_head_time(len(members))
                yield self._compute(lane, "lm_head", t_head, pass_=p, request=req)
            if passes.first_token[p]:
                self.first_token[req] = env.now
            elif phase == 1:
                for r in members:
                    self.last_token[r] = env.now
                    self.decode_tokens[r] = self.decode_tokens.get(r, 0) + 1
            self.pass_time[p] = env.now - t_pass
            self.pass_compute[p] = self.compute_iv.sum - compute_before
            self.pass_stall[p] = self.stall_iv.sum - stall_before
            report_progress(self.progress, p + 1, total)

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

    # --- result ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.env.process(self._stream())
        self.env.run()
        self.cache.finish()
        spans = self.spans.array()
        sc, passes = self.sc, self.sc.passes
        metrics = cache_metrics(self.cache.stats)
        makespan = float(self.env.now)
        requests = sorted(self.arrival)
        per_request = request_table(
            requests, self.arrival, self.first_token, self.last_token, self.decode_tokens,
            self.compute_iv, self.stall_iv,
        )  # fmt: skip
        decode = passes.phase == 1
        n_decode = int(decode.sum())
        tokens_out = len(self.first_token) + sum(self.decode_tokens.values())
        tokens_in = int(passes.rows.size)
        moved = metrics["bytes_demand"] + metrics["bytes_prefetch"]
        transfer = self.transfers.intervals
        transfer_busy = transfer.total()
        overlap = intersection_length(self.compute_iv.array(), transfer.array())
        tpot = float(self.pass_time[decode].mean()) if n_decode else None
        tpot_compute = float(self.pass_compute[decode].mean()) if n_decode else None
        tpot_stall = float(self.pass_stall[decode].mean()) if n_decode else None
        resources = self._resource_table(makespan)
        metrics.update(
            ttft_s=mean_of(per_request["ttft_s"]),
            ttft_compute_s=mean_of(per_request["ttft_compute_s"]),
            ttft_stall_s=mean_of(per_request["ttft_stall_s"]),
            ttft_other_s=mean_of(per_request["ttft_other_s"]),
            tpot_s=tpot,
            tpot_compute_s=tpot_compute,
            tpot_stall_s=tpot_stall,
            tpot_other_s=None if tpot is None else _other(tpot, tpot_compute, tpot_stall),
            stall_s=float(self.layer_stall.sum()),
            makespan_s=makespan,
            compute_s=float(self.layer_compute.sum()),
            tokens_generated=tokens_out,
            throughput_tok_s=tokens_out / makespan if makespan > 0 else None,
            bytes_per_token=moved / tokens_in if tokens_in else None,
            transfer_busy_s=transfer_busy,
            overlap_s=overlap,
            overlap_fraction=overlap / transfer_busy if transfer_busy > 0 else None,
            copy_engine_utilization=_ratio(float(self.engine_busy.mean()), makespan),
            link_utilization_max=max(
                (u for u, k in zip(resources["utilization"], resources["kind"], strict=True)
                 if k != "copy-engine" and u is not None),
                default=None,
            ),
        )  # fmt: skip
        with_prefill = max(len(self.first_token), 1)
        per_layer = per_layer_cache_table(self.cache.stats)
        per_layer["stall_s"] = self.layer_stall.tolist()
        per_layer["compute_s"] = self.layer_compute.tolist()
        per_layer["ttft_compute_s"] = (self.phase_compute[0] / with_prefill).tolist()
        per_layer["ttft_stall_s"] = (self.phase_stall[0] / with_prefill).tolist()
        per_layer["tpot_compute_s"] = (self.phase_compute[1] / max(n_decode, 1)).tolist()
        per_layer["tpot_stall_s"] = (self.phase_stall[1] / max(n_decode, 1)).tolist()
        result = RunResult(
            engine="simulate",
            metrics=metrics,
            per_layer=per_layer,
            per_request=per_request,
            config={},
            inputs={},
            hardware_grade=lowest_grade(
                self.used
                + (
                    [self.host.cpu_flops, self.host.cpu_compute_efficiency]
                    if metrics["activations_cpu"]
                    else []
                )
            ),
            spans=spans if self.spans.enabled else None,
            lanes=list(self.spans.lanes),
            counters=self.spans.counters(),
            per_resource=resources,
        )
        return finish_result(sc, self.objs.eviction.initial_contents(), result)

    def _resource_table(self, makespan: float) -> dict[str, list[Any]]:
        """Links, DRAM and copy engines: bytes moved, busy time and utilization."""
        net = self.network
        table: dict[str, list[Any]] = {
            k: [] for k in ("resource", "kind", "capacity_bytes_per_s", "bytes", "busy_s")
        }
        for r in self.resources:
            table["resource"].append(r)
            table["kind"].append(r.split(":", 1)[0] if r.startswith("dram:") else "link")
            table["capacity_bytes_per_s"].append(net.capacity[r])
            table["bytes"].append(net.bytes_through.get(r, 0.0))
            table["busy_s"].append(net.busy_s.get(r, 0.0))
        for slot, lane in enumerate(self.copy_lane_names):
            table["resource"].append(lane)
            table["kind"].append("copy-engine")
            table["capacity_bytes_per_s"].append(None)
            table["bytes"].append(self.engine_bytes[slot])
            table["busy_s"].append(float(self.engine_busy[slot]))
        table["busy_fraction"] = [_ratio(b, makespan) for b in table["busy_s"]]
        table["utilization"] = [
            _ratio(n, c * makespan) if c is not None else _ratio(b, makespan)
            for n, c, b in zip(
                table["bytes"], table["capacity_bytes_per_s"], table["busy_s"], strict=True
            )
        ]
        return table


def _other(total: float, compute: float, stall: float) -> float:
    other = total - compute - stall
    return other if other > 1e-9 * total else 0.0


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None
