"""One GPU's compute stream: a SimPy process running its passes layer by layer.

Per pass (the pass table's, or with an online schedule the step its scheduler forms when the
stream is ready for it: :mod:`specmd_sim.scenario.schedule`): the pass's new requests arrive
(closed loop: when it starts; else at their Poisson or recorded arrival time, which the stream
waits for: idle time, the *other* part of :mod:`.breakdown`); DeepSeek's dense-FFN
layers run; then per MoE layer attention runs and :mod:`specmd_sim.engine.layer` makes the
layer's decisions, whose requests the stream fulfils: fetches go to the GPU's
:class:`~specmd_sim.engine.sim.fetch.Fetcher`, CPU experts to the shared
:class:`~specmd_sim.engine.sim.cpu.HostCpu`, and experts run on the stream, each once its
transfer has arrived (the wait is a *stall*). A pass that produces a token ends with the LM
head. When the runtime issues its copies on the compute stream (``copy_stream: compute``), a
layer's attention and its experts first wait (a stall) until no copy of the GPU is queued or
moving, write-backs included: nothing overlaps.

Issuing a copy costs the thread that runs the model host time (the runtime's
``copy_issue_overhead_s`` per tensor copied: ``h2d_tensors_per_expert`` per expert fetched or
written back), during which it launches no kernel. The stream pays for the copies a layer step
issued as one ``copy_issue`` span, before it next runs or waits for an expert (a :class:`Run`,
an :class:`AwaitCpu`) and at the step's end: the host issues the copies, then the GPU may stall
on them. The copies start moving when they are issued, as without the cost, so the issue time
overlaps them.

A copy moving slows the compute (the runtime's ``copy_interference``, a fraction): a kernel of
the stream (attention, the dense layers, an expert, the LM head; not the host's ``copy_issue``)
that starts while a copy of the GPU holds one of its copy engines, a fetch or a write-back
(:meth:`CopyEngines.moving <specmd_sim.engine.sim.copy_engines.CopyEngines.moving>`), runs
``1 + copy_interference`` times as long, whole. A copy that ends at the instant a kernel starts
counts if the stream resumes first: events at one instant run in the order they were scheduled,
the compiled core's as SimPy's.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

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
from specmd_sim.engine.sim.copy_engines import CopyEngines
from specmd_sim.engine.sim.cpu import HostCpu
from specmd_sim.engine.sim.fetch import Fetcher
from specmd_sim.engine.sim.tally import GpuTally
from specmd_sim.models import CostModel
from specmd_sim.scenario import RunObjects, Scenario
from specmd_sim.scenario.schedule import WAIT
from specmd_sim.timeline import SpanRecorder
from specmd_sim.traces.trace import PREFILL


def pass_kernel_times(
    cost: CostModel, sc: Scenario, p: int
) -> tuple[float, float | None, float | None]:
    """The stream's kernels of pass ``p`` outside the experts: attention (each MoE layer), the
    dense layers (None without them) and the LM head (None where the pass gives no token). A
    prefill pass runs on the runtime's eager path where it has one (``eager_prefill``) and its
    attention core on the runtime's prefill kernels (``prefill_attention``: its requests'
    query tokens against their prompts plus the tokens allocated beyond), each MoE layer
    waiting for the eager path's blocking copies (:meth:`CostModel.handoff_time`); a pass whose
    every token decodes, on the runtime's decode attention kernel (``decode_attention``)."""
    passes = sc.passes
    tokens = passes.tokens(p)
    attended, kv_tokens = int(passes.attended[p]), int(passes.kv_tokens[p])
    eager = int(passes.phase[p]) == PREFILL
    decoding = pairs = 0
    if cost.split_kv and not eager:
        decoders = len(passes.decoders_of(p))
        decoding = decoders if decoders == tokens else 0
    if eager and cost.materialized_new_tokens is not None:
        lo, hi = passes.start[p], passes.start[p + 1]
        prompt_rows = passes.row_request[lo:hi][passes.row_phase[lo:hi] == PREFILL]
        requests, queries = np.unique(prompt_rows, return_counts=True)
        pairs = cost.materialized_pairs(queries, sc.trace.prompt_tokens[requests])
    t_attn = cost.batch_attention_time(tokens, attended, kv_tokens, eager, decoding, pairs)
    if eager and cost.hands_off:
        t_attn += cost.handoff_time(sc.host_links[cost.gpu.id], tokens)
    t_dense = None
    if sc.model.dense_layers:
        t_dense = cost.dense_layers_time(tokens, attended, kv_tokens, eager, decoding, pairs)
    t_head = None
    if not eager or passes.first_token[p]:
        t_head = cost.lm_head_time(passes.outputs(p), eager)
    return t_attn, t_dense, t_head


