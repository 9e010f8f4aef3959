"""Preemption (``workload.kv_cache: paged``): the KV pool in blocks, vLLM's V1 scheduler
preempting the last request to join when a running one finds no free block; the preempted one
recomputes its tokens when it runs again.

A case worked by hand, pass by pass; properties of random tables (every token runs once as
itself and in order, the pool is never exceeded); and the engines: the count in ``inputs``,
the counters on the timeline, SimPy against the compiled core, replay against ``simulate``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scenario.test_build_reference import awkward_trace

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.config import WorkloadConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario import build_scenario
from specmd_sim.scenario.build import kv_bytes_per_token
from specmd_sim.scenario.schedule import build_passes
from specmd_sim.traces import make_trace, save_trace
from specmd_sim.traces.trace import DECODE, PREFILL


def two_requests(layers: int = 1, **kw):
    """Requests 0 and 1, each 2 prompt and 6 decode tokens (8 in all)."""
    request = np.repeat(np.arange(2, dtype=np.int32), 8)
    phase = np.tile(np.r_[0, 0, np.ones(6)].astype(np.uint8), 2)
    experts = np.zeros((16, layers, 1), np.int16)
    return make_trace(experts, model="olmoe-1b-7b", num_experts=64, request=request,
                      phase=phase, **kw)  # fmt: skip


PAGED = {"scheduler": "continuous", "batch_size": 2, "kv_cache": "paged", "kv_block_tokens": 1}


def test_a_preemption_by_hand() -> None:
    """A pool of 10 one-token blocks, two requests of 8 tokens decoded together:

    - pass 0: both prompts (2 blocks each: 6 free); passes 1-3: a decode token each (0 free);
    - pass 4: request 0 needs a block: the last to join, request 1 (5 tokens run), is
      preempted, its 5 blocks freed; no request joins in a step that preempted;
    - passes 5, 6: request 0 alone; request 1, first in the queue, needs 6 blocks (its 5 tokens
      again and the next) and 3, then 2, are free; request 0 leaves after pass 6;
    - pass 7: request 1 recomputes tokens 0-4 (prompt again, no output) with token 5, a decode
      token (its next output); passes 8, 9: its last two."""
    passes = build_passes(two_requests(), WorkloadConfig(**PAGED), kv_pool_tokens=10)
    rows_of = [passes.rows[passes.start[p] : passes.start[p + 1]].tolist() for p in range(10)]
    assert passes.num_passes == 10
    assert rows_of == [
        [0, 1, 8, 9], [2, 10], [3, 11], [4, 12], [5], [6], [7],
        [8, 9, 10, 11, 12, 13], [14], [15],
    ]  # fmt: skip
    assert passes.preempted.tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert passes.kv_resident.tolist() == [4, 6, 8, 10, 6, 7, 8, 6, 7, 8]
    redo = slice(passes.start[7], passes.start[8])
    assert passes.row_phase[redo].tolist() == [PREFILL] * 5 + [DECODE]
    assert not passes.row_first[redo].any() and not passes.first_token[7]
    assert passes.decoders_of(7) == [1] and passes.first_tokens_of(0) == [0, 1]
    assert passes.phase.tolist() == [PREFILL] + [DECODE] * 9
    # each request's decode rows give an output token once, in order
    decoded = [r for p in range(10) for r in passes.decoders_of(p)]
    assert decoded.count(0) == decoded.count(1) == 6


@pytest.mark.parametrize("seed", range(16))
def test_every_token_runs_once_as_itself_and_the_pool_holds(seed: int) -> None:
    """Random tables under pools from the longest request's blocks up: every row runs exactly
    once not recomputed, each request's in order; the blocks the running requests hold never
    exceed the pool; each preemption is followed by a recomputation of what the request had."""
    trace = awkward_trace(seed)
    lengths = np.unique(trace.request, return_counts=True)[1]
    rng = np.random.default_rng(seed)
    for block in (1, 2, 3):
        longest = -(-int(lengths.max()) // block) * block
        for pool in sorted({longest, int(rng.integers(longest, 2 * longest + 1))}):
            for kw in ({"batch_size": 4}, {"batch_size": 3, "max_tokens_per_step": 3},
                       {"batch_size": 8, "prefill_chunk_tokens": 2}):  # fmt: skip
                workload = WorkloadConfig(**{**PAGED, "kv_block_tokens": block, **kw})
                passes = build_passes(trace, workload, kv_pool_tokens=pool)
                _check_table(trace, passes, pool, block)


def _check_table(trace, passes, pool: int, block: int) -> None:
    seen: dict[int, list[int]] = {}  # request -> its rows run as themselves, in order
    held: dict[int, int] = {}  # request -> its tokens computed
    position: dict[int, int] = {}
    for p in range(passes.num_passes):
        lo, hi = passes.start[p], passes.start[p + 1]
        if passes.preempted[p]:  # as the step was formed: the last to join start over
            members = passes.row_request[lo:hi].tolist()
            for r in [r for r in held if r not in members][-int(passes.preempted[p]) :]:
                del held[r]
                position[r] = 0
        for row, r in zip(passes.rows[lo:hi].tolist(), passes.row_request[lo:hi].tolist(),
                          strict=True):  # fmt: skip
            at = position.get(r, 0)
            if at == 0:
                held[r] = 0
            held[r] += 1
            position[r] = at + 1
            mine = seen.setdefault(r, [])
            if at >= len(mine):  # not a recomputation: the request's next row
                mine.append(row)
        assert sum(-(-n // block) for n in held.values()) <= pool // block
        for r in list(held):  # a request that has run all its rows leaves
            if len(seen[r]) == int((trace.request == r).sum()) and position[r] == len(seen[r]):
                del held[r], position[r]
    for r, rows in seen.items():
        assert rows == np.flatnonzero(trace.request == r)[np.argsort(
            trace.phase[trace.request == r], kind="stable")].tolist()  # fmt: skip


def test_a_request_the_pool_cannot_hold_is_refused() -> None:
    with pytest.raises(SpecmdError, match=r"^workload.kv_cache: paged: expected every request"):
        build_passes(
            two_requests(), WorkloadConfig(**{**PAGED, "kv_block_tokens": 3}), kv_pool_tokens=8
        )  # fmt: skip  (8 tokens: 2 blocks of 3, 6 tokens < 8)


def paged_config(tmp_path, pool_tokens: int, **workload) -> SimConfig:
    """Two-request trace (16 layers) on h100-pcie, its expert cache sized to leave a KV pool
    of ``pool_tokens``."""
    recorded = {"arrival_s": np.zeros(16)} if workload.get("arrivals") == "trace" else {}
    trace = save_trace(two_requests(16, **recorded), tmp_path / "two.npz")
    data = {"trace": str(trace), "hardware": "h100-pcie", "cache": {"capacity": "50%"},
            "workload": {**PAGED, **workload}}  # fmt: skip
    scenario = build_scenario(SimConfig.model_validate(data))
    per_token = kv_bytes_per_token(scenario.model)
    capacity = scenario.budgets[0].without_kv - pool_tokens * per_token
    return SimConfig.model_validate({**data, "cache": {"capacity": f"{capacity}B"}})


@pytest.mark.parametrize("arrivals", [{}, {"arrivals": "trace"}])
def test_the_engines_count_and_draw_the_preemption(tmp_path, arrivals) -> None:
    """The hand case in both timing engines (the same run, byte for byte) and replay: one
    preemption in ``inputs``; the counters ``kv_cache_tokens`` (at each pass start) and
    ``preempted_requests``; request 1's output tokens all counted, its TTFT untouched."""
    config = paged_config(tmp_path, 10, **arrivals)  # (recorded: both at 0, formed online)
    reference, got = simulate(config, compiled=False), simulate(config)
    assert json.dumps(got.to_dict(), default=str) == json.dumps(reference.to_dict(), default=str)
    assert np.array_equal(got.spans, reference.spans)
    assert got.inputs["preemptions"] == replay(config).inputs["preemptions"] == 1
    assert got.inputs["passes"] == 10
    kv = got.counters["kv_cache_tokens"]
    assert kv["value"].tolist() == [4, 6, 8, 10, 6, 7, 8, 6, 7, 8]
    assert kv["time"].tolist() == got.per_pass["start_s"]
    cut = got.counters["preempted_requests"]
    assert cut["value"].tolist() == [1] and cut["time"].tolist() == [got.per_pass["start_s"][4]]
    assert got.per_request["decode_tokens"] == [6, 6]
    assert got.per_request["ttft_s"][0] == got.per_request["ttft_s"][1]  # (both in pass 0)
    # reserving whole lengths instead, the second request waits for the first: no preemption
    reserved = simulate(config.model_copy(update={"workload": config.workload.model_copy(
        update={"kv_cache": "wait"})}))  # fmt: skip
    assert reserved.inputs["preemptions"] == 0 and reserved.inputs["passes"] == 14


def test_a_schedule_out_of_room_runs_again_with_more(tmp_path, monkeypatch) -> None:
    """Recorded arrivals (formed online) with room for the trace's rows alone: the recomputed
    ones do not fit, the run starts again with twice the room, and gives what it gives with
    room enough at once."""
    from specmd_sim.engine.sim import run as run_module

    config = paged_config(tmp_path, 10, arrivals="trace")
    want = simulate(config)
    monkeypatch.setattr(run_module, "PAGED_ROOM", 1)
    calls = []
    inner = run_module._simulate
    monkeypatch.setattr(run_module, "_simulate", lambda *a: calls.append(a[-1]) or inner(*a))
    for compiled in (True, False):
        calls.clear()
        got = simulate(config, compiled=compiled)
        assert calls == [1, 2]
        assert json.dumps(got.to_dict(), default=str) == json.dumps(want.to_dict(), default=str)
