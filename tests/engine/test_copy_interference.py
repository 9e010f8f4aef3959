"""What a copy moving costs the compute (the runtime's ``copy_interference``, ``f`` below).

A kernel of the compute stream (attention, an expert, the LM head; not the host's
``copy_issue``) that starts while a copy of its GPU holds one of its copy engines runs
``1 + f`` times as long, whole; one that starts with none moving runs as without the term.

Closed forms on Mixtral's shape (the ``roofline`` runtime, h100-pcie, LRU), each against the
same run without the term: ``A`` a layer's attention, ``E`` an expert on one token, ``H`` the
LM head, ``F`` one fetch alone on the link (``test_sim_closed_form.py``), ``L`` the layers.
Each runs on both engines (the compiled core runs interpreted where numba is not installed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.engine import jit
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.scenario import build_scenario
from specmd_sim.timeline import KIND
from tests.support.results import result_fields

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b
ENGINES = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "simpy"])


def one_token(write_trace) -> Path:
    """One prompt token routing expert ``l mod 8`` in layer ``l``."""
    ids = (np.arange(LAYERS) % EXPERTS)[None, :, None]
    return write_trace(ids.astype(np.int16), "mixtral-8x7b", EXPERTS,
                       phase=np.zeros(1, np.uint8), name="one.npz")  # fmt: skip


def two_passes(write_trace) -> Path:
    """A prompt token routing experts 0 and 1 of each layer, then a decode token routing 0 and
    2."""
    ids = np.zeros((2, LAYERS, 2), np.int16)
    ids[:, :, 1] = [[1], [2]]
    return write_trace(ids, "mixtral-8x7b", EXPERTS, phase=np.array([0, 1], np.uint8),
                       request=np.zeros(2, np.int32), name="two.npz")  # fmt: skip


def runtime(tmp_path: Path, interference: float | None, issue_s: float | None = None) -> str:
    """``roofline`` with ``copy_interference`` ``interference`` and ``issue_s`` seconds per
    copy issued (None: the field left out)."""
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    for name, value in (("copy_interference", interference), ("copy_issue_overhead_s", issue_s)):
        if value is not None:
            data[name] = {"value": value, "source": "test", "grade": "A"}
    path = tmp_path / f"rt-{interference}-{issue_s}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(trace: Path, rt: str, compiled: bool, **sections: Any) -> Any:
    cfg = SimConfig(
        trace=str(trace), hardware="h100-pcie", runtime=rt, eviction={"kind": "lru"},
        **{"prefetch": {"kind": "none"}, "cache": {"capacity": 1}, **sections},
    )  # fmt: skip
    with mock.patch.object(jit, "available", return_value=True):
        result = simulate(cfg, compiled=compiled)
    assert result.engine_path.startswith("compiled") == compiled, result.engine_path
    return result


def durations(result: Any, kind: str) -> np.ndarray:
    spans = result.spans[result.spans["kind"] == KIND[kind]]
    return spans["end"] - spans["start"]


@ENGINES
def test_a_hit_runs_beside_the_fetch_of_a_miss(write_trace, tmp_path: Path, compiled: bool) -> None:
    """Pass 0 misses experts 0 and 1 of each layer, and its experts start once both fetches
    landed: it is the run without the term. Pass 1 routes expert 0 (resident now) and 2 (a
    miss): at the end of a layer's attention the router issues 2's fetch and the stream runs
    expert 0 at once, beside it (``E (1 + f)``), then waits for the fetch and runs expert 2
    with nothing moving (``E``). With ``E (1 + f) < F`` a layer of pass 1 still takes
    ``A + F + E``: the run ends as without the term, with ``L f E`` more compute and as much
    less stall."""
    trace = two_passes(write_trace)
    f = 0.5
    cache = {"capacity": 3 * LAYERS}
    free = run(trace, runtime(tmp_path, None), compiled, cache=cache)
    slowed = run(trace, runtime(tmp_path, f), compiled, cache=cache)
    spans, before = slowed.spans, free.spans
    assert np.array_equal(spans[spans["pass_"] == 0], before[before["pass_"] == 0])
    e = durations(free, "expert")
    assert np.allclose(e, e[0], rtol=1e-9, atol=0)  # E, every one
    experts = spans[(spans["kind"] == KIND["expert"]) & (spans["pass_"] == 1)]
    assert experts["expert"].tolist() == [key for layer in range(LAYERS)
                                          for key in (8 * layer, 8 * layer + 2)]  # fmt: skip
    assert np.allclose(experts["end"] - experts["start"], [e[0] * (1 + f), e[0]] * LAYERS,
                       rtol=1e-9, atol=0)  # fmt: skip
    fetched = spans[(spans["kind"] == KIND["demand_fetch"]) & (spans["pass_"] == 1)]
    assert np.array_equal(experts["start"][::2], fetched["start"])  # as its fetch is issued
    assert np.all(experts["end"][::2] < fetched["end"])  # (E (1 + f) < F)
    extra = LAYERS * f * e[0]
    assert slowed.metrics["makespan_s"] == pytest.approx(free.metrics["makespan_s"], rel=1e-12)
    assert slowed.metrics["compute_s"] == pytest.approx(free.metrics["compute_s"] + extra,
                                                        rel=1e-12)  # fmt: skip
    assert slowed.metrics["stall_s"] == pytest.approx(free.metrics["stall_s"] - extra, rel=1e-12)


@ENGINES
def test_kernels_that_start_beside_a_prefetch_are_lengthened(
    write_trace, tmp_path: Path, compiled: bool
) -> None:
    """A perfect predictor prefetches the next layer's expert (two slots; one copy engine, so a
    copy moves alone). Layer 0's attention starts with nothing moving (``A``); its router issues the
    demand fetch and layer 1's prefetch, queued behind it; the stream stalls until the fetch
    lands at ``A + F``, when the prefetch starts, so expert 0 runs beside it: ``E (1 + f)``.
    Every later layer's attention starts beside its own expert's prefetch (``A (1 + f)``), its
    router issues the next one, queued, and its expert, a late hit, waits for its prefetch and
    starts beside the next (``E (1 + f)``) -- except the last layer's, which has no next one
    (``E``); the LM head starts with nothing moving (``H``). With ``(A + E)(1 + f) < F`` every
    lengthening hides in a stall: the TTFT stays ``A + L F + E + H`` while the compute grows by
    ``f (L - 1)(A + E)`` and the stall shrinks by as much."""
    trace = one_token(write_trace)
    f = 0.5
    sections = {"prefetch": {"kind": "top-k", "k": 1, "lookahead": 1},
                "predictor": {"kind": "noisy-oracle", "accuracy": 1.0}, "cache": {"capacity": 2},
                "hardware_set": {"nodes.gpu0.copy_engines_h2d": 1}}  # fmt: skip
    free = run(trace, runtime(tmp_path, None), compiled, **sections)
    slowed = run(trace, runtime(tmp_path, f), compiled, **sections)
    attention, expert = durations(free, "attention"), durations(free, "expert")
    assert np.allclose(attention, attention[0], rtol=1e-9, atol=0)  # (A, E: one each)
    assert np.allclose(expert, expert[0], rtol=1e-9, atol=0)
    a, e = attention[0], expert[0]
    assert (a + e) * (1 + f) < free.metrics["stall_s"] / LAYERS  # (F - A - E)
    assert np.allclose(durations(slowed, "attention"), [a] + [a * (1 + f)] * (LAYERS - 1),
                       rtol=1e-9, atol=0)  # fmt: skip
    assert np.allclose(durations(slowed, "expert"), [e * (1 + f)] * (LAYERS - 1) + [e],
                       rtol=1e-9, atol=0)  # fmt: skip
    assert np.array_equal(durations(slowed, "lm_head"), durations(free, "lm_head"))
    extra = f * (LAYERS - 1) * (a + e)
    assert slowed.metrics["ttft_s"] == pytest.approx(free.metrics["ttft_s"], rel=1e-12)
    assert slowed.metrics["compute_s"] == pytest.approx(free.metrics["compute_s"] + extra,
                                                        rel=1e-12)  # fmt: skip
    assert slowed.metrics["stall_s"] == pytest.approx(free.metrics["stall_s"] - extra,
                                                      rel=1e-12)  # fmt: skip


@ENGINES
def test_kernels_with_no_copy_moving_are_not(write_trace, tmp_path: Path, compiled: bool) -> None:
    """Demand fetches only, one slot: every layer's attention starts after the layer before
    waited for its fetch, every expert after its own fetch landed (``L (A + F + E) + H``, with
    nothing moving as any kernel starts): the run is the run without the term, span for span."""
    trace = one_token(write_trace)
    free = run(trace, runtime(tmp_path, None), compiled)
    slowed = run(trace, runtime(tmp_path, 1.0), compiled)
    assert free.metrics["stall_s"] > 0
    assert result_fields(slowed) == result_fields(free)


@ENGINES
def test_a_copy_that_ends_as_a_kernel_starts(write_trace, tmp_path: Path, compiled: bool) -> None:
    """Events at one instant run in the order they were scheduled. The link's latency 0, the
    issue of one copy takes ``c = expert_bytes / bandwidth``: exactly a fetch alone on the link.

    Pass 0 misses experts 0 and 1 in each layer: the router issues both fetches at ``t``, which
    share the link and end at ``t + 2c``, the instant their issue (``2c``) ends. The stream
    waits for expert 0's fetch (a stall of length 0) and resumes after both ended: nothing
    moves as the experts start, so pass 0 is the run without the term. Pass 1 (decode) routes
    experts 0 (resident) and 2 (a miss): the router issues 2's fetch at ``t``; the stream
    issues it (``c``) and runs expert 0 at ``t + c``, the instant the fetch ends. The stream's
    resumption was scheduled at ``t``, before the fetch started moving and scheduled its end, so
    expert 0 starts beside it: ``E (1 + f)``; expert 2 starts with nothing moving: ``E``."""
    trace = two_passes(write_trace)
    profile = load_profile("h100-pcie").model_dump(mode="json")
    (pcie,) = [lk for lk in profile["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    c = load_model("mixtral-8x7b").expert_bytes / pcie["bandwidth_bytes_per_s"]["value"]
    f = 0.25
    sections = {"cache": {"capacity": 3 * LAYERS},
                "hardware_set": {f"links.{pcie['id']}.latency_s": 0.0}}  # fmt: skip
    free = run(trace, runtime(tmp_path, None, c), compiled, **sections)
    slowed = run(trace, runtime(tmp_path, f, c), compiled, **sections)
    spans, before = slowed.spans, free.spans
    issued = spans[spans["kind"] == KIND["copy_issue"]]
    assert np.allclose(issued["end"] - issued["start"], [2 * c] * LAYERS + [c] * LAYERS,
                       rtol=1e-9, atol=0)  # fmt: skip
    # pass 0: each layer's fetches end as their issue does; the stream waited for them
    first = spans[spans["pass_"] == 0]
    assert np.array_equal(first, before[before["pass_"] == 0])
    fetched = first[first["kind"] == KIND["demand_fetch"]]
    stalls = first[first["kind"] == KIND["stall"]]
    assert np.array_equal(fetched["end"][::2], issued["end"][:LAYERS])
    assert np.array_equal(stalls["start"], stalls["end"]) and stalls.size == LAYERS
    # pass 1: each layer's fetch ends as expert 0 starts, beside it
    experts = spans[(spans["kind"] == KIND["expert"]) & (spans["pass_"] == 1)]
    assert experts["expert"].tolist() == [key for layer in range(LAYERS)
                                          for key in (8 * layer, 8 * layer + 2)]  # fmt: skip
    fetched = spans[(spans["kind"] == KIND["demand_fetch"]) & (spans["pass_"] == 1)]
    assert np.array_equal(experts["start"][::2], issued["end"][LAYERS:])
    assert np.array_equal(experts["start"][::2], fetched["end"])
    alone = durations(free, "expert")  # E, every one
    assert np.allclose(alone, alone[0], rtol=1e-9, atol=0)
    assert np.allclose(experts["end"] - experts["start"], [alone[0] * (1 + f), alone[0]] * LAYERS,
                       rtol=1e-9, atol=0)  # fmt: skip
    assert np.allclose(durations(slowed, "attention"), durations(free, "attention"), rtol=1e-9,
                       atol=0)  # fmt: skip


@ENGINES
def test_stated_as_zero_or_left_out_changes_nothing(
    write_trace, tmp_path: Path, compiled: bool
) -> None:
    """Stated as 0 (graded A) or left out, with copies moving beside kernels: the run is the
    same, span for span."""
    trace = one_token(write_trace)
    sections = {"cache": {"capacity": 4}, "prefetch": {"kind": "top-k", "lookahead": 2},
                "predictor": {"kind": "noisy-oracle"}}  # fmt: skip
    results = [run(trace, runtime(tmp_path, f), compiled, **sections) for f in (None, 0.0)]
    assert results[0].metrics["prefetch_issued"] > 0
    assert result_fields(results[1]) == result_fields(results[0])


def test_replay_is_unaffected(write_trace, tmp_path: Path) -> None:
    """Replay counts the cache's decisions, which take no time: the term changes none."""
    trace = one_token(write_trace)
    metrics = []
    for f in (None, 1.0):
        cfg = SimConfig(trace=str(trace), hardware="h100-pcie", runtime=runtime(tmp_path, f),
                        cache={"capacity": 2},
                        prefetch={"kind": "oracle", "lookahead": 1})  # fmt: skip
        metrics.append(replay(build_scenario(cfg)).metrics)
    assert metrics[0]["hits"] > 0
    assert metrics[1] == metrics[0]
