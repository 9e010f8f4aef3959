"""The timing engine's compiled core (:mod:`specmd_sim.engine.fast.timed`) gives the run the SimPy
processes give, byte for byte: every metric and table, the spans and the counters, over every
covered eviction policy in both pin modes with and without prefetching, the prefetchers and
predictors it covers, late hits, cancelled prefetches and a stream that waits for space, with
and without spans, batches with Poisson arrivals, dense layers, experts at two precisions,
copies in chunks and on the compute stream, memory parity's write-backs, the host's time
issuing copies, the compute that copies slow, experts on an NVMe drive, a copy method slower
than the link, three copy engines, blocks of one pass, and several GPUs. Runs it does not cover
say why and run on SimPy.

Without numba the core runs interpreted (the same source, slower): these tests compare it
there too."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import yaml
from support.traces import random_trace_ids

from specmd_sim import build_config, make_trace, save_trace, simulate
from specmd_sim.engine.sim import compiled as C
from specmd_sim.engine.sim.fetch import Fetcher
from specmd_sim.hardware import load_profile
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.scenario import build_runs, build_scenario
from specmd_sim.timeline import KIND
from tests.support.results import result_fields

SHAPES = {"olmoe-1b-7b": (16, 64, 8), "deepseek-v2-lite": (26, 64, 6)}  # layers, experts, k


def _trace(folder: Path, model: str, seed: int, requests: int = 3) -> str:
    rng = np.random.default_rng(seed)
    prompt, decode = 4, 6
    tokens = requests * (prompt + decode)
    layers, experts_per_layer, k = SHAPES[model]
    experts = random_trace_ids(rng, tokens, layers, experts_per_layer, k)
    phase = np.tile(np.r_[np.zeros(prompt), np.ones(decode)].astype(np.uint8), requests)
    request = np.repeat(np.arange(requests, dtype=np.int32), prompt + decode)
    pred = rng.integers(0, 40, (2, tokens, layers, experts_per_layer)).astype(np.float16) / 8
    made = make_trace(experts, model=model, num_experts=experts_per_layer, request=request,
                      phase=phase, pred_scores=pred)  # fmt: skip
    return str(save_trace(made, folder / f"{model}-{seed}.npz"))


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = Path(tmp_path_factory.mktemp("compiled"))
    return {
        "olmoe": _trace(folder, "olmoe-1b-7b", 1),
        "dense": _trace(folder, "deepseek-v2-lite", 2),
        "eight requests": _trace(folder, "olmoe-1b-7b", 3, requests=8),
    }


def _compiled() -> Any:
    """The core taken as where numba compiles it (without numba it runs interpreted)."""
    return mock.patch.object(C.jit, "available", return_value=True)


def _both(data: dict[str, Any], block: int | None = None) -> tuple[Any, Any]:
    """The run on SimPy and on the compiled core (``block``: accesses per block)."""
    config = build_config({"seed": 3, **data})
    reference = simulate(config, compiled=False)
    with _compiled(), mock.patch.object(C, "_BLOCK_ACCESSES", block or C._BLOCK_ACCESSES):
        scenario = build_scenario(config)
        assert C.compiled_unsupported(scenario, build_runs(scenario, None, None)) is None
        got = simulate(scenario)
    return reference, got


EVICTIONS = [
    {"kind": "fifo"}, {"kind": "lru"}, {"kind": "lfu"}, {"kind": "least-stale", "order": "fifo"},
    {"kind": "least-stale", "order": "touch"}, {"kind": "least-stale", "order": "layer"},
    {"kind": "belady"}, {"kind": "belady-bypass"}, {"kind": "lfu-aging", "period_passes": 2},
]  # fmt: skip


@pytest.mark.parametrize("eviction", EVICTIONS, ids=lambda e: "-".join(map(str, e.values())))
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "one-at-a-time"])
@pytest.mark.parametrize("prefetch", ["none", "top-k"])
def test_every_policy_gives_the_same_run(
    traces: dict[str, str], eviction: dict[str, str], pinned: bool, prefetch: str
) -> None:
    data = {"trace": traces["olmoe"], "eviction": eviction, "prefetch": prefetch,
            "cache": {"capacity": 200, "pin_demand_set": pinned}}  # fmt: skip
    reference, got = _both(data)
    assert reference.metrics["misses"] > 0 and reference.metrics["hits"] > 0
    assert reference.metrics["stall_s"] > 0
    if prefetch != "none":
        assert reference.metrics["prefetch_issued"] > 0
    assert result_fields(got) == result_fields(reference)


PREFETCHES = {
    "top-k, lookahead 2, weak oracle": ({"kind": "top-k", "k": 3, "lookahead": 2},
                                        {"kind": "noisy-oracle", "accuracy": 0.5}),
    "score-threshold": ({"kind": "score-threshold", "lookahead": 2}, {"kind": "noisy-oracle"}),
    "the trace's scores": ({"kind": "top-k", "lookahead": 2}, {"kind": "trace"}),
    "score-threshold, the trace's scores": ({"kind": "score-threshold"}, {"kind": "trace"}),
    "transitions learned": ({"kind": "top-k", "lookahead": 2}, {"kind": "transition"}),
    "popularity learned": ({"kind": "score-threshold"}, {"kind": "popularity"}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(PREFETCHES), ids=list(PREFETCHES))
def test_prefetchers_give_the_same_run(traces: dict[str, str], case: str) -> None:
    prefetch, predictor = PREFETCHES[case]
    data = {"trace": traces["olmoe"], "prefetch": prefetch, "predictor": predictor,
            "cache": {"capacity": 120}}  # fmt: skip
    reference, got = _both(data)
    assert reference.metrics["prefetch_issued"] > 0
    assert result_fields(got) == result_fields(reference)


@pytest.mark.parametrize("chunk", [None, 3_000_000], ids=["whole", "chunked"])
def test_late_hits_cancellations_and_waits_for_space_give_the_same_run(
    traces: dict[str, str], chunk: int | None
) -> None:
    """A small cache, a slow link and prefetches two layers ahead: late hits join queued or
    moving prefetches, obsolete ones are cancelled at dispatch, and demand fetches that find
    nothing evictable cancel queued ones or wait for space (``make_room``); in chunks, a late
    hit promotes a transfer between two of its chunks."""
    waits = [0]
    make_room = Fetcher.make_room

    def counted(self: Fetcher) -> Any:
        waits[0] += 1
        return make_room(self)

    data = {"trace": traces["olmoe"], "eviction": "lru", "hardware": "slow-link-5gbps",
            "cache": {"capacity": 10, "pin_demand_set": False},
            "prefetch": {"kind": "top-k", "lookahead": 2},
            "predictor": {"kind": "noisy-oracle", "accuracy": 0.6},
            "timing": {"chunk_bytes": chunk}}  # fmt: skip
    with mock.patch.object(Fetcher, "make_room", counted):
        reference, got = _both(data)
    metrics = reference.metrics
    assert metrics["late_hits"] > 0 and metrics["prefetch_cancelled"] > 0 and waits[0] > 0
    assert result_fields(got) == result_fields(reference)


CASES = {
    "no spans": {"timing": {"record_spans": False}},
    "whole prompts past a small cache": {"workload": {"prefill_chunk_tokens": 0},
                                         "cache": {"capacity": 20},
                                         "prefetch": {"kind": "top-k", "lookahead": 2}},
    "batch 3, poisson": {"workload": {"batch_size": 3, "arrivals": "poisson",
                                      "arrival_rate_per_s": 30.0}},
    "continuous, chunked prompts": {"workload": {"scheduler": "continuous", "batch_size": 2,
                                                 "prefill_chunk_tokens": 2}},
    "two precisions": {"precision": {"cold_dtype": "int4", "hot_fraction": 0.25}},
    "t4": {"hardware": "t4"},
    "slow link": {"hardware": "slow-link-5gbps"},
    "big cache": {"cache": {"capacity": "60%"}},
    "chunked copies": {"timing": {"chunk_bytes": 3_000_000},
                       "prefetch": {"kind": "top-k", "lookahead": 2}},
    "copies on the compute stream": {"runtime": "hf-eager"},
    "... one expert at a time": {"runtime": "fiddler", "cache": {"capacity": 150,
                                                                 "pin_demand_set": False}},
    "memory parity": {"runtime": "mixtral-offloading", "cache": {"capacity": 60}},
    "... chunked, prefetched": {"runtime": "mixtral-offloading", "cache": {"capacity": 60},
                                "timing": {"chunk_bytes": 3_000_000},
                                "prefetch": {"kind": "top-k", "lookahead": 2}},
    "experts on NVMe": {"memory": {"dram_capacity": "40%"}},
    "... all of them, chunked, prefetched": {"memory": {"dram_capacity": 1},
                                             "timing": {"chunk_bytes": 3_000_000},
                                             "prefetch": {"kind": "top-k", "lookahead": 2}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_workloads_and_machines_give_the_same_run(traces: dict[str, str], case: str) -> None:
    data = {"trace": traces["olmoe"], "eviction": "lru", "cache": {"capacity": 150}, **CASES[case]}
    reference, got = _both(data)
    spans = reference.spans
    if "runtime" in CASES[case]:  # the stream waited for the copies to drain
        assert ((spans["kind"] == KIND["stall"]) & (spans["expert"] == -1)).any()
    if CASES[case].get("runtime") == "mixtral-offloading":  # evicted experts copied back
        assert (spans["kind"] == KIND["write_back"]).any()
    if "memory" in CASES[case]:  # reads from the drive, at its queue depth's bandwidth
        nvme = reference.per_resource["resource"].index("nvme:nvme0")
        assert reference.per_resource["bytes"][nvme] > 0
    if CASES[case].get("workload", {}).get("prefill_chunk_tokens") == 0:  # overflowed
        assert reference.metrics["overflowed"] > 0
    if "chunk_bytes" in CASES[case].get("timing", {}):  # copies moved in several chunks
        fetches = spans[spans["kind"] == KIND["prefetch"]]
        assert fetches.size and (fetches["bytes"] < fetches["bytes"].max()).any()
    assert result_fields(got) == result_fields(reference)


def test_dense_layers_and_blocks_of_one_pass_give_the_same_run(traces: dict[str, str]) -> None:
    data = {"trace": traces["dense"], "cache": {"capacity": 150}}
    reference, got = _both(data, block=1)
    assert result_fields(got) == result_fields(reference)


def test_a_copy_method_slower_than_the_link_gives_the_same_run(
    traces: dict[str, str], tmp_path: Path
) -> None:
    """Copies capped below the link's rate (progressive filling with a private resource per
    flow, ties broken by name: ~flow10 before ~flow9), each expert as several tensors (more
    latency), over three copy engines."""
    runtime = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    runtime["h2d_efficiency"]["value"] = 0.3
    runtime["h2d_tensors_per_expert"]["value"] = 3
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(runtime))
    profile = load_profile("h100-pcie").model_dump(mode="json")
    profile["nodes"][0]["copy_engines_h2d"]["value"] = 3
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(profile))
    files = {"runtime": str(tmp_path / "rt.yaml"), "hardware": str(tmp_path / "hw.yaml")}
    data = {"trace": traces["olmoe"], "cache": {"capacity": 100}, **files}
    reference, got = _both(data)
    assert reference.per_resource["resource"][-3:] == [f"gpu0/copy-h2d-{i}" for i in range(3)]
    assert result_fields(got) == result_fields(reference)


GPUS = {
    "2 replicas sharing a PCIe switch": {"parallel": {"gpus": 2}, "cache": {"capacity": 60}},
    "8 sharded, defaults": {"parallel": {"gpus": 8, "mode": "expert-sharded"}},
    "4 sharded, lru, no prefetch": {"parallel": {"gpus": 4, "mode": "expert-sharded"},
                                    "eviction": "lru", "prefetch": "none"},
    "4 sharded, belady, one at a time": {
        "parallel": {"gpus": 4, "mode": "expert-sharded"}, "eviction": "belady",
        "cache": {"capacity": 40, "pin_demand_set": False}},
    "4 sharded, lfu, lookahead 2, chunked": {
        "parallel": {"gpus": 4, "mode": "expert-sharded"}, "eviction": "lfu",
        "prefetch": {"kind": "top-k", "lookahead": 2}, "timing": {"chunk_bytes": 3_000_000}},
    "3 replicas, copies on the compute stream, poisson": {
        "parallel": {"gpus": 3}, "runtime": "hf-eager", "cache": {"capacity": 50},
        "workload": {"arrivals": "poisson", "arrival_rate_per_s": 40.0}},
    "3 replicas, batch 2, poisson: passes formed online": {
        "parallel": {"gpus": 3}, "cache": {"capacity": 50},
        "workload": {"batch_size": 2, "arrivals": "poisson", "arrival_rate_per_s": 40.0}},
    "2 sharded, batch 3, least-stale by layer": {
        "parallel": {"gpus": 2, "mode": "expert-sharded"}, "workload": {"batch_size": 3},
        "eviction": {"kind": "least-stale", "order": "layer"}, "cache": {"capacity": 60}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(GPUS), ids=list(GPUS))
def test_several_gpus_give_the_same_run(traces: dict[str, str], case: str) -> None:
    """GPUs sharing the machine's network (one PCIe switch for two GPUs and the host's DRAM;
    NVLink from the peers' HBM in expert-sharded mode, where the GPU's own shard is always a
    hit), in blocks of one pass each, so that the streams wait for their blocks in turn."""
    data = {"trace": traces["eight requests"], "hardware": "hgx-h100-8gpu", **GPUS[case]}
    reference, got = _both(data, block=1)
    metrics = reference.metrics
    assert metrics["misses"] > 0 and metrics["stall_s"] > 0
    if GPUS[case]["parallel"].get("mode") == "expert-sharded":
        assert metrics["hits_home"] > 0
    else:
        assert metrics["hits_home"] == 0 and reference.per_gpu["gpu"] == [
            f"gpu{g}" for g in range(GPUS[case]["parallel"]["gpus"])
        ]
        # two GPUs' copies moved at once over the PCIe switch and the DRAM they share
        first, second = (_copies(reference, f"gpu{g}/copy-h2d-") for g in (0, 1))
        order = np.argsort(first["start"])
        starts, latest_end = first["start"][order], np.maximum.accumulate(first["end"][order])
        before = np.searchsorted(starts, second["end"])  # gpu0's copies starting before each
        assert (latest_end[np.maximum(before - 1, 0)] > second["start"])[before > 0].any()
    assert result_fields(got) == result_fields(reference)


def test_a_run_with_more_write_backs_than_accesses_gives_the_same_run() -> None:
    """Memory parity writes back every evicted expert: at a cache that misses nearly every
    access, a call's write-back chunks outnumber its accesses' slack, and their spans and
    bandwidth samples must still fit the call's buffers (they were once sized without them,
    and the core wrote past their end: a segmentation fault or a double free)."""
    data = {"trace": "mixtral-synthetic", "runtime": "mixtral-offloading",
            "hardware": "a100-80g-sxm", "cache": {"capacity": "20%"}, "eviction": "lru",
            "prefetch": "none", "workload": {"max_requests": 1}}  # fmt: skip
    reference, got = _both(data)
    assert reference.metrics["bytes_written_back"] > 0
    assert reference.metrics["misses"] > 0.9 * (
        reference.metrics["hits"] + reference.metrics["misses"]
    )
    assert result_fields(got) == result_fields(reference)


# setups where copies move beside the compute, for the copy issue's and interference's cases
COPIES = {
    "pinned, prefetched": {"prefetch": {"kind": "top-k", "lookahead": 2}},
    "one at a time, prefetched, three tensors each": {
        "cache": {"capacity": 150, "pin_demand_set": False},
        "prefetch": {"kind": "top-k", "lookahead": 2},
        "runtime_set": {"h2d_tensors_per_expert": 3}},
    "late hits, waits for space": {
        "hardware": "slow-link-5gbps", "cache": {"capacity": 10, "pin_demand_set": False},
        "prefetch": {"kind": "top-k", "lookahead": 2},
        "predictor": {"kind": "noisy-oracle", "accuracy": 0.6}},
}  # fmt: skip
ISSUES = {
    **COPIES,
    "write-backs on the compute stream, chunked": {
        "runtime": "mixtral-offloading", "cache": {"capacity": 60},
        "timing": {"chunk_bytes": 3_000_000}, "prefetch": {"kind": "top-k", "lookahead": 2}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(ISSUES), ids=list(ISSUES))
def test_the_host_issuing_copies_gives_the_same_run(traces: dict[str, str], case: str) -> None:
    """The stream pays for the copies a layer step issued (fetches, write-backs) before it runs
    its experts and at the step's end (``copy_issue`` spans)."""
    data = {"trace": traces["olmoe"], "eviction": "lru", "cache": {"capacity": 150},
            **ISSUES[case]}  # fmt: skip
    data["runtime_set"] = {"copy_issue_overhead_s": "20us", **data.get("runtime_set", {})}
    reference, got = _both(data)
    issued = reference.spans[reference.spans["kind"] == KIND["copy_issue"]]
    assert issued.size and reference.metrics["stall_s"] > 0
    assert result_fields(got) == result_fields(reference)


