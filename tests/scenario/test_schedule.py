"""The scheduler of ``scenario/schedule.py`` against straightforward references.

The steppers, driven with every request arrived, give the fixed tables; :class:`OnlineSchedule`
and :func:`zero_time_passes` give the table of a reference online scheduler written in the
style of ``reference_passes``/``reference_continuous`` (a deque of waiting requests, lists of
rows): each scheduler step is formed when it starts (at the end of the previous pass, or at the
next arrival when the server is idle) from the requests that have arrived by then, first come,
first served. The traces are the awkward ones of ``test_build_reference``; arrivals fall on
the grid of the passes' durations, so that a request often arrives exactly when a pass ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import pytest
from scenario.test_build_reference import (
    WORKLOADS,
    Table,
    assert_identical,
    awkward_trace,
    fields_of,
    passes_of,
    reference_sets,
    rows_by_request,
)

from specmd_sim.config import SimConfig, WorkloadConfig
from specmd_sim.scenario import passes as passes_module
from specmd_sim.scenario.passes import DemandSets, Passes, build_demand
from specmd_sim.scenario.schedule import (
    OnlineSchedule,
    Requests,
    SlotStepper,
    build_passes,
    closed_loop_steps,
    draw_arrivals,
    make_stepper,
    zero_time_passes,
)
from specmd_sim.traces import make_trace
from specmd_sim.traces.trace import DECODE, PREFILL, Trace

Duration = Callable[[int], float]
"""A pass's duration from its index in the run."""

SHARES = ((0, 1), (1, 2), (0, 3))
SLOT_WORKLOADS = [kw for kw in WORKLOADS if kw.get("scheduler") != "continuous"]


class ReferenceServer:
    """One GPU's requests on a clock: those waiting, in arrival order, the running ones, in
    the order they joined (with ``scheduler: slots``, those decoding), and each one's rows
    left (its prompt's first)."""

    def __init__(
        self,
        trace: Trace,
        workload: WorkloadConfig,
        share: tuple[int, int],
        arrivals: np.ndarray,
        pool: int | None,
    ) -> None:
        rows_of, order = rows_by_request(trace, workload, share)
        self.trace, self.workload, self.pool = trace, workload, pool
        self.arrival = dict(zip(order, np.asarray(arrivals, np.float64).tolist(), strict=True))
        self.length = {r: len(rows_of[r]) for r in order}
        self.prompt = {r: [x for x in rows_of[r] if trace.phase[x] == PREFILL] for r in order}
        self.decode = {r: [x for x in rows_of[r] if trace.phase[x] == DECODE] for r in order}
        self.left = {r: self.prompt[r] + self.decode[r] for r in order}
        self.waiting = deque(order)
        self.running: list[int] = []

    def arrived(self, now: float) -> bool:
        """Whether the next waiting request has arrived by ``now``."""
        return bool(self.waiting) and self.arrival[self.waiting[0]] <= now

    def pass_of(self, taken: list[tuple[int, list[int]]]) -> tuple:
        """A table's pass of (request, its rows) entries."""
        rows = [x for _, xs in taken for x in xs]
        requests = [r for r, xs in taken for _ in xs]
        phases = [int(self.trace.phase[x]) for x in rows]
        firsts = [p == PREFILL and x == self.prompt[r][-1]
                  for x, r, p in zip(rows, requests, phases, strict=True)]  # fmt: skip
        return rows, requests, phases, firsts

    def step(self, now: float) -> Table:
        """The passes of the step that starts at ``now``."""
        if self.workload.scheduler == "continuous":
            return self.continuous_step(now)
        return self.slot_step(now)

    def slot_step(self, now: float) -> Table:
        """While fewer than ``batch_size`` decode, the next arrived request joins and runs its
        prompt in chunks, a pass each; then a decode pass of every decoding request."""
        step: Table = []
        while self.arrived(now) and len(self.running) < self.workload.batch_size:
            r = self.waiting.popleft()
            prompt = self.prompt[r]
            chunk = self.workload.prefill_chunk_tokens or max(len(prompt), 1)
            for lo in range(0, len(prompt), chunk):
                step.append(self.pass_of([(r, prompt[lo : lo + chunk])]))
            del self.left[r][: len(prompt)]
            if self.left[r]:  # (one without decode tokens takes no slot)
                self.running.append(r)
        if self.running:
            step.append(self.pass_of([(r, [self.left[r].pop(0)]) for r in self.running]))
            self.running = [r for r in self.running if self.left[r]]
        return step

    def take(self, r: int, budget: int) -> list[int]:
        """Request ``r``'s next tokens: its next decode token, or its next prompt tokens (at
        most a chunk and ``budget``)."""
        prompt_left = max(len(self.left[r]) - len(self.decode[r]), 0)  # (decode rows: all left)
        chunk = self.workload.prefill_chunk_tokens or budget
        most = min(prompt_left, chunk, budget) if prompt_left else 1
        rows = self.left[r][:most]
        del self.left[r][:most]
        return rows

    def continuous_step(self, now: float) -> Table:
        """One pass: the running requests' next tokens, then arrived requests join while the
        batch, the budget and the KV pool have room for them."""
        budget = self.workload.max_tokens_per_step or 10**9
        taken: list[tuple[int, list[int]]] = []
        for r in self.running:
            if not budget:
                break
            taken.append((r, self.take(r, budget)))
            budget -= len(taken[-1][1])
        while budget and self.arrived(now) and len(self.running) < self.workload.batch_size:
            r = self.waiting[0]
            held = sum(self.length[x] for x in self.running)
            if self.pool is not None and held + self.length[r] > self.pool:
                break
            self.running.append(self.waiting.popleft())
            taken.append((r, self.take(r, budget)))
            budget -= len(taken[-1][1])
        self.running = [r for r in self.running if self.left[r]]
        return [self.pass_of(taken)]


