"""The online schedule (``workload.schedule: online``): each scheduler step formed when its
stream is ready to start it, from the requests arrived by then.

1. Batch 1 under Poisson arrivals is an M/D/1 queue: the mean wait matches Pollaczek-Khinchine.
2. Batch 2, two requests, a machine whose every pass takes the same time d: the pass start times,
   TTFTs and TPOTs, by hand, online and on the fixed closed-loop table (which waits for a
   request not yet arrived with the running ones).
3. Batch 8 at a low Poisson rate: online, the server never idles while a request is in the
   system, so no inter-token gap holds a wait for an arrival; the fixed table's do.
4. ``replay`` follows the zero-time schedule that ``simulate`` on a near-instant machine forms.
5. Offline plug-ins are refused online in one line; noisy-oracle (within the pass) runs.
6. SimPy and the compiled core give the same online run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from support.profiles import near_instant, profile_with_hbm
from support.results import result_fields
from support.traces import random_trace_ids

from specmd_sim import (
    SimConfig,
    apply_overrides,
    build_config,
    formed_schedule,
    replay,
    simulate,
)
from specmd_sim.engine import jit
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario import build_scenario
from specmd_sim.scenario.build import kv_bytes_per_token
from specmd_sim.scenario.schedule import is_online
from specmd_sim.traces.trace import DECODE, PREFILL

MODEL, LAYERS, EXPERTS = "olmoe-1b-7b", 16, 64
COMPILED = "compiled timing core"
CORE = jit.available()  # (without numba, the fast extra, every run is SimPy's)


def same_route_trace(
    write_trace, requests: int, decode: int, arrivals: list[float] | None = None, name="t.npz"
) -> str:
    """``requests`` requests of a 1-token prompt and ``decode`` decode tokens, every token routed
    to expert 0 of every layer (so after the first pass every access hits)."""
    per = 1 + decode
    request = np.repeat(np.arange(requests, dtype=np.int32), per)
    phase = np.tile(np.r_[0, np.ones(decode)].astype(np.uint8), requests)
    kw: dict[str, Any] = {}
    if arrivals is not None:
        kw["arrival_s"] = np.repeat(np.asarray(arrivals, np.float64), per)
    experts = np.zeros((request.size, LAYERS, 1), np.int16)
    return str(write_trace(experts, MODEL, EXPERTS, name=name, request=request, phase=phase, **kw))


def random_trace(write_trace, requests: int, prompt: int, decode: int, seed: int,
                 arrivals: np.ndarray | None = None, name: str = "r.npz") -> str:  # fmt: skip
    rng = np.random.default_rng(seed)
    per = prompt + decode
    experts = random_trace_ids(rng, requests * per, LAYERS, EXPERTS, 8)
    request = np.repeat(np.arange(requests, dtype=np.int32), per)
    phase = np.tile(np.r_[np.zeros(prompt), np.ones(decode)].astype(np.uint8), requests)
    kw: dict[str, Any] = {}
    if arrivals is not None:
        kw["arrival_s"] = np.repeat(np.asarray(arrivals, np.float64), per)
    return str(write_trace(experts, MODEL, EXPERTS, name=name, request=request, phase=phase, **kw))


def first_starts(result) -> np.ndarray:
    """Per request, the start of its first pass (batch 1: a pass's request is its only one)."""
    req = np.array(result.per_pass["request"])
    start = np.array(result.per_pass["start_s"])
    first = np.full(len(result.per_request["request"]), np.inf)
    np.minimum.at(first, req, start)
    return first


# --- 1. M/D/1 against Pollaczek-Khinchine -------------------------------------------------------

MD1_REQUESTS, MD1_RHO, MD1_BATCHES = 6000, 0.6, 20


def test_batch_one_under_poisson_arrivals_is_an_md1_queue(write_trace) -> None:
    """Identical requests (1 prompt token, 2 decode tokens, expert 0 of every layer), a cache
    of 16 slots (one per layer, all that is used): after request 0's 16 compulsory misses every
    access hits, so every later request takes the same service time S (measured closed loop).
    Poisson arrivals at rate rho / S make an M/D/1 queue; its mean wait from arrival to the
    start of a request's first pass is Pollaczek-Khinchine's rho S / (2 (1 - rho)), within 4
    standard errors from 20 batch means. (Request 0, whose service is longer, arrives to an
    empty server and is left out; its extra service delays a few followers by a bias far
    below the standard error.)"""
    base = {"cache": {"capacity": LAYERS}, "eviction": {"kind": "lru"},
            "prefetch": {"kind": "none"}, "timing": {"record_spans": False}}  # fmt: skip
    closed = simulate(SimConfig(trace=same_route_trace(write_trace, 3, 2, name="s.npz"), **base))
    assert closed.engine_path == COMPILED or not CORE
    finish = closed.per_request["finish_s"]
    service = finish[2] - finish[1]  # (closed loop: request 2 starts when request 1 finishes)
    assert finish[1] - finish[0] == pytest.approx(service, rel=1e-9)

    trace = same_route_trace(write_trace, MD1_REQUESTS, 2)
    workload = {"arrivals": "poisson", "arrival_rate_per_s": MD1_RHO / service}
    result = simulate(SimConfig(trace=trace, seed=11, workload=workload, **base))
    assert result.engine_path == COMPILED or not CORE
    arrival = np.array(result.per_request["arrival_s"])
    start = first_starts(result)
    served = np.array(result.per_request["finish_s"]) - start
    assert served[1:] == pytest.approx(np.full(MD1_REQUESTS - 1, service), rel=1e-9)
    assert np.all(start >= arrival)

    waits = (start - arrival)[1:]
    wq = float(waits.mean())
    batch = waits.size // MD1_BATCHES
    means = waits[: batch * MD1_BATCHES].reshape(MD1_BATCHES, batch).mean(axis=1)
    se = float(means.std(ddof=1) / np.sqrt(MD1_BATCHES))
    pk = MD1_RHO * service / (2 * (1 - MD1_RHO))
    print(f"M/D/1 rho={MD1_RHO} S={service:.6g}s Wq={wq:.6g}s P-K={pk:.6g}s SE={se:.3g}s "
          f"z={(wq - pk) / se:.2f}")  # fmt: skip
    assert se < 0.15 * pk
    assert abs(wq - pk) < 4 * se
    # the share of requests that found the server busy is rho (PASTA)
    assert float(np.mean(waits > 0)) == pytest.approx(MD1_RHO, abs=0.03)

    # at batch 1 the fixed table is already the FCFS queue: both schedules give the same run
    fixed = simulate(SimConfig(trace=trace, seed=11, workload={**workload, "schedule": "fixed"},
                               **base))  # fmt: skip
    assert result_fields(fixed) == result_fields(result)


# --- 2. batch 2 by hand ---------------------------------------------------------------------

LAUNCH_S = 1e-4


@pytest.fixture
def step_machine(tmp_path: Path) -> list[str]:
    """Overrides of a machine on which every pass takes d = 33 kernel launches (16 attentions,
    16 experts and the LM head, one kernel each): the near-instant machine (every rate 1e30,
    every other latency ~1e-15 s) with a kernel launch overhead of 0.1 ms."""
    overrides = near_instant(tmp_path)
    hardware = Path(overrides[0].removeprefix("hardware="))
    data = yaml.safe_load(hardware.read_text())
    data["nodes"][0]["kernel_launch_overhead_s"]["value"] = LAUNCH_S
    hardware.write_text(yaml.safe_dump(data))
    return overrides


def step_config(trace: str, machine: list[str], *extra: str):
    return build_config(apply_overrides({}, [
        f"trace={trace}", *machine, f"cache.capacity={LAYERS}", "eviction.kind=lru",
        "prefetch.kind=none", *extra]))  # fmt: skip


D = (2 * LAYERS + 1) * LAUNCH_S  # one pass: 16 attentions, 16 experts, the LM head
T = 2.5  # request 1's arrival, in passes

# request 0 arrives at 0, request 1 at T·d; each a 1-token prompt and 4 decode tokens.
# pass start times, requests (each pass's first), TTFT and TPOT per request, all in units of d
HAND = {
    # online, continuous: r0 runs alone from 0 (prompt, decode 1, 2); the step at 3 (the first
    # starting at or after 2.5) takes r0's decode 3 and r1's prompt; r0 finishes at 5, r1 at 8
    ("online", "continuous"): ([0, 1, 2, 3, 4, 5, 6, 7], [0, 0, 0, 0, 0, 1, 1, 1],
                               [1, 1.5], [1, 1]),
    # fixed, continuous: the closed-loop table's first step takes both prompts, so it waits for
    # r1 until 2.5 (r0's TTFT 3.5), then four decode steps of both
    ("fixed", "continuous"): ([2.5, 3.5, 4.5, 5.5, 6.5], [0, 0, 0, 0, 0], [3.5, 1], [1, 1]),
    # online, slots: r0's prefill and decode 1 (one step), decode 2; at 3 r1's prefill pass,
    # then decode steps {0, 1} at 4 and 5 (r0 finishes at 6), r1 alone at 6 and 7.
    # r0's TPOT: (6 - 1) / 4, r1's prefill pass between its tokens
    ("online", "slots"): ([0, 1, 2, 3, 4, 5, 6, 7], [0, 0, 0, 1, 0, 0, 1, 1], [1, 1.5],
                          [1.25, 1]),
    # fixed, slots: the table is r0's prefill, r1's prefill, four decode steps {0, 1}; r1's
    # prefill waits until 2.5 while r0, past its first token, waits too: TPOT (7.5 - 1) / 4
    ("fixed", "slots"): ([0, 2.5, 3.5, 4.5, 5.5, 6.5], [0, 1, 0, 0, 0, 0], [1, 1], [1.625, 1]),
}  # fmt: skip


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "simpy"])
@pytest.mark.parametrize(("schedule", "scheduler"), list(HAND), ids=["-".join(k) for k in HAND])
def test_two_requests_by_hand(write_trace, step_machine, schedule, scheduler, compiled) -> None:
    one = simulate(step_config(same_route_trace(write_trace, 1, 4, [0.0], name="one.npz"),
                               step_machine))  # fmt: skip
    durations = np.subtract(one.per_pass["end_s"], one.per_pass["start_s"])
    assert durations == pytest.approx(np.full(5, D), rel=1e-9)  # d: every pass, cold or not

    trace = same_route_trace(write_trace, 2, 4, [0.0, T * D], name="two.npz")
    workload = ["workload.arrivals=trace", "workload.batch_size=2",
                f"workload.scheduler={scheduler}", f"workload.schedule={schedule}"]  # fmt: skip
    config = step_config(trace, step_machine, *workload)
    assert is_online(config) == (schedule == "online")
    result = simulate(config, compiled=compiled)
    assert (result.engine_path == COMPILED) == (compiled and CORE)
    starts, requests, ttft, tpot = HAND[schedule, scheduler]
    table, req = result.per_pass, result.per_request
    assert table["request"] == requests
    assert table["start_s"] == pytest.approx(np.multiply(starts, D), rel=1e-9, abs=1e-12)
    assert table["end_s"] == pytest.approx(np.add(starts, 1) * D, rel=1e-9)
    assert req["arrival_s"] == pytest.approx([0.0, T * D])
    assert req["ttft_s"] == pytest.approx(np.multiply(ttft, D), rel=1e-9)
    assert req["tpot_s"] == pytest.approx(np.multiply(tpot, D), rel=1e-9)
    # the wait for request 1 is idle ("other") time of request 0's TPOT only on the fixed slots
    # table (a decode pass itself never waits)
    idle = (T - 1) * D / 4 if (schedule, scheduler) == ("fixed", "slots") else 0.0
    assert req["tpot_other_s"] == pytest.approx([idle, 0.0], abs=1e-12)
    assert result.metrics["tpot_other_s"] == 0.0
    assert result.metrics["makespan_s"] == pytest.approx((starts[-1] + 1) * D, rel=1e-9)


