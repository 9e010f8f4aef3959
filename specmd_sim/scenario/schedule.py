"""The scheduler: which tokens of which requests each pass takes, formed step by step.

A :class:`Stepper` holds a server's scheduler state (requests waiting in arrival order, the
running ones, the tokens each has run, the KV pool) and forms one *step* at a time from the
requests that have arrived when the step starts: ``scheduler: slots`` forms the admitted
requests' prefill chunks as passes of their own, then one decode pass
(:func:`_slot_passes`); ``scheduler: continuous`` one pass mixing decode tokens and prompt
chunks (:func:`_continuous_passes`; with ``kv_cache: paged``, preempting as vLLM does:
:class:`ContinuousStepper`). Admission is first come, first served, so what a step admits
depends on the time only through how many requests have arrived: a prefix of the waiting queue
(the preempted ones, which wait before it, have arrived).

Three ways to drive it:

- **closed loop** (every request has arrived at the start): the fixed table of
  :func:`build_passes`, formed before the run;
- **zero time** (:func:`zero_time_passes`): steps take no time, so the clock moves only when
  the server is idle, to the next arrival. This is the schedule of ``replay``, which has no time,
  and the limit of the timing engine's as the hardware gets infinitely fast;
- **online** (:class:`OnlineSchedule`, ``workload.schedule: online`` with Poisson or recorded
  arrivals and ``batch_size > 1``): the timing engine asks for the next step when its stream
  is ready to start it, at that time, as vLLM's or SGLang's scheduler forms a step when the
  previous one ends. The passes are appended to preallocated arrays
  (:class:`FormingPasses`, :class:`FormingDemand`) that the run's objects hold from the start.
  A step whose admissions cannot depend on when it starts (the batch is full whatever arrives,
  or every request it could admit has arrived already) is formed with the one before it, so
  the engine asks again only where an arrival could change the next step.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from specmd_sim.config import SimConfig, WorkloadConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.passes import DemandSets, Passes, _chunk_sets, _chunks
from specmd_sim.traces.trace import DECODE, PREFILL, Trace

Entry = tuple[int, int, int, int]
"""(request's admission index, index of its first token in the pass, tokens, the index below
which its tokens are recomputed: those it had run when it was last preempted, else 0)."""


def build_passes(
    trace: Trace,
    workload: WorkloadConfig,
    share: tuple[int, int] = (0, 1),
    kv_pool_tokens: int | None = None,
) -> Passes:
    """The pass table; ``share = (g, n)`` keeps every n-th request from the g-th on, in arrival
    order (GPU g's requests when n GPUs serve them round robin). ``workload.scheduler`` picks
    the builder: :func:`_slot_passes` or :func:`_continuous_passes` (which, with
    ``kv_cache: wait``, admits requests only while their KV caches fit ``kv_pool_tokens``)."""
    if workload.scheduler == "continuous":
        return _continuous_passes(trace, workload, share, kv_pool_tokens)
    return _slot_passes(trace, workload, share)


def _slot_passes(trace: Trace, workload: WorkloadConfig, share: tuple[int, int]) -> Passes:
    """The pass table of ``scheduler: slots``.

    Built over all rows at once (a long trace has millions): the admissions
    (:func:`_join_steps`) are the one loop, per request; then a row's pass follows from its
    request's join step and its index among the request's prefill or decode rows. A decode row
    ``i`` runs at decode step ``join + i``; the prefill chunks of the requests joining at a step
    run before that step's decode pass, in order of admission."""
    ids, admit = _admitted(trace, workload, share)
    decode = trace.phase == DECODE
    served = np.flatnonzero(admit >= 0)
    # the rows of each request, prefill then decode, in trace order within each
    block = admit[served] * 2 + decode[served]
    by_block = np.argsort(block, kind="stable")
    rows, block = served[by_block], block[by_block]
    sizes = np.bincount(block, minlength=2 * ids.size)
    index = np.arange(rows.size) - (np.cumsum(sizes) - sizes)[block]  # within the request's phase
    req, dec = block // 2, block % 2 == 1
    prefill_n, decode_n = sizes[0::2], sizes[1::2]
    join = np.asarray(_join_steps(decode_n.tolist(), workload.batch_size), np.int64)
    step = join[req] + np.where(dec, index, 0)
    order = np.argsort(step * 2 + dec, kind="stable")  # stable: by admission, then index
    rows, req, dec, index, step = rows[order], req[order], dec[order], index[order], step[order]
    chunk = workload.prefill_chunk_tokens or np.maximum(prefill_n, 1)[req]
    part = np.where(dec, -1, req * (rows.size + 1) + index // chunk)  # a prefill chunk's id
    new = np.ones(rows.size, bool)
    new[1:] = (step[1:] != step[:-1]) | (dec[1:] != dec[:-1]) | (part[1:] != part[:-1])
    start = np.append(np.flatnonzero(new), rows.size)
    first, last = start[:-1], start[1:] - 1
    position = np.where(dec, prefill_n[req], 0) + index + 1  # among the request's tokens
    attended = np.add.reduceat(position, first)
    in_decode = dec[first]
    return Passes(
        rows=rows.astype(np.int64),
        start=start.astype(np.int64),
        request=ids[req[first]].astype(np.int32),
        phase=np.where(in_decode, DECODE, PREFILL).astype(np.uint8),
        context_end=np.where(in_decode, position[first], position[last]).astype(np.int64),
        first_token=~in_decode & (position[last] == prefill_n[req[last]]),
        row_request=ids[req].astype(np.int32),
        attended=attended.astype(np.int64),
        kv_tokens=np.where(in_decode, attended, position[last]).astype(np.int64),
        joins=np.logical_or.reduceat(position == 1, first),
        row_phase=np.where(dec, DECODE, PREFILL).astype(np.uint8),
        row_first=~dec & (position == prefill_n[req]),
        preempted=np.zeros(first.size, np.int32),
    )


def _continuous_passes(
    trace: Trace, workload: WorkloadConfig, share: tuple[int, int], kv_pool_tokens: int | None
) -> Passes:
    """The pass table of ``scheduler: continuous``, one pass per scheduler step (vLLM's V1
    scheduler, as its docs describe it, with FCFS admission):

    - the running requests, in the order they joined, each take their next decode token, or
      (still in their prompt) their next prompt tokens, at most ``prefill_chunk_tokens`` (when
      not 0) and what the step's token budget (``max_tokens_per_step``) has left;
    - then waiting requests join, in arrival order, while fewer than ``batch_size`` run and the
      budget has tokens left, each taking its first prompt tokens the same way (a request
      without a prompt its first decode token); with ``kv_pool_tokens`` (``kv_cache: wait``)
      the next request joins only when its whole length fits beside the running requests'
      whole lengths (a request that cannot join blocks those behind it: FCFS);
    - a request whose prompt ends in a step gets its first token there and decodes from the
      next step; after its last decode token (or its prompt, without any) it leaves.
    """
    requests = Requests.of(trace, workload, share)
    stepper = ContinuousStepper(requests, workload, kv_pool_tokens)
    taken, steps = closed_loop_steps(stepper)
    return requests.passes(taken, steps, stepper)


def _passes_of_steps(
    by_request: np.ndarray,
    begin: np.ndarray,
    prompt_n: np.ndarray,
    ids: np.ndarray,
    taken: list[Entry],
    steps: list[int],
    preempted: list[int],
) -> Passes:
    """The pass table of scheduler steps: ``taken[steps[p]:steps[p + 1]]`` are pass p's
    entries (request, first token index, count, and the index below which its tokens are
    recomputed after a preemption), over each request's rows ``by_request[begin[r]:]`` (prompt
    rows first); ``preempted``: per pass, the requests preempted as its step was formed. A
    recomputed token is a prompt token again: no output, not a first token."""
    entries = np.array(taken, np.int64).reshape(-1, 4)
    req, first, count, redo = entries[:, 0], entries[:, 1], entries[:, 2], entries[:, 3]
    rows_of_entry = np.repeat(np.arange(req.size), count)
    index = first[rows_of_entry] + (
        np.arange(rows_of_entry.size) - np.repeat(np.cumsum(count) - count, count)
    )  # each row's index among its request's tokens
    row_req = req[rows_of_entry]
    sizes = np.add.reduceat(count, np.asarray(steps[:-1], np.int64)) if req.size else count
    start = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    first_row = start[:-1]
    position = index + 1
    again = index < redo[rows_of_entry]
    dec = (index >= prompt_n[row_req]) & ~again
    ends_prompt = ~again & (position == prompt_n[row_req])
    pass_of_row = np.repeat(np.arange(sizes.size), sizes)
    # per (pass, request): its last position in the pass, summed per pass
    boundary = np.ones(row_req.size, bool)
    boundary[:-1] = (row_req[1:] != row_req[:-1]) | (pass_of_row[1:] != pass_of_row[:-1])
    kv = np.bincount(pass_of_row[boundary], position[boundary], sizes.size)
    # the first request's context: its last row in the pass (entries of one request are one run)
    first_end = np.flatnonzero(boundary)[np.searchsorted(np.flatnonzero(boundary), first_row)]
    return Passes(
        rows=by_request[begin[row_req] + index].astype(np.int64),
        start=start,
        request=ids[row_req[first_row]].astype(np.int32),
        phase=np.where(np.logical_or.reduceat(dec, first_row), DECODE, PREFILL).astype(np.uint8),
        context_end=position[first_end].astype(np.int64),
        first_token=np.logical_or.reduceat(ends_prompt, first_row),
        row_request=ids[row_req].astype(np.int32),
        attended=np.add.reduceat(position, first_row).astype(np.int64),
        kv_tokens=kv.astype(np.int64),
        joins=np.logical_or.reduceat(position == 1, first_row),
        row_phase=np.where(dec, DECODE, PREFILL).astype(np.uint8),
        row_first=ends_prompt,
        preempted=np.asarray(preempted, np.int32).reshape(-1),
    )


def _admitted(
    trace: Trace, workload: WorkloadConfig, share: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The served request ids in order of admission (of first appearance, filtered by
    ``workload.requests``, ``max_requests`` and ``share``), and for each trace row the
    admission index of its request (-1: not served)."""
    ids, first, inverse = np.unique(trace.request, return_index=True, return_inverse=True)
    order = np.argsort(first)
    if workload.requests is not None:
        order = order[np.isin(ids[order], workload.requests)]
    if workload.max_requests is not None:
        order = order[: workload.max_requests]
    order = order[share[0] :: share[1]]
    index = np.full(ids.size, -1, np.int64)
    index[order] = np.arange(order.size)
    return ids[order], index[inverse.reshape(-1)]


def _join_steps(decode_tokens: list[int], batch_size: int) -> list[int]:
    """Per request, in admission order, the decode step (decode passes before it) at which it
    joins: the first at which fewer than ``batch_size`` requests decode. A request decodes from
    its join step for its decode tokens, then frees its slot; one without decode tokens takes
    none (it runs its prefill chunks and leaves)."""
    step, joins = 0, []
    leave: list[int] = []  # a heap: the steps at which the decoding requests leave
    for tokens in decode_tokens:
        if len(leave) == batch_size:
            step = heapq.heappop(leave)
        while leave and leave[0] <= step:
            heapq.heappop(leave)
        joins.append(step)
        if tokens:
            heapq.heappush(leave, step + tokens)
    return joins


def draw_arrivals(
    config: SimConfig, trace: Trace, count: int, rng: np.random.Generator
) -> np.ndarray | None:
    """The arrival time of each of the run's ``count`` requests in admission order (all GPUs),
    or None (closed loop): ``rng`` is the run's generator, of which Poisson arrivals are the
    first draws (so both engines and every plug-in see the same stream)."""
    workload = config.workload
    if workload.arrivals == "closed-loop":
        return None
    if workload.arrivals == "poisson":
        assert workload.arrival_rate_per_s is not None  # the config requires it for poisson
        return np.cumsum(rng.exponential(1.0 / workload.arrival_rate_per_s, count))
    recorded = trace.request_arrivals()  # arrivals: trace
    if recorded is None:
        raise SpecmdError(
            f"workload.arrivals: expected a trace with arrival_s for 'trace', got "
            f"{config.trace!r} without it; use closed-loop or poisson"
        )
    # those of the requests served (workload.requests, max_requests), in admission order
    firsts = np.sort(np.unique(trace.request, return_index=True)[1])
    served = _admitted(trace, workload, (0, 1))[0]
    order = np.argsort(trace.request[firsts], kind="stable")
    position = order[np.searchsorted(trace.request[firsts], served, sorter=order)]
    return recorded[position][:count]


def is_online(config: SimConfig) -> bool:
    """Whether the timing engine forms the run's passes as it runs (``workload.schedule:
    online``, arrivals that are not a closed loop, and batches of more than one request or
    requests routed as they arrive: :func:`is_routed`). With one request at a time on a GPU
    whose requests are known in advance, the fixed table is already the online one: a request
    joins when the one before it has left, and it waits for its own arrival, which the engine
    does."""
    w = config.workload
    return (w.schedule == "online" and w.arrivals != "closed-loop"
            and (w.batch_size > 1 or is_routed(config)))  # fmt: skip


def is_routed(config: SimConfig) -> bool:
    """Whether the GPUs' requests are routed as they arrive (``parallel.router:
    least-loaded``, several GPUs, arrivals that are not a closed loop: :class:`Router`). In a
    closed loop every request arrives at the start, when every GPU has as many unfinished
    requests as round robin gave it, so the two routers agree."""
    return (config.parallel.router == "least-loaded" and config.parallel.count > 1
            and config.workload.arrivals != "closed-loop")  # fmt: skip


class Arrivals:
    """One GPU's requests' arrival times by request id: ``ids`` in order of admission and
    their ``times`` (a router's schedule fills both as it routes requests; a request is read
    only once it joins a pass, so after it was routed). Not by the order in which requests
    first appear in passes: a request without prompt tokens first appears in its step's
    decode pass, after the prefill passes of those admitted after it (``scheduler: slots``)."""

    __slots__ = ("_index", "ids", "times")

    def __init__(self, ids: np.ndarray, times: np.ndarray) -> None:
        self.ids, self.times = ids, times
        self._index: dict[int, int] = {}  # (the admission index of the ids read so far)

    @classmethod
    def of_share(
        cls, trace: Trace, workload: WorkloadConfig, share: tuple[int, int], times: np.ndarray
    ) -> Arrivals:
        """The ``times`` of a GPU's ``share`` of the trace's requests, in order of admission."""
        return cls(_admitted(trace, workload, share)[0], times)

    def of(self, r: int) -> float:
        """Request ``r``'s arrival time, s."""
        index = self._index
        while r not in index:
            index[int(self.ids[len(index)])] = len(index)
        return float(self.times[index[r]])


@dataclass(frozen=True)
class Requests:
    """One GPU's requests in admission order: their ids, their trace rows (prompt rows, then
    decode rows; request ``r``'s from ``begin[r]``), prompt tokens and whole lengths."""

    ids: np.ndarray
    by_request: np.ndarray
    begin: np.ndarray
    prompt_n: np.ndarray
    length: np.ndarray

    @classmethod
    def of(cls, trace: Trace, workload: WorkloadConfig, share: tuple[int, int]) -> Requests:
        ids, admit = _admitted(trace, workload, share)
        served = np.flatnonzero(admit >= 0)
        decode = trace.phase == DECODE
        order = np.lexsort((served, decode[served], admit[served]))
        n = ids.size
        prompt_n = np.bincount(admit[served], ~decode[served], n).astype(np.int64)
        length = np.bincount(admit[served], minlength=n).astype(np.int64)
        return cls(ids, served[order], np.cumsum(length) - length, prompt_n, length)

    def routed(self) -> Requests:
        """Room for one GPU's share of these requests, routed to it as they arrive
        (:meth:`OnlineSchedule.take`): arrays as long as these (copies, whose first entries
        the routed requests overwrite in the order they come), the same rows."""
        return Requests(self.ids.copy(), self.by_request, self.begin.copy(),
                        self.prompt_n.copy(), self.length.copy())  # fmt: skip

    def passes(self, taken: list[Entry], steps: list[int], stepper: Stepper) -> Passes:
        """The passes of ``taken`` entries, pass ``p`` being ``taken[steps[p]:steps[p+1]]``,
        with what ``stepper`` counted as it formed them (taken from it): each one's KV cache
        (the table's ``kv_resident``) and preemptions."""
        kv, cut = stepper.take_counts()
        passes = _passes_of_steps(self.by_request, self.begin, self.prompt_n, self.ids, taken,
                                  steps, cut)  # fmt: skip
        object.__setattr__(passes, "kv_resident", np.asarray(kv, np.int64).reshape(-1))
        return passes


class Stepper:
    """A scheduler's state over one GPU's requests (:class:`Requests`); :meth:`step` forms the
    next step's passes from the first ``arrived`` requests (those that have arrived), after
    the preempted ones, which wait at the front of the queue. Its requests are the first
    :attr:`n`; while :attr:`open` (requests routed as they arrive), more may come."""

    # (continuous) the plan admits() made last, for the step after it if nothing changed since
    _planned: tuple[int, int, tuple[list[Entry], int, int, list[int]]] | None = None
    _counters: tuple[str, ...] = ("resident",)  # the state's numbers (but waiting)

    def __init__(self, requests: Requests, workload: WorkloadConfig) -> None:
        self.req = requests
        self.n = int(requests.ids.size)
        self.open = False
        self.batch = workload.batch_size
        zeros = np.zeros(self.n, np.int64).tolist()
        self.done = list(zeros)  # tokens each request has run (its progress)
        self.computed = list(zeros)  # ... of which its KV cache holds (0 once preempted)
        self.redo = list(zeros)  # tokens it had run when it was last preempted
        self.waiting = 0  # the next request to admit for the first time
        self.front: list[int] = []  # preempted requests, waiting before the others
        self.running: list[int] = []  # in the order they joined
        # tokens in the KV cache of the requests that have run a pass and not yet left; per
        # pass formed since the owner last took them, those tokens and the requests preempted
        self.resident = 0
        self.kv: list[int] = []
        self.cut: list[int] = []

    @property
    def finished(self) -> bool:
        return not self.open and self.waiting >= self.n and not self.running and not self.front

    def idle(self, arrived: int) -> bool:
        """Nothing runs or waits preempted, and nothing waiting has arrived: the server waits
        for an arrival."""
        return (not self.running and not self.front and self.waiting >= arrived
                and (self.waiting < self.n or self.open))  # fmt: skip

    def admits(self, arrived: int) -> int:
        """How many new requests the next step admits when ``arrived`` have arrived."""
        raise NotImplementedError

    def step(self, arrived: int) -> list[list[Entry]]:
        """The next step's passes (each a list of entries), its state then moved past them."""
        raise NotImplementedError

    def time_independent(self, arrived: int) -> bool:
        """Whether the next step admits the same requests whenever it starts (at least as late
        as the time when ``arrived`` requests had arrived): FCFS admission takes a prefix of
        the queue, so it does when it takes as many with all requests arrived; while requests
        are routed as they arrive (:attr:`open`), those to come are not known, so only when
        the batch is full."""
        if self.open:
            return not self.idle(arrived) and len(self.running) >= self.batch
        return not self.idle(arrived) and self.admits(self.n) == self.admits(arrived)

    def snapshot(self) -> Snapshot:
        """The state, to :meth:`restore` after later steps: the next request to admit, the
        requests running, then those preempted, and their entries of the lists by request (the
        only requests whose entries steps change, with those they admit), and the counters;
        not the requests routed to it, nor the counts not yet taken (:meth:`take_counts`)."""
        live = self.running + self.front
        return (self.waiting, live, len(self.running),
                [[column[r] for r in live] for column in self._columns()],
                [getattr(self, k) for k in self._counters])  # fmt: skip

    def restore(self, state: Snapshot) -> None:
        waiting, live, running, entries, counters = state
        for column, values in zip(self._columns(), entries, strict=True):
            for r, value in zip(live, values, strict=True):
                column[r] = value
            column[waiting : self.waiting] = [0] * (self.waiting - waiting)  # (not yet run)
        for k, value in zip(self._counters, counters, strict=True):
            setattr(self, k, value)
        self.waiting, self.running, self.front = waiting, live[:running], live[running:]
        self._planned = None

    def _columns(self) -> tuple[list[int], ...]:
        """The lists by request."""
        return self.done, self.computed, self.redo

    def take_counts(self) -> tuple[list[int], list[int]]:
        """The KV cache's tokens and the preemptions of each pass formed since last taken."""
        counts = self.kv, self.cut
        self.kv, self.cut = [], []
        return counts

    def _ran(self, entries: list[Entry], preempted: int = 0) -> None:
        """Count a pass's entries: the tokens they add, then those of requests that leave
        after it (their last token ran); the KV cache's tokens during the pass, and the
        requests preempted as it was formed."""
        done, computed, length = self.done, self.computed, self.req.length
        for r, first, count, _ in entries:
            computed[r] = first + count
            done[r] = max(done[r], computed[r])
            self.resident += count
        self.kv.append(self.resident)
        self.cut.append(preempted)
        for r, _, _, _ in entries:
            if done[r] >= length[r] and r in self.running:
                self.resident -= int(length[r])


Snapshot = tuple[int, list[int], int, list[list[int]], list[int]]
""":meth:`Stepper.snapshot`: the next request to admit, the requests running then preempted,
how many run, their entries of the lists by request, the counters."""


class SlotStepper(Stepper):
    """``scheduler: slots``: while fewer than ``batch_size`` requests decode, arrived
    requests join, each running its prefill chunks as passes of their own (a request without
    decode tokens takes no slot); then one decode pass takes the next token of each decoding
    request, in the order they joined."""

    def __init__(self, requests: Requests, workload: WorkloadConfig) -> None:
        super().__init__(requests, workload)
        self.chunk = workload.prefill_chunk_tokens

    def admits(self, arrived: int) -> int:
        slots, count, decode = len(self.running), 0, self.req.length - self.req.prompt_n
        while self.waiting + count < min(arrived, self.n) and slots < self.batch:
            slots += int(decode[self.waiting + count] > 0)
            count += 1
        return count

    def step(self, arrived: int) -> list[list[Entry]]:
        joining = range(self.waiting, self.waiting + self.admits(arrived))
        self.waiting += len(joining)
        prompt_n, length = self.req.prompt_n, self.req.length
        passes: list[list[Entry]] = []
        for r in joining:
            self.running.append(r)  # (resident while its chunks run; it leaves if no decode)
            n = int(prompt_n[r])
            chunk = self.chunk or max(n, 1)
            for first in range(0, n, chunk):
                passes.append([(r, first, min(chunk, n - first), 0)])
                self._ran(passes[-1])
            if length[r] == n:
                self.running.remove(r)
        if self.running:
            passes.append([(r, self.done[r], 1, 0) for r in self.running])
            self._ran(passes[-1])
            self.running = [r for r in self.running if self.done[r] < length[r]]
        return passes


class ContinuousStepper(Stepper):
    """``scheduler: continuous`` (:func:`_continuous_passes` tells the rules): one pass a step.

    The KV pool (``kv_pool_tokens``), by ``workload.kv_cache``:

    - ``wait``: a request joins only while its whole length fits the pool beside the running
      requests' whole lengths (a reservation);
    - ``paged`` (vLLM's V1 scheduler, ``vllm/v1/core/sched/scheduler.py`` at 00024d3,
      ``schedule``): the pool is ``kv_block_tokens``-token blocks, a request holds the blocks of
      the tokens it has computed. A running request whose next tokens need blocks the pool has
      not free preempts the last request running (``self.running.pop()``), and so on, itself
      last (then it waits too); a preempted request frees its blocks and waits at the front of
      the queue (``prepend_request``), and when it runs again recomputes every token it had
      (its prompt and outputs, as a prompt: ``num_computed_tokens = 0``) with the next one. A
      step that preempted admits no waiting request; a waiting request joins only when the
      blocks of its first tokens are free.
    """

    def __init__(
        self, requests: Requests, workload: WorkloadConfig, kv_pool_tokens: int | None
    ) -> None:
        super().__init__(requests, workload)
        length = requests.length
        self.paged = workload.kv_cache == "paged" and kv_pool_tokens is not None
        self.block = workload.kv_block_tokens if self.paged else 1
        if kv_pool_tokens is not None and self.n:
            r = int(np.argmax(length))
            pool = kv_pool_tokens // self.block * self.block
            if self._blocks(int(length[r])) * self.block > pool:
                raise SpecmdError(
                    f"workload.kv_cache: {workload.kv_cache}: expected every request's KV cache "
                    f"to fit the pool that cache.capacity leaves ({pool} tokens), got request "
                    f"{int(requests.ids[r])} with {int(length[r])} tokens; lower cache.capacity "
                    f"or use kv_cache: evict"
                )
        self.pool = None if self.paged else kv_pool_tokens
        self.free = 0 if kv_pool_tokens is None else kv_pool_tokens // self.block  # (paged)
        self.held = np.zeros(self.n, np.int64).tolist()  # blocks each request holds (paged)
        self.budget_step = workload.max_tokens_per_step or int(length.sum()) + 1
        self.chunk = workload.prefill_chunk_tokens or self.budget_step
        self.reserved = 0  # whole lengths of the running requests (wait)

    _counters = (*Stepper._counters, "free", "reserved")

    def _columns(self) -> tuple[list[int], ...]:
        return *super()._columns(), self.held

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _count(self, r: int, budget: int) -> int:
        """Request ``r``'s tokens in the next step: its next decode token, or its next prompt
        tokens (after a preemption, the tokens it recomputes and the next one) up to the chunk
        and what the step's budget has left."""
        prompt, done, computed = int(self.req.prompt_n[r]), self.done[r], self.computed[r]
        remaining = (prompt if done < prompt else done + 1) - computed
        if computed >= prompt and remaining == 1:
            return 1
        return min(remaining, self.chunk, budget)

    def _plan(self, arrived: int) -> tuple[list[Entry], int, int, list[int]]:
        """The next step's entries, how many new requests and preempted ones join in it, and
        the requests it preempts."""
        length = self.req.length
        budget, taken = self.budget_step, []
        running, free, preempted = list(self.running), self.free, []
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            count = self._count(r, budget)
            if self.paged:
                need = self._blocks(self.computed[r] + count) - self.held[r]
                while need > free and r not in preempted:
                    victim = running.pop()
                    free += self.held[victim]
                    preempted.append(victim)
                if r in preempted:
                    break
                free -= need
            taken.append((r, self.computed[r], count, self.redo[r]))
            budget -= count
            i += 1
        joined = resumed = 0
        reserved, limit = self.reserved, min(arrived, self.n)
        while not preempted and len(running) < self.batch and budget > 0:
            if resumed < len(self.front):
                r = self.front[resumed]
            elif self.waiting + joined < limit:
                r = self.waiting + joined
            else:
                break
            if self.pool is not None and reserved + length[r] > self.pool:
                break
            count = self._count(r, budget)
            if self.paged:
                need = self._blocks(count)
                if need > free:
                    break
                free -= need
            taken.append((r, 0, count, self.redo[r]))
            budget -= count
            running.append(r)
            if resumed < len(self.front):
                resumed += 1
            else:
                reserved += int(length[r])
                joined += 1
        return taken, joined, resumed, preempted

    def admits(self, arrived: int) -> int:
        plan = self._plan(arrived)
        self._planned = (arrived, self.n, plan)  # (the step that follows takes it)
        return plan[1]

    def step(self, arrived: int) -> list[list[Entry]]:
        planned, self._planned = self._planned, None
        if planned is not None and planned[:2] == (arrived, self.n):
            taken, joined, resumed, preempted = planned[2]
        else:
            taken, joined, resumed, preempted = self._plan(arrived)
        for v in preempted:  # (each to the front of the queue, as it was preempted)
            self.running.remove(v)
            self.free += self.held[v]
            self.held[v] = 0
            self.resident -= self.computed[v]
            self.computed[v], self.redo[v] = 0, self.done[v]
            self.front.insert(0, v)
        self.running += self.front[:resumed]
        del self.front[:resumed]
        joining = range(self.waiting, self.waiting + joined)
        self.running.extend(joining)
        self.reserved += int(self.req.length[self.waiting : self.waiting + joined].sum())
        self.waiting += joined
        self._ran(taken, len(preempted))
        for r, _, _, _ in taken:
            if self.paged:
                blocks = self._blocks(self.computed[r])
                self.free -= blocks - self.held[r]
                self.held[r] = blocks
        length = self.req.length
        left = [r for r in self.running if self.done[r] >= length[r]]
        self.reserved -= int(sum(int(length[r]) for r in left))
        for r in left:
            self.free += self.held[r]
            self.held[r] = 0
        self.running = [r for r in self.running if self.done[r] < length[r]]
        return [taken] if taken else []


def make_stepper(
    requests: Requests, workload: WorkloadConfig, kv_pool_tokens: int | None = None
) -> Stepper:
    if workload.scheduler == "continuous":
        return ContinuousStepper(requests, workload, kv_pool_tokens)
    return SlotStepper(requests, workload)


def _add(passes: list[list[Entry]], taken: list[Entry], steps: list[int]) -> None:
    """Append a step's ``passes`` to ``taken``, noting where each pass begins in ``steps``."""
    for entries in passes:
        steps.append(len(taken))
        taken += entries


def _arrived_by(arrivals: np.ndarray, stepper: Stepper, now: float) -> tuple[int, float]:
    """How many of ``arrivals`` (a GPU's, in admission order) the step that starts at ``now``
    may take, and when it starts: at ``now``, or, if nothing runs and nothing waiting has
    arrived, at the next arrival."""
    arrived = int(np.searchsorted(arrivals, now, side="right"))
    if stepper.idle(arrived):
        now = float(arrivals[stepper.waiting])
        arrived = int(np.searchsorted(arrivals, now, side="right"))
    return arrived, now


def closed_loop_steps(stepper: Stepper) -> tuple[list[Entry], list[int]]:
    """Every step with every request arrived: the entries and each pass's first entry (and
    their count at the end)."""
    taken: list[Entry] = []
    steps: list[int] = []
    while not stepper.finished:
        _add(stepper.step(stepper.n), taken, steps)
    steps.append(len(taken))
    return taken, steps


def zero_time_passes(
    trace: Trace,
    workload: WorkloadConfig,
    arrivals: np.ndarray,
    share: tuple[int, int] = (0, 1),
    kv_pool_tokens: int | None = None,
) -> Passes:
    """The pass table a machine whose steps take no time forms (``replay``'s under arrivals):
    at each step the requests that have arrived by then join (as the scheduler admits them);
    the clock moves only when nothing runs, to the next arrival. ``arrivals``: the share's
    requests' arrival times in admission order."""
    requests = Requests.of(trace, workload, share)
    stepper = make_stepper(requests, workload, kv_pool_tokens)
    taken: list[Entry] = []
    steps: list[int] = []
    now = -np.inf
    while not stepper.finished:
        arrived, now = _arrived_by(arrivals, stepper, now)
        _add(stepper.step(arrived), taken, steps)
    steps.append(len(taken))
    return requests.passes(taken, steps, stepper)


class ScheduleFull(Exception):
    """An online schedule formed more rows than its arrays have room for: with preemptions
    (``kv_cache: paged``) a request's recomputed tokens run again, so the rows a run forms are
    not bounded by the trace's; the run starts again with more room
    (:func:`~specmd_sim.engine.sim.run.simulate`)."""


# the fields of a pass table by row and by pass (its ``start`` apart)
_ROW_FIELDS = ("rows", "row_request", "row_phase", "row_first")
_PASS_FIELDS = ("request", "phase", "context_end", "first_token", "attended", "kv_tokens", "joins",
                "preempted")  # fmt: skip


@dataclass(frozen=True, eq=False)
class FormingPasses(Passes):
    """A pass table formed during the run (:class:`OnlineSchedule`): every array sized for the
    most passes and rows the run can have, of which the first :attr:`num_passes` passes (and
    their rows) are formed; what is held of them never moves, so a view taken at the start
    sees every pass once it is formed."""

    formed: np.ndarray  # int64 [2]: passes and rows formed
    tokens_of: np.ndarray  # int64 [P]: each pass's tokens
    kv_of: np.ndarray  # int64 [P]: each pass's KV cache tokens (kv_resident)

    @property
    def num_passes(self) -> int:
        return int(self.formed[0])

    @property
    def pass_tokens(self) -> np.ndarray:
        return self.tokens_of

    @property
    def kv_resident(self) -> np.ndarray:
        return self.kv_of

    def append(self, block: Passes) -> tuple[int, int]:
        """Add ``block``'s passes; their index range. Raises :class:`ScheduleFull` where they
        do not fit (recomputed tokens after preemptions are rows again)."""
        p0, r0 = int(self.formed[0]), int(self.formed[1])
        p1, r1 = p0 + block.num_passes, r0 + int(block.rows.size)
        if r1 > self.rows.size:
            raise ScheduleFull(f"{r1} rows formed, room for {self.rows.size}")
        for name in _ROW_FIELDS:
            getattr(self, name)[r0:r1] = getattr(block, name)
        for name in _PASS_FIELDS:
            getattr(self, name)[p0:p1] = getattr(block, name)
        self.start[p0 + 1 : p1 + 1] = block.start[1:] + r0
        self.tokens_of[p0:p1] = np.diff(block.start)
        self.kv_of[p0:p1] = block.kv_resident
        self.formed[:] = p1, r1
        return p0, p1

    def final(self) -> Passes:
        """The passes formed, as a table of their own."""
        p, r = int(self.formed[0]), int(self.formed[1])
        fields = {}
        for name in _ROW_FIELDS:
            fields[name] = getattr(self, name)[:r].copy()
        for name in _PASS_FIELDS:
            fields[name] = getattr(self, name)[:p].copy()
        fields["start"] = self.start[: p + 1].copy()
        out = Passes(**fields)
        object.__setattr__(out, "kv_resident", self.kv_of[:p].copy())  # (as the stepper counted)
        return out

    @classmethod
    def empty(cls, rows: int) -> FormingPasses:
        """Room for ``rows`` rows in at most as many passes (a pass has a row at least)."""
        i64, u8 = np.int64, np.uint8
        return cls(
            rows=np.zeros(rows, i64), start=np.zeros(rows + 1, i64),
            request=np.zeros(rows, np.int32), phase=np.zeros(rows, u8),
            context_end=np.zeros(rows, i64), first_token=np.zeros(rows, bool),
            row_request=np.zeros(rows, np.int32), attended=np.zeros(rows, i64),
            kv_tokens=np.zeros(rows, i64), joins=np.zeros(rows, bool),
            row_phase=np.zeros(rows, u8), row_first=np.zeros(rows, bool),
            preempted=np.zeros(rows, np.int32), formed=np.zeros(2, i64),
            tokens_of=np.zeros(rows, i64), kv_of=np.zeros(rows, i64),
        )  # fmt: skip


class FormingDemand(DemandSets):
    """The demand sets of :class:`FormingPasses`, formed with them: keys, tokens, gates and
    offsets sized for the most the run can have (a pass's set at a layer has at most a key per
    routed id of its rows). :attr:`num_accesses` is that bound until :meth:`final`."""

    def __init__(self, trace: Trace, passes: FormingPasses) -> None:
        rows, layers = passes.rows.size, trace.num_layers
        bound = rows * layers * trace.top_k
        super().__init__(np.zeros(bound, np.int32), np.zeros(rows * layers + 1, np.int64),
                         trace, passes, 0)  # fmt: skip
        object.__setattr__(self, "tokens", np.zeros(bound, np.int32))
        object.__setattr__(self, "gates", np.zeros(bound, np.float32))

    @property
    def num_accesses(self) -> int:
        return int(self.keys.size)

    def max_layer_demand(self) -> tuple[int, int, int]:
        """The largest a set can be: every expert of a layer (pass and layer: -1)."""
        trace = self._source[0]
        return int(trace.num_experts), -1, -1

    def append(self, block: Passes, p0: int) -> None:
        """The sets of ``block``'s passes, which are passes ``p0 ..`` of the run."""
        trace, layers = self._source[0], self.num_layers
        a = int(self.offsets[p0 * layers])
        for lo, hi in _chunks(block, trace):  # (keys, tokens and gates at once, a chunk each)
            keys, tokens, gates, sizes = _chunk_sets(trace, block, lo, hi, values=True)
            b = a + keys.size
            self.keys[a:b], self.tokens[a:b], self.gates[a:b] = keys, tokens, gates
            self.offsets[(p0 + lo) * layers + 1 : (p0 + hi) * layers + 1] = a + np.cumsum(sizes)
            a = b

    def final(self, passes: Passes) -> DemandSets:
        """The sets of the passes formed (``passes``: :meth:`FormingPasses.final`)."""
        trace = self._source[0]
        end = passes.num_passes * self.num_layers
        offsets = self.offsets[: end + 1].copy()
        n = int(offsets[-1])
        sizes = np.diff(offsets)
        largest = int(np.argmax(sizes)) if sizes.size else 0
        out = DemandSets(self.keys[:n].copy(), offsets, trace, passes, largest)
        object.__setattr__(out, "tokens", self.tokens[:n].copy())
        object.__setattr__(out, "gates", self.gates[:n].copy())
        return out


Pace = Callable[[int, int], float]
"""A pass's expected seconds, of its tokens and phase (:meth:`OnlineSchedule.form`)."""

AHEAD_MARGIN = 0.01
"""How surely :meth:`OnlineSchedule.form` must expect a step formed ahead to start between two
arrivals: by this share of the time it expects to pass before the step (a step formed for the
wrong arrivals is given back, with those after it; one not formed costs a return to the
schedule)."""

WAIT = -1
""":meth:`OnlineSchedule.form`'s answer where its GPU has nothing to run until another request
is routed (:class:`Router`): the engine asks again at :attr:`OnlineSchedule.wake`."""


class Router:
    """``parallel.router: least-loaded``: each request, at its arrival, goes to the GPU with
    the fewest unfinished requests (routed to it, and the last pass of each not ended), the
    first found in GPU order from a start that moves one GPU on per request, as vLLM's
    data-parallel front end routes (``vllm/v1/engine/core_client.py`` at 00080ee,
    ``DPLBAsyncMPClient.get_core_engine_for_request``: with one front end its in-flight count
    is exact and the scan start rotates). Not modelled: the coordinator's count snapshots,
    published every 100 ms, which raise a score only where other front ends load an engine,
    and the penalty on waiting requests above half the KV cache's use.

    Nothing runs it: each GPU's :class:`OnlineSchedule` routes, when its stream asks for a
    step at ``now``, the requests that have arrived by then (:meth:`route`); where a GPU is
    idle it asks again at the next arrival (:data:`WAIT`), so a request is routed at the first
    step start or idle GPU's wake at or after its arrival, when every GPU's passes that ended
    by then have ended (the engines run in time order) and those running have not."""

    def __init__(self, requests: Requests, arrivals: np.ndarray) -> None:
        """``requests``: every request in arrival order; ``arrivals``: their times."""
        self.requests, self.arrivals = requests, np.asarray(arrivals, np.float64)
        self.next = 0  # the next request to route
        self.start = 0  # the GPU the next scan starts from
        self.schedules: list[OnlineSchedule] = []  # each GPU's, in GPU order

    @property
    def done(self) -> bool:
        return self.next >= self.arrivals.size

    @property
    def wake(self) -> float:
        """The next request's arrival (inf: every request is routed)."""
        return np.inf if self.done else float(self.arrivals[self.next])

    def route(self, now: float) -> None:
        """Route every request that has arrived by ``now`` and is not routed yet."""
        arrivals, schedules = self.arrivals, self.schedules
        n = len(schedules)
        while self.next < arrivals.size and arrivals[self.next] <= now:
            at = float(arrivals[self.next])
            order = [(self.start + i) % n for i in range(n)]
            loads = [schedules[g].load(at) for g in order]
            g = order[loads.index(min(loads))]
            schedules[g].take(self.next, at)
            self.start = (self.start + 1) % n
            self.next += 1


class OnlineSchedule:
    """One GPU's passes, formed as its stream reaches them (module docstring): ``passes`` and
    ``demand`` grow; :meth:`form` adds the next step (and those after it that no arrival can
    change); ``on_formed`` callbacks see each range of new passes (the KV cache's capacities).

    With a :class:`Router`, its requests are those routed to it as they arrive: ``arrivals``
    (in admission order) fills as they come, and the router counts the GPU's unfinished
    requests from :attr:`pass_end`, the engine's record of each pass's end (inf until then),
    which the engine sets before the run."""

    def __init__(
        self,
        trace: Trace,
        workload: WorkloadConfig,
        arrivals: np.ndarray | None,
        share: tuple[int, int] = (0, 1),
        kv_pool_tokens: int | None = None,
        room: int = 1,
        router: Router | None = None,
    ) -> None:
        """``room``: rows for this many times the trace's (more than 1 only where preemptions
        make requests recompute: :class:`ScheduleFull`); ``router``: the requests come from
        it (``arrivals`` and ``share`` unused), with room for every one."""
        self.router = router
        if router is None:
            assert arrivals is not None
            self.requests = Requests.of(trace, workload, share)
        else:
            self.requests = router.requests.routed()
            arrivals = np.full(self.requests.ids.size, np.inf)
        self.stepper = make_stepper(self.requests, workload, kv_pool_tokens)
        self.arrivals = np.asarray(arrivals, np.float64)
        # the arrivals as a list, read step by step; None with a router, which writes arrivals
        # as it routes (a list copied now would go stale)
        self.arrival_list: list[float] | None = self.arrivals.tolist() if router is None else None
        rows = int(self.requests.by_request.size)
        self.passes = FormingPasses.empty(rows * room)
        self.demand = FormingDemand(trace, self.passes)
        self.on_formed: list[Callable[[int, int], None]] = []
        # the steps formed ahead at the last form: each one's first pass and the window its
        # start must fall in (not before, before), and the stepper's state before it, by pass
        self.windows: tuple[list[int], list[float], list[float]] = ([], [], [])
        self._ahead: dict[int, Snapshot] = {}
        self.wake = np.inf  # (form answered WAIT: when to ask again)
        if router is not None:
            self.stepper.n, self.stepper.open = 0, True
            router.schedules.append(self)
            # each request's last pass (-1: not formed yet); the requests routed here that the
            # router has not seen leave
            self.last_pass = np.full(self.requests.ids.size, -1, np.int64)
            self.pass_end = np.zeros(0)  # (the engine's)
            self.unfinished: list[int] = []

    @property
    def total_rows(self) -> int:
        """The rows it forms (for progress; routed: an even share)."""
        rows = int(self.requests.by_request.size)
        return rows if self.router is None else rows // len(self.router.schedules)

    def load(self, at: float) -> int:
        """How many requests routed here had not left at ``at``: the last pass of each had
        not ended."""
        last, end = self.last_pass, self.pass_end
        self.unfinished = [r for r in self.unfinished if last[r] < 0 or end[last[r]] > at]
        return len(self.unfinished)

    def take(self, i: int, at: float) -> None:
        """The router's request ``i``, arrived at ``at``, is this GPU's next."""
        assert self.router is not None
        k, mine, every = self.stepper.n, self.requests, self.router.requests
        mine.ids[k], mine.begin[k] = every.ids[i], every.begin[i]
        mine.prompt_n[k], mine.length[k] = every.prompt_n[i], every.length[i]
        self.arrivals[k] = at
        self.stepper.n = k + 1
        self.unfinished.append(k)

    def form(self, now: float, ahead: int = 0, pace: Pace | None = None) -> int:
        """The passes of the step that starts at ``now`` (the stream is ready for it; when
        nothing runs and nothing has arrived, of the step that starts at the next arrival,
        which the stream waits for), and of the steps after it that no arrival can change.
        How many passes were formed (0: every request has left; :data:`WAIT`: with a
        router, none has been routed here that has not left, so the stream waits for the next
        arrival, :attr:`wake`).

        ``ahead``: then up to this many steps more while something runs, each formed for the
        requests arrived by when it is expected to start (by ``pace``: the seconds a pass of
        that many tokens and that phase takes; without it, or with a router, for those
        arrived by now). Each is the server's if its first pass starts in its window
        (:attr:`windows`): from the last arrival it takes to the next (the next to route,
        with a router); the engine checks, and gives back (:meth:`give_back`) the first that
        does not. None is formed ahead where it is expected to start about when a request
        arrives (:data:`AHEAD_MARGIN`): what is given back was formed for nothing (the run is
        the same whatever is formed ahead)."""
        stepper, router = self.stepper, self.router
        self.windows, self._ahead = ([], [], []), {}
        arrived, start = self._arrived(now)
        if stepper.finished:
            return 0
        if arrived == WAIT:
            return WAIT
        taken: list[Entry] = []
        steps: list[int] = []
        while True:
            _add(stepper.step(arrived), taken, steps)
            if stepper.finished or not stepper.time_independent(arrived):
                break
        p0 = self.passes.num_passes
        elapsed = self._elapsed(taken, steps, pace)
        count = arrived  # (the requests a step formed ahead takes)
        listed = self.arrival_list
        for _ in range(ahead):
            if pace is not None:  # (when the step is expected to start, and how surely)
                at, band = start + elapsed, elapsed * AHEAD_MARGIN
                if router is not None and at - band >= router.wake:
                    break
                if router is None:
                    assert listed is not None
                    last = bisect_right(listed, at + band)
                    if bisect_right(listed, at - band) != last:
                        break
                    count = max(count, last)
            if stepper.finished or stepper.idle(count):
                break
            k, state = len(steps), stepper.snapshot()
            _add(stepper.step(count), taken, steps)
            if len(steps) > k:  # (a step that only preempts forms none: it takes no arrival)
                self._ahead[p0 + k] = state
                self._window(p0 + k, count, arrived)
            elapsed += self._elapsed(taken, steps[k:], pace)
        steps.append(len(taken))
        block = self.requests.passes(taken, steps, stepper)
        p0, p1 = self.passes.append(block)
        self.demand.append(block, p0)
        if router is not None:
            self._last_passes(taken, steps, p0)
        for callback in self.on_formed:
            callback(p0, p1)
        return p1 - p0

    def _window(self, p: int, count: int, arrived: int) -> None:
        """Note the window of pass ``p``, the first of a step formed ahead for the first
        ``count`` requests when ``arrived`` had arrived by now."""
        at, not_before, before = self.windows
        at.append(p)
        if self.router is not None:
            not_before.append(-np.inf)
            before.append(self.router.wake)
            return
        arrivals = self.arrival_list
        assert arrivals is not None
        not_before.append(arrivals[count - 1] if count > arrived else -np.inf)
        before.append(arrivals[count] if count < len(arrivals) else np.inf)

    def _elapsed(self, taken: list[Entry], starts: list[int], pace: Pace | None) -> float:
        """The expected seconds (by ``pace``; 0 without) of the passes of ``taken`` that begin
        at ``starts`` (each ends where the next begins, the last at the end)."""
        if pace is None:
            return 0.0
        return sum(self._expected(taken[a:b], pace) for a, b in pairwise([*starts, len(taken)]))

    def _arrived(self, now: float) -> tuple[int, float]:
        """How many of the GPU's requests the step that starts at ``now`` may take: those
        routed here by then; or, known in advance, arrived by then, or by the next arrival
        if nothing runs (the step then starts at it). :data:`WAIT` where the GPU is idle and
        the next request may be routed elsewhere. And when the step starts."""
        stepper, router = self.stepper, self.router
        if router is not None:
            router.route(now)
            stepper.open = not router.done
            if stepper.idle(stepper.n):
                self.wake = router.wake
                return WAIT, now
            return stepper.n, now
        return _arrived_by(self.arrivals, stepper, now)

    def _expected(self, entries: list[Entry], pace: Pace) -> float:
        """A pass's expected seconds by ``pace``: of its tokens, and decode where a row of it
        is past its request's prompt and what it recomputes (as :func:`_passes_of_steps`
        tells the phase)."""
        prompt_n = self.requests.prompt_n
        decode = any(first + count > max(prompt_n[r], redo) for r, first, count, redo in entries)
        return pace(sum(entry[2] for entry in entries), DECODE if decode else PREFILL)

    def _last_passes(self, taken: list[Entry], steps: list[int], p0: int) -> None:
        """Note the pass of each request's last token among the passes formed from ``p0``."""
        length = self.requests.length
        for i in range(len(steps) - 1):
            for r, first, count, _ in taken[steps[i] : steps[i + 1]]:
                if first + count >= length[r]:
                    self.last_pass[r] = p0 + i

    def give_back(self, p: int) -> None:
        """Forget the passes formed ahead from pass ``p`` on, the first of a step whose window
        the stream missed (:meth:`form`; unstarted): the stepper's state is that before it."""
        self.stepper.restore(self._ahead[p])
        self.passes.formed[:] = p, self.passes.start[p]
        if self.router is not None:
            self.last_pass[self.last_pass >= p] = -1
        self.windows, self._ahead = ([], [], []), {}

    def final(self) -> tuple[Passes, DemandSets]:
        passes = self.passes.final()
        return passes, self.demand.final(passes)
