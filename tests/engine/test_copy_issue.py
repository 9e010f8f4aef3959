"""The host's cost of issuing copies (the runtime's ``copy_issue_overhead_s``, ``c`` below).

The thread that runs the model issues every copy of an expert's tensor (``T`` =
``h2d_tensors_per_expert`` per expert fetched or written back); the compute stream pays for the
copies a layer step issued as one ``copy_issue`` span of ``copies * c`` before it next runs or
waits for an expert, and at the step's end. The copies start moving when they are issued.

Closed forms on Mixtral's shape (the ``roofline`` runtime, one prompt token, h100-pcie, LRU),
each against the same run with issuing free: with ``A`` a layer's attention, ``E``
an expert on one token, ``H`` the LM head and ``F = T * latency + expert_bytes / bandwidth`` one
fetch alone on the link, the run without the cost in which every layer misses its one expert
takes ``L (A + F + E) + H`` (``test_sim_closed_form.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.engine import jit
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.timeline import KIND
from tests.support.results import result_fields

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b


def one_token(write_trace) -> Path:
    """One prompt token routing expert ``l mod 8`` in layer ``l``."""
    ids = (np.arange(LAYERS) % EXPERTS)[None, :, None]
    return write_trace(ids.astype(np.int16), "mixtral-8x7b", EXPERTS,
                       phase=np.zeros(1, np.uint8), name="one.npz")  # fmt: skip


def runtime(tmp_path: Path, issue_s: float | None, tensors: int = 1, parity: bool = False) -> str:
    """``roofline`` with ``issue_s`` seconds per copy issued (None: the field left out), each
    expert ``tensors`` copies, and memory parity or not."""
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    data["h2d_tensors_per_expert"]["value"] = tensors
    data["memory_parity"]["value"] = parity
    if issue_s is not None:
        data["copy_issue_overhead_s"] = {"value": issue_s, "source": "test", "grade": "A"}
    path = tmp_path / f"rt-{issue_s}-{tensors}-{parity}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def fetch_time(tensors: int) -> float:
    """One expert's copy alone on h100-pcie's host link, as ``tensors`` copies."""
    data = load_profile("h100-pcie").model_dump(mode="json")
    (link,) = [lk for lk in data["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    bandwidth, latency = link["bandwidth_bytes_per_s"]["value"], link["latency_s"]["value"]
    return tensors * latency + load_model("mixtral-8x7b").expert_bytes / bandwidth


def run(trace: Path, rt: str, slots: int = 1, **sections: Any) -> Any:
    cfg = SimConfig(
        trace=str(trace), hardware="h100-pcie", runtime=rt, eviction={"kind": "lru"},
        **{"prefetch": {"kind": "none"}, "cache": {"capacity": slots}, **sections},
    )  # fmt: skip
    return simulate(cfg)


def issue_spans(result: Any) -> np.ndarray:
    spans = result.spans
    return spans[spans["kind"] == KIND["copy_issue"]]


@pytest.mark.parametrize("tensors", [1, 3])
@pytest.mark.parametrize("share", [0.25, 2.0], ids=["hidden", "exposed"])
def test_issuing_a_demand_fetch_overlaps_its_copy(
    write_trace, tmp_path: Path, tensors: int, share: float
) -> None:
    """Every layer misses its expert: the fetch starts at the router, the stream issues its
    ``T`` copies (``T c``), then waits for it. A layer takes ``A + max(T c, F) + E``: issuing
    shorter than the copy only shortens the stall (``share`` 0.25: ``T c = F / 4``), longer adds
    its excess (``share`` 2: ``T c = 2 F``)."""
    trace = one_token(write_trace)
    f = fetch_time(tensors)
    c = share * f / tensors
    free = run(trace, runtime(tmp_path, None, tensors))
    paid = run(trace, runtime(tmp_path, c, tensors))
    issue = tensors * c
    assert paid.metrics["ttft_s"] - free.metrics["ttft_s"] == pytest.approx(
        LAYERS * (max(issue, f) - f), rel=1e-9, abs=1e-12
    )
    assert free.metrics["stall_s"] == pytest.approx(LAYERS * f, rel=1e-9)
    assert paid.metrics["stall_s"] == pytest.approx(LAYERS * max(f - issue, 0.0), rel=1e-9)
    assert paid.metrics["compute_s"] - free.metrics["compute_s"] == pytest.approx(
        LAYERS * issue, rel=1e-9
    )
    # one span per layer, right after its attention and before its stall
    spans = issue_spans(paid)
    assert spans["layer"].tolist() == list(range(LAYERS))
    assert np.allclose(spans["end"] - spans["start"], issue, rtol=1e-12)
    attention = paid.spans[paid.spans["kind"] == KIND["attention"]]
    assert np.array_equal(spans["start"], attention["end"])
    assert (spans["expert"] == -1).all() and (spans["bytes"] == 0).all()
    assert not issue_spans(free).size


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "one-at-a-time"])
def test_prefetches_are_paid_for_when_issued(write_trace, tmp_path: Path, pinned: bool) -> None:
    """The oracle prefetches the next layer's expert (two slots: it evicts the layer before).
    With ``T c = 3 F`` every copy lands while the stream still issues: layer 0 issues its demand
    fetch and layer 1's prefetch (pinned: both before its expert, sharing the link, landed by
    ``2 F``; one at a time: the fetch before it, the prefetch at the step's end), each later
    layer the next one's prefetch and finds its own expert a hit, the last none. So the run
    takes ``L (A + E) + H`` plus one issue per layer: ``L (A + F + E) + H - L F + L T c``, with
    no stall."""
    trace = one_token(write_trace)
    f = fetch_time(1)
    c = 3 * f
    free = run(trace, runtime(tmp_path, None))  # demand only, issuing free
    cache = {"capacity": 2, "pin_demand_set": pinned}
    paid = run(trace, runtime(tmp_path, c), prefetch={"kind": "oracle", "lookahead": 1},
               cache=cache)  # fmt: skip
    assert paid.metrics["hits"] == LAYERS - 1 and paid.metrics["stall_s"] == 0.0
    assert paid.metrics["ttft_s"] == pytest.approx(
        free.metrics["ttft_s"] - LAYERS * f + LAYERS * c, rel=1e-9
    )
    spans = issue_spans(paid)
    if pinned:
        assert spans["layer"].tolist() == list(range(LAYERS - 1))
        assert np.allclose(spans["end"] - spans["start"], [2 * c] + [c] * (LAYERS - 2))
    else:  # layer 0 twice: its demand fetch, then its step's prefetch
        assert spans["layer"].tolist() == [0, *range(LAYERS - 1)]
        assert np.allclose(spans["end"] - spans["start"], c)


def test_write_backs_are_issued_by_the_same_thread(write_trace, tmp_path: Path) -> None:
    """Memory parity, one slot: from layer 1 on each fetch evicts the previous layer's expert,
    whose write-back the stream issues with the fetch: 1, then 2 experts' copies per layer."""
    trace = one_token(write_trace)
    c = 1e-4
    paid = run(trace, runtime(tmp_path, c, tensors=2, parity=True))
    assert paid.metrics["bytes_written_back"] > 0
    spans = issue_spans(paid)
    assert spans["layer"].tolist() == list(range(LAYERS))
    assert np.allclose(spans["end"] - spans["start"], [2 * c] + [4 * c] * (LAYERS - 1))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "simpy"])
def test_a_free_issue_changes_nothing(write_trace, tmp_path: Path, compiled: bool) -> None:
    """Stated as 0 (graded A) or left out, the run is the same, span for span: no
    ``copy_issue`` span, no number moved, on either engine (the compiled core runs interpreted
    where numba is not installed)."""
    trace = one_token(write_trace)
    results = []
    for c in (None, 0.0):
        config = SimConfig(
            trace=str(trace), hardware="h100-pcie", runtime=runtime(tmp_path, c),
            cache={"capacity": 4}, prefetch={"kind": "top-k", "lookahead": 2},
            predictor={"kind": "noisy-oracle"},
        )  # fmt: skip
        with mock.patch.object(jit, "available", return_value=True):
            results.append(simulate(config, compiled=compiled))
        assert results[-1].engine_path.startswith("compiled") == compiled
    assert not issue_spans(results[0]).size
    assert result_fields(results[1]) == result_fields(results[0])