class GpuStream:
    """The compute stream of one GPU and its fulfilment of the layer step's requests."""

    def __init__(
        self,
        env: simpy.Environment,
        objs: RunObjects,
        cost: CostModel,
        fetcher: Fetcher,
        cpu: HostCpu,
        spans: SpanRecorder,
        tally: GpuTally,
        pass_base: int,
        lane: str,
        on_pass_done: Callable[[int], None],
        copies: list[CopyEngines],
        capacity_counter: str = "cache_capacity_bytes",
    ) -> None:
        self.env, self.objs, self.cost = env, objs, cost
        # host time per tensor copy issued (0: issuing is free), the copies an expert takes, and
        # the experts' copies the step issued since the stream last paid for them (its fetches;
        # write-backs, by issue_copy)
        self.issue_s = cost.copy_issue_time()
        self.tensors = objs.scenario.runtime.h2d_tensors_per_expert.value
        self.issued = 0
        # a kernel's time beside a moving copy of the GPU's copy engines, over its time alone
        # (1: copies cost the compute nothing)
        self.slowdown = cost.copy_slowdown()
        self.copies = copies
        # copies on the compute stream: what must be idle before a kernel runs (else nothing)
        self.queued_with = (
            copies if self.objs.scenario.runtime.copy_stream.value == "compute" else []
        )
        self.fetcher, self.cpu, self.spans, self.tally = fetcher, cpu, spans, tally
        self.step = LayerStep(objs, bulk_plans=True)
        self.sc = objs.scenario
        self.passes = self.sc.passes
        self.pass_base = pass_base  # this GPU's passes are numbered from here in the spans
        self.lane = spans.lane(lane)
        self.on_pass_done = on_pass_done
        self.dtype_of = self.sc.placement.dtype
        self.position = (-1, -1)  # (pass, layer) whose router decided last
        self.demanded: frozenset[int] = frozenset()  # ... and the demand set it decided
        self.where: dict[str, int] = {}  # span fields of the layer running
        self.phase = 0
        self.pass_tokens = 0  # the tokens of the pass running
        self.capacity_counter, self.capacity = capacity_counter, -1

    # --- passes ----------------------------------------------------------------------------

    def run(self) -> Generator[Any, Any, None]:
        passes, env, cost, tally = self.passes, self.env, self.cost, self.tally
        num_layers = self.sc.trace.num_layers
        schedule, p = self.objs.schedule, -1
        while True:
            if (p := p + 1) >= passes.num_passes:
                if schedule is None:
                    break
                formed = schedule.form(float(env.now))
                while formed == WAIT:  # (routed: nothing to run until the next arrival)
                    yield env.timeout(schedule.wake - env.now)
                    formed = schedule.form(float(env.now))
                if not formed:
                    break
            gp = self.pass_base + p  # the pass's number in the spans (unique over GPUs)
            req = int(passes.request[p])
            members = passes.requests_of(p)
            if passes.joins[p]:
                yield from self._admit(members)
            tally.begin_pass(p, env.now)
            self.phase = int(passes.phase[p])
            self.pass_tokens = passes.tokens(p)
            self.step.begin_pass(p)
            if self.objs.capacities is not None:  # the KV cache moved the capacity
                capacity = self.objs.cache.capacity_bytes
                if capacity != self.capacity:
                    self.capacity = capacity
                    self.spans.sample(self.capacity_counter, env.now, capacity)
            t_attn, t_dense, t_head = pass_kernel_times(cost, self.sc, p)
            if t_dense is not None:
                yield self._compute("attention", t_dense, gp, -1, req)
            for layer in range(num_layers):
                self.where = {"pass_": gp, "layer": layer, "request": req}
                if self.queued_with:
                    yield from self._drain()
                yield self._compute("attention", t_attn, gp, layer, req)
                yield from self._fulfil(self.step.layer(p, layer))
            if t_head is not None:
                yield self._compute("lm_head", t_head, gp, -1, req)
            tally.end_pass(p, env.now)
            self.on_pass_done(self.pass_tokens)

    def _admit(self, members: list[int]) -> Generator[Any, Any, None]:
        """Record the arrival of the pass's new requests; wait until all have arrived."""
        env, arrival, arrivals = self.env, self.tally.arrival, self.objs.arrivals
        latest = env.now
        for r in members:
            if r in arrival:
                continue
            # (float: SimPy's clock is the int 0 until time first moves)
            arrival[r] = float(env.now) if arrivals is None else arrivals.of(r)
            latest = max(latest, arrival[r])
        if latest > env.now:
            yield env.timeout(latest - env.now)

    # --- the layer step's requests ---------------------------------------------------------

    def _fulfil(self, step: Step) -> Generator[Any, Any, None]:
        send, fetcher, fetch = step.send, self.fetcher, self.fetcher.fetch
        outcome: Any = None
        while True:
            try:
                request = send(outcome)
            except StopIteration:
                if self.issued:
                    yield from self._issue()
                return
            outcome = None
            # most frequent first, by exact type (the requests have no subclasses; cheaper than
            # isinstance, or a match statement's class patterns)
            if type(request) is Fetch:
                outcome = fetch(request)
                if self.issue_s:  # (counted only where issuing costs)
                    self.issued += 1
            elif type(request) is Join:
                outcome = fetcher.join(request.key)
            elif type(request) is Decide:
                self.position, self.demanded = (request.pass_index, request.layer), request.keys
            elif type(request) is Run:
                if self.issued:
                    yield from self._issue()
                yield from self._run(request.experts)
            elif type(request) is WaitForSpace:
                yield from fetcher.make_room()
            elif type(request) is RunOnCpu:
                key, tokens, klass = request.key, request.tokens, request.klass
                outcome = self.cpu.start(self.cost, key, tokens, klass, self.where,
                                         self.pass_tokens)  # fmt: skip
            else:
                assert isinstance(request, AwaitCpu)
                if self.issued:
                    yield from self._issue()
                for cpu_expert in request.experts:
                    yield from self._wait(cpu_expert.handle, cpu_expert.key, cpu_expert.klass)

    def issue_copy(self) -> None:
        """The step issued a copy of an expert besides its fetches (a write-back)."""
        if self.issue_s:
            self.issued += 1

    def _issue(self) -> Generator[Any, Any, None]:
        """The host issues the copies of experts the step issued since the stream last paid
        for them (counted only where issuing costs): a ``copy_issue`` span of their tensors'
        issue time."""
        seconds, self.issued = self.issued * self.tensors * self.issue_s, 0
        where = self.where
        yield self._compute("copy_issue", seconds, where["pass_"], where["layer"],
                            where["request"])  # fmt: skip

    def _run(self, experts: list[Expert]) -> Generator[Any, Any, None]:
        expert_time, dtype_of, where = self.cost.expert_time, self.dtype_of, self.where
        gp, layer, req = where["pass_"], where["layer"], where["request"]
        compute = self._compute
        if self.queued_with:
            yield from self._drain()
        for e in experts:
            handle = e.handle
            if handle is not None and not handle.triggered:
                yield from self._wait(handle, e.key, e.klass)
            t_exp = expert_time(e.tokens, dtype_of[e.key])
            yield compute("expert", t_exp, gp, layer, req, e.key, e.klass)

    def _wait(self, event: simpy.Event, key: int, klass: int) -> Generator[Any, Any, None]:
        """Wait for an expert's transfer or CPU run; the wait is a stall."""
        if event.triggered:
            return
        t0 = self.env._now
        yield event
        where, t1 = self.where, self.env._now
        self.spans.add(self.lane, "stall", t0, t1, where["pass_"], where["layer"], key,
                       0, where["request"], klass)  # fmt: skip
        self.tally.stall(t0, t1, self.phase, where["layer"])

    def _drain(self) -> Generator[Any, Any, None]:
        """Copies on the compute stream: wait until none is queued or moving (a stall)."""
        for engines in self.queued_with:
            while (event := engines.idle()) is not None:
                yield from self._wait(event, -1, -1)

    def _copying(self) -> bool:
        """Whether a copy of the GPU (a fetch, a write-back) holds one of its copy engines."""
        return any(engines.moving() for engines in self.copies)

    def _compute(
        self,
        kind: str,
        seconds: float,
        pass_: int,
        layer: int,
        request: int,
        expert: int = -1,
        klass: int = -1,
    ) -> simpy.Timeout:
        """Run a kernel of ``seconds`` (outside the MoE layers: ``layer`` -1), longer where a
        copy of the GPU moves as it starts (the host's ``copy_issue`` excepted)."""
        env = self.env
        now = env._now
        if self.slowdown != 1.0 and kind != "copy_issue" and self._copying():
            seconds *= self.slowdown
        self.spans.add(self.lane, kind, now, now + seconds, pass_, layer, expert, 0, request, klass)
        self.tally.compute(now, seconds, self.phase, layer)
        return env.timeout(seconds)
