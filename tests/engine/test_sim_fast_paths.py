"""The timing engine's fast paths give what the plain SimPy forms give: the same event order,
the same times, the same counters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import simpy

from specmd_sim.engine.sim.events import Environment, soon
from specmd_sim.engine.sim.flows import FlowNetwork

# (start, bytes, resources, latency, cap)
Flow = tuple[float, float, tuple[str, ...], float, float | None]
CAPACITY = {"L": 10.0, "M": 4.0, "N": 25.0}
FLOWS: list[Flow] = [
    (0.0, 100.0, ("L",), 0.5, None),
    (0.0, 60.0, ("L", "M"), 0.0, None),
    (1.0, 80.0, ("L", "N"), 0.25, 3.0),
    (2.0, 40.0, ("N", "N"), 0.0, None),  # a resource listed twice counts twice
    (2.0, 0.0, ("L",), 0.5, None),  # nothing to move: done after its latency
]


def _run(env: simpy.Environment, use_start: bool) -> tuple[list[float], FlowNetwork]:
    net = FlowNetwork(env, dict(CAPACITY))
    ends = [0.0] * len(FLOWS)

    def one(i: int, flow: Flow) -> Any:
        start, nbytes, resources, latency, cap = flow
        yield env.timeout(start)
        if use_start:  # no process waits: the callback records the end
            net.start(nbytes, resources, latency, 1, cap, lambda: ends.__setitem__(i, env.now))
        else:
            yield from net.transfer(nbytes, resources, latency, 1, cap)
            ends[i] = env.now

    for i, flow in enumerate(FLOWS):
        env.process(one(i, flow))
    env.run()
    return ends, net


@pytest.mark.parametrize("use_start", [False, True])
def test_start_and_transfer_agree(use_start: bool) -> None:
    reference, ref_net = _run(simpy.Environment(), use_start=False)
    ends, net = _run(Environment(), use_start)
    assert ends == reference
    assert net.busy_s == ref_net.busy_s
    assert net.bytes_through == ref_net.bytes_through
    assert net.capacity == CAPACITY  # no private rate-cap resource is ever added


def test_a_flow_alone_runs_at_its_narrowest_resource() -> None:
    ends, _ = _run_one(("L", "M"), None)
    assert ends == pytest.approx(100.0 / 4.0, rel=1e-12)
    ends, _ = _run_one(("L", "M"), 2.0)
    assert ends == pytest.approx(100.0 / 2.0, rel=1e-12)
    ends, _ = _run_one(("L", "L"), None)  # listed twice: half of it, as progressive filling
    assert ends == pytest.approx(100.0 / 5.0, rel=1e-12)


def _run_one(resources: tuple[str, ...], cap: float | None) -> tuple[float, FlowNetwork]:
    env = Environment()
    net = FlowNetwork(env, dict(CAPACITY))
    env.process(net.transfer(100.0, resources, 0.0, 1, cap))
    env.run()
    return env.now, net


Start = Callable[[simpy.Environment, Callable[[], None]], None]


def _order(env: simpy.Environment, start: Start) -> list[tuple[float, str]]:
    """Who runs when, for events that tie in time: timeouts, processes and urgent starts."""
    seen: list[tuple[float, str]] = []

    def proc(name: str, delay: float) -> Any:
        yield env.timeout(delay)
        seen.append((env.now, name))
        start(env, lambda: seen.append((env.now, f"{name}+")))
        yield env.timeout(1.0)
        seen.append((env.now, f"{name} again"))

    for i, delay in enumerate((1.0, 0.0, 1.0, 2.0)):
        env.process(proc(f"p{i}", delay))
    env.run()
    return seen


def _as_process(env: simpy.Environment, then: Callable[[], None]) -> None:
    def body() -> Any:
        then()
        yield from ()

    env.process(body())


def _soon(env: simpy.Environment, then: Callable[[], None]) -> None:
    soon(env, lambda _: then())


def test_soon_and_the_loop_keep_simpys_order() -> None:
    reference = _order(simpy.Environment(), _as_process)
    assert _order(Environment(), _soon) == reference
    assert _order(simpy.Environment(), _soon) == reference


def test_the_loop_raises_a_failure_nothing_handled() -> None:
    env = Environment()
    env.event().fail(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        env.run()


def test_the_loop_stops_at_until() -> None:
    env = Environment()
    env.timeout(5.0)
    env.run(until=2.0)
    assert env.now == 2.0
