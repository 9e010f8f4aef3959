"""Passes and demand sets: how a trace becomes the sequence of cache accesses.

A *pass* is one forward pass through all MoE layers: one decode step of up to
``workload.batch_size`` active requests (one token each), or one prefill chunk of
``workload.prefill_chunk_tokens`` prompt tokens (0 = the whole prompt) of one request.

The pass table is fixed before the run, so that both engines and offline policies see the same
access sequence. Requests are admitted in order of first appearance in the trace (their arrival
order) into ``batch_size`` slots: whenever a slot is free, the next request joins and its prefill
chunks run as passes of their own (prefill first); then every decode pass takes the next token of
each active request, in the order they joined; a request leaves after its last token. With
``batch_size: 1`` this is one request after another.

The *demand set* of (pass, layer) is the union of its tokens' selections, ordered by highest
gate first (the max over the pass's tokens; without gates, the best slot rank, then the number
of tokens), ties by expert id. For a single-token pass it is the row as stored. The
concatenation of all demand sets in (pass, layer) order is the run's *access sequence*, which
both engines follow and offline policies (Belady) read in advance.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specmd_sim.config import WorkloadConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.policies.context import AccessSequence
from specmd_sim.traces.trace import DECODE, PREFILL, Trace


@dataclass(frozen=True, eq=False)
class Passes:
    rows: np.ndarray  # int64 [N]: trace rows in pass order
    start: np.ndarray  # int64 [P + 1]: pass p covers rows[start[p]:start[p + 1]]
    request: np.ndarray  # int32 [P]
    phase: np.ndarray  # uint8 [P]: 0 prefill, 1 decode
    context_end: np.ndarray  # int64 [P]: the request's tokens up to and including this pass
    first_token: np.ndarray  # bool [P]: this pass produces its request's first output token
    row_request: np.ndarray  # int32 [N]: the request of each row of ``rows``
    attended: np.ndarray  # int64 [P]: sum over the pass's tokens of their 1-based positions
    kv_tokens: np.ndarray  # int64 [P]: sum over the pass's requests of their context ends
    joins: np.ndarray  # bool [P]: some request runs its first pass here
    row_phase: np.ndarray  # uint8 [N]: each row's phase (continuous batching mixes them)
    row_first: np.ndarray  # bool [N]: the request's last prompt token (its first token follows)

    @property
    def num_passes(self) -> int:
        return int(self.request.size)

    def tokens(self, p: int) -> int:
        return int(self.start[p + 1] - self.start[p])

    def requests_of(self, p: int) -> list[int]:
        """The pass's requests, in slot order (a prefill pass has one)."""
        reqs = self.row_request[self.start[p] : self.start[p + 1]].tolist()
        return list(dict.fromkeys(reqs))

    def first_tokens_of(self, p: int) -> list[int]:
        """The requests whose first output token this pass gives (their prompt ends here)."""
        lo, hi = self.start[p], self.start[p + 1]
        return self.row_request[lo:hi][self.row_first[lo:hi]].tolist()

    def decoders_of(self, p: int) -> list[int]:
        """The requests this pass gives a decode token, in slot order."""
        lo, hi = self.start[p], self.start[p + 1]
        decoding = self.row_phase[lo:hi] == DECODE
        return self.row_request[lo:hi][decoding].tolist()

    def outputs(self, p: int) -> int:
        """Tokens whose logits the pass's LM head computes: its first tokens and decode tokens."""
        lo, hi = self.start[p], self.start[p + 1]
        return int(self.row_first[lo:hi].sum() + (self.row_phase[lo:hi] == DECODE).sum())

    @cached_property
    def kv_resident(self) -> np.ndarray:
        """int64 [P]: tokens in the KV cache during each pass: of every request that has run a
        pass and not yet left (its last pass is this one or later), all its tokens so far,
        this pass's included. A row adds one token from its pass to its request's last."""
        pass_of_row = np.repeat(np.arange(self.num_passes), np.diff(self.start))
        _, inverse = np.unique(self.row_request, return_inverse=True)
        last = np.zeros(int(inverse.max(initial=-1)) + 1, np.int64)
        np.maximum.at(last, inverse, pass_of_row)
        change = np.zeros(self.num_passes + 1, np.int64)
        np.add.at(change, pass_of_row, 1)
        np.add.at(change, last[inverse] + 1, -1)
        return np.cumsum(change[:-1])


