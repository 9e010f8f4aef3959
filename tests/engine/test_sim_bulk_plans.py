"""The SimPy timing engine's prefetch plans from :class:`~specmd_sim.engine.layer.PlanBlocks`
(drawn ahead in blocks) give the run the plug-ins' own calls give, byte for byte: the metrics, spans
and counters, over top-k and score-threshold, the noisy oracle and the trace's predictions,
both pin modes, two GPUs, and blocks of one pass; runs whose other plug-ins may draw from the
generator are refused. :func:`~specmd_sim.engine.sim.events.settle` processes at once only an
event nothing waits on."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import simpy
from support.traces import random_trace_ids

from specmd_sim import build_config, make_trace, save_trace, simulate
from specmd_sim.engine import layer as L
from specmd_sim.engine.layer import PlanBlocks, bulk_plans_unsupported
from specmd_sim.engine.sim.events import Environment, settle
from specmd_sim.policies.eviction.lru import LRUEviction
from specmd_sim.scenario import build_runs, build_scenario

LAYERS, EXPERTS, K = 16, 64, 8


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three requests of 4 prompt and 6 decode tokens, with two layers of recorded scores."""
    rng = np.random.default_rng(3)
    requests, prompt, decode = 3, 4, 6
    tokens = requests * (prompt + decode)
    experts = random_trace_ids(rng, tokens, LAYERS, EXPERTS, K)
    phase = np.tile(np.r_[np.zeros(prompt), np.ones(decode)].astype(np.uint8), requests)
    request = np.repeat(np.arange(requests, dtype=np.int32), prompt + decode)
    pred = rng.integers(0, 40, (2, tokens, LAYERS, EXPERTS)).astype(np.float16) / 8
    made = make_trace(experts, model="olmoe-1b-7b", num_experts=EXPERTS, request=request,
                      phase=phase, pred_scores=pred)  # fmt: skip
    return str(save_trace(made, Path(tmp_path_factory.mktemp("bulk")) / "t.npz"))


CASES = [
    ({"kind": "top-k"}, {"kind": "noisy-oracle"}, {}),
    ({"kind": "top-k", "k": 3, "lookahead": 2}, {"kind": "noisy-oracle", "accuracy": 0.5}, {}),
    ({"kind": "score-threshold", "lookahead": 2}, {"kind": "noisy-oracle"}, {}),
    ({"kind": "top-k", "lookahead": 2}, {"kind": "trace"}, {"cache": {"capacity": 40}}),
    ({"kind": "score-threshold"}, {"kind": "trace"}, {"eviction": "lru"}),
    ({"kind": "top-k"}, {"kind": "noisy-oracle"},
     {"cache": {"capacity": 40, "pin_demand_set": False}}),
    ({"kind": "top-k", "lookahead": 2}, {"kind": "noisy-oracle"},
     {"hardware": "hgx-h100-8gpu", "parallel": {"gpus": 2}}),
    ({"kind": "top-k"}, {"kind": "noisy-oracle"}, {"timing": {"chunk_bytes": 3_000_000}}),
]  # fmt: skip


def config(trace: str, prefetch: dict[str, Any], predictor: dict[str, Any], **extra: Any) -> Any:
    data = {"trace": trace, "seed": 5, "cache": {"capacity": 48}, "eviction": "least-stale",
            "prefetch": prefetch, "predictor": predictor, **extra}  # fmt: skip
    return build_config(data)


def outcome(trace: str, case: tuple[Any, ...], bulk: bool, block_rows: int) -> dict[str, Any]:
    """The run's metrics, spans and counters; the plans it took from PlanBlocks."""
    prefetch, predictor, extra = case
    taken = [0]
    plan = PlanBlocks.plan

    def counted(self: PlanBlocks, p: int, layer: int) -> list[int]:
        taken[0] += 1
        return plan(self, p, layer)

    off = mock.patch.object(L, "bulk_plans_unsupported", return_value="off")
    with (
        mock.patch.object(PlanBlocks, "plan", counted),
        mock.patch.object(PlanBlocks, "BLOCK_ROWS", block_rows),
        _compiled() if bulk else off,
    ):
        result = simulate(config(trace, prefetch, predictor, **extra), compiled=False)
    assert result.spans is not None
    return {"metrics": result.metrics, "spans": result.spans.tobytes(), "taken": taken[0],
            "counters": {k: v.tobytes() for k, v in result.counters.items()}}  # fmt: skip


def _compiled() -> Any:
    """Bulk plans taken as where numba compiles their kernels (without it they run
    interpreted, the same plans, slower)."""
    return mock.patch.object(L.jit, "available", return_value=True)


@pytest.mark.parametrize("case", CASES)
def test_bulk_plans_give_the_same_run(trace: str, case: tuple[Any, ...]) -> None:
    reference = outcome(trace, case, bulk=False, block_rows=PlanBlocks.BLOCK_ROWS)
    assert reference["taken"] == 0
    assert reference["metrics"]["prefetch_issued"] > 0
    for rows in (PlanBlocks.BLOCK_ROWS, 1):  # 1: a block a pass
        got = outcome(trace, case, bulk=True, block_rows=rows)
        assert got["taken"] > 0  # the plans did come from the blocks
        assert {k: v for k, v in got.items() if k != "taken"} == {
            k: v for k, v in reference.items() if k != "taken"
        }


class _OwnLRU(LRUEviction):
    """A plug-in from outside specmd_sim: it might draw from the run's generator."""


def test_runs_whose_plug_ins_may_draw_are_refused(trace: str) -> None:
    def run(prefetch: str = "top-k", **extra: Any) -> Any:
        cfg = config(trace, {"kind": prefetch}, {"kind": "noisy-oracle"}, **extra)
        return build_runs(build_scenario(cfg), None, None)[0]

    with mock.patch.object(L.jit, "available", return_value=False):
        assert "not compiled" in (bulk_plans_unsupported(run()) or "")
    with _compiled():
        assert bulk_plans_unsupported(run()) is None
        assert "'random'" in (bulk_plans_unsupported(run(eviction="random")) or "")
        own = run()
        own.eviction.__class__ = _OwnLRU
        assert "generator" in (bulk_plans_unsupported(own) or "")
        oracle = run(prefetch="oracle")
        assert bulk_plans_unsupported(oracle) == "prefetch 'oracle'"


def test_settle_processes_at_once_only_an_event_nothing_waits_on() -> None:
    env = Environment()
    seen: list[str] = []
    alone, waited = env.event(), env.event()
    waited.callbacks.append(lambda _: seen.append("waited"))
    queued = next(env._eid)
    settle(alone)
    assert alone.processed and alone.ok and next(env._eid) == queued + 1  # nothing scheduled
    settle(waited)
    assert not waited.processed and not seen
    env.run()
    assert seen == ["waited"]
    with pytest.raises(RuntimeError):
        settle(alone)  # a second success raises, as succeed() does

    def proc() -> Any:
        yield alone  # processed: resumes at once
        seen.append("resumed")

    env.process(proc())
    env.run()
    assert seen == ["waited", "resumed"]
    assert isinstance(alone, simpy.Event)
