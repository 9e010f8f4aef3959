"""The vectorised pass table, demand sets, routing counts and expert-id checks of a scenario
against straightforward references that follow the docstrings of ``scenario/passes.py`` pass by
pass, (pass, layer) by (pass, layer) and row by row.

The traces are small and awkward on purpose: requests interleaved in the trace and with ids out
of order, requests without prefill or without decode tokens, padding (-1), gates with ties,
NaN, -0.0 and infinities, or no gates at all. The chunk sizes are shrunk so that chunks end
inside runs of single-token and batched passes.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections import deque

import numpy as np
import pytest

from specmd_sim.config import WorkloadConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario import passes as passes_module
from specmd_sim.scenario import placement
from specmd_sim.scenario.passes import Passes, build_demand
from specmd_sim.scenario.schedule import build_passes
from specmd_sim.traces import make_trace
from specmd_sim.traces import trace as trace_module
from specmd_sim.traces.trace import DECODE, PREFILL, Trace

Table = list[tuple[list[int], list[int], list[int], list[bool]]]
"""Passes as rows: each pass's trace rows, their requests, their phases and whether each is
its request's last prompt token."""


def rows_by_request(
    trace: Trace, workload: WorkloadConfig, share: tuple[int, int]
) -> tuple[dict[int, list[int]], list[int]]:
    """Each request's rows, and the requests served, in order of first appearance."""
    rows_of: dict[int, list[int]] = {}
    for row, request in enumerate(trace.request.tolist()):
        rows_of.setdefault(request, []).append(row)
    order = list(rows_of)  # in order of first appearance
    if workload.requests is not None:
        order = [r for r in order if r in workload.requests]
    if workload.max_requests is not None:
        order = order[: workload.max_requests]
    return rows_of, order[share[0] :: share[1]]


def reference_passes(
    trace: Trace, workload: WorkloadConfig, share: tuple[int, int] = (0, 1),
    pool: int | None = None,
) -> Passes:  # fmt: skip
    """The pass table as the module docstring tells it: one admission or decode step at a time."""
    if workload.scheduler == "continuous":
        return passes_of(reference_continuous(trace, workload, share, pool))
    rows_of, order = rows_by_request(trace, workload, share)
    queue = deque(order)
    table: Table = []
    active: list[tuple[int, list[int]]] = []  # joined requests and their decode rows left
    while queue or active:
        while queue and len(active) < workload.batch_size:
            request = queue.popleft()
            prefill = [r for r in rows_of[request] if trace.phase[r] == PREFILL]
            decode = [r for r in rows_of[request] if trace.phase[r] == DECODE]
            step = workload.prefill_chunk_tokens or max(len(prefill), 1)
            for lo in range(0, len(prefill), step):
                part = prefill[lo : lo + step]
                last = lo + step >= len(prefill)
                firsts = [last and i == len(part) - 1 for i in range(len(part))]
                table.append((part, [request] * len(part), [PREFILL] * len(part), firsts))
            if decode:
                active.append((request, decode))
        if active:
            rows = [d.pop(0) for _, d in active]
            table.append((rows, [r for r, _ in active], [DECODE] * len(rows), [False] * len(rows)))
            active = [(r, d) for r, d in active if d]
    return passes_of(table)


