"""Workloads: the batched pass table, arrivals, and what batching does to bytes per token."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.config import WorkloadConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.schedule import build_passes
from specmd_sim.traces import make_trace


def tiny_trace(prefill: list[int], decode: list[int]):
    """One row per token; request r has prefill[r] prompt and decode[r] decode tokens."""
    sizes = list(zip(prefill, decode, strict=True))
    request = np.concatenate([np.full(p + d, r) for r, (p, d) in enumerate(sizes)])
    phase = np.concatenate([np.r_[np.zeros(p), np.ones(d)] for p, d in sizes])
    experts = np.zeros((request.size, 1, 1), np.int16)
    return make_trace(
        experts,
        model="olmoe-1b-7b",
        num_experts=64,
        request=request.astype(np.int32),
        phase=phase.astype(np.uint8),
    )


def test_batch_one_serves_requests_one_after_another() -> None:
    passes = build_passes(tiny_trace([2, 1], [2, 1]), WorkloadConfig(prefill_chunk_tokens=1))
    assert passes.request.tolist() == [0, 0, 0, 0, 1, 1]
    assert passes.phase.tolist() == [0, 0, 1, 1, 0, 1]
    assert passes.first_token.tolist() == [False, True, False, False, True, False]
    assert passes.context_end.tolist() == [1, 2, 3, 4, 1, 2]
    assert passes.joins.tolist() == [True, False, False, False, True, False]


def test_batched_decode_takes_one_token_of_each_active_request() -> None:
    """Slots of 2: requests 0 and 1 prefill, decode together; 2 joins when 1 leaves."""
    passes = build_passes(
        tiny_trace([1, 1, 1], [3, 1, 1]), WorkloadConfig(batch_size=2, prefill_chunk_tokens=0)
    )
    assert [passes.requests_of(p) for p in range(passes.num_passes)] == [
        [0], [1], [0, 1], [2], [0, 2], [0],
    ]  # fmt: skip
    assert passes.phase.tolist() == [0, 0, 1, 0, 1, 1]
    # positions: pass 2 = request 0 token 2 + request 1 token 2; pass 4 = 3 + 2
    assert passes.attended.tolist() == [1, 1, 4, 1, 5, 4]
    assert passes.kv_tokens.tolist() == [1, 1, 4, 1, 5, 4]
    assert passes.joins.tolist() == [True, True, False, True, False, False]


def test_batch_8_moves_fewer_bytes_per_token_than_batch_1(small_trace) -> None:
    """A decode pass's demand set is the union over the batch: shared experts load once."""
    trace = str(small_trace("olmoe-1b-7b", requests=8, prefill=1, decode=6))
    runs = {
        b: simulate(SimConfig(trace=trace, workload={"batch_size": b}, prefetch={"kind": "none"}))
        for b in (1, 8)
    }
    one, eight = runs[1].metrics, runs[8].metrics
    assert eight["bytes_per_token"] < 0.8 * one["bytes_per_token"]
    assert eight["tokens_generated"] == one["tokens_generated"] == 8 * 7
    assert eight["throughput_tok_s"] > one["throughput_tok_s"]
    assert eight["accesses"] < one["accesses"]


def test_replay_and_simulate_follow_the_same_batched_passes(small_trace) -> None:
    cfg = SimConfig(
        trace=str(small_trace("olmoe-1b-7b", requests=4)),
        workload={"batch_size": 3, "prefill_chunk_tokens": 2},
        prefetch={"kind": "none"},
    )
    assert replay(cfg).metrics["accesses"] == simulate(cfg).metrics["accesses"]


def test_poisson_arrivals_are_seeded_and_measured_from_arrival(small_trace) -> None:
    base = {
        "trace": str(small_trace("olmoe-1b-7b", requests=3)),
        "workload": {"arrivals": "poisson", "arrival_rate_per_s": 2.0},
        "timing": {"record_spans": False},
    }
    a = simulate(SimConfig(**base))
    b = simulate(SimConfig(**base))
    assert a.to_json() == b.to_json()
    req = a.per_request
    assert req["arrival_s"] == sorted(req["arrival_s"]) and req["arrival_s"][0] > 0
    finish = [0.0, *req["finish_s"]]
    for r in range(3):  # one at a time: a request starts after its arrival and its predecessor
        start = max(req["arrival_s"][r], finish[r])
        assert req["arrival_s"][r] + req["ttft_s"][r] > start
        parts = req["ttft_compute_s"][r] + req["ttft_stall_s"][r] + req["ttft_other_s"][r]
        assert parts == pytest.approx(req["ttft_s"][r], rel=1e-9)
    assert a.metrics["makespan_s"] == req["finish_s"][-1]
    c = simulate(SimConfig(**{**base, "seed": 1}))
    assert c.per_request["arrival_s"] != req["arrival_s"]


def test_poisson_needs_a_rate() -> None:
    from specmd_sim.config import build_config

    with pytest.raises(SpecmdError, match="arrival_rate_per_s"):
        build_config({"workload": {"arrivals": "poisson"}})


