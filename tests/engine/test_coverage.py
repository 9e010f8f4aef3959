"""The one coverage check (:mod:`specmd_sim.engine.coverage`): a run says which path its engine
takes — the compiled replay or timing core, or the Python layer step — and, on the Python path,
why and at what cost; the result records it (``engine_path``) and ``result.json`` stays the same
on either path. A user's policy from outside specmd_sim, the random eviction, a DRAM cache, no
numba and ``compiled=False`` each take the Python path and say so."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest

from specmd_sim import build_config, replay, simulate
from specmd_sim.engine import jit
from specmd_sim.engine import replay as R
from specmd_sim.engine.coverage import ASKED, EnginePath, replay_path, simulate_path
from specmd_sim.engine.sim import run as S
from specmd_sim.policies.eviction.lru import LRUEviction
from specmd_sim.scenario import RunObjects, build_run, build_runs, build_scenario

REPLAY_SLOWER = "Python layer step, ~100x slower than the compiled replay"
SIMULATE_SLOWER = "Python layer step on SimPy, ~10x slower than the compiled timing core"
MINE = "eviction 'my-policy' (MyPolicy, a subclass) declares no compiled form of its own"


class MyPolicy(LRUEviction):
    """A user's policy from outside specmd_sim: LRU's decisions under its own kind."""

    kind = "my-policy"


def _own(run: RunObjects) -> RunObjects:
    run.eviction.__class__ = MyPolicy
    return run


@contextmanager
def _user_policy() -> Iterator[None]:
    """Both engines' runs built with :class:`MyPolicy` in place of their LRU eviction."""
    with (
        mock.patch.object(R, "build_run", lambda *a: _own(build_run(*a))),
        mock.patch.object(S, "build_runs", lambda *a, **k: [_own(r) for r in build_runs(*a, **k)]),
    ):
        yield


def _compiled(available: bool = True) -> Any:
    """Kernels taken as where numba compiles them (without it they run interpreted)."""
    return mock.patch.object(jit, "available", return_value=available)


@pytest.fixture
def config(small_trace) -> Any:
    trace = str(small_trace("olmoe-1b-7b"))

    def make(**data: Any) -> Any:
        return build_config({"trace": trace, "seed": 3, "cache": {"capacity": 24},
                             "eviction": "lru", **data})  # fmt: skip

    return make


def _paths(cfg: Any, compiled: bool = True) -> tuple[EnginePath, EnginePath]:
    """What the check says of ``cfg`` for replay and for simulate."""
    scenario = build_scenario(cfg)
    run = replay_path(build_run(scenario), None if compiled else False)
    return run, simulate_path(scenario, build_runs(scenario, None, None), compiled)


def test_a_covered_run_takes_the_compiled_paths(config) -> None:
    with _compiled():
        assert _paths(config()) == (EnginePath("replay"), EnginePath("simulate"))
        assert replay(config()).engine_path == "compiled replay"
        assert simulate(config()).engine_path == "compiled timing core"


DRAWS = "'random', which may draw from the run's generator"


@pytest.mark.parametrize(
    ("data", "reason", "plans"),
    [
        ({"eviction": "random"}, "eviction 'random' has no compiled form", DRAWS),
        ({"memory": {"dram_cache": {}}}, "a DRAM cache (memory.dram_cache)", None),
    ],
    ids=["random", "dram-cache"],
)
def test_a_run_it_does_not_cover_says_why_and_what_it_costs(
    config, data: dict[str, Any], reason: str, plans: str | None
) -> None:
    with _compiled():
        paths = _paths(config(**data))
        assert paths == (EnginePath("replay", reason), EnginePath("simulate", reason, plans))
        assert replay(config(**data)).engine_path == f"{REPLAY_SLOWER} (why: {reason})"
        tail = f"; prefetch plans drawn one at a time (why: {plans})" if plans else ""
        got = simulate(config(**data)).engine_path
        assert got == f"{SIMULATE_SLOWER} (why: {reason}){tail}"


def test_a_users_policy_says_why_and_result_json_is_the_same(config) -> None:
    """MyPolicy makes LRU's decisions on the Python path: the file is the compiled LRU's."""
    with _compiled():
        compiled = replay(config()), simulate(config())
        with _user_policy():
            python = replay(config()), simulate(config())
    assert [r.engine_path for r in python] == [
        f"{REPLAY_SLOWER} (why: {MINE})",
        f"{SIMULATE_SLOWER} (why: {MINE}); prefetch plans drawn one at a time "
        "(why: 'my-policy', which may draw from the run's generator)",
    ]
    assert [r.engine_path for r in compiled] == ["compiled replay", "compiled timing core"]
    assert [r.to_json() for r in python] == [r.to_json() for r in compiled]


def test_without_numba_or_when_asked_the_python_path_says_so(config) -> None:
    with _compiled(available=False):
        assert _paths(config()) == (
            EnginePath("replay", jit.UNCOMPILED),
            EnginePath("simulate", jit.UNCOMPILED),  # (the plans' reason is the same)
        )
        with mock.patch.object(R, "replay_compiled") as compiled_replay:
            assert replay(config()).engine_path == f"{REPLAY_SLOWER} (why: {jit.UNCOMPILED})"
        compiled_replay.assert_not_called()
    with _compiled():
        assert _paths(config(), compiled=False) == (
            EnginePath("replay", ASKED),
            EnginePath("simulate", ASKED),  # (its plans are drawn in bulk)
        )
        assert replay(config(), compiled=False).engine_path == f"{REPLAY_SLOWER} (why: {ASKED})"