@dataclass(frozen=True, eq=False, init=False)
class DemandSets(AccessSequence):
    """The run's access sequence (:class:`~specmd_sim.policies.context.AccessSequence`, which
    offline plug-ins are given as it is), with the checks made before a run.

    ``offsets`` are built with it; ``tokens`` and ``gates`` on first use, from the trace and
    passes it was built from, and so are ``keys`` where every pass has one token (a decode
    trace: each set is its row's routed experts, so the sizes are known without the keys). A
    compiled replay reads the keys a block of passes at a time (:meth:`keys_of_passes`) and a
    policy that reads no tokens or gates never builds them: arrays of the access sequence's
    length not allocated, and the trace's gates not read.
    """

    _largest: int  # the index of the (first) largest demand set

    def __init__(self, keys: np.ndarray | None, offsets: np.ndarray, trace: Trace,
                 passes: Passes, largest: int) -> None:  # fmt: skip
        """``keys``: None to build them on first use."""
        fields = {"offsets": offsets, "num_layers": trace.num_layers}
        if keys is not None:
            fields["keys"] = keys
        for name, value in (*fields.items(), ("_source", (trace, passes)), ("_largest", largest)):
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> np.ndarray:
        # called only for what the instance does not hold: keys, tokens and gates before first
        # use
        if name not in ("keys", "tokens", "gates"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        trace, passes = self.__dict__["_source"]
        if name == "keys":
            keys = _assemble(trace, passes, values=False)[0]
            object.__setattr__(self, "keys", keys)
            return keys
        _, tokens, gates, _, _ = _assemble(trace, passes, values=True)  # (not the keys again)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "gates", gates)
        return tokens if name == "tokens" else gates

    def keys_of_passes(self, lo: int, hi: int) -> np.ndarray:
        """The keys of passes ``[lo, hi)`` (int32, contiguous): a view of :attr:`keys` where
        they are built, else built for these passes alone."""
        a, b = self.offsets[lo * self.num_layers], self.offsets[hi * self.num_layers]
        if "keys" in self.__dict__:
            return self.keys[a:b]
        trace, passes = self._source  # (one token a pass: pass p's set is row p's ids)
        return _row_keys(trace, passes.rows[lo:hi])

    def max_layer_demand(self) -> tuple[int, int, int]:
        """(size, pass, layer) of the largest demand set (the first of them)."""
        i = self._largest
        size = int(self.offsets[i + 1] - self.offsets[i])
        return size, i // self.num_layers, i % self.num_layers


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
    ids, admit = _admitted(trace, workload, share)
    served = np.flatnonzero(admit >= 0)
    decode = trace.phase == DECODE
    # the rows of each request: prompt rows, then decode rows, each in trace order
    order = np.lexsort((served, decode[served], admit[served]))
    by_request = served[order]
    n = ids.size
    prompt_n = np.bincount(admit[served], ~decode[served], n).astype(np.int64)
    length = np.bincount(admit[served], minlength=n).astype(np.int64)
    begin = np.cumsum(length) - length
    if kv_pool_tokens is not None and n and int(length.max()) > kv_pool_tokens:
        r = int(np.argmax(length))
        raise SpecmdError(
            f"workload.kv_cache: wait: expected every request's KV cache to fit the pool that "
            f"cache.capacity leaves ({kv_pool_tokens} tokens), got request {int(ids[r])} with "
            f"{int(length[r])} tokens; lower cache.capacity or use kv_cache: evict"
        )
    budget_step = workload.max_tokens_per_step or int(length.sum()) + 1
    chunk = workload.prefill_chunk_tokens or budget_step
    done = np.zeros(n, np.int64)  # tokens of each request run so far
    running: list[int] = []
    reserved, waiting = 0, 0  # whole lengths of the running requests; next to join
    taken: list[tuple[int, int, int]] = []  # (request, first token index, count), step by step
    steps: list[int] = []  # taken entries before each step
    while waiting < n or running:
        steps.append(len(taken))
        budget = budget_step
        for r in running:
            if budget == 0:
                break
            count = 1 if done[r] >= prompt_n[r] else min(prompt_n[r] - done[r], chunk, budget)
            taken.append((r, int(done[r]), int(count)))
            budget -= count
        while waiting < n and len(running) < workload.batch_size and budget > 0:
            r = waiting
            if kv_pool_tokens is not None and reserved + length[r] > kv_pool_tokens:
                break
            count = min(prompt_n[r], chunk, budget) if prompt_n[r] else 1
            taken.append((r, 0, int(count)))
            budget -= count
            running.append(r)
            reserved += int(length[r])
            waiting += 1
        for r, first, count in taken[steps[-1] :]:
            done[r] = first + count
        finished = [r for r in running if done[r] >= length[r]]
        reserved -= int(length[finished].sum()) if finished else 0
        running = [r for r in running if done[r] < length[r]]
    steps.append(len(taken))
    return _passes_of_steps(by_request, begin, prompt_n, ids, taken, steps)


def _passes_of_steps(
    by_request: np.ndarray,
    begin: np.ndarray,
    prompt_n: np.ndarray,
    ids: np.ndarray,
    taken: list[tuple[int, int, int]],
    steps: list[int],
) -> Passes:
    """The pass table of scheduler steps: ``taken[steps[p]:steps[p + 1]]`` are pass p's
    (request, first token index, count) entries, over each request's rows ``by_request[
    begin[r]:]`` (prompt rows first)."""
    entries = np.array(taken, np.int64).reshape(-1, 3)
    req, first, count = entries[:, 0], entries[:, 1], entries[:, 2]
    rows_of_entry = np.repeat(np.arange(req.size), count)
    index = first[rows_of_entry] + (
        np.arange(rows_of_entry.size) - np.repeat(np.cumsum(count) - count, count)
    )  # each row's index among its request's tokens
    row_req = req[rows_of_entry]
    sizes = np.add.reduceat(count, np.asarray(steps[:-1], np.int64)) if req.size else count
    start = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    first_row = start[:-1]
    position = index + 1
    dec = index >= prompt_n[row_req]
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
        first_token=np.logical_or.reduceat(~dec & (position == prompt_n[row_req]), first_row),
        row_request=ids[row_req].astype(np.int32),
        attended=np.add.reduceat(position, first_row).astype(np.int64),
        kv_tokens=kv.astype(np.int64),
        joins=np.logical_or.reduceat(position == 1, first_row),
        row_phase=np.where(dec, DECODE, PREFILL).astype(np.uint8),
        row_first=~dec & (position == prompt_n[row_req]),
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


_CHUNK = 1 << 18
"""Entries (rows x layers x top-k) and union cells (batched passes x layers x experts) handled
at once by :func:`build_demand`: its temporaries stay a few MiB each, whatever the trace's
length (large ones page in slowly, and would add to the demand sets' own memory)."""


def build_demand(trace: Trace, passes: Passes) -> DemandSets:
    """The demand sets of every (pass, layer): their offsets now, and their keys too unless
    every pass has one token; their tokens and gates on first use (:class:`DemandSets`)."""
    if passes.rows.size == passes.num_passes:  # one token a pass: sizes from the routed ids
        offsets, largest = _row_offsets(trace, passes)
        return DemandSets(None, offsets, trace, passes, largest)
    keys, _, _, offsets, largest = _assemble(trace, passes, values=False)
    return DemandSets(keys, offsets, trace, passes, largest)


def _row_offsets(trace: Trace, passes: Passes) -> tuple[np.ndarray, int]:
    """The offsets of single-token passes' demand sets (each its row's routed ids) and the
    index of the (first) largest, counted without building the sets."""
    num_layers = trace.num_layers
    sizes = np.zeros(passes.num_passes * num_layers + 1, np.int64)  # the sizes, then summed
    if not trace.padded:  # every set has top-k keys
        sizes[1:] = trace.top_k
    else:
        for lo, hi in _chunks(passes, trace):
            routed = trace.experts[passes.rows[lo:hi]] >= 0
            into = sizes[lo * num_layers + 1 : hi * num_layers + 1]
            routed.sum(axis=2, out=into.reshape(hi - lo, num_layers))
    largest = int(np.argmax(sizes[1:])) if sizes.size > 1 else 0
    return np.cumsum(sizes, out=sizes), largest


def _row_keys(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The keys of single-token passes' demand sets, of the trace's ``rows`` (the passes'):
    each row's routed ids as stored (:func:`_row_sets`' keys, in one pass for a block)."""
    ids = trace.experts[rows]
    keys = _flat_keys(ids, trace.num_experts).reshape(-1)
    return keys[ids.reshape(-1) >= 0] if trace.padded else keys


def _flat_keys(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """Expert ids ``[..., L, k]`` as flat keys ``layer * num_experts + id`` (int32); the
    caller drops the padding's (ids -1)."""
    keys = np.empty(ids.shape, np.int32)
    layer_base = np.arange(ids.shape[-2], dtype=np.int32) * num_experts
    np.add(ids, layer_base[:, None], out=keys)
    return keys


def _assemble(
    trace: Trace, passes: Passes, values: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The demand sets' keys, or with ``values`` their tokens and gates (the keys are built
    by then), their offsets, and the index of the (first) largest set; the arrays not asked for
    are empty. Chunk by chunk of passes (:data:`_CHUNK`), written into arrays sized for every
    entry of the passes' rows (unions only shrink them); the results are their first entries,
    views whose untouched tail takes no memory."""
    num_layers = trace.num_layers
    bound = passes.rows.size * num_layers * trace.top_k
    lengths = (0, bound, bound) if values else (bound, 0, 0)
    dtypes = (np.int32, np.int32, np.float32)
    outs = [np.empty(n, dtype) for n, dtype in zip(lengths, dtypes, strict=True)]
    offsets = np.zeros(passes.num_passes * num_layers + 1, np.int64)  # the sizes, then summed
    end = 0
    for lo, hi in _chunks(passes, trace):
        part = _chunk_sets(trace, passes, lo, hi, values)
        n = part[0].size
        for out, got in zip(outs, part[:3], strict=True):
            if out.size:
                out[end : end + n] = got
        offsets[lo * num_layers + 1 : hi * num_layers + 1] = part[3]
        end += n
    # (before the sizes are summed: no array of them is made)
    largest = int(np.argmax(offsets[1:])) if offsets.size > 1 else 0
    np.cumsum(offsets, out=offsets)
    return outs[0][:end], outs[1][:end], outs[2][:end], offsets, largest


_Sets = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Demand sets of consecutive (pass, layer)s: keys, tokens, gates, and each one's size."""


def _chunks(passes: Passes, trace: Trace) -> Iterator[tuple[int, int]]:
    """Runs ``[lo, hi)`` of consecutive passes of about :data:`_CHUNK` entries and cells (one
    pass at least): a batched pass counts its dense table of experts per layer too."""
    rows = np.diff(passes.start)
    k, num_experts = trace.top_k, trace.num_experts
    work = np.where(rows == 1, k, np.maximum(rows * k, num_experts)) * trace.num_layers
    total = np.concatenate(([0], np.cumsum(work)))
    lo = 0
    while lo < passes.num_passes:
        hi = max(lo + 1, int(np.searchsorted(total, total[lo] + _CHUNK, "right")) - 1)
        yield lo, hi
        lo = hi


def _chunk_sets(trace: Trace, passes: Passes, lo: int, hi: int, values: bool) -> _Sets:
    """The demand sets of passes ``[lo, hi)``: a single-token pass's are its rows as stored
    (:func:`_row_sets`), a batched pass's the unions of its rows (:func:`_union_sets`).
    Without ``values``, single-token passes' gates are not read (their order does not depend
    on them) and their tokens and gates are placeholders."""
    rows = passes.rows[passes.start[lo] : passes.start[hi]]
    ids = trace.experts[rows]
    sizes = np.diff(passes.start[lo : hi + 1])
    single = sizes == 1
    if single.all():
        if not values:  # the keys alone
            return _row_sets(ids, None, trace.num_experts, values=False)
        gates_read = None if trace.gates is None else trace.gates[rows]
        return _row_sets(ids, gates_read, trace.num_experts)
    gates = None if trace.gates is None else trace.gates[rows]
    pass_of_row = np.repeat(np.arange(hi - lo), sizes)
    if not single.any():
        return _union_sets(ids, gates, pass_of_row, hi - lo, trace.num_experts)
    one = single[pass_of_row]  # the rows of the single-token passes
    batched = ~single
    rank = (np.cumsum(batched) - 1)[pass_of_row[~one]]  # among the chunk's batched passes
    num_experts = trace.num_experts
    rows_as_stored = _row_sets(ids[one], _rows(gates, one), num_experts)
    unions = _union_sets(ids[~one], _rows(gates, ~one), rank, int(batched.sum()), num_experts)
    parts = ((np.flatnonzero(single), rows_as_stored), (np.flatnonzero(batched), unions))
    return _interleave(parts, hi - lo, trace.num_layers)


def _interleave(parts: tuple[tuple[np.ndarray, _Sets], ...], passes: int, num_layers: int) -> _Sets:
    """The sets of ``passes`` passes from parts that each hold the sets of some of them (their
    indices, in order): every part's (pass, layer)s scattered to their places."""
    segments = [(p[:, None] * num_layers + np.arange(num_layers)).reshape(-1) for p, _ in parts]
    counts = np.empty(passes * num_layers, np.int64)
    for seg, (_, sets) in zip(segments, parts, strict=True):
        counts[seg] = sets[3]
    offsets = np.cumsum(counts) - counts
    out = [np.empty(int(counts.sum()), dtype) for dtype in (np.int32, np.int32, np.float32)]
    for seg, (_, sets) in zip(segments, parts, strict=True):
        size = sets[3]
        at = np.repeat(offsets[seg] - (np.cumsum(size) - size), size) + np.arange(sets[0].size)
        for array, values in zip(out, sets[:3], strict=True):
            array[at] = values
    return out[0], out[1], out[2], counts


def _rows(gates: np.ndarray | None, which: np.ndarray) -> np.ndarray | None:
    return None if gates is None else gates[which]


def _row_sets(
    ids: np.ndarray, gates: np.ndarray | None, num_experts: int, values: bool = True
) -> _Sets:
    """The demand sets of single-token passes (``ids`` [passes, L, k]): each row as stored;
    without ``values``, their tokens and gates are left empty."""
    num_layers, k = ids.shape[1], ids.shape[2]
    keys = _flat_keys(ids, num_experts)
    gate = None
    if values:
        gate = np.full(ids.shape, np.nan, np.float32) if gates is None else gates
    valid = ids >= 0
    if valid.all():  # no padding: the rows as they are, without a copy
        counts = np.full(ids.shape[0] * num_layers, k, np.int64)
        keys = keys.reshape(-1)
        gate = None if gate is None else gate.reshape(-1)
    else:
        counts = valid.sum(axis=2, dtype=np.int64).reshape(-1)
        keys = keys[valid]
        gate = None if gate is None else gate[valid]
    if gate is None:
        return keys, np.zeros(0, np.int32), np.zeros(0, np.float32), counts
    return keys, np.ones(keys.size, np.int32), gate, counts


def _union_sets(
    ids: np.ndarray, gates: np.ndarray | None, pass_of_row: np.ndarray, passes: int,
    num_experts: int,
) -> _Sets:  # fmt: skip
    """The demand sets of ``passes`` batched passes, from their rows' ``ids`` [rows, L, k]
    (and ``gates``) and each row's pass: per (pass, layer), the distinct experts ordered as the
    module docstring says, with their token counts and highest gates (NaN without gates).

    Each (pass, layer, expert) is a cell of a dense table: counts by ``bincount``, the highest
    gate (or best slot rank) by ``maximum.at`` (``minimum.at``), as the pass's rows give them
    in order; then one sort of the present cells, by a key packing (pass and layer, order
    value, expert)."""
    num_layers, k = ids.shape[1], ids.shape[2]
    segments = passes * num_layers
    valid = ids >= 0
    segment = (pass_of_row[:, None] * num_layers + np.arange(num_layers))[:, :, None]
    cell = (segment * num_experts + ids)[valid]
    count = np.bincount(cell, minlength=segments * num_experts)
    present = np.flatnonzero(count > 0)  # (faster on bools)
    if gates is None:
        rank = np.full(count.size, k, np.int64)
        np.minimum.at(rank, cell, np.broadcast_to(np.arange(k), ids.shape)[valid])
        most = int(count.max())  # fewest tokens first within a rank, as a value >= 0
        value = rank[present] * (most + 1) + (most - count[present])
        value_bits = (k * (most + 1) - 1).bit_length()
        best = None
    else:
        gate = gates[valid]
        best = np.full(count.size, -np.inf, np.float32)
        np.maximum.at(best, cell, np.where(np.isnan(gate), np.float32(-np.inf), gate))
        value, value_bits = _descending(best[present]), 32
    expert_bits = (num_experts - 1).bit_length()
    shift = value_bits + expert_bits
    # a chunk has at most max(L, _CHUNK / E) segments, and a pass no more tokens than the trace
    assert (segments - 1).bit_length() + shift <= 63, "the sort key fits an int64"
    segment_of = present // num_experts
    key = np.sort((segment_of << shift) | (value << expert_bits) | (present % num_experts))
    segment_of = key >> shift
    expert = key & ((1 << expert_bits) - 1)
    cell = segment_of * num_experts + expert
    keys = ((segment_of % num_layers) * num_experts + expert).astype(np.int32)
    if best is None:
        gate = np.full(keys.size, np.nan, np.float32)
    else:
        gate = best[cell]
        gate[np.isinf(gate)] = np.nan
    sizes = np.bincount(segment_of, minlength=segments).astype(np.int64)
    return keys, count[cell].astype(np.int32), gate, sizes


def _descending(values: np.ndarray) -> np.ndarray:
    """float32 ``values`` (no NaN) as int64 keys in [0, 2**32), ascending for descending
    values; -0.0 and 0.0 are equal, as in a float comparison."""
    bits = (values + np.float32(0)).view(np.int32).astype(np.int64)  # -0.0 + 0.0 = 0.0
    ascending = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return (1 << 31) - 1 - ascending