INTERFERENCES = {
    **COPIES,
    "memory parity's write-backs, chunked": {
        "cache": {"capacity": 60}, "timing": {"chunk_bytes": 3_000_000},
        "prefetch": {"kind": "top-k", "lookahead": 2}, "runtime_set": {"memory_parity": True}},
    "on the compute stream, one at a time, dense layers": {
        "trace": "dense", "cache": {"capacity": 150, "pin_demand_set": False},
        "prefetch": {"kind": "top-k", "lookahead": 2}, "runtime_set": {"copy_stream": "compute"}},
    "write-backs on the compute stream, the issue paid, chunked": {
        "runtime": "mixtral-offloading", "cache": {"capacity": 60},
        "timing": {"chunk_bytes": 3_000_000}, "prefetch": {"kind": "top-k", "lookahead": 2},
        "runtime_set": {"copy_issue_overhead_s": "20us"}},
    "4 sharded, prefetched, blocks of one pass": {
        "trace": "eight requests", "hardware": "hgx-h100-8gpu",
        "parallel": {"gpus": 4, "mode": "expert-sharded"},
        "prefetch": {"kind": "top-k", "lookahead": 2}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(INTERFERENCES), ids=list(INTERFERENCES))
def test_copies_slowing_the_compute_give_the_same_run(traces: dict[str, str], case: str) -> None:
    """A kernel that starts while a copy of its GPU holds a copy engine (a fetch, a write-back)
    runs ``1 + copy_interference`` times as long. With the copies on the compute stream none
    does: the stream waits for them before a layer's attention and its experts, and a pass
    issues none after its last expert."""
    data = {"eviction": "lru", "cache": {"capacity": 150}, **INTERFERENCES[case]}
    data["trace"] = traces[data.get("trace", "olmoe")]
    unset = data.get("runtime_set", {})
    data["runtime_set"] = {"copy_interference": 0.5, **unset}
    reference, got = _both(data, block=1 if "parallel" in data else None)
    alone = simulate(build_config({"seed": 3, **data, "runtime_set": unset}), compiled=False)
    if "on the compute stream" in case:
        assert reference.spans.tobytes() == alone.spans.tobytes()
    else:
        assert sum(reference.per_gpu["compute_s"]) > sum(alone.per_gpu["compute_s"])
    assert result_fields(got) == result_fields(reference)


def _copies(result: Any, prefix: str) -> Any:
    """The spans of the copies on the lanes named from ``prefix``."""
    lanes = [i for i, name in enumerate(result.lanes) if name.startswith(prefix)]
    return result.spans[np.isin(result.spans["lane"], lanes)]


def test_runs_it_does_not_cover_say_why(traces: dict[str, str]) -> None:
    def why(**data: Any) -> str | None:
        config = build_config({"trace": traces["olmoe"], "prefetch": "none",
                               "cache": {"capacity": 12}, **data})  # fmt: skip
        scenario = build_scenario(config)
        with _compiled():
            return C.compiled_unsupported(scenario, build_runs(scenario, None, None))

    assert why() is None
    assert why(prefetch="top-k") is None
    assert why(prefetch="oracle") == "prefetch 'oracle'"
    assert why(parallel={"gpus": 2}, hardware="hgx-h100-8gpu") is None
    assert why(runtime="roofline") is None
    assert why(timing={"chunk_bytes": 1 << 20}) is None
    assert why(runtime="mixtral-offloading") is None  # (memory parity)
    assert why(eviction="random") == "eviction 'random' has no compiled form"
    assert why(miss={"kind": "drop"}) == "miss 'drop'"
    assert why(memory={"dram_capacity": "50%"}) is None  # (experts on the NVMe drive)
    assert why(memory={"dram_cache": {}}) == "a DRAM cache (memory.dram_cache)"
    with mock.patch.object(C.jit, "available", return_value=False):
        config = build_config({"trace": traces["olmoe"], "prefetch": "none"})
        scenario = build_scenario(config)
        assert "not compiled" in (C.compiled_unsupported(scenario, []) or "")


def test_the_compiled_core_reports_progress_at_each_block(tmp_path: Path) -> None:
    """The core returns to Python at the end of each block of passes (~65,536 accesses): each
    return is reported, whatever pass it ends at (a prompt's pass is larger than a token's, so
    the blocks end off the multiples of 64 that the Python engine's reports keep), the last
    with everything done."""
    pytest.importorskip("numba")  # (without it, runs take the SimPy engine, which reports so)
    from specmd_sim.traces import generate_trace
    from specmd_sim.traces.synthetic import PRESETS

    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": 3, "prompt_tokens": 37, "decode_tokens": 400}
    )
    path = save_trace(generate_trace(params, 0), tmp_path / "t.npz")
    reports: list[tuple[int, int]] = []
    config = build_config({"trace": str(path), "timing": {"record_spans": False}})
    simulate(config, lambda done, total: reports.append((done, total)))
    done = [d for d, _ in reports]
    assert len(reports) >= 3 and done == sorted(done) and reports[-1][0] == reports[-1][1]
    assert any(d % 64 for d in done[:-1])
