"""The real executor: the timing engine's compute stream and transfers, run for real.

:func:`execute` builds the same scenario, cache and plug-ins as the simulator
(:func:`specmd_sim.scenario.build_runs`) and drives the same :class:`~specmd_sim.engine.layer.
LayerStep`; only the fulfilment differs. The calling thread runs each pass's attention blocks,
experts and LM head as real float32 matmuls (:mod:`.model`) on the backend's device
(:mod:`.device`: numpy on this CPU, or torch on a CUDA GPU); fetches are real copies from the
slow tier into fast-tier slots over a link, throttled or the device's own. On the torch
backends the calling thread issues the copies itself, to copy streams, as production
offloading systems do (:mod:`.issue`): kernels are launched without waiting for them, an
expert's kernel waits for its copy on the device, and the host waits only to read a layer's
routing; on the ``cpu`` backend (no DMA engine) copy-worker threads make them
(:mod:`.copies`). Times are read after the run from marks on the streams (CUDA events; on a
CPU ``time.perf_counter``), from the run's start; the accounting is the timing engine's
(:class:`~specmd_sim.engine.sim.tally.GpuTally`, :func:`timing_result`), so the result has the
simulator's format with ``engine: "execute"``. A stall runs from when the compute stream was
ready for an expert (or the host began to wait for it) to its copy's arrival, at most until
the expert's kernel started.

Decisions are the simulator's wherever they do not depend on time. Where they do — whether an
access finds its prefetch still loading (a late hit), whether a prefetch is cancelled because
its layer has already decided, whether a demand fetch has to wait for space — the executor
decides by its own clock, as a real system would; :mod:`specmd_sim.validate.real` counts how
often the outcomes then differ.

Supported: one GPU, closed-loop arrivals, every expert at the model's dtype in host memory,
miss handling that fetches, drops or substitutes (not ``cpu-execute``), no chunked transfers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.layer import (
    AwaitCpu,
    Decide,
    Expert,
    Fetch,
    Join,
    LayerStep,
    Run,
    RunOnCpu,
    Step,
    WaitForSpace,
)
from specmd_sim.engine.sim.copy_engines import transfer_kind
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.engine.sim.tally import GpuTally, timing_result
from specmd_sim.errors import SpecmdError
from specmd_sim.execute.copies import FairLink, Job, ThrottledLink, Transfers
from specmd_sim.execute.device import Device, check_name, make_device
from specmd_sim.execute.issue import Issuer, Mark, Streams, streams_for
from specmd_sim.execute.model import KvCache, Weights
from specmd_sim.metrics import RunResult
from specmd_sim.scenario import Scenario, build_runs
from specmd_sim.timeline import SpanRecorder


@dataclass(frozen=True)
class Backend:
    """Where the executor runs: the slow tier's link bandwidth (bytes/s, throttled; infinite:
    the device's own link, on CUDA PCIe; its latency is what the copy path costs for real), the
    weights' seed and the device (:data:`~specmd_sim.execute.device.DEVICES`). The copy workers
    (or copy streams) are the profile GPU's ``copy_engines_h2d``."""

    link_bandwidth: float
    seed: int = 0
    dry: bool = False  # no compute and no bytes moved: the executor's own cost (calibration)
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_name(self.device, "execute: device")


def execute(
    scenario: Scenario,
    backend: Backend,
    progress: Progress | None = None,
    weights: Weights | None = None,
) -> RunResult:
    """Run ``scenario`` on this machine for real; see the module docstring. ``weights``: the
    model's weights, drawn (and placed on the device) once for several runs (default: drawn for
    this one)."""
    _check(scenario)
    if weights is None:
        weights = Weights(scenario.model, backend.seed, dry=backend.dry)
    elif weights.model != scenario.model:
        raise SpecmdError(
            f"execute: weights: expected {scenario.model.id}'s, got {weights.model.id}'s"
        )
    device = make_device(backend.device)
    return _Executor(scenario, backend, device, device.place(weights)).run(progress)


