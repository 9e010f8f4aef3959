"""Offline bounds: Belady is the floor of every always-admit policy, Belady with bypass the floor
of every policy; and the Belady gap the engine reports.

Demand-only (``prefetch: none``) with ``cache.pin_demand_set: false``: accesses are processed
one at a time, the classic cache model in which MIN (``belady``) is optimal among policies that
admit every miss, and MIN with bypass (``belady-bypass``) is optimal among policies that may
also stream an expert past the cache. ``static-hot`` starts warm (its hot set is preloaded
without a miss), so a cold-start optimum bounds it only up to that warm start:
``belady-bypass <= static-hot + (hot experts preloaded)``; the Belady gap the engine reports
gives the optimum the same warm start, and then the bound is exact.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from support.traces import random_trace_ids

from specmd_sim import SimConfig, replay
from specmd_sim.policies import EVICTION
from specmd_sim.scenario import Scenario, build_scenario

KINDS = EVICTION.kinds()
# policies that may stream a miss past the cache instead of admitting it
BYPASSING = {k for k in KINDS if getattr(EVICTION.get(k), "may_bypass", False)}
ALWAYS_ADMIT = [k for k in KINDS if k not in BYPASSING]

# (model, layers, experts, k, tokens, capacities in slots)
SHAPES = {
    "mixtral": ("mixtral-8x7b", 32, 8, 2, 40, (4, 24, 96)),
    "olmoe": ("olmoe-1b-7b", 16, 64, 8, 20, (8, 51, 160)),
}
SEEDS = (1, 2)


def _trace(write_trace, shape: str, seed: int) -> Path:
    model, layers, experts, k, tokens, _ = SHAPES[shape]
    ids = random_trace_ids(np.random.default_rng(seed), tokens, layers, experts, k)
    half = tokens // 2
    # two requests, each a 4-token prompt and then decode
    request = np.repeat(np.arange(2, dtype=np.int32), half)
    phase = np.tile(np.r_[np.zeros(4), np.ones(half - 4)].astype(np.uint8), 2)
    return write_trace(
        ids, model, experts, name=f"{shape}-{seed}.npz", request=request, phase=phase
    )


def _config(trace: Path, capacity: int, kind: str, **kw: object) -> SimConfig:
    return SimConfig(
        trace=str(trace),
        cache={"capacity": capacity, "pin_demand_set": False},
        eviction={"kind": kind},
        prefetch={"kind": "none"},
        **kw,
    )


def _misses(scenario: Scenario, kind: str) -> int:
    """Replay the built scenario (same trace and capacity) under another eviction policy."""
    config = scenario.config.model_copy(update={"eviction": EVICTION.parse_config(kind)})
    return replay(dataclasses.replace(scenario, config=config)).metrics["misses"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_belady_bounds_every_policy(write_trace, shape: str, seed: int) -> None:
    assert {"belady-bypass", "static-hot"} <= BYPASSING and "belady" not in BYPASSING
    trace = _trace(write_trace, shape, seed)
    for capacity in SHAPES[shape][5]:
        scenario = build_scenario(_config(trace, capacity, "lru"))
        misses = {kind: _misses(scenario, kind) for kind in KINDS}
        where = f"{shape} seed {seed}, {capacity} slots: {misses}"
        for kind in ALWAYS_ADMIT:
            assert misses["belady"] <= misses[kind], f"belady beaten by {kind}; {where}"
        for kind in KINDS:
            if kind != "static-hot":
                assert misses["belady-bypass"] <= misses[kind], f"bypass > {kind}; {where}"
        # static-hot's preloaded experts (at most one per slot) are compulsory misses saved
        assert misses["belady-bypass"] <= misses["static-hot"] + capacity, where
        # the bounds are not vacuous: some online policy misses more than the optimum
        assert misses["belady"] < max(misses[k] for k in ALWAYS_ADMIT), where


@pytest.mark.parametrize("kind", ["lru", "least-stale", "per-layer-lru", "belady"])
def test_belady_gap_for_always_admit_policies(write_trace, kind: str) -> None:
    trace = _trace(write_trace, "mixtral", 3)
    plain = replay(_config(trace, 24, kind)).metrics
    optimum = replay(_config(trace, 24, "belady")).metrics
    m = replay(_config(trace, 24, kind, belady_gap=True)).metrics
    assert {k: m[k] for k in plain} == plain  # the gap adds keys, changes none
    assert m["belady_reference"] == "belady"
    assert m["belady_misses"] == optimum["misses"]
    assert m["belady_hit_rate"] == optimum["hit_rate"]
    assert m["belady_gap_misses"] == m["misses"] - m["belady_misses"] >= 0
    if kind == "belady":
        assert m["belady_gap_misses"] == 0


def test_belady_gap_reference_for_a_bypassing_policy(write_trace) -> None:
    trace = _trace(write_trace, "olmoe", 3)
    optimum = replay(_config(trace, 51, "belady-bypass")).metrics
    m = replay(_config(trace, 51, "belady-bypass", belady_gap=True)).metrics
    assert m["belady_reference"] == "belady-bypass"
    assert m["belady_misses"] == optimum["misses"] == m["misses"]
    assert m["belady_gap_misses"] == 0


def test_belady_gap_of_static_hot_starts_the_optimum_warm(write_trace) -> None:
    """The optimum gets static-hot's preloaded experts too, so the gap is never negative —
    even where a cold optimum would lose (1 token, 32 layers, everything fits)."""
    ids = np.tile(np.array([0, 1], np.int16), (1, 32, 1))
    one = write_trace(ids, "mixtral-8x7b", 8, name="one.npz")
    m = replay(_config(one, 64, "static-hot", belady_gap=True)).metrics
    assert (m["misses"], m["belady_misses"], m["belady_gap_misses"]) == (0, 0, 0)
    cold = replay(_config(one, 64, "belady-bypass")).metrics
    assert cold["misses"] == 64  # the cold optimum alone would appear to lose by 64
    trace = _trace(write_trace, "olmoe", 3)
    m = replay(_config(trace, 51, "static-hot", belady_gap=True)).metrics
    assert m["belady_reference"] == "belady-bypass"
    assert m["belady_gap_misses"] == m["misses"] - m["belady_misses"] >= 0
