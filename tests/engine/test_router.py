"""``parallel.router: least-loaded``: each request goes, as it arrives, to the GPU with the
fewest unfinished requests (vLLM's data-parallel front end), inside the timing engine.

1. A case by hand: a long request on GPU 0, a short one on GPU 1 that has left when a third
   arrives; the third goes to the idle GPU 1 and starts at its arrival, where round robin
   queues it behind the long one.
2. The rule checked from the outputs alone: from each request's GPU, arrival and finish, the
   unfinished requests of every GPU at each arrival, and the GPU the rule picks (the fewest,
   the first from a start that moves one GPU on per request) is the one that served it.
3. Its limits: requests far apart (every GPU idle at each arrival) and a closed loop (every
   request at once) route as round robin does, so the runs are the same.
4. SimPy and the compiled core give the same routed run; the schedule a routed run formed,
   run as a fixed table, gives the same run; a fixed table with the router is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.traces import random_trace_ids

from specmd_sim import SimConfig, formed_schedule, simulate
from specmd_sim.engine import jit
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.schedule import is_online, is_routed

LAYERS, EXPERTS, K = 16, 64, 8  # olmoe-1b-7b
COMPILED = "compiled timing core"
CORE = jit.available()  # (without numba, the fast extra, every run is SimPy's)


def trace_of(write_trace, decode: list[int], prompt: int = 2, arrivals=None, seed: int = 0,
             name: str = "t.npz") -> str:  # fmt: skip
    """One request per entry of ``decode`` (its decode tokens), each a ``prompt``-token prompt,
    random routing; recorded ``arrivals`` if given."""
    rng = np.random.default_rng(seed)
    sizes = np.add(decode, prompt)
    request = np.repeat(np.arange(len(decode), dtype=np.int32), sizes)
    phase = np.concatenate([np.r_[np.zeros(prompt), np.ones(d)] for d in decode]).astype(np.uint8)
    kw: dict[str, Any] = {}
    if arrivals is not None:
        kw["arrival_s"] = np.repeat(np.asarray(arrivals, np.float64), sizes)
    experts = random_trace_ids(rng, request.size, LAYERS, EXPERTS, K)
    return str(write_trace(experts, "olmoe-1b-7b", EXPERTS, name=name, request=request,
                           phase=phase, **kw))  # fmt: skip


def config_of(trace: str, gpus: int, router: str, **workload: Any) -> SimConfig:
    return SimConfig(
        hardware="hgx-h100-8gpu", trace=trace, seed=3, cache={"capacity": 2 * K},
        prefetch={"kind": "top-k"}, parallel={"gpus": gpus, "router": router},
        workload=workload,
    )  # fmt: skip


def gpu_of_request(config: SimConfig) -> dict[int, int]:
    """Each request's GPU, from the schedule the run formed."""
    shards = formed_schedule(config).shards
    return {int(r): g for g, (passes, _) in enumerate(shards) for r in set(passes.row_request)}


# --- 1. by hand ----------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "simpy"])
def test_a_request_goes_to_the_idle_gpu_by_hand(write_trace, compiled) -> None:
    """Batch 1, two GPUs. Request 0 (200 decode tokens) arrives at 0 and goes to GPU 0;
    request 1 (2 tokens) at 1 ms to GPU 1 (unfinished: GPU 0 one, GPU 1 none); request 2 at
    0.3 s, when request 1 has left and request 0 has not: the scan starts at GPU 0 (one per
    request: 2 mod 2), which has one unfinished request, GPU 1 none, so GPU 1, where it starts
    at once. Round robin sends it to GPU 0, behind request 0."""
    trace = trace_of(write_trace, [200, 2, 2], arrivals=[0.0, 0.001, 0.3])
    runs = {}
    for router in ("least-loaded", "round-robin"):
        config = config_of(trace, 2, router, arrivals="trace")
        assert is_online(config) == is_routed(config) == (router == "least-loaded")
        result = simulate(config, compiled=compiled)
        assert (result.engine_path == COMPILED) == (compiled and CORE)
        runs[router] = result
    routed, rr = runs["least-loaded"], runs["round-robin"]
    finish = rr.per_request["finish_s"]
    assert finish[1] < 0.3 < finish[0]  # (the situation the case needs)
    table = routed.per_pass
    first = {r: i for i, r in reversed(list(enumerate(table["request"])))}
    assert [table["gpu"][first[r]] for r in range(3)] == ["gpu0", "gpu1", "gpu1"]
    assert table["start_s"][first[2]] == pytest.approx(0.3, abs=1e-12)  # at its arrival
    # round robin: request 2 starts when request 0 has left; least-loaded: its TTFT is its
    # prompt pass alone
    assert rr.per_request["ttft_s"][2] > finish[0] - 0.3
    assert routed.per_request["ttft_s"][2] == pytest.approx(
        table["end_s"][first[2]] - 0.3, rel=1e-9
    )
    assert routed.per_request["finish_s"][2] < finish[0]


