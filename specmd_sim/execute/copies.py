"""The executor's transfers: experts copied from the slow tier into fast-tier slots over a
link, with the timing engine's scheduling rules.

:class:`FairLink` emulates the slow tier's link in real time: the copies moving over it share
its bandwidth equally (max-min fair on one resource, as the simulator's flow network shares a
link), each copy's bytes are really copied (``numpy.copyto``, or a CUDA copy on a copy stream)
while its share of the link time elapses, and a copy ends when both have. An unthrottled link
(infinite bandwidth) is the real one: on CUDA, PCIe.

:class:`Queues` holds the fetch rules of :mod:`specmd_sim.engine.sim`'s fetcher: demand
fetches before prefetches (FIFO within a class), a queued prefetch promoted by a late hit, a
prefetch whose target layer's router has decided and does not use it cancelled before it
starts, a demand fetch that finds nothing evictable cancelling the newest queued prefetch or
waiting for space. Two ways run them: :class:`Transfers`, ``engines`` copy-worker threads (the
``cpu`` backend: a CPU has no DMA engine, so a copy needs a thread of its own), and
:class:`~specmd_sim.execute.issue.Issuer`, the one host thread that runs the model issuing
copies to copy streams as production offloading systems do (the torch backends). Either way
the cache sees the same sequence of calls as in the simulator, at real times.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specmd_sim.cache import ExpertCache
from specmd_sim.cache.states import State
from specmd_sim.engine.layer import Fetch
from specmd_sim.execute.device import Copy, Device

_ABSENT = int(State.ABSENT)
NATIVE = float("inf")  # a link bandwidth without throttle: the device's own link


class FairLink:
    """``bandwidth`` bytes/s shared equally by the flows on the link (max-min fair on one
    resource, as the simulator's flow network shares a link), kept in real time without
    blocking: a flow leaves the link at the instant its bytes have crossed (:meth:`arrived`
    says when), and the others speed up from then on."""

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self._left: dict[int, float] = {}  # flow id -> bytes still to cross
        self._arrived: dict[int, float] = {}  # flow id -> when its last byte crossed
        self._last = time.perf_counter()
        self._ids = 0

    def _advance(self, now: float) -> None:
        """Move the flows' bytes up to ``now``, flow by flow as each finishes."""
        left = self._left
        while left:
            share = self.bandwidth / len(left)
            first = min(left.values())
            finish = self._last + first / share
            if finish > now:
                for flow in left:
                    left[flow] -= (now - self._last) * share
                break
            for flow in list(left):
                left[flow] -= first
                if left[flow] <= 0.0:
                    del left[flow]
                    self._arrived[flow] = finish
            self._last = finish
        self._last = now

    def start(self, nbytes: int) -> int:
        """A copy of ``nbytes`` joins the link; returns its flow id (0 on an unthrottled link)."""
        if self.bandwidth == NATIVE:
            return 0
        self._advance(time.perf_counter())
        self._ids += 1
        self._left[self._ids] = float(nbytes)
        return self._ids

    def arrived(self, flow: int) -> float | None:
        """When (``time.perf_counter``) the flow's bytes crossed, or None if they have not yet."""
        if not flow:
            return 0.0
        self._advance(time.perf_counter())
        return self._arrived.get(flow)

    def left_s(self, flow: int) -> float:
        """Seconds until the flow's bytes cross if no flow joins or leaves before (0: crossed)."""
        if not flow or flow not in self._left:
            return 0.0
        return self._left[flow] * len(self._left) / self.bandwidth

    def leave(self, flow: int) -> None:
        """Forget a flow that has arrived."""
        self._arrived.pop(flow, None)


class ThrottledLink(FairLink):
    """:class:`FairLink` for copies on several threads: :meth:`finish` blocks until a flow's
    bytes have crossed."""

    def __init__(self, bandwidth: float) -> None:
        super().__init__(bandwidth)
        self._cond = threading.Condition()

    def start(self, nbytes: int) -> int:
        with self._cond:
            flow = super().start(nbytes)
            self._cond.notify_all()
            return flow

    def finish(self, flow: int) -> None:
        """Block until the flow's bytes have crossed the link at its share, and leave it."""
        if not flow:
            return
        with self._cond:
            while self.arrived(flow) is None:
                self._cond.wait(timeout=self.left_s(flow))
            self.leave(flow)
            self._cond.notify_all()


@dataclass(eq=False)
class Job:
    key: int
    demand: bool
    target: tuple[int, int]  # (pass, layer) the fetch is for
    slot: Any  # where the bytes go (a row of the fast tier, or a staging buffer)
    buffer: tuple[str, int]  # which: ("fast", slot) or ("staging", index)
    done: threading.Event = field(default_factory=threading.Event)
    bypass: bool = False  # streamed past the cache (into its staging buffer)
    started: bool = False
    promoted: bool = False  # issued as a prefetch, needed before it completed (a late hit)
    start_s: float = 0.0  # seconds from the run's start
    end_s: float = 0.0
    flow: int = 0  # its flow on the link (0: unthrottled)
    marks: tuple[Any, Any] = (None, None)  # its copy's start and end on a copy stream

    @property
    def staged(self) -> int:
        """Its staging buffer (a streamed expert), else -1."""
        return self.buffer[1] if self.buffer[0] == "staging" else -1


# (pass, layer) whose router decided last, and its demand set
Position = Callable[[], tuple[tuple[int, int], frozenset[int]]]


class Queues:
    """One fast tier's slots, its queued and running copies and the rules that order them
    (see the module docstring); what runs the copies is a subclass's."""

    def __init__(
        self,
        device: Device,
        cache: ExpertCache,
        slow: Any,  # the slow tier: one row per expert
        slots: int,
        position: Position,
        on_copy: Callable[[Job, int], None],  # (job, engine): its bytes arrived
        move: bool = True,  # False: copy no bytes (a dry run)
    ) -> None:
        self.move, self.device = move, device
        self.cache, self.slow = cache, slow
        self.position, self.on_copy = position, on_copy
        self.fast = device.zeros(slots, slow.shape[1])  # the fast tier
        self.staging: list[Any] = []  # buffers of streamed (bypassing) experts
        self.free = list(range(slots))
        self.slot_of: dict[int, int] = {}
        self.staged: list[int] = []  # free staging buffers
        self.jobs: dict[int, Job] = {}
        self.demand_q: deque[Job] = deque()
        self.prefetch_q: deque[Job] = deque()
        self.failure: BaseException | None = None

    # --- what the compute thread asks ------------------------------------------------------

    def fetch(self, request: Fetch) -> Job:
        key = request.key
        if request.bypass:
            if not self.staged:  # a layer streams more experts than ever before
                self.staging.append(self.device.zeros(self.slow.shape[1]))
                self.staged.append(len(self.staging) - 1)
            index = self.staged.pop()
            buf, where = self.staging[index], ("staging", index)
        else:
            slot = self._slot(key)
            buf, where = self.fast[slot], ("fast", slot)
        job = Job(key, request.demand, request.target, buf, where, bypass=request.bypass)
        if not request.bypass:
            self.jobs[key] = job
        (self.demand_q if job.demand else self.prefetch_q).append(job)
        return job

    def join(self, key: int) -> Job:
        """A late hit: the compute thread now needs ``key`` (its queued prefetch is promoted)."""
        job = self.jobs[key]
        if not job.demand:
            job.demand = job.promoted = True
            if job in self.prefetch_q:
                self.prefetch_q.remove(job)
                self.demand_q.append(job)
        return job

    def cancel_for_room(self) -> bool:
        """Nothing is evictable for a demand fetch: cancel the newest queued prefetch the
        running layer does not demand (True), if there is one."""
        for job in reversed(list(self.prefetch_q)):
            if not job.started and not self._spared(job):
                self.prefetch_q.remove(job)
                self._cancel(job)
                return True
        return False

    def preload(self, keys: list[int]) -> None:
        """Experts the cache holds before the run (a warm start): copied in, untimed."""
        for key in keys:
            self.device.copy(self.fast[self._slot(key)], self.slow[key])

    def weights(self, key: int, job: Job | None) -> Any:
        """The fast-tier copy of a resident (or just arrived) expert."""
        return job.slot if job is not None else self.fast[self.slot_of[key]]

    def release(self, job: Job) -> None:
        """A streamed expert has run: its staging buffer is free again."""
        if job.staged >= 0:
            self.staged.append(job.staged)

    # --- slots and queues ---------------------------------------------------------------------

    def _slot(self, key: int) -> int:
        if not self.free:  # reclaim the slots of evicted experts
            state = self.cache.state
            for k in [k for k, _ in self.slot_of.items() if state[k] == _ABSENT]:
                self.free.append(self.slot_of.pop(k))
        if key in self.slot_of:  # evicted earlier, its slot not reclaimed yet: it is still its own
            return self.slot_of[key]
        slot = self.free.pop()
        self.slot_of[key] = slot
        return slot

    def _spared(self, job: Job) -> bool:
        """The running layer needs the job's expert (pinned, or in its demand set)."""
        return bool(self.cache.pins[job.key]) or job.key in self.position()[1]

    def _cancel(self, job: Job) -> None:
        del self.jobs[job.key]
        self.cache.cancel(job.key)
        self.free.append(self.slot_of.pop(job.key))
        job.done.set()

    def _pop(self) -> Job | None:
        """The next copy to start (demand first), cancelling obsolete prefetches on the way."""
        while self.demand_q or self.prefetch_q:
            job = self.demand_q.popleft() if self.demand_q else self.prefetch_q.popleft()
            obsolete = not job.demand and self.position()[0] >= job.target
            if obsolete and not self._spared(job):
                self._cancel(job)
                continue
            return job
        return None

    def _arrived(self, job: Job, engine: int) -> None:
        """A copy's bytes are in place: the cache and the executor learn of it."""
        if job.staged < 0:
            del self.jobs[job.key]
            self.cache.complete(job.key)
        self.on_copy(job, engine)
        job.done.set()


class Transfers(Queues):
    """Copies run by ``engines`` worker threads over ``link`` (the ``cpu`` backend); call
    everything but :meth:`close` with ``lock`` held (the workers take it for their cache
    updates)."""

    threaded = True

    def __init__(
        self,
        device: Device,
        cache: ExpertCache,
        slow: Any,
        slots: int,
        link: ThrottledLink,
        engines: int,
        lock: threading.Lock,
        position: Position,
        on_copy: Callable[[Job, int], None],
        clock: Callable[[], float],  # seconds from the run's start
        move: bool = True,
    ) -> None:
        super().__init__(device, cache, slow, slots, position, on_copy, move)
        self.link, self.lock, self.clock = link, lock, clock
        self.work = threading.Condition(lock)
        self.space = threading.Condition(lock)
        self.stopping = False
        cache.listeners.append(self.space.notify_all)
        self.threads = [
            threading.Thread(target=self._worker, args=(i, device.copy), name=f"copy-{i}",
                             daemon=True)
            for i in range(engines)
        ]  # fmt: skip
        for t in self.threads:
            t.start()

    def fetch(self, request: Fetch) -> Job:
        job = super().fetch(request)
        self.work.notify()
        return job

    def make_room(self) -> None:
        """Cancel a queued prefetch for room, or else wait until space may have been freed."""
        if not self.cancel_for_room():
            self.space.wait()

    def wait(self, job: Job) -> None:
        """Until the copy has arrived (the lock released meanwhile)."""
        self.lock.release()
        try:
            job.done.wait()
        finally:
            self.lock.acquire()

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            self.work.notify_all()
        for t in self.threads:
            t.join()

    # --- the workers ---------------------------------------------------------------------------

    def _next(self) -> Job | None:
        while not self.stopping:
            if (job := self._pop()) is not None:
                return job
            self.work.wait()
        return None

    def _copy(self, job: Job, copy: Copy) -> None:
        """Move the expert's bytes at once, then wait out its share of the link time (one
        wake-up per copy: chunked copies woke the workers more often, and on a two-vCPU machine
        every wake-up slows the compute thread)."""
        flow = self.link.start(job.slot.nbytes)
        if self.move:
            copy(job.slot, self.slow[job.key])
        self.link.finish(flow)

    def _worker(self, engine: int, copy: Copy) -> None:
        self.lock.acquire()
        try:
            while (job := self._next()) is not None:
                job.started = True
                job.start_s = self.clock()
                self.lock.release()
                try:
                    self._copy(job, copy)
                finally:
                    self.lock.acquire()
                job.end_s = self.clock()
                self._arrived(job, engine)
        except BaseException as exc:  # the compute thread re-raises it; nobody waits forever
            self.failure = exc
            for waiting in list(self.jobs.values()):
                waiting.done.set()
            self.space.notify_all()
        finally:
            self.lock.release()
