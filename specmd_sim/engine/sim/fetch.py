"""One GPU's transfers: each fetch is a job on the GPU's copy engines whose chunks are flows over
the machine's network; its ``done`` event is what the stream waits on.

An expert is fetched from where it is stored (:mod:`specmd_sim.scenario.placement`): host
DRAM, an NVMe drive (whose bandwidth depends on the reads outstanding on it), or, in
expert-sharded mode, the HBM of the GPU owning its shard. A prefetch whose target layer's router
has decided, and which the layer now running does not demand (in either pin mode: the demand set
is known at the router, also when its experts are pinned one at a time), is cancelled before it
starts. A demand fetch that finds nothing evictable first cancels queued prefetches that layer
does not demand (newest first), then waits for a transfer to end.

With memory parity (the runtime's ``memory_parity``) every expert the cache evicts is copied
back to host DRAM by :class:`WriteBacks` on the GPU's device-to-host copy engines, over the
links' reverse direction: the loaded expert goes to a spare buffer (as mixtral-offloading's
``_swap`` does), so no load waits for a write-back — unless both are issued on the compute
stream (``copy_stream: compute``, as ``_swap`` issues them: src/expert_cache.py at ce54518),
where they run one at a time (:class:`~.copy_engines.OneStream`) and the stream waits for
both.

With a DRAM cache (:mod:`specmd_sim.engine.dram`) every fetch first reads its expert from DRAM:
a DRAM miss is read from the NVMe drive into DRAM (a flow over the drive, its link and DRAM, at
the drive's queue-depth bandwidth) before its job enters the copy engines; a DRAM late hit waits
for the DRAM prefetch reading it; a miss that finds nothing evictable in DRAM waits until a read
lands or a copy ends. DRAM prefetches are such reads without a job.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import simpy

from specmd_sim.cache import ExpertCache, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.engine.dram import JOIN, READ, READY, WAIT, DramLevel
from specmd_sim.engine.layer import Fetch
from specmd_sim.engine.sim.copy_engines import CopyEngines, Job, transfer_kind
from specmd_sim.engine.sim.events import settle
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.engine.sim.tally import GpuTally
from specmd_sim.hardware import TransferPath
from specmd_sim.hardware.schema import NVMeNode
from specmd_sim.packed_rows import PackedRows
from specmd_sim.timeline import SpanRecorder


def split(nbytes: int, chunk_bytes: int | None) -> list[int]:
    """The chunks a copy of ``nbytes`` moves as (one chunk without ``timing.chunk_bytes``)."""
    if not chunk_bytes or chunk_bytes >= nbytes:
        return [nbytes]
    return [min(chunk_bytes, nbytes - off) for off in range(0, nbytes, chunk_bytes)]


_LOADING, _RESIDENT = int(State.LOADING), int(State.RESIDENT)

# (pass, layer) whose router decided last, and the demand set it decided
Position = Callable[[], tuple[tuple[int, int], frozenset[int]]]


class Fetcher:
    """The transfers of one GPU into its cache (or a staging buffer, when not admitted)."""

    def __init__(
        self,
        env: simpy.Environment,
        network: FlowNetwork,
        cache: ExpertCache,
        paths: tuple[TransferPath, ...],
        source: Any,  # int32 per key: index into paths
        drive: NVMeNode | None,
        engines: int,
        chunk_bytes: int | None,
        spans: SpanRecorder,
        tally: GpuTally,
        lanes: tuple[str, str, str],  # (copy-lane prefix, occupancy counter, in-flight counter)
        position: Position,
        pass_base: int,
        pass_request: Any,  # request of each of the GPU's passes
    ) -> None:
        self.env, self.network, self.cache = env, network, cache
        self.paths, self.drive = paths, drive
        # per key, the index of its path (a list: read per transfer, and cheaper to index than
        # an array); per pass, its request (a view: an online schedule's grows)
        self.source: list[int] = source.tolist()
        self.pass_request = pass_request
        # per path, whether it reads the drive (its flows keep requests outstanding on it)
        self.from_drive = [drive is not None and path.source == drive.id for path in paths]
        self.chunk_bytes = chunk_bytes
        self.spans, self.tally = spans, tally
        prefix, self.counter_used, self.counter_flight = lanes
        # the two counters' samples, appended to directly (spans.sample looks the counter up
        # each time); made at the first sample, so a counter never sampled is absent
        self.used_series: PackedRows | None = None
        self.flight_series: PackedRows | None = None
        tally.copy_lane_names = [f"{prefix}{i}" for i in range(engines)]
        self.copy_lanes = [spans.lane(name) for name in tally.copy_lane_names]
        self.position = position
        self.pass_base = pass_base
        self.used_paths: set[int] = set()
        self.jobs: dict[int, Job] = {}
        self.in_flight = 0
        self.space_event: simpy.Event | None = None
        self.dram: DramLevel | None = None  # the DRAM cache in front of the drive, if any
        self.stage: TransferPath | None = None  # its NVMe -> DRAM path
        self.reading: dict[int, list[Job]] = {}  # keys being read into the DRAM cache: jobs after
        self.stalled: deque[Job] = deque()  # DRAM misses waiting for DRAM space
        self.staged = False  # an NVMe read into DRAM took time (its path's numbers were read)
        self.read_lane = -1  # the span lane of those reads
        self.engines = CopyEngines(
            env,
            engines,
            run_chunk=self._move_chunk,
            should_cancel=self._prefetch_obsolete,
            on_cancel=self._cancelled,
            on_done=self._arrived,
        )
        cache.listeners.append(self._space_changed)
        if spans.enabled:
            cache.occupancy_hook = self._occupancy

    def attach_dram(self, dram: DramLevel, stage: TransferPath) -> None:
        """Fetch through a DRAM cache whose misses are read from the drive over ``stage``
        (each read a ``nvme_read`` span on the drive's lane ``<drive>/dram-fill``)."""
        assert self.drive is not None  # a DRAM cache needs the drive (checked before the run)
        self.dram, self.stage = dram, stage
        self.read_lane = self.spans.lane(f"{self.drive.id}/dram-fill")

    # --- what the stream asks --------------------------------------------------------------

    def fetch(self, request: Fetch) -> simpy.Event:
        """Queue the transfer of ``request.key``; its event succeeds when the bytes arrived."""
        key = request.key
        nbytes = self.cache.nbytes[key]
        chunks = split(nbytes, self.chunk_bytes)
        job = Job(key, request.demand, request.target, nbytes, chunks, self.env.event(),
                  bypass=request.bypass)  # fmt: skip
        if not request.bypass:
            self.jobs[key] = job
        if self.dram is None:
            self.engines.submit(job)
        else:
            self._from_dram(job)
        return job.done

    def join(self, key: int) -> simpy.Event:
        """A late hit: the stream now needs ``key``'s transfer (a queued prefetch is promoted
        to demand priority)."""
        job = self.jobs[key]
        self.engines.promote(job)
        return job.done

    def make_room(self) -> Generator[Any, Any, None]:
        """Nothing is evictable for a demand fetch: cancel the newest queued prefetch, or else
        wait until space may have been freed (a transfer ended or a pin was released)."""
        if self.engines.cancel_queued_prefetches(1, self._cancel_job):
            return
        self.space_event = self.env.event()
        yield self.space_event
        self.space_event = None

    # --- the DRAM cache -------------------------------------------------------------------

    def _from_dram(self, job: Job) -> None:
        """Copy ``job``'s expert from DRAM once it is there."""
        assert self.dram is not None
        action = self.dram.access(job.key)
        if action == READY:
            self.engines.submit(job)
        elif action == JOIN:
            self.reading[job.key].append(job)
        elif action == WAIT:
            self.stalled.append(job)
        else:
            self._read(job.key, action == READ, job)

    def load(self, key: int) -> None:
        """A DRAM prefetch reserved DRAM space for ``key``: read it from the drive."""
        self._read(key, True, None)

    def _read(self, key: int, cached: bool, job: Job | None) -> None:
        """Read ``key`` from the drive into DRAM (``cached``: into the DRAM cache, whose space
        is reserved; else into a staging buffer), then submit ``job`` (and any job joining)."""
        assert self.dram is not None and self.stage is not None and self.drive is not None
        waiting = [] if job is None else [job]
        if cached:
            self.reading[key] = waiting
        nbytes = self.cache.nbytes[key]
        start = self.env.now
        # the pass and layer it serves: its job's, or (a DRAM prefetch) the router decision's
        p, layer = self.position()[0] if job is None else job.target

        def landed() -> None:
            assert self.dram is not None
            self.spans.add(
                self.read_lane, "nvme_read", start, self.env.now, self.pass_base + p, layer, key,
                nbytes, int(self.pass_request[p]),
            )  # fmt: skip
            jobs = waiting
            if cached:
                jobs = self.reading.pop(key)
                self.dram.cache.complete(key)
            for queued in jobs:
                self.engines.submit(queued)
            self._retry_stalled()

        self.staged = True
        stage = self.stage
        depth = math.ceil(nbytes / self.drive.read_request_bytes.value)
        self.network.start(nbytes, stage.resources, stage.latency_s, depth, stage.rate_cap, landed)

    def _retry_stalled(self) -> None:
        """DRAM space may have been freed: the waiting DRAM misses, in order, reserve again (one
        that a DRAM prefetch started reading meanwhile joins that read)."""
        dram = self.dram
        assert dram is not None
        while self.stalled:
            job = self.stalled[0]
            state = dram.cache.state[job.key]
            if state == _LOADING:
                self.reading[job.key].append(job)
            elif state == _RESIDENT:
                self.engines.submit(job)
            elif dram.cache.reserve(job.key, FetchReason.DEMAND):
                self._read(job.key, True, job)
            else:
                return
            self.stalled.popleft()

    def _copied(self, job: Job) -> None:
        """``job``'s expert left DRAM (its copy ended or was cancelled): unpin it there."""
        if self.dram is not None:
            self.dram.release(job.key)
            self._retry_stalled()

    # --- the copy engines' callbacks -------------------------------------------------------

    def _sample_flight(self, time: float) -> None:
        """Sample ``bytes_in_flight`` (spans recorded only)."""
        series = self.flight_series
        if series is None:
            series = self.flight_series = self.spans.series(self.counter_flight)
        series.append((time, self.in_flight))

    def _move_chunk(self, job: Job, slot: int, nbytes: int, then: Callable[[], None]) -> None:
        env, tally, spans = self.env, self.tally, self.spans
        recording = spans.enabled
        start = env._now
        self.in_flight += nbytes
        tally.transfers.start(start)
        if recording:
            self._sample_flight(start)
        index = self.source[job.key]
        self.used_paths.add(index)

        def moved() -> None:
            now = env._now
            self.in_flight -= nbytes
            tally.transfers.stop(now)
            tally.engine_busy[slot] += now - start
            tally.engine_bytes[slot] += nbytes
            if recording:
                self._sample_flight(now)
            p, layer = job.target
            spans.add(
                self.copy_lanes[slot], transfer_kind(job), start,
                now, self.pass_base + p, layer, job.key, nbytes, int(self.pass_request[p]),
            )  # fmt: skip
            then()

        path = self.paths[index]
        depth = 1
        if self.from_drive[index]:
            assert self.drive is not None
            depth = math.ceil(nbytes / self.drive.read_request_bytes.value)
        self.network.start(nbytes, path.resources, path.latency_s, depth, path.rate_cap, moved)

    def _prefetch_obsolete(self, job: Job) -> bool:
        """Its target layer's router has decided, and the layer now running does not use it."""
        position, demanded = self.position()
        key = job.key
        return position >= job.target and not self.cache.pins[key] and key not in demanded

    def _cancelled(self, job: Job) -> None:
        del self.jobs[job.key]
        self.cache.cancel(job.key)
        self._copied(job)
        settle(job.done)  # (nothing waits on an unused prefetch)

    def _cancel_job(self, job: Job) -> bool:
        """Cancel a queued prefetch to make room, unless the layer now running demands it."""
        if self.cache.pins[job.key] or job.key in self.position()[1]:
            return False
        self._cancelled(job)
        return True

    def _arrived(self, job: Job) -> None:
        if not job.bypass:
            del self.jobs[job.key]
            self.cache.complete(job.key)
        self._copied(job)
        settle(job.done)

    def _space_changed(self) -> None:
        if self.space_event is not None and not self.space_event.triggered:
            self.space_event.succeed()

    def _occupancy(self, used_bytes: int) -> None:
        series = self.used_series
        if series is None:
            series = self.used_series = self.spans.series(self.counter_used)
        series.append((self.env._now, used_bytes))


class WriteBacks:
    """Memory parity: one GPU's copies of evicted experts back to host DRAM (FIFO on its D2H
    copy engines; never cancelled, never waited on)."""

    def __init__(
        self,
        env: simpy.Environment,
        network: FlowNetwork,
        cache: ExpertCache,
        path: TransferPath,
        engines: int,
        chunk_bytes: int | None,
        spans: SpanRecorder,
        tally: GpuTally,
        lane_prefix: str,
        pass_base: int,
        pass_request: Any,
    ) -> None:
        self.env, self.network, self.cache, self.path = env, network, cache, path
        self.chunk_bytes = chunk_bytes
        self.spans, self.tally = spans, tally
        self.pass_base = pass_base
        self.pass_request = pass_request  # per pass, its request (a view: it may grow)
        tally.d2h_lane_names = [f"{lane_prefix}{i}" for i in range(engines)]
        tally.d2h_busy = [0.0] * engines
        tally.d2h_bytes = [0] * engines
        self.lanes = [spans.lane(name) for name in tally.d2h_lane_names]
        self.used = False
        self.engines = CopyEngines(
            env,
            engines,
            run_chunk=self._move_chunk,
            should_cancel=lambda job: False,
            on_cancel=lambda job: None,
            on_done=lambda job: None,
        )
        cache.write_back = self.submit
        self.issued: Callable[[], None] | None = None  # told of each copy (the stream's host)

    def submit(self, key: int) -> None:
        """The cache evicted ``key``: queue the copy of its bytes back to the host."""
        self.used = True
        if self.issued is not None:
            self.issued()
        nbytes = self.cache.nbytes[key]
        chunks = split(nbytes, self.chunk_bytes)
        target = (self.cache.pass_index, key // self.cache.num_experts)
        self.engines.submit(Job(key, True, target, nbytes, chunks, self.env.event()))

    def _move_chunk(self, job: Job, slot: int, nbytes: int, then: Callable[[], None]) -> None:
        env, path = self.env, self.path
        start = env.now

        def moved() -> None:
            self.tally.d2h_busy[slot] += env.now - start
            self.tally.d2h_bytes[slot] += nbytes
            p, layer = job.target
            self.spans.add(
                self.lanes[slot], "write_back", start, env.now, self.pass_base + p, layer,
                job.key, nbytes, int(self.pass_request[p]),
            )  # fmt: skip
            then()

        self.network.start(nbytes, path.resources, path.latency_s, 1, path.rate_cap, moved)