# --- 3. batch 8 at a low rate -----------------------------------------------------------------


def idle_gaps_with_a_request_in_the_system(result) -> list[tuple[float, float]]:
    """The gaps between consecutive passes (end of one, start of the next) during which some
    request had arrived and not yet finished: a server that schedules online has none."""
    start, end = np.array(result.per_pass["start_s"]), np.array(result.per_pass["end_s"])
    arrival = np.array(result.per_request["arrival_s"])
    finish = np.array(result.per_request["finish_s"])
    gaps = []
    for p in range(start.size - 1):
        t0, t1 = end[p], start[p + 1]
        assert t1 >= t0 - 1e-12  # one stream: its passes do not overlap
        if t1 - t0 > 1e-9 * t1 and np.any((arrival <= t0) & (finish > t0)):
            gaps.append((float(t0), float(t1)))
    return gaps


def test_batch_8_at_a_low_rate_waits_only_for_arrivals_online(write_trace) -> None:
    """48 requests (4 prompt, 8 decode tokens, random routing, a 5% cache on h100-pcie), batch 8,
    Poisson arrivals at a rate at which a request mostly finds the server idle or lightly
    loaded. On the fixed table a decode step that admits a request not yet arrived waits for
    it with the running requests: their inter-token gaps hold the wait (ITL p99 several passes
    long, TPOT 'other' > 0). Online, a step admits only arrived requests: the server idles only
    when no request is in the system, so no request's TPOT holds idle time and every
    inter-token gap is passes run back to back."""
    requests, decode = 48, 8
    trace = random_trace(write_trace, requests, 4, decode, seed=5)
    base = {"trace": trace, "prefetch": {"kind": "none"}, "timing": {"record_spans": False}}
    alone = simulate(SimConfig(**base, workload={"max_requests": 1}))
    service = alone.per_request["finish_s"][0]  # one request alone, closed loop
    rate = 0.5 / service
    runs = {
        schedule: simulate(SimConfig(**base, seed=3, workload={
            "batch_size": 8, "arrivals": "poisson", "arrival_rate_per_s": rate,
            "schedule": schedule}))
        for schedule in ("online", "fixed")
    }  # fmt: skip
    for result in runs.values():
        assert result.engine_path == COMPILED or not CORE
        assert result.metrics["tokens_generated"] == requests * (1 + decode)
        assert result.metrics["stall_s"] > 0  # (misses: passes of unequal lengths)
        assert result.metrics["tpot_other_s"] == 0.0  # a decode pass itself never waits
    online, fixed = runs["online"], runs["fixed"]
    assert online.per_request["arrival_s"] == fixed.per_request["arrival_s"]
    longest = max(np.subtract(r.per_pass["end_s"], r.per_pass["start_s"]).max()
                  for r in runs.values())  # fmt: skip
    print(f"batch 8, rate {rate:.3g}/s: longest pass {longest:.4g}s; ITL p99 online "
          f"{online.metrics['itl_p99_s']:.4g}s, fixed {fixed.metrics['itl_p99_s']:.4g}s; "
          f"request TPOT max online {max(online.per_request['tpot_s']):.4g}s, fixed "
          f"{max(fixed.per_request['tpot_s']):.4g}s")  # fmt: skip

    # online: never idle with a request in the system; no TPOT holds idle time
    assert idle_gaps_with_a_request_in_the_system(online) == []
    assert max(online.per_request["tpot_other_s"]) == 0.0
    assert online.metrics["itl_p99_s"] <= 2 * longest
    assert max(online.per_request["tpot_s"]) <= 2 * longest

    # fixed: the running requests wait for arrivals between their tokens
    gaps = idle_gaps_with_a_request_in_the_system(fixed)
    assert len(gaps) > 5
    assert sum(np.array(fixed.per_request["tpot_other_s"]) > 0) > 5
    assert fixed.metrics["itl_p99_s"] > 4 * longest
    assert fixed.metrics["itl_p99_s"] > 3 * online.metrics["itl_p99_s"]