def reference_continuous(
    trace: Trace, workload: WorkloadConfig, share: tuple[int, int], pool: int | None
) -> Table:
    """Continuous batching token by token: a step hands out one token at a time from its
    budget, first to the running requests in join order (a decode token, or prompt tokens up
    to the chunk), then to waiting requests, which join while the batch has room (and, with a
    KV pool, while their whole lengths fit)."""
    rows_of, order = rows_by_request(trace, workload, share)
    # each request's rows, prompt first; and its prompt length
    todo = {
        r: [x for x in rows_of[r] if trace.phase[x] == PREFILL]
        + [x for x in rows_of[r] if trace.phase[x] == DECODE]
        for r in order
    }
    prompt = {r: sum(trace.phase[x] == PREFILL for x in rows_of[r]) for r in order}
    done = dict.fromkeys(order, 0)
    waiting, running = deque(order), []
    budget_step = workload.max_tokens_per_step or 10**9
    chunk = workload.prefill_chunk_tokens or 10**9
    table: Table = []
    while waiting or running:
        step: tuple[list[int], list[int], list[int], list[bool]] = ([], [], [], [])
        budget = budget_step

        def take(r: int, most: int, budget: int, step: tuple = step) -> int:
            """Hand ``r`` up to ``most`` tokens of ``budget``; what is left of it."""
            for _ in range(most):
                if not budget or not todo[r]:
                    break
                x = todo[r].pop(0)
                done[r] += 1
                for column, value in zip(step, (x, r, int(trace.phase[x]),
                                                trace.phase[x] == PREFILL and done[r] == prompt[r]),
                                         strict=True):  # fmt: skip
                    column.append(value)
                budget -= 1
                if trace.phase[x] == DECODE or done[r] == prompt[r]:
                    break  # one decode token a step; a prompt's end ends the request's share
            return budget

        for r in list(running):
            if not budget:
                break
            budget = take(r, 1 if done[r] >= prompt[r] else chunk, budget)
        while waiting and len(running) < workload.batch_size and budget:
            r = waiting[0]
            if pool is not None and sum(len(rows_of[x]) for x in running) + len(rows_of[r]) > pool:
                break
            running.append(waiting.popleft())
            budget = take(r, chunk if prompt[r] else 1, budget)
        table.append(step)
        running = [r for r in running if todo[r]]
    return table


def passes_of(table: Table) -> Passes:
    """The Passes of a table, every per-pass field counted row by row."""
    done: dict[int, int] = {}
    fields: dict[str, list[int]] = {name: [] for name in ("context", "attended", "kv", "joins")}
    for _, requests, _, _ in table:
        fields["joins"].append(any(r not in done for r in requests))
        positions = []
        for r in requests:
            done[r] = done.get(r, 0) + 1
            positions.append(done[r])
        fields["context"].append(done[requests[0]])
        fields["attended"].append(sum(positions))
        fields["kv"].append(sum(done[r] for r in dict.fromkeys(requests)))
    sizes = [len(rows) for rows, _, _, _ in table]
    return Passes(
        rows=np.array([r for rows, _, _, _ in table for r in rows], np.int64),
        start=np.array([0, *np.cumsum(sizes, dtype=np.int64)], np.int64),
        request=np.array([requests[0] for _, requests, _, _ in table], np.int32),
        phase=np.array([DECODE if DECODE in phases else PREFILL for _, _, phases, _ in table],
                       np.uint8),
        context_end=np.array(fields["context"], np.int64),
        first_token=np.array([any(firsts) for _, _, _, firsts in table], bool),
        row_request=np.array([r for _, requests, _, _ in table for r in requests], np.int32),
        attended=np.array(fields["attended"], np.int64),
        kv_tokens=np.array(fields["kv"], np.int64),
        joins=np.array(fields["joins"], bool),
        row_phase=np.array([ph for _, _, phases, _ in table for ph in phases], np.uint8),
        row_first=np.array([f for _, _, _, firsts in table for f in firsts], bool),
        preempted=np.zeros(len(table), np.int32),
    )  # fmt: skip


def reference_sets(trace: Trace, passes: Passes) -> dict[str, np.ndarray]:
    """Keys, tokens, gates and offsets of the demand sets, one (pass, layer) at a time."""
    keys: list[int] = []
    tokens: list[int] = []
    gates: list[float] = []
    offsets = [0]
    for p in range(passes.num_passes):
        rows = passes.rows[passes.start[p] : passes.start[p + 1]].tolist()
        for layer in range(trace.num_layers):
            for expert, count, gate in _reference_set(trace, rows, layer):
                keys.append(layer * trace.num_experts + expert)
                tokens.append(count)
                gates.append(gate)
            offsets.append(len(keys))
    return {
        "keys": np.array(keys, np.int32),
        "tokens": np.array(tokens, np.int32),
        "gates": np.array(gates, np.float32),
        "offsets": np.array(offsets, np.int64),
    }


