"""Passes and demand sets: how a trace becomes the sequence of cache accesses.

A *pass* is one forward pass through all MoE layers: one decode step of up to
``workload.batch_size`` active requests (one token each), or one prefill chunk of
``workload.prefill_chunk_tokens`` prompt tokens (0 = the whole prompt) of one request.

Which tokens each pass takes is the scheduler's (:mod:`.schedule`): the table is formed before
the run (closed loop, or the zero-time schedule of arrivals), so that both engines and offline
policies see the same access sequence, or step by step during a timed run whose scheduler admits
only what has arrived (``workload.schedule: online``), into arrays that grow. Requests are
admitted in order of first appearance in the trace (their arrival order) into ``batch_size``
slots: whenever a slot is free, the next request joins and its prefill chunks run as passes of
their own (prefill first); then every decode pass takes the next token of each active request,
in the order they joined; a request leaves after its last token. With ``batch_size: 1`` this is
one request after another.

The *demand set* of (pass, layer) is the union of its tokens' selections, ordered by highest
gate first (the max over the pass's tokens; without gates, the best slot rank, then the number
of tokens), ties by expert id. For a single-token pass it is the row as stored. The
concatenation of all demand sets in (pass, layer) order is the run's *access sequence*, which
both engines follow and offline policies (Belady) read in advance.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specmd_sim.policies.context import AccessSequence
from specmd_sim.traces.trace import DECODE, Trace


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
    # int32 [P]: requests preempted when the pass's step was formed (kv_cache: paged; else 0)
    preempted: np.ndarray

    @property
    def num_passes(self) -> int:
        return int(self.request.size)

    @cached_property
    def pass_tokens(self) -> np.ndarray:
        """int64 [P]: each pass's tokens."""
        return np.diff(self.start)

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
