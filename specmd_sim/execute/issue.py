"""One host thread issues the model's kernels and its copies, as production offloading systems do.

mixtral-offloading, MoE-Infinity and vLLM's offloading issue their expert copies from the thread
that runs the model, on side streams, ordered against the compute by CUDA events; nothing waits
on a kernel but what the host must read (the router's choice). :class:`Issuer` does the same
for the executor: its copies go to ``engines`` copy streams, one at a time each, so that the
fetch rules of :class:`~specmd_sim.execute.copies.Queues` (demand first, promotion, cancellation
before start) still choose which copy starts next; the host learns that a copy has arrived by
polling its event whenever it gets control (a launch, a fetch, a wait), never from a thread
waiting on a stream. A copy into a slot waits (on its stream) for the last kernel that read
the slot; an expert's kernel waits (on the compute stream) for its copy's event.

The streams are behind one small interface (:class:`CudaStreams`, :class:`HostStreams`):
*marks* (CUDA events, or host times) bracket each launch and copy, and every time in the
result is read from them after the run. :class:`HostStreams` stands in for CUDA on a CPU
(``--backend torch-cpu``, the test suite's way through this code): the compute stream is the
host thread itself and a copy is done when issued, so its only asynchrony is the throttled
link's share of time, which the host waits out as it would wait for a CUDA event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from specmd_sim.cache import ExpertCache
from specmd_sim.engine.layer import Fetch
from specmd_sim.execute.copies import NATIVE, FairLink, Job, Position, Queues
from specmd_sim.execute.device import Device, TorchDevice

POLL_S = 1e-3  # the longest the host sleeps between polls while it waits for a throttled copy

Mark = Any  # a point on a stream: a CUDA event, or seconds from the start on the host's clock


class Streams(Protocol):
    """A device's compute stream and copy streams as the issuing thread sees them."""

    device_waits: bool  # the compute stream can wait for a copy's mark on the device
    t0: float  # time.perf_counter() at the run's start

    def start(self) -> Mark: ...
    def host(self) -> float: ...
    def launch(self, work: Callable[..., Any], args: tuple) -> tuple[Any, Mark, Mark]: ...
    def mark(self) -> Mark: ...
    def copy(self, engine: int, dst: Any, src: Any, after: Mark) -> tuple[Mark, Mark]: ...
    def after(self, mark: Mark) -> None: ...
    def done(self, mark: Mark) -> bool: ...
    def seconds(self, mark: Mark) -> float: ...
    def finish(self) -> None: ...


class HostStreams:
    """The host thread as the compute stream (every launch has run when it returns: ``sync``
    ends it) and copies done when issued (``copy``); marks are host times."""

    device_waits = False

    def __init__(self, sync: Callable[[], None], copy: Callable[[Any, Any], None]) -> None:
        self.sync, self._copy = sync, copy
        self.t0 = time.perf_counter()

    def start(self) -> float:
        self.t0 = time.perf_counter()
        return 0.0

    def host(self) -> float:
        return time.perf_counter() - self.t0

    def launch(self, work: Callable[..., Any], args: tuple) -> tuple[Any, float, float]:
        start = self.host()
        out = work(*args)
        self.sync()
        return out, start, self.host()

    def mark(self) -> float:
        return self.host()

    def copy(self, engine: int, dst: Any, src: Any, after: Mark) -> tuple[float, float]:
        start = self.host()
        self._copy(dst, src)
        return start, self.host()

    def after(self, mark: Mark) -> None:
        """Nothing to order: whatever was launched has run."""

    def done(self, mark: Mark) -> bool:
        return True

    def seconds(self, mark: float) -> float:
        return mark

    def finish(self) -> None:
        self.sync()


class CudaStreams:
    """The CUDA device's current stream for compute and ``engines`` streams for copies;
    marks are timing events (host times where no event was recorded: a dry copy)."""

    device_waits = True

    def __init__(self, torch: Any, device: Any, engines: int) -> None:
        self.torch, self.device = torch, device
        self.compute = torch.cuda.current_stream(device)
        self.copies = [torch.cuda.Stream(device) for _ in range(engines)]
        self.t0 = time.perf_counter()
        self.origin: Any = None

    def _event(self, stream: Any) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def start(self) -> Mark:
        """The run's origin: an event on an idle device, and the host's clock beside it."""
        self.torch.cuda.synchronize(self.device)
        self.origin = self._event(self.compute)
        self.origin.synchronize()
        self.t0 = time.perf_counter()
        return self.origin

    def host(self) -> float:
        return time.perf_counter() - self.t0

    def launch(self, work: Callable[..., Any], args: tuple) -> tuple[Any, Mark, Mark]:
        start = self._event(self.compute)
        out = work(*args)
        return out, start, self._event(self.compute)

    def mark(self) -> Mark:
        return self._event(self.compute)

    def copy(self, engine: int, dst: Any, src: Any, after: Mark) -> tuple[Mark, Mark]:
        stream = self.copies[engine]
        if after is not None and not isinstance(after, float):
            stream.wait_event(after)
        start = self._event(stream)
        with self.torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        return start, self._event(stream)

    def after(self, mark: Mark) -> None:
        self.compute.wait_event(mark)

    def done(self, mark: Mark) -> bool:
        return isinstance(mark, float) or bool(mark.query())

    def seconds(self, mark: Mark) -> float:
        if isinstance(mark, float):
            return mark
        return float(self.origin.elapsed_time(mark)) / 1e3

    def finish(self) -> None:
        self.torch.cuda.synchronize(self.device)