def _reference_set(trace: Trace, rows: list[int], layer: int) -> list[tuple[int, int, float]]:
    """(expert, tokens, gate) of one demand set: a single row as stored; a union ordered by the
    highest gate (NaN counts as -inf; of 0.0 and -0.0 the later is kept), without gates by the
    best slot, then the most tokens; ties by expert id."""
    ids = trace.experts[rows, layer].tolist()
    gates = trace.gates[rows, layer].tolist() if trace.gates is not None else None
    if len(rows) == 1:
        row_gates = gates[0] if gates is not None else [float("nan")] * len(ids[0])
        return [(e, 1, g) for e, g in zip(ids[0], row_gates, strict=True) if e >= 0]
    best: dict[int, list[float]] = {}  # expert -> [tokens, highest gate, best slot]
    for i, row in enumerate(ids):
        for slot, expert in enumerate(row):
            if expert < 0:
                continue
            gate = -np.inf if gates is None or np.isnan(gates[i][slot]) else gates[i][slot]
            entry = best.setdefault(expert, [0, -np.inf, slot])
            entry[0] += 1
            entry[2] = min(entry[2], slot)
            if gate >= entry[1]:  # the last of equal gates, as np.maximum keeps it
                entry[1] = gate
    if gates is None:
        order = sorted(best, key=lambda e: (best[e][2], -best[e][0], e))
    else:
        order = sorted(best, key=lambda e: (-best[e][1], e))
    gate_of = {e: np.nan if gates is None or np.isinf(best[e][1]) else best[e][1] for e in best}
    return [(e, int(best[e][0]), gate_of[e]) for e in order]


