"""A per-flow rate cap (a copy method slower than the link): closed forms.

The cap is a private resource of the flow, so max-min fairness gives a capped flow at most its
cap and hands the rest of the link to the others; it is not a resource of the network's
accounting (busy_s, bytes_through, per_resource). The last test is a timing-engine closed form
with a runtime that copies each expert as 3 tensors at half the link bandwidth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.runtime.loader import runtime_dir

Flow = tuple[float, float, float | None, float]  # start, bytes, cap, latency


def run_flows(capacity: dict[str, float], flows: list[Flow]) -> tuple[list[float], FlowNetwork]:
    """Every flow over link 'L'; returns each flow's end time and the network."""
    env = simpy.Environment()
    net = FlowNetwork(env, dict(capacity))
    ends = [0.0] * len(flows)

    def one(i: int, start: float, nbytes: float, cap: float | None, latency: float):
        yield env.timeout(start)
        yield from net.transfer(nbytes, ("L",), latency=latency, cap=cap)
        ends[i] = env.now

    for i, flow in enumerate(flows):
        env.process(one(i, *flow))
    env.run()
    return ends, net


def no_private_keys(net: FlowNetwork) -> None:
    for table in (net.capacity, net.busy_s, net.bytes_through):
        assert not [k for k in table if k.startswith("~flow")], table


def test_one_capped_flow_runs_at_its_cap() -> None:
    # link 10 B/s, cap 5 B/s, 100 B after 0.5 s of latency: 0.5 + 100 / 5
    ends, net = run_flows({"L": 10.0}, [(0, 100, 5.0, 0.5)])
    assert ends[0] == pytest.approx(20.5, rel=1e-12)
    assert net.busy_s == {"L": pytest.approx(20.0)}  # latency does not count
    assert net.bytes_through == {"L": pytest.approx(100.0)}
    assert net.capacity == {"L": 10.0}  # the private resource is gone
    no_private_keys(net)


def test_a_cap_above_the_link_changes_nothing() -> None:
    ends, net = run_flows({"L": 10.0}, [(0, 100, 25.0, 0.0)])
    assert ends[0] == pytest.approx(10.0, rel=1e-12)
    no_private_keys(net)


def test_capped_flow_ends_first_then_the_other_takes_the_link() -> None:
    # link 12: A capped at 3 (1/4 of it), B uncapped gets the other 9 (3/4).
    # A: 15 B -> ends at 15/3 = 5; B has moved 45 of 90, then alone at 12: 5 + 45/12 = 8.75
    ends, net = run_flows({"L": 12.0}, [(0, 15, 3.0, 0.0), (0, 90, None, 0.0)])
    assert ends[0] == pytest.approx(5.0, rel=1e-12)
    assert ends[1] == pytest.approx(5.0 + 45.0 / 12.0, rel=1e-12)
    assert net.bytes_through == {"L": pytest.approx(105.0)}
    assert net.busy_s == {"L": pytest.approx(8.75)}
    no_private_keys(net)


def test_uncapped_flow_ends_first_and_the_capped_one_stays_at_its_cap() -> None:
    # A: 60 B capped at 3, B: 90 B at 9 -> B ends at 10 with A at 30 of 60; A alone is still
    # capped at 3: 10 + 30/3 = 20 (it does not take the free link)
    ends, net = run_flows({"L": 12.0}, [(0, 60, 3.0, 0.0), (0, 90, None, 0.0)])
    assert ends[1] == pytest.approx(10.0, rel=1e-12)
    assert ends[0] == pytest.approx(20.0, rel=1e-12)
    assert net.busy_s == {"L": pytest.approx(20.0)}
    no_private_keys(net)