def reference_online(
    trace: Trace,
    workload: WorkloadConfig,
    share: tuple[int, int],
    arrivals: np.ndarray,
    duration: Duration,
    pool: int | None = None,
) -> Table:
    """The passes an online scheduler forms, step by step on a clock: a step starts at the end
    of the previous pass (or, when nothing runs and the next request has not arrived, at its
    arrival), and admits only requests that have arrived by then, in arrival order (one that
    has not arrived blocks those behind it). ``arrivals``: the served requests' arrival times
    in admission order; ``duration``: each pass's, by its index."""
    server = ReferenceServer(trace, workload, share, arrivals, pool)
    table: Table = []
    clock = 0.0
    while server.waiting or server.running:
        if not server.running and not server.arrived(clock):
            clock = server.arrival[server.waiting[0]]  # idle: it waits for the next arrival
        for one in server.step(clock):  # formed when it starts; then its passes run
            assert one[0], "a pass has rows"
            table.append(one)
            clock += duration(len(table) - 1)
    return table


class Run:
    """An :class:`OnlineSchedule` driven as a timing engine drives it: a pass starts when the
    previous one ends, or when the last of its requests arrives (the engine waits for them);
    :meth:`OnlineSchedule.form` is called, at the end of the last pass formed, whenever every
    formed pass has run. Each call's passes, and the prefix of the table and its demand sets
    each call leaves, are kept to check that nothing formed moves."""

    def __init__(
        self,
        trace: Trace,
        workload: WorkloadConfig,
        arrivals: np.ndarray,
        duration: Duration,
        share: tuple[int, int] = (0, 1),
        pool: int | None = None,
    ) -> None:
        schedule = OnlineSchedule(trace, workload, arrivals, share, pool)
        arrival_of = dict(zip(schedule.requests.ids.tolist(), np.asarray(arrivals).tolist(),
                              strict=True))  # fmt: skip
        seen: list[tuple[int, int]] = []
        schedule.on_formed.append(lambda p0, p1: seen.append((p0, p1)))
        passes = schedule.passes
        views = (passes.rows, passes.start, passes.request, schedule.demand.offsets)
        self.formed: list[int] = []
        self.prefixes: list[dict[str, np.ndarray]] = []
        now, ran = 0.0, 0
        while True:
            if ran == passes.num_passes:
                formed = schedule.form(now)
                self.formed.append(formed)
                if formed == 0:
                    break
                p, layers = passes.num_passes, trace.num_layers
                self.prefixes.append(
                    {
                        "rows": passes.rows[: passes.start[p]].copy(),
                        "start": passes.start[: p + 1].copy(),
                        "kv_resident": passes.kv_resident[:p].copy(),
                        "offsets": schedule.demand.offsets[: p * layers + 1].copy(),
                    }
                )
            lo, hi = passes.start[ran], passes.start[ran + 1]
            latest = max(arrival_of[r] for r in passes.row_request[lo:hi].tolist())
            now = max(now, latest) + duration(ran)
            ran += 1
        held = (passes.rows, passes.start, passes.request, schedule.demand.offsets)
        assert all(a is b for a, b in zip(held, views, strict=True)), "the arrays stay"
        self.schedule = schedule
        self.callbacks = seen
        self.passes, self.demand = schedule.final()