# --- 2. the rule, from the outputs ---------------------------------------------------------------


def check_least_loaded(result, gpu_of: dict[int, int], gpus: int) -> int:
    """Replay the rule over the run's arrivals and finishes; how many requests had a choice
    (not every GPU equally loaded)."""
    req = result.per_request
    order = np.argsort(req["arrival_s"], kind="stable")
    arrival, finish = np.array(req["arrival_s"]), np.array(req["finish_s"])
    ids = req["request"]
    served: list[list[int]] = [[] for _ in range(gpus)]
    chosen = 0
    for n, i in enumerate(order):
        at = arrival[i]
        loads = [sum(finish[j] > at for j in served[g]) for g in range(gpus)]
        scan = [(n + k) % gpus for k in range(gpus)]
        pick = scan[int(np.argmin([loads[g] for g in scan]))]
        assert gpu_of[ids[i]] == pick, (n, at, loads, pick)
        served[pick].append(int(i))
        chosen += len(set(loads)) > 1
    return chosen


@pytest.mark.parametrize("scheduler", ["slots", "continuous"])
@pytest.mark.parametrize("batch", [1, 4])
def test_every_request_goes_to_the_least_loaded_gpu(write_trace, scheduler, batch) -> None:
    """Three GPUs, 30 requests of 3 to 60 decode tokens, 2 arriving a second: the GPU that
    served each request is the rule's, counted from the run's own arrivals and finishes; and
    the rule had choices to make (it is not round robin here)."""
    rng = np.random.default_rng(11)
    trace = trace_of(write_trace, rng.integers(3, 60, 30).tolist(), seed=4)
    config = config_of(trace, 3, "least-loaded", batch_size=batch, scheduler=scheduler,
                       arrivals="poisson", arrival_rate_per_s=2.0)  # fmt: skip
    result = simulate(config)
    gpu_of = gpu_of_request(config)
    assert check_least_loaded(result, gpu_of, 3) >= 5
    assert any(gpu_of[r] != r % 3 for r in gpu_of)


# --- 3. limits -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arrivals", ["far apart", "closed-loop"])
def test_where_every_gpu_is_equally_loaded_it_routes_as_round_robin(write_trace, arrivals):
    decode = [5, 30, 2, 17, 9, 4, 12]
    if arrivals == "far apart":  # each request has left long before the next arrives
        trace = trace_of(write_trace, decode, arrivals=np.arange(len(decode)) * 2.0)
        workload: dict[str, Any] = {"arrivals": "trace", "batch_size": 2}
    else:
        trace = trace_of(write_trace, decode)
        workload = {"batch_size": 2}
    routed, rr = (simulate(config_of(trace, 3, router, **workload))
                  for router in ("least-loaded", "round-robin"))  # fmt: skip
    assert routed.metrics == rr.metrics
    for table in ("per_request", "per_pass", "per_gpu", "per_layer"):
        assert getattr(routed, table) == getattr(rr, table)


# --- 4. engines, the formed schedule, refusals ---------------------------------------------------