@pytest.mark.parametrize("scheduler", ["slots", "continuous"])
def test_the_schedule_formed_online_run_as_a_fixed_table_gives_the_same_run(write_trace, scheduler):
    """``formed_schedule``: the passes a timed run formed online, as a table fixed before the
    run; run as it is, every pass starts when it did online (its new requests had arrived by
    then, or it waits for them at the same instant as the idle server did), so the run is the
    same, and an offline plug-in (Belady) runs on it where it is refused online."""
    trace = random_trace(write_trace, 24, 4, 6, seed=2)
    config = SimConfig(trace=trace, seed=4, workload={
        "batch_size": 4, "scheduler": scheduler, "arrivals": "poisson",
        "arrival_rate_per_s": 20.0})  # fmt: skip
    online = simulate(config)
    fixed = formed_schedule(config)
    assert fixed.config.workload.schedule == "fixed" and not is_online(fixed.config)
    assert fixed.num_passes == online.inputs["passes"]
    again = simulate(fixed)
    for field in ("metrics", "per_request", "per_pass", "per_layer", "per_gpu"):
        assert getattr(again, field) == getattr(online, field), field
    assert np.array_equal(again.spans, online.spans)
    belady = dataclasses.replace(fixed, config=fixed.config.model_copy(
        update={"eviction": build_config({"eviction": {"kind": "belady"}}).eviction}))  # fmt: skip
    assert simulate(belady).metrics["hit_rate"] >= online.metrics["hit_rate"]


