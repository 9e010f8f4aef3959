"""DMA copy engines of one GPU and direction: a few slots, two priority classes.

Demand fetches are dispatched before prefetches (FIFO within a class); a queued prefetch can be
promoted to the demand class (a late hit waits on it) or cancelled. With chunking, a job gives
its slot back after each chunk and re-enters the front of its class, so a demand fetch that
arrived meanwhile overtakes it. The lowest free slot id is used first (deterministic lanes).
When the runtime issues its copies on the compute stream (``copy_stream: compute``), the GPU's
copy engines of both directions share one :class:`OneStream`: CUDA runs a stream's operations
one at a time, in order, so one chunk moves at a time, and when it ends queued write-backs
start before fetches (with the compute stream waiting for every copy before it runs a kernel,
the order between them moves no kernel).
A chunk runs as callbacks started where a SimPy process for it would start
(:func:`~specmd_sim.engine.sim.events.soon`): a process per chunk costs more, and nothing waits
on it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from specmd_sim.engine.sim.events import soon


@dataclass(eq=False, slots=True)
class Job:
    key: int
    demand: bool
    target: tuple[int, int]  # (pass, layer) the fetch is for
    nbytes: int
    chunks: list[int]
    done: simpy.Event
    bypass: bool = False  # into a staging buffer, not the cache
    started: bool = False
    promoted: bool = False  # issued as a prefetch, needed before it completed (a late hit)


def transfer_kind(job: Job | Any) -> str:
    """The span kind of a job's transfer: what it was issued as (``timeline.TRANSFER_KINDS``)."""
    if job.bypass:
        return "streamed"
    if job.promoted:
        return "promoted_prefetch"
    return "demand_fetch" if job.demand else "prefetch"


@dataclass(eq=False)
class OneStream:
    """The copies of one GPU's compute stream: at most one chunk of ``engines`` moves at a time;
    when it ends, the engines dispatch in list order."""

    engines: list[CopyEngines] = field(default_factory=list)
    busy: bool = False


@dataclass(eq=False)
class CopyEngines:
    env: simpy.Environment
    slots: int
    # run(job, slot, nbytes, then): move one chunk, then call then()
    run_chunk: Callable[[Job, int, int, Callable[[], None]], None]
    # should_cancel(job) -> True if a not-yet-started prefetch has become useless
    should_cancel: Callable[[Job], bool]
    on_cancel: Callable[[Job], None]
    on_done: Callable[[Job], None]
    demand_q: deque[Job] = field(default_factory=deque)
    prefetch_q: deque[Job] = field(default_factory=deque)
    free: list[int] = field(default_factory=list)
    active: int = 0  # jobs submitted and neither done nor cancelled
    idle_event: simpy.Event | None = None
    stream: OneStream | None = None  # copies on the compute stream (shared with write-backs)

    def __post_init__(self) -> None:
        self.free = list(range(self.slots))

    def submit(self, job: Job) -> None:
        self.active += 1
        (self.demand_q if job.demand else self.prefetch_q).append(job)
        self._dispatch()

    def moving(self) -> bool:
        """Whether a chunk holds an engine: it moves, or starts at this instant (dispatched, its
        start an urgent event now); a queued job holds none."""
        return len(self.free) < self.slots

    def idle(self) -> simpy.Event | None:
        """An event that succeeds once no job is queued or moving; None if none is."""
        if not self.active:
            return None
        if self.idle_event is None:
            self.idle_event = self.env.event()
        return self.idle_event

    def _retired(self) -> None:
        self.active -= 1
        if not self.active and self.idle_event is not None:
            self.idle_event.succeed()
            self.idle_event = None

    def promote(self, job: Job) -> None:
        """A queued prefetch is now needed by the compute stream."""
        if job.demand:
            return
        job.demand = job.promoted = True
        if job in self.prefetch_q:
            self.prefetch_q.remove(job)
            self.demand_q.append(job)
            self._dispatch()

    def cancel_queued_prefetches(self, need: int, cancel: Callable[[Job], bool]) -> int:
        """Cancel unstarted prefetches, newest first, until ``need`` are cancelled."""
        done = 0
        for job in reversed(list(self.prefetch_q)):
            if done >= need:
                break
            if not job.started and cancel(job):
                self.prefetch_q.remove(job)
                self._retired()
                done += 1
        return done

    def _dispatch(self) -> None:
        free, demand_q, prefetch_q, stream = self.free, self.demand_q, self.prefetch_q, self.stream
        while free and (demand_q or prefetch_q):
            if stream is not None and stream.busy:
                return
            job = demand_q.popleft() if demand_q else prefetch_q.popleft()
            if not job.started and not job.demand and self.should_cancel(job):
                self.on_cancel(job)
                self._retired()
                continue
            slot = free.pop(0)
            if stream is not None:
                stream.busy = True
            soon(self.env, functools.partial(self._run, job, slot))

    def _run(self, job: Job, slot: int, _: object) -> None:
        job.started = True
        chunk = job.chunks.pop(0)
        self.run_chunk(job, slot, chunk, lambda: self._moved(job, slot))

    def _moved(self, job: Job, slot: int) -> None:
        self.free.append(slot)
        self.free.sort()
        if job.chunks:
            (self.demand_q if job.demand else self.prefetch_q).appendleft(job)
        else:
            self.on_done(job)
            self._retired()
        if self.stream is None:
            self._dispatch()
            return
        self.stream.busy = False
        for engines in self.stream.engines:
            engines._dispatch()