@pytest.mark.parametrize("arrivals", ["closed-loop", "trace"])
def test_a_rate_with_arrivals_that_take_none_is_refused(arrivals: str) -> None:
    """A rate would be ignored by closed-loop and recorded arrivals: refused, not dropped."""
    from specmd_sim.config import build_config

    with pytest.raises(SpecmdError, match=f"arrival_rate_per_s: expected none with arrivals: "
                                          f"{arrivals} .*, got 2$"):  # fmt: skip
        build_config({"workload": {"arrivals": arrivals, "arrival_rate_per_s": 2.0}})


@pytest.mark.parametrize("schedule", ["fixed", "online"])
def test_waiting_for_an_arrival_is_other_time(small_trace, schedule: str) -> None:
    """Batch 2 with the fixed table: the pass admitting request 1 waits for its arrival;
    request 0, already decoding, sees that idle time as *other* in its TPOT. Online, request
    0 decodes on meanwhile and request 1 joins a step after it has arrived: nothing waits."""
    result = simulate(
        SimConfig(
            trace=str(small_trace("olmoe-1b-7b", requests=2)),
            workload={
                "arrivals": "poisson",
                "arrival_rate_per_s": 1.0,
                "batch_size": 2,
                "schedule": schedule,
            },
            timing={"record_spans": False},
        )
    )
    req = result.per_request
    assert req["arrival_s"][1] > req["arrival_s"][0] + req["ttft_s"][0]  # after 0's first token
    idle = req["arrival_s"][1] - (req["arrival_s"][0] + req["ttft_s"][0])
    if schedule == "online":
        idle = 0.0
    assert req["tpot_other_s"][0] * req["decode_tokens"][0] == pytest.approx(idle, rel=1e-9)
    assert result.metrics["tpot_other_s"] == 0.0  # decode passes themselves never wait


def test_trace_arrivals_are_replayed(write_trace) -> None:
    """Recorded arrivals: a request arriving long after its predecessor finished starts at its
    arrival, and its TTFT does not include the gap; with max_requests the first ones are used."""
    trace = tiny_trace([2, 2, 2], [2, 2, 2])
    experts = np.tile(np.arange(8, dtype=np.int16), (12, 16, 1))  # all 16 layers, top-8
    arrival = np.repeat([0.0, 5.0, 5.0], 4)  # request 2 queues behind request 1
    path = write_trace(
        experts, "olmoe-1b-7b", 64, request=trace.request, phase=trace.phase, arrival_s=arrival
    )
    base = {"trace": str(path), "model": "olmoe-1b-7b", "timing": {"record_spans": False}}
    result = simulate(SimConfig(**base, workload={"arrivals": "trace"}))
    req = result.per_request
    assert req["arrival_s"] == [0.0, 5.0, 5.0]
    assert req["ttft_other_s"][:2] == [0.0, 0.0]
    assert req["finish_s"][0] < 5.0 and req["ttft_s"][1] < 1.0  # the 5 s gap is not in it
    # request 2 queues behind request 1: its TTFT includes the wait
    assert req["ttft_s"][2] > req["finish_s"][1] - 5.0 > 0
    assert result.metrics["makespan_s"] == pytest.approx(req["finish_s"][2])
    two = simulate(SimConfig(**base, workload={"arrivals": "trace", "max_requests": 2}))
    assert two.per_request["arrival_s"] == [0.0, 5.0]


def test_trace_arrivals_need_a_trace_that_has_them(small_trace) -> None:
    config = SimConfig(trace=str(small_trace("olmoe-1b-7b")), workload={"arrivals": "trace"})
    with pytest.raises(SpecmdError, match="expected a trace with arrival_s"):
        simulate(config)


@pytest.mark.parametrize("arrivals", ["poisson", "trace"])
def test_requests_joining_in_one_pass_each_get_an_arrival(write_trace, arrivals) -> None:
    """Decode-only requests at batch 4 all join in the first decode pass: every one of them
    needs its own arrival time (counted per request, not per joining pass)."""
    trace = tiny_trace([0, 0, 0, 0], [3, 3, 3, 3])
    experts = np.tile(np.arange(8, dtype=np.int16), (12, 16, 1))
    path = write_trace(
        experts, "olmoe-1b-7b", 64, request=trace.request, phase=trace.phase,
        arrival_s=np.repeat([0.0, 0.1, 0.2, 0.3], 3),
    )  # fmt: skip
    result = simulate(
        SimConfig(
            trace=str(path),
            workload={"arrivals": arrivals, "batch_size": 4}
            | ({"arrival_rate_per_s": 10.0} if arrivals == "poisson" else {}),
            timing={"record_spans": False},
        )
    )
    arrived = result.per_request["arrival_s"]
    assert len(arrived) == 4 and arrived == sorted(arrived)
    if arrivals == "trace":
        assert arrived == [0.0, 0.1, 0.2, 0.3]