class Issuer(Queues):
    """The copies of one fast tier, issued by the thread that runs the model (see the module
    docstring); single-threaded, so the executor's lock is never contended."""

    threaded = False

    def __init__(
        self,
        device: Device,
        cache: ExpertCache,
        slow: Any,
        slots: int,
        link: FairLink,
        engines: int,
        streams: Streams,
        position: Position,
        on_copy: Callable[[Job, int], None],
        move: bool = True,
    ) -> None:
        super().__init__(device, cache, slow, slots, position, on_copy, move)
        self.link, self.streams = link, streams
        self.running: list[Job | None] = [None] * engines
        self.read_until: dict[tuple[str, int], Mark] = {}  # buffer -> its last reader's end

    def fetch(self, request: Fetch) -> Job:
        job = super().fetch(request)
        self.poll()
        return job

    def read(self, job: Job | None, key: int, end: Mark) -> None:
        """A kernel ending at ``end`` reads the expert (``job``'s buffer, or its slot)."""
        buffer = job.buffer if job is not None else ("fast", self.slot_of[key])
        self.read_until[buffer] = end

    def poll(self) -> bool:
        """Record the copies that have arrived and start queued ones on idle copy streams;
        whether any arrived."""
        arrived = False
        for engine, job in enumerate(self.running):
            if job is not None and self._landed(job):
                self.running[engine] = None
                self._arrived(job, engine)
                arrived = True
        for engine, job in enumerate(self.running):
            if job is None and (job := self._pop()) is not None:
                self._issue(job, engine)
        return arrived

    def until(self, ready: Callable[[], bool] | None) -> None:
        """Poll until ``ready()`` (a compute mark done, a copy arrived; None: until any copy
        arrives): the host waits as it waits for an event, issuing meanwhile."""
        while True:
            arrived = self.poll()
            if arrived if ready is None else ready():
                return
            if ready is None and not any(self.running):
                raise RuntimeError("execute: the host waits for a copy, and none is running")
            left = [self.link.left_s(j.flow) for j in self.running if j is not None and j.flow]
            time.sleep(min(POLL_S, *left) if left else 0)

    def wait(self, job: Job) -> None:
        """Until the expert's kernel may be launched: its copy issued, where the compute stream
        can wait for it on the device (a CUDA copy over the native link), else arrived."""
        on_device = self.streams.device_waits and self.link.bandwidth == NATIVE
        self.until(lambda: job.done.is_set() or (on_device and job.started))
        if not job.done.is_set():
            self.streams.after(job.marks[1])

    def make_room(self) -> None:
        """Cancel a queued prefetch for room, or else wait until a copy arrives."""
        if not self.cancel_for_room():
            self.until(None)

    def close(self) -> None:
        """Let the running copies arrive; the queued ones are dropped."""
        self.demand_q.clear()
        self.prefetch_q.clear()
        self.until(lambda: not any(self.running))

    # --- one copy ------------------------------------------------------------------------------

    def _issue(self, job: Job, engine: int) -> None:
        job.started = True
        job.flow = self.link.start(job.slot.nbytes)
        if self.move:
            reader = self.read_until.get(job.buffer)
            job.marks = self.streams.copy(engine, job.slot, self.slow[job.key], reader)
        else:
            now = self.streams.host()
            job.marks = (now, now)
        self.running[engine] = job

    def _landed(self, job: Job) -> bool:
        """The copy's bytes are in place and its share of the link has elapsed; its times."""
        streams = self.streams
        if not streams.done(job.marks[1]):
            return False
        crossed = self.link.arrived(job.flow)
        if crossed is None:
            return False
        self.link.leave(job.flow)
        job.start_s = streams.seconds(job.marks[0])
        job.end_s = max(streams.seconds(job.marks[1]), crossed - streams.t0 if job.flow else 0.0)
        return True


def streams_for(device: Device, engines: int, dry: bool) -> Streams:
    """The device's streams: CUDA's, or the host standing in (a dry run computes nothing, so
    nothing is synchronised)."""
    if isinstance(device, TorchDevice) and device.cuda:
        return CudaStreams(device.torch, device.device, engines)
    return HostStreams((lambda: None) if dry else device.sync, device.copy)