@pytest.mark.parametrize("scheduler", ["slots", "continuous"])
def test_simpy_and_the_compiled_core_route_alike(write_trace, scheduler) -> None:
    """Three GPUs, batch 3, Poisson arrivals: GPUs go idle and wake at arrivals, steps are
    formed ahead and given back at each arrival to any GPU; the same run byte for byte."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    trace = trace_of(write_trace, rng.integers(2, 40, 24).tolist(), seed=6)
    config = config_of(trace, 3, "least-loaded", batch_size=3, scheduler=scheduler,
                       arrivals="poisson", arrival_rate_per_s=15.0)  # fmt: skip
    got, reference = simulate(config), simulate(config, compiled=False)
    assert got.engine_path == COMPILED and reference.engine_path != COMPILED
    assert reference.to_dict() == got.to_dict()
    assert np.array_equal(reference.spans, got.spans)


def test_the_routed_schedule_run_as_a_fixed_table_gives_the_same_run(write_trace) -> None:
    rng = np.random.default_rng(8)
    trace = trace_of(write_trace, rng.integers(2, 30, 16).tolist(), seed=9)
    config = config_of(trace, 2, "least-loaded", batch_size=2, arrivals="poisson",
                       arrival_rate_per_s=20.0)  # fmt: skip
    online = simulate(config)
    fixed = formed_schedule(config)
    assert fixed.routed is not None and fixed.config.workload.schedule == "fixed"
    again = simulate(fixed)
    assert again.metrics == online.metrics
    assert again.per_request == online.per_request


def test_a_fixed_table_cannot_route_by_load(write_trace) -> None:
    trace = trace_of(write_trace, [3, 4, 5])
    config = config_of(trace, 2, "least-loaded", batch_size=2, arrivals="poisson",
                       arrival_rate_per_s=5.0, schedule="fixed")  # fmt: skip
    with pytest.raises(SpecmdError) as caught:
        simulate(config)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("parallel.router: expected round-robin")
    assert "use workload.schedule: online" in line


def test_the_run_summary_says_how_requests_are_routed() -> None:
    from specmd_sim.cli.notes import serving_words

    workload = {"arrivals": "poisson", "arrival_rate_per_s": 2.0, "batch_size": 4}
    routed = serving_words(workload, {"gpus": 3, "router": "least-loaded"})
    assert "each request to the GPU least loaded at its arrival" in routed
    assert "round robin" in serving_words(workload, {"gpus": ["gpu0", "gpu1"]})
    assert "GPU" not in serving_words(workload, {"gpus": 1, "router": "least-loaded"})


@pytest.mark.parametrize(("gpus", "router"), [(1, "round-robin"), (2, "least-loaded")])
def test_simpy_and_the_compiled_core_agree_with_prefill_chunks(write_trace, gpus, router):
    """Slots, prompts in chunks of 2 (a chunk before the last gives no token, so its pass has
    no LM head): a chunk formed again where a step formed ahead was given back runs no LM head
    of the pass it replaces (found by review: the compiled core kept it)."""
    pytest.importorskip("numba")
    trace = trace_of(write_trace, [30, 300, 1, 3], prompt=12, arrivals=[0.0, 0.001, 0.05, 5.0],
                     seed=1)  # fmt: skip
    config = config_of(trace, gpus, router, batch_size=2, scheduler="slots",
                       prefill_chunk_tokens=2, arrivals="trace")  # fmt: skip
    got, reference = simulate(config), simulate(config, compiled=False)
    assert got.engine_path == COMPILED
    assert reference.to_dict() == got.to_dict()
    assert np.array_equal(reference.spans, got.spans)


def test_an_offline_plugin_with_the_router_names_a_way_out(write_trace) -> None:
    """Belady under least-loaded routing: the line does not send the user to a fixed table,
    which cannot route by load."""
    trace = trace_of(write_trace, [3, 4, 5])
    config = SimConfig(hardware="hgx-h100-8gpu", trace=trace, eviction={"kind": "belady"},
                       prefetch={"kind": "none"}, parallel={"gpus": 2, "router": "least-loaded"},
                       workload={"arrivals": "poisson", "arrival_rate_per_s": 5.0})  # fmt: skip
    with pytest.raises(SpecmdError) as caught:
        simulate(config)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("eviction.kind:")
    assert "parallel.router: round-robin" in line and "formed_schedule" in line
