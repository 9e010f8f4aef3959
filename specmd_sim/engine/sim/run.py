"""The timing engine's main process: one GPU compute stream running passes layer by layer.

Per layer (DESIGN.md §4): attention runs; the router decides; the demand set is pinned; each
access is classified (a LOADING expert is a *late hit*, and a queued prefetch of it is promoted
to demand priority); misses are demand-fetched in gate order; the prefetcher's list is issued
(demand fetches keep priority on the copy engines); resident experts run first, then each
missing one as soon as it arrives (the wait is *stall*); pins are released. A prefetch whose
target layer has already started, and which that layer did not demand, is cancelled before it
starts. A demand fetch that finds nothing evictable first cancels queued prefetches, then waits
for a transfer to finish.

Requests are served one after another (closed loop): a request arrives when the previous one
has finished, so its TTFT is its prefill time plus the LM head.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from specmd_sim.cache import AccessClass, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.config import SimConfig
from specmd_sim.engine.common import Progress, finish_result, grade_of, report_progress
from specmd_sim.engine.setup import build_run
from specmd_sim.engine.sim.copy_engines import CopyEngines, Job
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.miss.base import DROP
from specmd_sim.scenario import Scenario, build_scenario
from specmd_sim.timeline import (
    COMPUTE_KINDS,
    TRANSFER_KINDS,
    SpanRecorder,
    busy_union,
    intersection_length,
)

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
        self.spans.sample("bytes_in_flight", start, self.in_flight)
        yield from self.network.transfer(nbytes, self.resources, self.latency)
        self.in_flight -= nbytes
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
        job.cancelled = True
        self._cancelled(job)
        return True

    # --- compute stream --------------------------------------------------------------------

    def _compute(self, lane: int, kind: str, seconds: float, **where: int) -> simpy.Timeout:
        now = self.env.now
        self.spans.add(lane, kind, now, now + seconds, **where)
        return self.env.timeout(seconds)

    def _stream(self) -> Generator[Any, Any, None]:
        sc, cache, env, cost = self.sc, self.cache, self.env, self.cost
        passes, demand = sc.passes, sc.demand
        prefetch, predictor, miss = self.objs.prefetch, self.objs.predictor, self.objs.miss
        fetch_all = miss.always_fetches
        prefetching = prefetch.lookahead > 0
        num_layers, lane = sc.trace.num_layers, self.compute_lane
        pin = sc.config.cache.pin_demand_set
        arrival: dict[int, float] = {}
        self.ttft: dict[int, float] = {}
        self.pass_time = np.zeros(passes.num_passes)
        total = passes.num_passes
        for p in range(total):
            req = int(passes.request[p])
            t_pass = env.now
            arrival.setdefault(req, t_pass)
            cache.begin_pass(p)
            tokens, context = passes.tokens(p), int(passes.context_end[p])
            for layer in range(num_layers):
                where = {"pass_": p, "layer": layer, "request": req}
                t_attn = cost.attention_time(tokens, context)
                self.layer_compute[layer] += t_attn
                yield self._compute(lane, "attention", t_attn, **where)
                self.position = (p, layer)
                cache.begin_layer(layer)
                lo, hi = demand.span(p, layer)
                keys = demand.keys[lo:hi].tolist()
                ntok = demand.tokens[lo:hi].tolist()
                ready: list[tuple[int, int, int, Job | None]] = []
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
                        self.layer_stall[layer] += env.now - t0
                    t_exp = cost.expert_time(n)
                    self.layer_compute[layer] += t_exp
                    yield self._compute(
                        lane, "expert", t_exp, expert=key, klass=int(klass), **where
                    )
                    if not pin:
                        cache.unpin(key)
                if pin:
                    for key in held:
                        cache.unpin(key)
            if passes.phase[p] == 1 or passes.first_token[p]:
                yield self._compute(lane, "lm_head", cost.lm_head_time(), pass_=p, request=req)
            if passes.first_token[p]:
                self.ttft[req] = env.now - arrival[req]
            self.pass_time[p] = env.now - t_pass
            report_progress(self.progress, p + 1, total)

    # --- result ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.env.process(self._stream())
        self.env.run()
        self.cache.finish()
        spans = self.spans.array()
        sc = self.sc
        metrics = cache_metrics(self.cache.stats)
        decode = sc.passes.phase == 1
        requests = sorted(self.ttft)
        stall = float(self.layer_stall.sum())
        metrics.update(
            ttft_s=float(np.mean([self.ttft[r] for r in requests])) if requests else None,
            tpot_s=float(self.pass_time[decode].mean()) if decode.any() else None,
            stall_s=stall,
            makespan_s=float(self.env.now),
            compute_s=float(self.layer_compute.sum()),
        )
        if self.spans.enabled:
            compute = busy_union(spans, COMPUTE_KINDS)
            transfer = busy_union(spans, TRANSFER_KINDS)
            metrics["transfer_busy_s"] = float(np.sum(transfer[:, 1] - transfer[:, 0]))
            metrics["overlap_s"] = intersection_length(compute, transfer)
        per_layer = per_layer_cache_table(self.cache.stats)
        per_layer["stall_s"] = self.layer_stall.tolist()
        per_layer["compute_s"] = self.layer_compute.tolist()
        result = RunResult(
            engine="simulate",
            metrics=metrics,
            per_layer=per_layer,
            per_request={"request": requests, "ttft_s": [self.ttft[r] for r in requests]},
            config={},
            inputs={},
            hardware_grade=grade_of(self.used),
            spans=spans if self.spans.enabled else None,
            lanes=list(self.spans.lanes),
            counters=self.spans.counters(),
        )
        return finish_result(sc, result)