def awkward_trace(seed: int, *, gates: bool = True, experts: int = 6, k: int = 3) -> Trace:
    """A few requests of random lengths, interleaved, with padding and awkward gates."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 7))
    ids = rng.choice(50, count, replace=False)
    lengths = rng.integers(0, 6, (count, 2))
    lengths[lengths.sum(axis=1) == 0, 0] = 1
    tokens = [
        [(int(r), PREFILL)] * p + [(int(r), DECODE)] * d
        for r, (p, d) in zip(ids, lengths, strict=True)
    ]
    rows: list[tuple[int, int]] = []
    while tokens:  # interleave: the next token of a random request (or of the first)
        i = int(rng.integers(len(tokens))) if rng.random() < 0.6 else 0
        rows.append(tokens[i].pop(0))
        tokens = [t for t in tokens if t]
    layers = 2
    routed = np.stack([rng.permutation(experts)[:k] for _ in range(len(rows) * layers)])
    routed = routed.reshape(len(rows), layers, k).astype(np.int16)
    pad = rng.random(routed.shape) < 0.2
    pad[:, :, 0] = False
    routed[pad] = -1
    weights = None
    if gates:
        weights = np.round(rng.random(routed.shape), 1).astype(np.float32)  # ties
        awkward = ((np.nan, 0.1), (-0.0, 0.1), (0.0, 0.1), (np.inf, 0.03), (-np.inf, 0.03))
        for value, share in awkward:
            weights[rng.random(routed.shape) < share] = value
    return make_trace(
        routed,
        model="olmoe-1b-7b",
        num_experts=experts,
        request=np.array([r for r, _ in rows], np.int32),
        phase=np.array([p for _, p in rows], np.uint8),
        gates=weights,
    )


def assert_identical(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, expected in want.items():
        actual = got[name]
        assert actual.dtype == expected.dtype, name
        np.testing.assert_array_equal(actual, expected, err_msg=name, strict=True)
        if expected.dtype.kind == "f":  # -0.0 and 0.0 too
            np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected), err_msg=name)


def fields_of(passes: Passes) -> dict[str, np.ndarray]:
    return {f.name: getattr(passes, f.name) for f in dataclasses.fields(passes)}


WORKLOADS = [
    {"batch_size": 1},
    {"batch_size": 1, "prefill_chunk_tokens": 1},  # one token a pass: keys built on first use
    {"batch_size": 1, "prefill_chunk_tokens": 0},
    {"batch_size": 2, "prefill_chunk_tokens": 2},
    {"batch_size": 3, "prefill_chunk_tokens": 0},
    {"batch_size": 5, "prefill_chunk_tokens": 3},
    {"batch_size": 2, "max_requests": 2},
    {"scheduler": "continuous"},
    {"scheduler": "continuous", "batch_size": 2, "prefill_chunk_tokens": 0},
    {"scheduler": "continuous", "batch_size": 3, "max_tokens_per_step": 2},
    {
        "scheduler": "continuous",
        "batch_size": 4,
        "max_tokens_per_step": 5,
        "prefill_chunk_tokens": 2,
    },
    {
        "scheduler": "continuous",
        "batch_size": 8,
        "max_tokens_per_step": 3,
        "prefill_chunk_tokens": 0,
        "max_requests": 3,
    },
]


@pytest.mark.parametrize("seed", range(24))
def test_passes_and_demand_sets_equal_the_references(seed: int, monkeypatch) -> None:
    monkeypatch.setattr(passes_module, "_CHUNK", 1 + 7 * (seed % 4))
    trace = awkward_trace(seed, gates=seed % 3 != 0)
    ids = np.unique(trace.request).tolist()
    workloads = [*WORKLOADS, {"batch_size": 2, "requests": tuple(ids[::2])}]
    for kw in workloads:
        workload = WorkloadConfig(**kw)
        for share in ((0, 1), (1, 2), (0, 3)):
            passes = build_passes(trace, workload, share)
            assert_identical(fields_of(passes), fields_of(reference_passes(trace, workload, share)))
            demand = build_demand(trace, passes)
            want = reference_sets(trace, passes)
            got = {n: getattr(demand, n) for n in ("keys", "tokens", "gates", "offsets")}
            assert_identical(got, want)
            if want["keys"].size:  # the first largest set
                sizes = np.diff(want["offsets"])
                i, layers = int(np.argmax(sizes)), trace.num_layers
                assert demand.max_layer_demand() == (sizes[i], i // layers, i % layers)


def test_tokens_and_gates_are_built_on_first_use() -> None:
    """A demand set's keys are built with it, its tokens and gates when first read (also in a
    copy sent to another process): what a compiled replay never reads is never built."""
    trace = awkward_trace(5)
    passes = build_passes(trace, WorkloadConfig(batch_size=2))
    demand = build_demand(trace, passes)
    assert not {"tokens", "gates"} & set(vars(demand))
    want = reference_sets(trace, passes)
    for sets in (pickle.loads(pickle.dumps(demand)), demand):
        got = {n: getattr(sets, n) for n in ("keys", "tokens", "gates", "offsets")}
        assert_identical(got, want)
    assert {"tokens", "gates"} <= set(vars(demand))
    with pytest.raises(AttributeError, match="no attribute 'token'"):
        demand.token  # noqa: B018 (only the two arrays are built on demand)


@pytest.mark.parametrize("seed", range(8))
def test_keys_of_one_token_passes_are_built_on_first_use_or_a_block_at_a_time(
    seed: int, monkeypatch
) -> None:
    """Where every pass has one token the offsets are counted without the keys; the keys of a
    run of passes are built for it alone (a compiled replay's blocks), or sliced from the keys
    once these are built; the sizes, their count and the largest set agree with the reference."""
    monkeypatch.setattr(passes_module, "_CHUNK", 1 + 5 * (seed % 3))
    trace = awkward_trace(seed, gates=seed % 2 == 0)
    passes = build_passes(trace, WorkloadConfig(batch_size=1, prefill_chunk_tokens=1))
    want = reference_sets(trace, passes)
    demand = build_demand(trace, passes)
    assert "keys" not in vars(demand)
    assert_identical({"offsets": demand.offsets}, {"offsets": want["offsets"]})
    assert demand.num_accesses == want["keys"].size
    sizes = np.diff(want["offsets"])
    i, layers = int(np.argmax(sizes)), trace.num_layers
    assert demand.max_layer_demand() == (sizes[i], i // layers, i % layers)
    rng = np.random.default_rng(seed)
    ranges = [(0, passes.num_passes), *(sorted(rng.integers(0, passes.num_passes + 1, 2))
                                        for _ in range(6))]  # fmt: skip
    for lo, hi in ranges:
        a, b = want["offsets"][lo * layers], want["offsets"][hi * layers]
        got = demand.keys_of_passes(lo, hi)
        assert got.dtype == np.int32 and np.array_equal(got, want["keys"][a:b])
    assert "keys" not in vars(demand)
    copy = pickle.loads(pickle.dumps(demand))  # (as sent to another process: still lazy)
    assert "keys" not in vars(copy) and np.array_equal(copy.keys, want["keys"])
    assert np.array_equal(demand.keys, want["keys"])  # built whole on first use
    for lo, hi in ranges:
        a, b = want["offsets"][lo * layers], want["offsets"][hi * layers]
        assert np.shares_memory(demand.keys_of_passes(lo, hi), demand.keys) or a == b


def test_union_of_a_batched_pass_by_hand() -> None:
    """Two requests of one token decoded together: expert 4 in both (gates 0.2, 0.5), 1 and 3
    tie at 0.3 (by id), 2 without a gate (NaN: last); the padded slot's gate is not read."""
    experts = np.array([[[4, 3, -1]], [[1, 4, 2]]], np.int16)
    gates = np.array([[[0.2, 0.3, 0.9]], [[0.3, 0.5, np.nan]]], np.float32)
    trace = make_trace(
        experts, model="olmoe-1b-7b", num_experts=6, gates=gates,
        request=np.array([0, 1], np.int32),
    )  # fmt: skip
    passes = build_passes(trace, WorkloadConfig(batch_size=2))
    assert passes.start.tolist() == [0, 2]
    demand = build_demand(trace, passes)
    assert demand.keys.tolist() == [4, 1, 3, 2]
    assert demand.tokens.tolist() == [2, 1, 1, 1]
    np.testing.assert_array_equal(demand.gates, np.array([0.5, 0.3, 0.3, np.nan], np.float32))
    assert demand.offsets.tolist() == [0, 4]


def test_routing_counts_count_every_routed_id_across_chunks(monkeypatch) -> None:
    monkeypatch.setattr(placement, "_COUNT_ENTRIES", 5)
    trace = awkward_trace(3)
    want = np.zeros(trace.num_layers * trace.num_experts, np.int64)
    for tok, layer, slot in np.argwhere(trace.experts >= 0):
        want[layer * trace.num_experts + int(trace.experts[tok, layer, slot])] += 1
    got = placement.routing_counts(trace)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("k", [3, 17])  # compared slot by slot; sorted (more than 16 slots)
def test_a_duplicate_id_is_found_in_a_later_chunk(k: int, monkeypatch) -> None:
    monkeypatch.setattr(trace_module, "_CHECK_ENTRIES", 2 * k)  # one row per chunk
    experts = np.tile(np.arange(k, dtype=np.int16), (5, 2, 1))
    experts[:, :, 1] = -1
    experts[3, 1, 2] = 0
    with pytest.raises(SpecmdError) as err:
        make_trace(experts, model="olmoe-1b-7b", num_experts=32)
    assert str(err.value).endswith(f"{experts[3, 1].tolist()} at token 3, layer 1")


@pytest.mark.parametrize("seed", range(12))
def test_continuous_passes_with_a_kv_pool_equal_the_reference(seed: int) -> None:
    """``kv_cache: wait``: a request joins only while the whole lengths of the running ones and
    its own fit the pool; the pool is drawn between the longest request and all of them."""
    trace = awkward_trace(seed)
    lengths = np.unique(trace.request, return_counts=True)[1]
    rng = np.random.default_rng(seed)
    for pool in sorted({int(lengths.max()), int(rng.integers(lengths.max(), lengths.sum() + 1))}):
        for kw in ({"batch_size": 8}, {"batch_size": 2, "max_tokens_per_step": 3}):
            workload = WorkloadConfig(scheduler="continuous", kv_cache="wait", **kw)
            passes = build_passes(trace, workload, kv_pool_tokens=pool)
            want = reference_passes(trace, workload, pool=pool)
            assert_identical(fields_of(passes), fields_of(want))


def test_kv_resident_counts_every_running_requests_tokens() -> None:
    """The KV cache of each pass, counted from the table: a request holds its tokens so far
    from its first pass through its last."""
    for seed in range(8):
        trace = awkward_trace(seed)
        for kw in ({"batch_size": 3}, {"scheduler": "continuous", "batch_size": 2}):
            passes = build_passes(trace, WorkloadConfig(**kw))
            last = {int(r): p for p in range(passes.num_passes) for r in passes.requests_of(p)}
            held: dict[int, int] = {}
            want = []
            for p in range(passes.num_passes):
                for r in passes.row_request[passes.start[p] : passes.start[p + 1]].tolist():
                    held[r] = held.get(r, 0) + 1
                want.append(sum(n for r, n in held.items() if last[r] >= p))
            assert passes.kv_resident.tolist() == want


def test_a_request_longer_than_the_kv_pool_is_refused() -> None:
    trace = awkward_trace(1)
    longest = int(np.unique(trace.request, return_counts=True)[1].max())
    workload = WorkloadConfig(scheduler="continuous", kv_cache="wait")
    with pytest.raises(SpecmdError, match=f"got request .* with {longest} tokens"):
        build_passes(trace, workload, kv_pool_tokens=longest - 1)