def _check(scenario: Scenario) -> None:
    cfg = scenario.config
    problems = [
        (len(scenario.gpus) == 1, "parallel.gpus", "1 GPU", len(scenario.gpus)),
        (cfg.workload.arrivals == "closed-loop", "workload.arrivals", "closed-loop",
         cfg.workload.arrivals),
        (cfg.workload.scheduler == "slots", "workload.scheduler", "slots",
         cfg.workload.scheduler),
        (cfg.workload.kv_cache == "reserved", "workload.kv_cache", "reserved",
         cfg.workload.kv_cache),
        (cfg.kv_dtype in (None, "fp32"), "kv_dtype", "null or fp32 (its KV cache is float32)",
         cfg.kv_dtype),
        (cfg.miss.kind != "cpu-execute", "miss.kind", "fetch, drop or substitute", "cpu-execute"),
        (cfg.timing.chunk_bytes is None, "timing.chunk_bytes", "null", cfg.timing.chunk_bytes),
        (scenario.placement.nvme is None, "memory", "every expert in host memory", "NVMe"),
        (set(scenario.placement.dtype) == {scenario.model.expert_dtype}, "precision.cold_dtype",
         "null (one expert dtype)", cfg.precision.cold_dtype),
        (scenario.model.expert_dtype == "fp32", "model", "a float32 model (execute.scaled_model)",
         scenario.model.expert_dtype),
    ]  # fmt: skip
    for ok, name, want, got in problems:
        if not ok:
            raise SpecmdError(f"execute: {name}: expected {want}, got {got!r}")


