"""Flow-level bandwidth sharing: max-min fair rates over shared link directions.

Each transfer is a *flow* of ``nbytes`` over a set of resources (link directions, a host's
DRAM). Whenever a flow starts or ends, every active flow's rate is recomputed by progressive
filling: the most constrained resource's capacity is split equally among its flows, those
flows are frozen at that rate, and the rest continue on the remaining capacity. A flow first
waits its path latency, then moves its bytes at its (changing) rate.

Closed forms (tests): one flow alone takes ``latency + nbytes / bandwidth``; two equal flows on
one link each get half of it; a path's narrowest link sets its rate.

A *depth-dependent* resource (an NVMe drive) has a capacity that is a function of its queue
depth: the sum of the ``depth`` (read requests kept outstanding) of the flows moving over it,
re-evaluated, like every rate, whenever a flow starts or ends.

Per resource the network counts ``bytes_through`` (bytes of finished flows) and ``busy_s``
(time during which at least one flow moved bytes over it; latency phases do not count). Given
a recorder (``spans``, when the run records spans), it also samples each resource's bandwidth
in use, the sum of the rates of the flows moving over it, as the counter
``network/<resource>_bytes_per_s`` wherever the rates change: a step function whose integral
over the run is the resource's ``bytes_through``. Sampling reads the rates and changes none.

The filling runs over the resources the flows use, not the whole machine; a flow alone takes
its narrowest resource's capacity, what filling gives it, without filling. The copy engines
start flows with :meth:`FlowNetwork.start` (a callback where a process would resume), and the
wake-up at the next flow's end is a timeout armed by an urgent event where a wake-up process
would have started (:func:`~specmd_sim.engine.sim.events.soon`): the same events in the same
order, and so the same results, as a process per transfer and per wake-up.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from specmd_sim.engine.sim.events import soon
from specmd_sim.packed_rows import PackedRows
from specmd_sim.timeline import SpanRecorder

_PRIVATE = "~flow"  # prefix of a flow's own rate-cap resource
_EPS = 1e-12  # relative: a flow within this fraction of its size is done


@dataclass(eq=False, slots=True)
class _Flow:
    nbytes: float
    shared: tuple[str, ...]  # the resources it shares with other flows
    resources: tuple[str, ...]  # shared, then a rate cap's private resource
    cap: float | None
    done: simpy.Event
    depth: int
    order: int
    remaining: float
    busy: tuple[str, ...]  # shared, each resource once
    rate: float = 0.0


@dataclass(eq=False)
class FlowNetwork:
    env: simpy.Environment
    capacity: dict[str, float]  # peak bytes/s of each resource
    depth_capacity: dict[str, Callable[[int], float]] = field(default_factory=dict)
    flows: list[_Flow] = field(default_factory=list)
    bytes_through: dict[str, float] = field(default_factory=dict)
    busy_s: dict[str, float] = field(default_factory=dict)  # time with at least one flow
    _last: float = 0.0
    _generation: int = 0
    _count: int = 0
    # the rate of a flow alone, by (resources, cap); capacity is fixed once flows move
    _alone: dict[tuple[tuple[str, ...], float | None], float | None] = field(default_factory=dict)
    spans: SpanRecorder | None = None  # samples each resource's bandwidth in use, if given
    _carried: dict[str, float] = field(default_factory=dict)  # bytes/s last sampled, if > 0
    _series: dict[str, PackedRows] = field(default_factory=dict)  # samples
    _unique: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)  # see _once

    def transfer(
        self,
        nbytes: float,
        resources: tuple[str, ...],
        latency: float,
        depth: int = 1,
        cap: float | None = None,
    ) -> Generator[Any, Any, None]:
        """A process body: wait ``latency``, then move ``nbytes`` sharing ``resources``,
        keeping ``depth`` requests outstanding on the depth-dependent ones, at most at ``cap``
        bytes/s (a copy method slower than the links: a private resource of the flow)."""
        if latency > 0:
            yield self.env.timeout(latency)
        if nbytes <= 0:
            return
        flow = self._begin(nbytes, resources, depth, cap)
        yield flow.done
        self._end(flow)

    def start(
        self,
        nbytes: float,
        resources: tuple[str, ...],
        latency: float,
        depth: int,
        cap: float | None,
        then: Callable[[], None],
    ) -> None:
        """:meth:`transfer` without a process: ``then()`` runs where the process would resume
        after the transfer (the same events, in the same order, less the process's own)."""
        if latency > 0:
            self.env.timeout(latency).callbacks.append(
                lambda _: self._start_moving(nbytes, resources, depth, cap, then)
            )
        else:
            self._start_moving(nbytes, resources, depth, cap, then)

    def _start_moving(
        self,
        nbytes: float,
        resources: tuple[str, ...],
        depth: int,
        cap: float | None,
        then: Callable[[], None],
    ) -> None:
        if nbytes <= 0:
            then()
            return
        flow = self._begin(nbytes, resources, depth, cap)

        def moved(_: simpy.Event) -> None:
            self._end(flow)
            then()

        flow.done.callbacks.append(moved)

    def _begin(
        self, nbytes: float, shared: tuple[str, ...], depth: int, cap: float | None
    ) -> _Flow:
        self._advance()
        self._count += 1
        resources = shared if cap is None else (*shared, f"{_PRIVATE}{self._count}")
        flow = _Flow(nbytes, shared, resources, cap, simpy.Event(self.env), depth, self._count,
                     nbytes, self._unique.get(shared) or self._once(shared))  # fmt: skip
        self.flows.append(flow)
        self._reschedule()
        return flow

    def _end(self, flow: _Flow) -> None:
        through = self.bytes_through
        for r in flow.shared:
            through[r] = through.get(r, 0.0) + flow.nbytes

    def _advance(self) -> None:
        now = self.env._now
        dt = now - self._last
        if dt > 0:
            flows, busy_s = self.flows, self.busy_s
            if len(flows) == 1:  # the most frequent case: its resources, without a set
                flow = flows[0]
                flow.remaining -= flow.rate * dt
                for r in flow.busy:
                    busy_s[r] = busy_s.get(r, 0.0) + dt
            else:
                busy: set[str] = set()
                for f in flows:
                    f.remaining -= f.rate * dt
                    busy.update(f.shared)
                for r in busy:
                    busy_s[r] = busy_s.get(r, 0.0) + dt
            if self.spans is not None:
                self._sample_bandwidth(self._last)
        self._last = now

    def _rates(self) -> None:
        """Progressive filling over the resources the flows use (ties: the lowest name)."""
        if len(self.flows) == 1:
            flow = self.flows[0]
            rate = self._rate_alone(flow)
            if rate is not None:
                flow.rate = rate
                return
        residual, users = self._demand()
        active = self.flows
        while active:
            bottleneck: str | None = None
            share = 0.0
            for r, n in users.items():
                s = residual[r] / n
                if bottleneck is None or s < share or (s == share and r < bottleneck):
                    bottleneck, share = r, s
            rest: list[_Flow] = []
            for f in active:
                if bottleneck in f.resources:
                    f.rate = share
                    for r in f.resources:
                        residual[r] -= share
                        n = users[r] - 1
                        if n:
                            users[r] = n
                        else:
                            del users[r]
                else:
                    rest.append(f)
            active = rest

    def _once(self, shared: tuple[str, ...]) -> tuple[str, ...]:
        """``shared`` with each resource once (in the order first listed), kept by ``shared``."""
        once = self._unique[shared] = tuple(dict.fromkeys(shared))
        return once

    def _rate_alone(self, flow: _Flow) -> float | None:
        """The rate progressive filling gives a flow alone: its narrowest resource's capacity
        (None where a resource is depth-dependent or listed twice: then fill)."""
        key = (flow.shared, flow.cap)
        if key not in self._alone:
            rate: float | None = None
            if len(set(flow.shared)) == len(flow.shared) and not any(
                r in self.depth_capacity for r in flow.shared
            ):
                rate = min(self.capacity[r] for r in flow.shared)
                if flow.cap is not None:
                    rate = min(rate, flow.cap)
            self._alone[key] = rate
        return self._alone[key]

    def _demand(self) -> tuple[dict[str, float], dict[str, int]]:
        """The capacity of each resource the flows use (a drive's at their queue depth) and
        the number of flows using it."""
        capacity, depth_capacity = self.capacity, self.depth_capacity
        residual: dict[str, float] = {}
        users: dict[str, int] = {}
        for f in self.flows:
            for r in f.shared:
                users[r] = users.get(r, 0) + 1
                if r not in residual and r in capacity:
                    residual[r] = capacity[r]
            if f.cap is not None:
                users[f.resources[-1]] = 1
                residual[f.resources[-1]] = f.cap
        if depth_capacity:
            depth: dict[str, int] = {}
            for f in self.flows:
                for r in f.resources:
                    if r in depth_capacity:
                        depth[r] = depth.get(r, 0) + f.depth
            for r, q in depth.items():
                residual[r] = depth_capacity[r](q)
        return residual, users

    def _reschedule(self) -> None:
        self._generation += 1
        flows = self.flows
        if not flows:
            return
        self._rates()
        first = flows[0]
        first_t = first.remaining / first.rate
        for f in flows:
            t = f.remaining / f.rate
            if t < first_t or (t == first_t and f.order < first.order):
                first, first_t = f, t
        delay = max(first_t, 0.0)
        generation = self._generation

        def arm(_: simpy.Event) -> None:
            # where the wake-up process would have started its timeout; a stale one would
            # only have woken to find the rates changed, so it is not armed at all
            if generation == self._generation:
                self.env.timeout(delay).callbacks.append(lambda _: self._wake(generation, first))

        soon(self.env, arm)

    def _sample_bandwidth(self, at: float) -> None:
        """Sample, at ``at``, the bandwidth each resource carries from then on where it changed
        (a resource no flow moves over any more drops to 0). Called once time has moved on from
        ``at`` (the rates held until now: the last of those set at ``at``), and when the last
        flow ends, so there is one sample per instant at which rates changed."""
        assert self.spans is not None
        flows = self.flows
        if len(flows) == 1:
            carried = dict.fromkeys(flows[0].shared, flows[0].rate)
        else:
            carried = {}
            for f in flows:
                rate = f.rate
                for r in f.shared:
                    carried[r] = carried.get(r, 0.0) + rate
        last = self._carried
        if carried == last:
            return
        series = self._series
        for r, rate in carried.items():
            if rate != last.get(r):
                if r not in series:
                    series[r] = self.spans.series(f"network/{r}_bytes_per_s")
                series[r].append((at, rate))
        for r in last:
            if r not in carried:
                series[r].append((at, 0.0))
        self._carried = carried

    def _wake(self, generation: int, first: _Flow) -> None:
        if generation != self._generation:
            return
        self._advance()
        first.remaining = 0.0
        if len(self.flows) == 1:  # first, alone (the most frequent case)
            finished, self.flows = self.flows, []
        else:
            finished = [f for f in self.flows if f.remaining <= _EPS * f.nbytes]
            self.flows = [f for f in self.flows if f.remaining > _EPS * f.nbytes]
        for f in finished:
            f.done.succeed()
        if not self.flows and self.spans is not None:
            self._sample_bandwidth(self.env._now)
        self._reschedule()