def test_a_capped_flow_joining_late_rerates_the_first() -> None:
    # B uncapped alone at 12 from t=0; A (capped 3) starts at t=2 after latency 1 (moves from
    # t=3). At t=3 B has 36 of 120 done; then B gets 9, A 3. A: 12 B -> ends at t=7, B has
    # 84 - 4*9 = 48 left, alone at 12: ends at t=11.
    ends, net = run_flows({"L": 12.0}, [(2, 12, 3.0, 1.0), (0, 120, None, 0.0)])
    assert ends[0] == pytest.approx(7.0, rel=1e-12)
    assert ends[1] == pytest.approx(11.0, rel=1e-12)
    assert net.busy_s == {"L": pytest.approx(11.0)}
    assert net.bytes_through == {"L": pytest.approx(132.0)}
    no_private_keys(net)


def test_two_capped_flows_have_separate_caps() -> None:
    # each capped at 3 on a 12 B/s link: both run at 3 (their caps are not one shared resource)
    ends, net = run_flows({"L": 12.0}, [(0, 30, 3.0, 0.0), (0, 30, 3.0, 0.0)])
    assert ends == [pytest.approx(10.0, rel=1e-12)] * 2
    # with two caps of 8, the link binds: 6 each
    ends, net = run_flows({"L": 12.0}, [(0, 30, 8.0, 0.0), (0, 30, 8.0, 0.0)])
    assert ends == [pytest.approx(5.0, rel=1e-12)] * 2
    no_private_keys(net)


# --- the timing engine -----------------------------------------------------------------

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b


def one_token_run(write_trace, runtime: str) -> dict:
    """One prompt token, one expert per layer, nothing cached, demand fetches only."""
    experts = (np.arange(LAYERS) % EXPERTS).reshape(1, LAYERS, 1).astype(np.int16)
    trace = write_trace(experts, "mixtral-8x7b", EXPERTS, phase=np.zeros(1, np.uint8))
    result = simulate(
        SimConfig(
            trace=str(trace),
            hardware="h100-pcie",
            runtime=runtime,
            cache={"capacity": 1},
            eviction={"kind": "lru"},
            prefetch={"kind": "none"},
        )
    )
    assert result.metrics["misses_compulsory"] == LAYERS and result.metrics["hits"] == 0
    assert not [r for r in result.per_resource["resource"] if r.startswith("~flow")]
    return result.metrics


def test_slow_copies_stall_by_the_closed_form(write_trace, tmp_path: Path) -> None:
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    data["h2d_efficiency"]["value"] = 0.5
    data["h2d_tensors_per_expert"]["value"] = 3
    slow = tmp_path / "roofline-slow-copies.yaml"
    slow.write_text(yaml.safe_dump(data))

    profile = load_profile("h100-pcie").model_dump(mode="json")
    (link,) = [lk for lk in profile["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    bw, latency = link["bandwidth_bytes_per_s"]["value"], link["latency_s"]["value"]
    assert (bw, latency) == (53e9, 10e-6)
    (host,) = [n for n in profile["nodes"] if n["id"] == "host"]
    assert host["dram_bandwidth_bytes_per_s"]["value"] > bw  # the link, not DRAM, binds
    nbytes = load_model("mixtral-8x7b").expert_bytes

    fast = one_token_run(write_trace, "roofline")
    capped = one_token_run(write_trace, str(slow))
    assert fast["stall_s"] == pytest.approx(LAYERS * (latency + nbytes / bw), rel=1e-9)
    stall = 3 * latency + nbytes / (0.5 * bw)
    assert capped["stall_s"] == pytest.approx(LAYERS * stall, rel=1e-9)
    # nothing overlaps: the run is longer by exactly the extra stall, compute is unchanged
    assert capped["compute_s"] == pytest.approx(fast["compute_s"], rel=1e-12)
    extra = LAYERS * (2 * latency + nbytes / bw)
    assert capped["ttft_s"] - fast["ttft_s"] == pytest.approx(extra, rel=1e-9)
    assert capped["bytes_demand"] == fast["bytes_demand"] == LAYERS * nbytes