def arrival_patterns(n: int, rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Arrival times of ``n`` requests of ``rows`` tokens in all, non-decreasing (FCFS), on the
    grid of 0.5 of the durations (:func:`durations`)."""
    bursts = np.arange(0, 2 * rows + 1, 2 * max(rows // 3, 1)) / 2
    return {
        "at zero": np.zeros(n),
        "spread": np.sort(rng.integers(0, 2 * rows + 1, n)) / 2,
        "bursts": np.sort(rng.choice(bursts, n)),
        "gaps": (np.arange(n) + 1) * (rows + 1) * 3.0,  # each has left before the next arrives
        "late": np.sort(rng.integers(4 * rows, 6 * rows + 1, n)) / 2,  # idle at the start
    }


def durations(seed: int) -> dict[str, Duration]:
    """Pass durations: none, constant, and random per pass (multiples of 0.5, some 0)."""
    drawn = np.random.default_rng(1000 + seed).choice([0.0, 0.5, 1.0, 2.5], 1000).tolist()
    return {"zero": lambda p: 0.0, "one": lambda p: 1.0, "random": lambda p: drawn[p]}


def served(trace: Trace, workload: WorkloadConfig, share: tuple[int, int]) -> int:
    return int(Requests.of(trace, workload, share).ids.size)


def workloads_of(trace: Trace, seed: int) -> list[tuple[WorkloadConfig, int | None]]:
    """:data:`WORKLOADS`, a selection of requests, and continuous batching with KV pools
    (``kv_cache: wait``) between the longest request and all of them."""
    ids = np.unique(trace.request).tolist()
    lengths = np.unique(trace.request, return_counts=True)[1]
    rng = np.random.default_rng(seed)
    pools = sorted({int(lengths.max()), int(rng.integers(lengths.max(), lengths.sum() + 1))})
    out: list[tuple[WorkloadConfig, int | None]] = [
        (WorkloadConfig(**kw), None) for kw in WORKLOADS
    ]
    out.append((WorkloadConfig(batch_size=2, requests=tuple(ids[::2])), None))
    for pool in pools:
        for kw in ({"batch_size": 8}, {"batch_size": 2, "max_tokens_per_step": 3},
                   {"batch_size": 3, "prefill_chunk_tokens": 2}):  # fmt: skip
            out.append((WorkloadConfig(scheduler="continuous", kv_cache="wait", **kw), pool))
    return out


# --- the steppers with every request arrived: the fixed tables


@pytest.mark.parametrize("seed", range(24))
def test_slot_stepper_gives_the_vectorised_slot_table(seed: int) -> None:
    trace = awkward_trace(seed, gates=seed % 3 != 0)
    for kw in SLOT_WORKLOADS:
        workload = WorkloadConfig(**kw)
        for share in SHARES:
            requests = Requests.of(trace, workload, share)
            stepper = SlotStepper(requests, workload)
            taken, steps = closed_loop_steps(stepper)
            got = requests.passes(taken, steps, stepper)
            assert_identical(fields_of(got), fields_of(build_passes(trace, workload, share)))


# --- online: the reference scheduler on a clock


@pytest.mark.parametrize("seed", range(24))
def test_online_schedule_equals_the_reference(seed: int) -> None:
    """Every workload and arrival pattern, under one share and one kind of durations in turn."""
    trace = awkward_trace(seed, gates=seed % 3 != 0)
    rng = np.random.default_rng(seed)
    kinds = list(durations(seed).items())
    for i, (workload, pool) in enumerate(workloads_of(trace, seed)):
        share = SHARES[(seed + i) % len(SHARES)]
        n = served(trace, workload, share)
        for j, (pattern, arrivals) in enumerate(arrival_patterns(n, trace.request.size,
                                                                 rng).items()):  # fmt: skip
            name, duration = kinds[(seed + i + j) % len(kinds)]
            want = reference_online(trace, workload, share, arrivals, duration, pool)
            run = Run(trace, workload, arrivals, duration, share, pool)
            context = f"{workload!r}, share {share}, pool {pool}, {pattern}, {name} durations"
            try:
                assert_identical(fields_of(run.passes), fields_of(passes_of(want)))
            except AssertionError as err:
                raise AssertionError(f"{context}: {err}") from None


@pytest.mark.parametrize("seed", range(24))
def test_zero_time_passes_equal_the_reference_without_durations(seed: int) -> None:
    trace = awkward_trace(seed)
    rng = np.random.default_rng(seed)
    for i, (workload, pool) in enumerate(workloads_of(trace, seed)):
        for share in (SHARES[(seed + i + 1) % len(SHARES)],):  # (not the online test's)
            n = served(trace, workload, share)
            for pattern, arrivals in arrival_patterns(n, trace.request.size, rng).items():
                got = zero_time_passes(trace, workload, arrivals, share, pool)
                want = reference_online(trace, workload, share, arrivals, lambda p: 0.0, pool)
                try:
                    assert_identical(fields_of(got), fields_of(passes_of(want)))
                except AssertionError as err:
                    raise AssertionError(f"{workload!r}, {share}, {pattern}: {err}") from None


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("start", [0.0, -np.inf])
def test_arrivals_at_the_start_give_the_fixed_table(seed: int, start: float) -> None:
    """Everything arrived when the first step starts: the closed loop's table, whatever the
    durations, formed in one call (and the one that finds nothing left)."""
    trace = awkward_trace(seed)
    duration = durations(seed)["random"]
    for workload, pool in workloads_of(trace, seed):
        for share in SHARES:
            n = served(trace, workload, share)
            arrivals = np.full(n, start)
            want = fields_of(build_passes(trace, workload, share, pool))
            assert_identical(fields_of(zero_time_passes(trace, workload, arrivals, share, pool)),
                             want)  # fmt: skip
            run = Run(trace, workload, arrivals, duration, share, pool)
            assert_identical(fields_of(run.passes), want)
            reference = reference_online(trace, workload, share, arrivals, duration, pool)
            assert_identical(fields_of(passes_of(reference)), want)  # (the reference's too)
            assert run.formed == ([want["request"].size, 0] if n else [0])


# --- what the online schedule holds as it forms


@pytest.mark.parametrize("seed", range(8))
def test_forming_arrays_and_demand_sets_match_the_final_table(seed: int, monkeypatch) -> None:
    """The KV cache's tokens counted as the passes are formed equal those counted from the
    final table; the demand sets formed a block at a time equal the reference's and
    ``build_demand``'s; what each call formed stays as it was; the callbacks see each call's
    passes, in order."""
    monkeypatch.setattr(passes_module, "_CHUNK", 1 + 5 * (seed % 3))
    trace = awkward_trace(seed, gates=seed % 2 == 0)
    rng = np.random.default_rng(seed)
    kinds = list(durations(seed).values())
    for i, (workload, pool) in enumerate(workloads_of(trace, seed)):
        share = SHARES[(seed + i) % len(SHARES)]
        n = served(trace, workload, share)
        for j, arrivals in enumerate(arrival_patterns(n, trace.request.size, rng).values()):
            run = Run(trace, workload, arrivals, kinds[(i + j) % len(kinds)], share, pool)
            passes, demand = run.passes, run.demand
            p = passes.num_passes
            assert run.schedule.passes.num_passes == p
            forming = run.schedule.passes
            # (the scheduler counts the KV cache as it forms the passes; the table's count,
            # from each request's first and last pass, is the same without preemption)
            table_kv = Passes.kv_resident.func(passes)  # type: ignore[attr-defined]
            assert_identical({"kv": forming.kv_resident[:p], "tokens": forming.pass_tokens[:p]},
                             {"kv": table_kv, "tokens": passes.pass_tokens})  # fmt: skip
            sizes = run.formed[:-1]  # (the last call finds nothing left)
            ends = np.cumsum(sizes, dtype=np.int64).tolist()
            starts = [e - size for e, size in zip(ends, sizes, strict=True)]
            assert run.callbacks == list(zip(starts, ends, strict=True))
            assert sum(run.formed) == p
            for prefix in run.prefixes:  # nothing formed moves
                q = prefix["start"].size - 1
                assert_identical(prefix, {
                    "rows": passes.rows[: passes.start[q]], "start": passes.start[: q + 1],
                    "kv_resident": passes.kv_resident[:q],
                    "offsets": demand.offsets[: q * trace.num_layers + 1],
                })  # fmt: skip
            check_demand(trace, passes, demand)


def check_demand(trace: Trace, passes: Passes, demand: DemandSets) -> None:
    want = reference_sets(trace, passes)
    names = ("keys", "tokens", "gates", "offsets")
    assert_identical({n: getattr(demand, n) for n in names}, want)
    built = build_demand(trace, passes)
    assert_identical({n: getattr(demand, n) for n in names}, {n: getattr(built, n) for n in names})
    assert demand.num_accesses == want["keys"].size
    if want["keys"].size:
        assert demand.max_layer_demand() == built.max_layer_demand()


# --- how often the engine asks, and the fixed table of one request at a time


@pytest.mark.parametrize("seed", range(24))
def test_time_independent_steps_are_formed_together(seed: int) -> None:
    """With every request arrived and passes of no time, no step can depend on when it
    starts: at most a call per request, and the one that finds nothing left."""
    trace = awkward_trace(seed)
    for workload, pool in workloads_of(trace, seed):
        for share in SHARES:
            n = served(trace, workload, share)
            run = Run(trace, workload, np.zeros(n), lambda p: 0.0, share, pool)
            assert len(run.formed) <= n + 1


@pytest.mark.parametrize("seed", range(12))
def test_one_request_at_a_time_gives_the_fixed_table_under_any_arrivals(seed: int) -> None:
    """``is_online``'s claim: with ``batch_size: 1`` the online table is the fixed one (a
    request joins when the one before it has left), whatever the arrivals and durations."""
    trace = awkward_trace(seed)
    rng = np.random.default_rng(seed)
    ones = [kw for kw in WORKLOADS if kw.get("batch_size", 1) == 1]
    ones += [{"scheduler": "continuous", "batch_size": 1, "max_tokens_per_step": 2},
             {"scheduler": "continuous", "batch_size": 1, "prefill_chunk_tokens": 3}]  # fmt: skip
    kinds = list(durations(seed).values())
    for i, kw in enumerate(ones):
        workload = WorkloadConfig(**kw)
        assert workload.batch_size == 1
        for k, share in enumerate(SHARES):
            n = served(trace, workload, share)
            want = fields_of(build_passes(trace, workload, share))
            for j, arrivals in enumerate(arrival_patterns(n, trace.request.size, rng).values()):
                run = Run(trace, workload, arrivals, kinds[(i + j + k) % len(kinds)], share)
                assert_identical(fields_of(run.passes), want)
                assert_identical(fields_of(zero_time_passes(trace, workload, arrivals, share)),
                                 want)  # fmt: skip


def test_make_stepper_picks_the_scheduler() -> None:
    trace = awkward_trace(4)
    longest = int(np.unique(trace.request, return_counts=True)[1].max())
    for kw, pool in (({"batch_size": 2}, None), ({"scheduler": "continuous", "batch_size": 4},
                                                 longest)):  # fmt: skip
        workload = WorkloadConfig(**kw)
        requests = Requests.of(trace, workload, (0, 1))
        stepper = make_stepper(requests, workload, pool)
        taken, steps = closed_loop_steps(stepper)
        assert_identical(fields_of(requests.passes(taken, steps, stepper)),
                         fields_of(build_passes(trace, workload, kv_pool_tokens=pool)))  # fmt: skip


def test_recorded_arrivals_are_those_of_the_requests_served() -> None:
    """``arrivals: trace`` with a selection of requests: each served request gets its own
    recorded arrival, in admission order."""
    experts = np.zeros((3, 1, 1), np.int16)
    trace = make_trace(
        experts,
        model="olmoe-1b-7b",
        num_experts=4,
        request=np.array([7, 8, 9], np.int32),
        arrival_s=np.array([0.0, 10.0, 20.0]),
    )
    for requests, want in (
        ((8, 9), [10.0, 20.0]),
        ((7, 9), [0.0, 20.0]),
        (None, [0.0, 10.0, 20.0]),
    ):
        config = SimConfig.model_validate(
            {"workload": {"arrivals": "trace", "requests": requests, "batch_size": 2}}
        )
        assert draw_arrivals(config, trace, len(want), np.random.default_rng(0)).tolist() == want
