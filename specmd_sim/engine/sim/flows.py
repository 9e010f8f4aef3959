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
(time during which at least one flow moved bytes over it; latency phases do not count).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

_PRIVATE = "~flow"  # prefix of a flow's own rate-cap resource
_EPS = 1e-12  # relative: a flow within this fraction of its size is done


@dataclass(eq=False)
class _Flow:
    nbytes: float
    resources: tuple[str, ...]
    done: simpy.Event
    depth: int = 1
    remaining: float = 0.0
    rate: float = 0.0
    order: int = 0
    shared: int = 0  # resources[:shared] are shared; a rate cap's private one follows


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
        self._advance()
        self._count += 1
        shared = resources
        if cap is not None:
            private = f"{_PRIVATE}{self._count}"
            self.capacity[private] = cap
            resources = (*resources, private)
        flow = _Flow(
            nbytes, resources, self.env.event(), depth, remaining=nbytes, order=self._count,
            shared=len(shared),
        )  # fmt: skip
        self.flows.append(flow)
        self._reschedule()
        yield flow.done
        if cap is not None:
            del self.capacity[resources[-1]]
        for r in shared:
            self.bytes_through[r] = self.bytes_through.get(r, 0.0) + nbytes

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0:
            busy: set[str] = set()
            for f in self.flows:
                f.remaining -= f.rate * dt
                busy.update(f.resources[: f.shared])
            for r in busy:
                self.busy_s[r] = self.busy_s.get(r, 0.0) + dt
        self._last = self.env.now

    def _rates(self) -> None:
        residual = dict(self.capacity)
        if self.depth_capacity:
            depth: dict[str, int] = {}
            for f in self.flows:
                for r in f.resources:
                    if r in self.depth_capacity:
                        depth[r] = depth.get(r, 0) + f.depth
            for r, q in depth.items():
                residual[r] = self.depth_capacity[r](q)
        active = list(self.flows)
        while active:
            users: dict[str, int] = {}
            for f in active:
                for r in f.resources:
                    users[r] = users.get(r, 0) + 1
            bottleneck = min(users, key=lambda r: (residual[r] / users[r], r))
            share = residual[bottleneck] / users[bottleneck]
            frozen = [f for f in active if bottleneck in f.resources]
            for f in frozen:
                f.rate = share
                for r in f.resources:
                    residual[r] -= share
            active = [f for f in active if bottleneck not in f.resources]

    def _reschedule(self) -> None:
        self._generation += 1
        if not self.flows:
            return
        self._rates()
        first = min(self.flows, key=lambda f: (f.remaining / f.rate, f.order))
        delay = max(first.remaining / first.rate, 0.0)
        self.env.process(self._wake(delay, self._generation, first))

    def _wake(self, delay: float, generation: int, first: _Flow) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        if generation != self._generation:
            return
        self._advance()
        first.remaining = 0.0
        finished = [f for f in self.flows if f.remaining <= _EPS * f.nbytes]
        self.flows = [f for f in self.flows if f.remaining > _EPS * f.nbytes]
        for f in finished:
            f.done.succeed()
        self._reschedule()
