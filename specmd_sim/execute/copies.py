"""The executor's transfers: copy workers (threads) moving experts from the slow tier into
fast-tier slots over a link, with the timing engine's scheduling rules.

:class:`ThrottledLink` emulates the slow tier's link in real time: the copies moving over it
share its bandwidth equally (max-min fair on one resource, as the simulator's flow network
shares a link), each copy's bytes are really copied (the device's copy: ``numpy.copyto``, or a
CUDA copy on the worker's stream) while its share of the link time elapses, and a copy ends
when both have. An unthrottled link (infinite bandwidth) is the real one: on CUDA, PCIe.
:class:`Transfers` is the copy engines and the fetcher of :mod:`specmd_sim.engine.sim` for
real threads: demand fetches before prefetches (FIFO within a class), a queued prefetch
promoted by a late hit, a prefetch whose target layer's router has decided and does not use it
cancelled before it starts, a demand fetch that finds nothing evictable cancelling the newest
queued prefetch or waiting for space. Every cache mutation happens under the executor's one
lock, so the cache sees the same sequence of calls as in the simulator, at real times.
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


class ThrottledLink:
    """``bandwidth`` bytes/s shared equally by the copies on the link, in real time."""

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self._cond = threading.Condition()
        self._left: dict[int, list[float]] = {}  # flow id -> [bytes still to cross]
        self._last = time.perf_counter()
        self._ids = 0

    def _advance(self, now: float) -> None:
        if self._left:
            moved = (now - self._last) * self.bandwidth / len(self._left)
            for left in self._left.values():
                left[0] -= moved
        self._last = now

    def start(self, nbytes: int) -> int:
        """A copy of ``nbytes`` joins the link; returns its flow id (0 on an unthrottled link)."""
        if self.bandwidth == NATIVE:
            return 0
        with self._cond:
            self._advance(time.perf_counter())
            self._ids += 1
            self._left[self._ids] = [float(nbytes)]
            self._cond.notify_all()
            return self._ids

    def finish(self, flow: int) -> None:
        """Block until the flow's bytes have crossed the link at its share, and leave it."""
        if not flow:
            return
        with self._cond:
            left = self._left[flow]
            while True:
                self._advance(time.perf_counter())
                if left[0] <= 0.0:
                    break
                self._cond.wait(timeout=left[0] * len(self._left) / self.bandwidth)
            del self._left[flow]
            self._advance(time.perf_counter())
            self._cond.notify_all()


@dataclass(eq=False)
class Job:
    key: int
    demand: bool
    target: tuple[int, int]  # (pass, layer) the fetch is for
    slot: Any  # where the bytes go (a row of the fast tier, or a staging buffer)
    staged: int  # its staging buffer (a streamed expert), else -1
    done: threading.Event = field(default_factory=threading.Event)
    bypass: bool = False  # streamed past the cache (into its staging buffer)
    started: bool = False
    promoted: bool = False  # issued as a prefetch, needed before it completed (a late hit)
    start_s: float = 0.0
    end_s: float = 0.0


# (pass, layer) whose router decided last, and its demand set
Position = Callable[[], tuple[tuple[int, int], frozenset[int]]]


class Transfers:
    """One fast tier's copies: ``engines`` worker threads over ``link``; call everything but
    :meth:`close` with ``lock`` held (the workers take it for their cache updates)."""

    def __init__(
        self,
        device: Device,
        cache: ExpertCache,
        slow: Any,  # the slow tier: one row per expert
        slots: int,
        link: ThrottledLink,
        engines: int,
        lock: threading.Lock,
        position: Position,
        on_start: Callable[[Job], None],  # a copy starts moving (locked)
        on_copy: Callable[[Job, int], None],  # (job, engine): its bytes arrived (locked)
        move: bool = True,  # False: copy no bytes (a dry run)
    ) -> None:
        self.move, self.device = move, device
        self.cache, self.slow, self.link, self.lock = cache, slow, link, lock
        self.position, self.on_start, self.on_copy = position, on_start, on_copy
        self.fast = device.zeros(slots, slow.shape[1])  # the fast tier
        self.staging: list[Any] = []  # buffers of streamed (bypassing) experts
        self.free = list(range(slots))
        self.slot_of: dict[int, int] = {}
        self.staged: list[int] = []  # free staging buffers
        self.jobs: dict[int, Job] = {}
        self.demand_q: deque[Job] = deque()
        self.prefetch_q: deque[Job] = deque()
        self.work = threading.Condition(lock)
        self.space = threading.Condition(lock)
        self.stopping = False
        self.failure: BaseException | None = None
        cache.listeners.append(self.space.notify_all)
        self.threads = [
            threading.Thread(target=self._worker, args=(i, device.copier()), name=f"copy-{i}",
                             daemon=True)
            for i in range(engines)
        ]  # fmt: skip
        for t in self.threads:
            t.start()

    # --- what the compute thread asks ------------------------------------------------------

    def fetch(self, request: Fetch) -> Job:
        key = request.key
        staged = -1
        if request.bypass:
            if not self.staged:  # a layer streams more experts than ever before
                self.staging.append(self.device.zeros(self.slow.shape[1]))
                self.staged.append(len(self.staging) - 1)
            staged = self.staged.pop()
            buf = self.staging[staged]
        else:
            buf = self.fast[self._slot(key)]
        job = Job(key, request.demand, request.target, buf, staged, bypass=request.bypass)
        if not request.bypass:
            self.jobs[key] = job
        (self.demand_q if job.demand else self.prefetch_q).append(job)
        self.work.notify()
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

    def make_room(self) -> None:
        """Nothing is evictable for a demand fetch: cancel the newest queued prefetch the
        running layer does not demand, or else wait until space may have been freed."""
        for job in reversed(list(self.prefetch_q)):
            if not job.started and not self._spared(job):
                self.prefetch_q.remove(job)
                self._cancel(job)
                return
        self.space.wait()

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

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            self.work.notify_all()
        for t in self.threads:
            t.join()

    # --- slots -------------------------------------------------------------------------------

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

    # --- the workers ---------------------------------------------------------------------------

    def _spared(self, job: Job) -> bool:
        """The running layer needs the job's expert (pinned, or in its demand set)."""
        return bool(self.cache.pins[job.key]) or job.key in self.position()[1]

    def _cancel(self, job: Job) -> None:
        del self.jobs[job.key]
        self.cache.cancel(job.key)
        self.free.append(self.slot_of.pop(job.key))
        job.done.set()

    def _next(self) -> Job | None:
        while not self.stopping:
            if self.demand_q or self.prefetch_q:
                job = self.demand_q.popleft() if self.demand_q else self.prefetch_q.popleft()
                obsolete = not job.demand and self.position()[0] >= job.target
                if obsolete and not self._spared(job):
                    self._cancel(job)
                    continue
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
                job.start_s = time.perf_counter()
                self.on_start(job)
                self.lock.release()
                try:
                    self._copy(job, copy)
                finally:
                    self.lock.acquire()
                job.end_s = time.perf_counter()
                if job.staged < 0:
                    del self.jobs[job.key]
                    self.cache.complete(job.key)
                self.on_copy(job, engine)
                job.done.set()
        except BaseException as exc:  # the compute thread re-raises it; nobody waits forever
            self.failure = exc
            for waiting in list(self.jobs.values()):
                waiting.done.set()
            self.space.notify_all()
        finally:
            self.lock.release()