class _Executor:
    def __init__(
        self, scenario: Scenario, backend: Backend, device: Device, weights: Weights
    ) -> None:
        (objs,) = build_runs(scenario)
        self.sc, self.objs, self.device = scenario, objs, device
        model = scenario.model
        self.weights = weights
        self.ops = device.ops(weights, backend.dry)
        self.passes = scenario.passes
        self.num_layers = model.moe_layers
        gpu = scenario.gpus[0]
        engines = gpu.copy_engines_h2d.value
        self.tally = GpuTally(gpu.id, self.passes, self.num_layers, engines)
        self.tally.copy_lane_names = [f"{gpu.id}/copy-h2d-{i}" for i in range(engines)]
        self.spans = SpanRecorder(scenario.config.timing.record_spans)
        self.lane = self.spans.lane(f"{gpu.id}/compute")
        self.copy_lanes = [self.spans.lane(n) for n in self.tally.copy_lane_names]
        self.step = LayerStep(objs)
        self.lock = threading.Lock()
        self.position: tuple[int, int] = (-1, -1)
        self.demanded: frozenset[int] = frozenset()
        self.where: dict[str, int] = {}
        self.phase = 0
        # the copies: worker threads on a CPU (no DMA engine), else issued by this thread
        self.streams: Streams = streams_for(device, engines, backend.dry)
        position = self._decided
        self.transfers: Transfers | Issuer
        if device.threaded_copies:
            self.transfers = Transfers(
                device, objs.cache, self.weights.slow, scenario.slots,
                ThrottledLink(backend.link_bandwidth), engines, self.lock, position,
                self._copied, self.streams.host, move=not backend.dry,
            )  # fmt: skip
        else:
            self.transfers = Issuer(
                device, objs.cache, self.weights.slow, scenario.slots,
                FairLink(backend.link_bandwidth), engines, self.streams, position, self._copied,
                move=not backend.dry,
            )  # fmt: skip
        # what happened on the streams, read once the run is over: ("compute", kind, start,
        # end, where, phase), ("stall", ready, waited, arrival, start, where, phase),
        # ("begin" | "end", pass, mark)
        self.records: list[tuple] = []
        self.last: Mark = 0.0  # the end of the compute stream's last launch
        self.copies: list[tuple[float, float]] = []
        self.transfers.preload(objs.cache.contents())
        length = int(self.passes.context_end.max()) if self.passes.num_passes else 0
        self.kv = {int(r): KvCache(model, length, device.zeros)
                   for r in np.unique(self.passes.request)}  # fmt: skip
        # every pass's input, drawn and placed before the clock starts
        rng = np.random.default_rng(backend.seed + 1)
        self.inputs = [
            device.array(rng.standard_normal((self.passes.tokens(p), model.hidden_size),
                                             dtype=np.float32))
            for p in range(self.passes.num_passes)
        ]  # fmt: skip

    # --- the compute stream -------------------------------------------------------------------

    def _compute(self, kind: str, work: Callable[..., Any], args: tuple, **where: int) -> Any:
        """Launch ``work(*args)`` on the compute stream (the lock released), timed by its
        marks."""
        self.lock.release()
        try:
            out, start, self.last = self.streams.launch(work, args)
        finally:
            self.lock.acquire()
        self.records.append(("compute", kind, start, self.last, where, self.phase))
        return out

    def _wait(self, job: Job) -> tuple[float, float | Job] | None:
        """Wait until an expert's kernel may be launched after its copy: None if the copy had
        arrived, else when the host began to wait and the copy's arrival (the job, whose end
        is read after the run; a copy worker's: the host's waking)."""
        if job.done.is_set():
            self._raise_failure()
            return None
        waited = self.streams.host()
        self.transfers.wait(job)
        self._raise_failure()
        return waited, (self.streams.host() if self.transfers.threaded else job)

    def _decided(self) -> tuple[tuple[int, int], frozenset[int]]:
        """The (pass, layer) whose router decided last, and its demand set."""
        return self.position, self.demanded

    def _raise_failure(self) -> None:
        if self.transfers.failure is not None:
            raise RuntimeError("execute: a copy worker failed") from self.transfers.failure

    def _copied(self, job: Job, engine: int) -> None:
        """A copy's bytes arrived (locked)."""
        self.copies.append((job.start_s, job.end_s))
        self.tally.engine_busy[engine] += job.end_s - job.start_s
        self.tally.engine_bytes[engine] += job.slot.nbytes
        p, layer = job.target
        self.spans.add(
            self.copy_lanes[engine], transfer_kind(job), job.start_s,
            job.end_s, p, layer, job.key, job.slot.nbytes, int(self.passes.request[p]),
        )  # fmt: skip

    def _resolve(self) -> None:
        """Everything the compute stream did, in order, into the spans and the tally (its
        times read from the marks, now that the device is idle)."""
        seconds, tally, spans, lane = self.streams.seconds, self.tally, self.spans, self.lane
        for record in self.records:
            kind = record[0]
            if kind == "compute":
                _, name, a, b, where, phase = record
                start, end = seconds(a), seconds(b)
                spans.add(lane, name, start, end, **where)
                tally.compute(start, end - start, phase, where.get("layer", -1))
            elif kind == "stall":
                _, ready, waited, arrival, launched, w, phase = record
                start = max(seconds(ready), waited)
                end = arrival if isinstance(arrival, float) else arrival.end_s
                end = min(end, seconds(launched))
                if end > start:
                    spans.add(lane, "stall", start, end, w["pass_"], w["layer"], w["expert"],
                              0, w["request"], w["klass"])  # fmt: skip
                    tally.stall(start, end, phase, w["layer"])
            elif kind == "begin":
                _, p, mark = record
                t = seconds(mark)
                for r in self.passes.requests_of(p):
                    tally.arrival.setdefault(r, t)
                tally.begin_pass(p, t)
            else:
                _, p, mark = record
                tally.end_pass(p, seconds(mark))
        # the copies' union, in time order
        for t, start in sorted([(a, True) for a, _ in self.copies]
                               + [(b, False) for _, b in self.copies],
                               key=lambda e: (e[0], e[1])):  # fmt: skip
            (tally.transfers.start if start else tally.transfers.stop)(t)

    # --- passes ----------------------------------------------------------------------------

    def run(self, progress: Progress | None) -> RunResult:
        passes = self.passes
        self._warm_up()
        self.lock.acquire()
        try:
            self.last = self.streams.start()
            for p in range(passes.num_passes):
                req = int(passes.request[p])
                self.records.append(("begin", p, self.streams.mark()))
                self.phase = int(passes.phase[p])
                self.step.begin_pass(p)
                x = self.inputs[p]
                start = int(passes.context_end[p]) - x.shape[0]
                kv = self.kv[req]
                for layer in range(self.num_layers):
                    self.where = {"pass_": p, "layer": layer, "request": req}
                    # every layer reads the pass's input: the routing comes from the trace, and
                    # chained random layers would drift towards overflow
                    self._compute(
                        "attention", self.ops.attention, (x, layer, kv, start), **self.where
                    )
                    self._read_router()
                    self._fulfil(self.step.layer(p, layer), x)
                if self.phase == 1 or passes.first_token[p]:
                    last = x[-1:]
                    self._compute("lm_head", self.ops.lm_head, (last,), pass_=p, request=req)
                self.records.append(("end", p, self.streams.mark()))
                report_progress(progress, p + 1, passes.num_passes)
        finally:
            self.lock.release()
            self.transfers.close()
        self._raise_failure()
        self.streams.finish()
        self._resolve()
        self.objs.cache.finish()
        network = FlowNetwork(simpy.Environment(), {})
        result = timing_result(
            [self.tally], [self.objs.cache], network, self.spans, "A", self.sc.config.slo
        )
        result.engine = "execute"
        finish_result(self.sc, result)
        return result

    def _read_router(self) -> None:
        """The host reads the layer's routing before it decides (as mixtral-offloading's
        ``.tolist()`` of the selected experts does): it waits for the attention block, issuing
        copies meanwhile. A copy worker's host computes synchronously: nothing to wait for."""
        if isinstance(self.transfers, Issuer):
            last, done = self.last, self.streams.done
            self.transfers.until(lambda: done(last))

    def _warm_up(self) -> None:
        """Untimed attention blocks, experts and LM heads on one token and on the largest pass
        (BLAS threads, code paths, the GPU's kernels and libraries)."""
        m, device, ops = self.sc.model, self.device, self.ops
        most = max((x.shape[0] for x in self.inputs), default=1)
        for tokens in sorted({1, most}):
            x = device.zeros(tokens, m.hidden_size)
            ops.attention(x, 0, KvCache(m, tokens, device.zeros), 0)
            ops.expert(device.zeros(self.weights.expert_size), x)
            ops.lm_head(x[-1:])
        device.sync()

    def _fulfil(self, step: Step, x: Any) -> None:
        send, transfers = step.send, self.transfers
        outcome: Any = None
        while True:
            try:
                request = send(outcome)
            except StopIteration:
                return
            outcome = None
            match request:
                case Run(experts):
                    self._run(experts, x)
                case Fetch():
                    outcome = transfers.fetch(request)
                case Join(key):
                    outcome = transfers.join(key)
                case WaitForSpace():
                    transfers.make_room()
                    self._raise_failure()
                case Decide(pass_index, layer, keys):
                    self.position, self.demanded = (pass_index, layer), keys
                case RunOnCpu() | AwaitCpu():
                    raise SpecmdError("execute: miss.kind: expected no cpu-execute, got it")

    def _run(self, experts: list[Expert], x: Any) -> None:
        ops, transfers, where = self.ops, self.transfers, self.where
        for e in experts:
            job: Job | None = e.handle
            ready, waited = self.last, self._wait(job) if job is not None else None
            w = transfers.weights(e.key, job)
            tokens = x[: e.tokens]
            self._compute("expert", ops.expert, (w, tokens), expert=e.key, klass=e.klass,
                          **where)  # fmt: skip
            start = self.records[-1][2]
            if waited is not None:  # the stall: from when the stream was ready (or the host
                # began to wait) to the copy's arrival, at most until the kernel started
                self.records.insert(-1, ("stall", ready, *waited, start,
                                         {**where, "expert": e.key, "klass": e.klass},
                                         self.phase))  # fmt: skip
            if isinstance(transfers, Issuer):
                transfers.read(job, e.key, self.last)
            if job is not None:
                transfers.release(job)
