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

from collections import deque
from dataclasses import dataclass

import numpy as np

from specmd_sim.config import WorkloadConfig
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

    @property
    def num_passes(self) -> int:
        return int(self.request.size)

    def tokens(self, p: int) -> int:
        return int(self.start[p + 1] - self.start[p])

    def requests_of(self, p: int) -> list[int]:
        """The pass's requests, in slot order (a prefill pass has one)."""
        reqs = self.row_request[self.start[p] : self.start[p + 1]].tolist()
        return list(dict.fromkeys(reqs))


@dataclass(frozen=True, eq=False)
class DemandSets(AccessSequence):
    """The run's access sequence (:class:`~specmd_sim.policies.context.AccessSequence`, which
    offline plug-ins are given as it is), with the checks made before a run."""

    def max_layer_demand(self) -> tuple[int, int, int]:
        """(size, pass, layer) of the largest demand set."""
        sizes = np.diff(self.offsets)
        i = int(np.argmax(sizes))
        return int(sizes[i]), i // self.num_layers, i % self.num_layers


def build_passes(trace: Trace, workload: WorkloadConfig, share: tuple[int, int] = (0, 1)) -> Passes:
    """The pass table; ``share = (g, n)`` keeps every n-th request from the g-th on, in arrival
    order (GPU g's requests when n GPUs serve them round robin)."""
    order = np.argsort(trace.request, kind="stable")
    req_sorted = trace.request[order]
    bounds = np.flatnonzero(np.diff(req_sorted)) + 1
    groups = np.split(order, bounds)
    groups.sort(key=lambda g: int(g[0]))  # requests in order of first appearance
    if workload.requests is not None:
        keep = set(workload.requests)
        groups = [g for g in groups if int(trace.request[g[0]]) in keep]
    if workload.max_requests is not None:
        groups = groups[: workload.max_requests]
    groups = groups[share[0] :: share[1]]
    table = _PassTable()
    queue = deque(groups)
    active: list[tuple[int, np.ndarray, int]] = []  # (request, decode rows, prompt length)
    done: dict[int, int] = {}  # request -> tokens processed so far
    while queue or active:
        while queue and len(active) < workload.batch_size:
            g = queue.popleft()
            req = int(trace.request[g[0]])
            prefill = g[trace.phase[g] == PREFILL]
            decode = g[trace.phase[g] == DECODE]
            step = workload.prefill_chunk_tokens or max(prefill.size, 1)
            done[req] = 0
            for lo in range(0, prefill.size, step):
                part = prefill[lo : lo + step]
                table.add(part, [req] * part.size, PREFILL, done, part.size == prefill.size - lo)
            if decode.size:
                active.append((req, decode, 0))
        if active:
            rows = np.array([dec[i] for _, dec, i in active], np.int64)
            table.add(rows, [req for req, _, _ in active], DECODE, done, False)
            active = [(r, dec, i + 1) for r, dec, i in active if i + 1 < dec.size]
    return table.build()


class _PassTable:
    """Accumulates passes; ``add`` advances each member request's processed-token count."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.row_request: list[int] = []
        self.sizes: list[int] = []
        self.request: list[int] = []
        self.phase: list[int] = []
        self.context: list[int] = []
        self.first: list[bool] = []
        self.attended: list[int] = []
        self.kv_tokens: list[int] = []
        self.joins: list[bool] = []

    def add(
        self, rows: np.ndarray, reqs: list[int], phase: int, done: dict[int, int], first: bool
    ) -> None:
        members = list(dict.fromkeys(reqs))
        joins = any(done[r] == 0 for r in members)
        attended = 0
        for r in reqs:
            done[r] += 1
            attended += done[r]
        self.rows.append(rows)
        self.row_request.extend(reqs)
        self.sizes.append(rows.size)
        self.request.append(members[0])
        self.phase.append(phase)
        self.context.append(done[members[0]])
        self.first.append(first)
        self.attended.append(attended)
        self.kv_tokens.append(sum(done[r] for r in members))
        self.joins.append(joins)

    def build(self) -> Passes:
        return Passes(
            rows=np.concatenate(self.rows).astype(np.int64) if self.rows else np.zeros(0, np.int64),
            start=np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int64),
            request=np.asarray(self.request, np.int32),
            phase=np.asarray(self.phase, np.uint8),
            context_end=np.asarray(self.context, np.int64),
            first_token=np.asarray(self.first, bool),
            row_request=np.asarray(self.row_request, np.int32),
            attended=np.asarray(self.attended, np.int64),
            kv_tokens=np.asarray(self.kv_tokens, np.int64),
            joins=np.asarray(self.joins, bool),
        )


def build_demand(trace: Trace, passes: Passes) -> DemandSets:
    num_layers, num_experts = trace.num_layers, trace.num_experts
    layer_base = (np.arange(num_layers, dtype=np.int32) * num_experts)[:, None]
    key_parts: list[np.ndarray] = []
    token_parts: list[np.ndarray] = []
    gate_parts: list[np.ndarray] = []
    counts = np.zeros(passes.num_passes * num_layers, np.int64)
    experts, gates = trace.experts, trace.gates
    for p in range(passes.num_passes):
        rows = passes.rows[passes.start[p] : passes.start[p + 1]]
        if rows.size == 1:
            e = experts[rows[0]].astype(np.int32)  # [L, k], distinct, gate-ordered
            valid = e >= 0
            key_parts.append((e + layer_base)[valid])
            token_parts.append(np.ones(int(valid.sum()), np.int32))
            g = np.full(e.shape, np.nan, np.float32) if gates is None else gates[rows[0]]
            gate_parts.append(g[valid])
            counts[p * num_layers : (p + 1) * num_layers] = valid.sum(axis=1)
            continue
        for layer in range(num_layers):
            ids, n, g = _union(experts[rows, layer], None if gates is None else gates[rows, layer])
            key_parts.append(ids + layer * num_experts)
            token_parts.append(n)
            gate_parts.append(g)
            counts[p * num_layers + layer] = ids.size
    keys = np.concatenate(key_parts).astype(np.int32) if key_parts else np.zeros(0, np.int32)
    tokens = np.concatenate(token_parts).astype(np.int32) if token_parts else keys.copy()
    gate = np.concatenate(gate_parts).astype(np.float32) if gate_parts else np.zeros(0, np.float32)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return DemandSets(keys=keys, tokens=tokens, gates=gate, offsets=offsets, num_layers=num_layers)


def _union(ids: np.ndarray, gates: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct experts of a [tokens, k] block, ordered as the module docstring says, with
    their token counts and highest gates (NaN without gates)."""
    flat = ids.reshape(-1).astype(np.int64)
    rank = np.tile(np.arange(ids.shape[1]), ids.shape[0])
    valid = flat >= 0
    flat, rank = flat[valid], rank[valid]
    uniq, inverse, count = np.unique(flat, return_inverse=True, return_counts=True)
    if gates is not None:
        g = gates.reshape(-1)[valid].astype(np.float64)
        g = np.where(np.isnan(g), -np.inf, g)
        best = np.full(uniq.size, -np.inf)
        np.maximum.at(best, inverse, g)
        order = np.lexsort((uniq, -best))
        best_gate = best[order]
    else:
        best_rank = np.full(uniq.size, np.iinfo(np.int64).max)
        np.minimum.at(best_rank, inverse, rank)
        order = np.lexsort((uniq, -count, best_rank))
        best_gate = np.full(uniq.size, np.nan)
    best_gate = np.where(np.isinf(best_gate), np.nan, best_gate).astype(np.float32)
    return uniq[order].astype(np.int32), count[order].astype(np.int32), best_gate