# --- 4. replay follows the zero-time schedule -------------------------------------------------

_COUNTERS = ("accesses", "hits", "late_hits", "misses", "misses_compulsory", "misses_capacity",
             "misses_collision", "evictions", "prefetch_issued", "prefetch_used",
             "bytes_demand", "bytes_prefetch")  # fmt: skip


@pytest.mark.parametrize("arrivals", ["poisson", "trace, three at a time"])
@pytest.mark.parametrize("scheduler", ["slots", "continuous"])
def test_replay_follows_the_zero_time_schedule(write_trace, tmp_path, arrivals, scheduler):
    """Batch 8 on the near-instant machine: ``simulate`` forms the passes that ``replay``'s
    zero-time schedule has, and makes the same cache decisions (a late hit being a hit).
    Poisson arrivals, far apart against near-instant passes, are served one at a time;
    recorded arrivals three at a time are batched."""
    requests = 12
    times = None
    if arrivals != "poisson":
        times = np.repeat(np.arange(requests // 3) * 0.01, 3)
    trace = random_trace(write_trace, requests, 3, 4, seed=9, arrivals=times)
    workload = ["workload.batch_size=8", f"workload.scheduler={scheduler}"]
    if arrivals == "poisson":
        workload += ["workload.arrivals=poisson", "workload.arrival_rate_per_s=50"]
    else:
        workload += ["workload.arrivals=trace"]
    config = build_config(apply_overrides({}, [
        f"trace={trace}", *near_instant(tmp_path), "cache.capacity=40", "eviction.kind=lru",
        "prefetch.kind=top-k", *workload]))  # fmt: skip
    assert is_online(config)
    replayed, timed = replay(config), simulate(config)
    assert timed.engine_path == COMPILED or not CORE
    zero_time = build_scenario(config).num_passes
    assert len(timed.per_pass["pass"]) == zero_time
    got = {k: timed.metrics[k] for k in _COUNTERS}
    got["hits"], got["late_hits"] = got["hits"] + got["late_hits"], 0
    assert got == {k: replayed.metrics[k] for k in _COUNTERS}
    assert replayed.metrics["evictions"] > 0 and replayed.metrics["prefetch_issued"] > 0

    # the closed-loop table batches requests that had not arrived: other passes
    fixed = build_config(apply_overrides(config.model_dump(mode="json"),
                                         ["workload.schedule=fixed"]))  # fmt: skip
    closed = build_scenario(fixed).num_passes
    alone = requests * (1 + 4)  # a request alone: its prompt's pass, then 4 decode steps
    if arrivals == "poisson":
        assert zero_time == alone
    else:
        assert zero_time < alone
    assert closed < zero_time


# --- 5. offline plug-ins ------------------------------------------------------------------------


def test_offline_plugins_are_refused_online_in_one_line(write_trace) -> None:
    trace = random_trace(write_trace, 6, 2, 3, seed=1)
    data = {"trace": trace, "eviction": {"kind": "belady"}, "prefetch": {"kind": "none"},
            "workload": {"batch_size": 4, "arrivals": "poisson", "arrival_rate_per_s": 20.0},
            "timing": {"record_spans": False}}  # fmt: skip
    with pytest.raises(SpecmdError) as caught:
        simulate(SimConfig(**data))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("eviction.kind: ")
    assert "'belady'" in message and "workload.schedule: fixed" in message

    fixed = simulate(SimConfig(**{**data, "workload": {**data["workload"], "schedule": "fixed"}}))
    assert fixed.metrics["misses"] > 0 and fixed.metrics["tokens_generated"] == 6 * 4

    # noisy-oracle reads only the pass running: it runs online
    config = SimConfig(**{**data, "eviction": {"kind": "lru"},
                          "prefetch": {"kind": "top-k", "lookahead": 2},
                          "predictor": {"kind": "noisy-oracle"}})  # fmt: skip
    assert is_online(config)
    online = simulate(config)
    assert online.metrics["prefetch_issued"] > 0
    assert online.metrics["tokens_generated"] == 6 * 4


# --- 6. SimPy and the compiled core ------------------------------------------------------------


def test_simpy_and_the_compiled_core_give_the_same_online_run(write_trace, tmp_path) -> None:
    """Batch 4, Poisson arrivals, continuous batching, and a KV pool of 30 tokens (kv_cache:
    wait; a request is 12 tokens, so at most two run at once): the same run byte for byte."""
    requests, length = 10, 12
    trace = random_trace(write_trace, requests, 4, length - 4, seed=2)
    data: dict[str, Any] = {
        "trace": trace, "seed": 4, "cache": {"capacity": 60},
        "prefetch": {"kind": "top-k", "lookahead": 2},
        "workload": {"batch_size": 4, "arrivals": "poisson", "arrival_rate_per_s": 40.0,
                     "scheduler": "continuous", "prefill_chunk_tokens": 2,
                     "kv_cache": "wait"},
    }  # fmt: skip
    probe = build_scenario(SimConfig(**data))
    pool = probe.kv_pools[0]
    assert pool is not None
    hbm = int(probe.profile.nodes[0].hbm_bytes.value)
    per_token = kv_bytes_per_token(probe.model)
    data["hardware"] = str(profile_with_hbm(tmp_path, hbm - (pool - 30) * per_token))
    config = SimConfig(**data)
    assert build_scenario(config).kv_pools[0] == 30 and is_online(config)

    reference, got = simulate(config, compiled=False), simulate(config)
    assert (got.engine_path == COMPILED) == CORE and reference.engine_path != COMPILED
    assert reference.metrics["misses"] > 0 and reference.metrics["prefetch_issued"] > 0
    assert reference.to_dict() == got.to_dict()
    assert reference.spans is not None and got.spans is not None
    assert reference.spans.tobytes() == got.spans.tobytes()
    assert result_fields(got) == result_fields(reference)
    # the pool holds the schedule back: with the whole H100's, other passes
    roomy = simulate(SimConfig(**{k: v for k, v in data.items() if k != "hardware"}))
    assert roomy.per_request["arrival_s"] == got.per_request["arrival_s"]
    assert len(roomy.per_pass["pass"]) < len(got.per_pass["pass"])


@pytest.mark.parametrize("predictor", ["transition", "noisy-oracle"])
@pytest.mark.parametrize("scheduler", ["slots", "continuous"])
def test_steps_formed_ahead_and_given_back_give_the_same_run(
    write_trace, monkeypatch, predictor, scheduler
) -> None:
    """The compiled core takes steps formed ahead for the requests expected to have arrived
    when each starts, and gives back the first it reaches outside its window (unstarted; the
    plans' draws and the learned counts rewound): the run is SimPy's, which forms every step
    when it starts, byte for byte, whether the expected pass times are those measured or
    wrong by a random factor of 0.2-5 (then steps are given back both ways: reached before an
    arrival they take, and after one they do not)."""
    pytest.importorskip("numba")
    from specmd_sim.engine.sim.compiled import _Core
    from specmd_sim.scenario.schedule import OnlineSchedule

    given: list[float] = []  # (each missed window's start: finite where the step took one)
    inner = OnlineSchedule.give_back

    def give_back(self: OnlineSchedule, p: int) -> None:
        at, not_before, _ = self.windows
        given.append(not_before[at.index(p)])
        inner(self, p)

    monkeypatch.setattr(OnlineSchedule, "give_back", give_back)
    formed: list[float] = []
    form = OnlineSchedule.form

    def noting(self: OnlineSchedule, *args: Any, **kwargs: Any) -> int:
        out = form(self, *args, **kwargs)
        formed.extend(self.windows[1])
        return out

    monkeypatch.setattr(OnlineSchedule, "form", noting)
    trace = random_trace(write_trace, 24, 4, 12, seed=7)
    config = SimConfig(trace=trace, seed=5, prefetch={"kind": "top-k"},
                       predictor={"kind": predictor}, workload={
                           "batch_size": 4, "scheduler": scheduler, "arrivals": "poisson",
                           "arrival_rate_per_s": 1.5})  # fmt: skip
    reference = simulate(config, compiled=False)
    pace, rng = _Core._pace, np.random.default_rng(0)

    def wrongly(self: _Core, g: int, p: int) -> Any:  # (one random factor per call)
        f, scale = pace(self, g, p), rng.uniform(0.2, 5.0)
        return f and (lambda n, phase: scale * f(n, phase))

    for wrong in (False, True):
        if wrong:
            monkeypatch.setattr(_Core, "_pace", wrongly)
        given.clear()
        formed.clear()
        got = simulate(config)
        assert got.engine_path == COMPILED
        assert sum(np.isfinite(formed)) > 10  # (steps formed for requests not arrived yet)
        if wrong:  # (given back where reached before the arrival they took, or after one)
            assert 0 < sum(np.isfinite(given)) < len(given)
        assert reference.to_dict() == got.to_dict()
        assert np.array_equal(reference.spans, got.spans)


@pytest.mark.parametrize("schedule", ["online", "fixed"])
@pytest.mark.parametrize("third", [0.505, 0.51])
def test_a_request_without_a_prompt_keeps_its_own_arrival(write_trace, monkeypatch, third,
                                                          schedule):  # fmt: skip
    """``scheduler: slots``: a request without prompt tokens (arrived at 0.5 s) first appears
    in its step's decode pass, after the prefill pass of a request admitted after it (at
    ``third``). Each keeps its own arrival: at 0.505 s one step admits both, at 0.51 s the
    compiled core forms that step ahead, reaches it before 0.51 s and gives it back, and the
    server's step admits the first alone. Both engines, the same run, online and on the
    closed-loop table (a regression: arrivals were handed out in the order requests first
    appeared in passes)."""
    prompts, decodes = [4, 2, 0, 3], [40, 30, 5, 5]
    arrivals = [0.0, 0.2, 0.5, third]
    sizes = np.add(prompts, decodes)
    phase = np.repeat(np.tile([PREFILL, DECODE], 4), np.ravel([prompts, decodes], "F"))
    experts = random_trace_ids(np.random.default_rng(0), int(sizes.sum()), LAYERS, EXPERTS, 8)
    request = np.repeat(np.arange(4, dtype=np.int32), sizes)
    trace = write_trace(experts, MODEL, EXPERTS, request=request, phase=phase.astype(np.uint8),
                        arrival_s=np.repeat(arrivals, sizes))  # fmt: skip
    config = SimConfig(trace=str(trace), seed=1, cache={"capacity": 64}, prefetch={"kind": "none"},
                       workload={"batch_size": 4, "scheduler": "slots", "arrivals": "trace",
                                 "schedule": schedule})  # fmt: skip
    from specmd_sim.scenario.schedule import OnlineSchedule

    given: list[int] = []
    inner = OnlineSchedule.give_back
    monkeypatch.setattr(OnlineSchedule, "give_back",
                        lambda self, p: given.append(p) or inner(self, p))  # fmt: skip
    reference, got = simulate(config, compiled=False), simulate(config)
    assert reference.per_request["arrival_s"] == arrivals
    assert reference.to_dict() == got.to_dict()
    assert np.array_equal(reference.spans, got.spans)
    if schedule == "online" and got.engine_path == COMPILED:
        assert given  # (steps formed ahead and given back)
