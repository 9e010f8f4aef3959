"""Timing cases with a closed form, computed by hand from the profile and the model.

Demand-only, every expert missing, one request of one prefill token: per layer the GPU runs
attention, waits for the fetch, then runs the expert(s); nothing can overlap. The expected
times below are written out from the profile's numbers, independently of the cost model code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.profiles import profile_with_engines

from specmd_sim import SimConfig, simulate
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.runtime import load_runtime

LAYERS, EXPERTS = 32, 8  # mixtral-8x7b shape


def roofline(flops: float, nbytes: float, gpu: dict) -> float:
    peak = gpu["dense_bf16_flops"]["value"] * gpu["compute_efficiency"]["value"]
    bw = gpu["hbm_bandwidth_bytes_per_s"]["value"] * gpu["memory_efficiency"]["value"]
    return max(flops / peak, nbytes / bw) + gpu["kernel_launch_overhead_s"]["value"]


def hand_times(gpu: dict, position: int = 1) -> tuple[float, float, float]:
    """Attention (1 token at ``position``: it reads that many tokens' keys and values), one
    expert on 1 token, LM head: Mixtral by hand."""
    h, inter, heads, kv_heads, hd, vocab = 4096, 14336, 32, 8, 128, 32000
    attn_params = h * (2 * heads * hd + 2 * kv_heads * hd) + h * EXPERTS  # + router
    attn = roofline(
        2 * attn_params + 4 * heads * hd * position,
        attn_params * 2 + position * (2 * kv_heads * hd * 2) + 2 * h * 2,
        gpu,
    )
    expert_params = 3 * h * inter
    expert = roofline(2 * expert_params, expert_params * 2 + 2 * h * 2, gpu)
    lm_head = roofline(2 * h * vocab, h * vocab * 2, gpu)
    return attn, expert, lm_head


def run_one_token(
    write_trace, tmp_path: Path, k: int, engines: int, slots: int | None = None
) -> tuple[dict, dict]:
    experts = np.stack([np.arange(k) + (layer % (EXPERTS - k + 1)) for layer in range(LAYERS)])
    trace = write_trace(
        experts[None].astype(np.int16), "mixtral-8x7b", EXPERTS, phase=np.zeros(1, np.uint8)
    )
    cfg = SimConfig(
        trace=str(trace),
        hardware=str(profile_with_engines(tmp_path, engines)),
        cache={"capacity": slots or k},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        runtime="roofline",
    )
    result = simulate(cfg)
    profile = load_profile(cfg.hardware).model_dump(mode="json")
    return result.metrics, profile


def link(profile: dict) -> tuple[float, float]:
    """The host-GPU link (h100-pcie also has an NVMe drive's link, unused here)."""
    (lk,) = [lk for lk in profile["links"] if {lk["a"], lk["b"]} == {"host", "gpu0"}]
    return lk["bandwidth_bytes_per_s"]["value"], lk["latency_s"]["value"]


def test_ttft_single_expert_per_layer(write_trace, tmp_path: Path) -> None:
    metrics, profile = run_one_token(write_trace, tmp_path, k=1, engines=1)
    gpu = profile["nodes"][0]
    attn, expert, lm_head = hand_times(gpu)
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw  # DRAM is faster than PCIe
    expected = LAYERS * (attn + fetch + expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)
    assert metrics["stall_s"] == pytest.approx(LAYERS * fetch, rel=1e-9)
    assert metrics["misses_compulsory"] == LAYERS and metrics["hits"] == 0


def test_ttft_two_concurrent_fetches_share_the_link(write_trace, tmp_path: Path) -> None:
    """Two copy engines, two misses per layer: both flows get half the link and end together."""
    metrics, profile = run_one_token(write_trace, tmp_path, k=2, engines=2)
    attn, expert, lm_head = hand_times(profile["nodes"][0])
    bw, latency = link(profile)
    both = latency + 2 * load_model("mixtral-8x7b").expert_bytes / bw
    expected = LAYERS * (attn + both + 2 * expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)


def test_one_copy_engine_serializes_the_fetches(write_trace, tmp_path: Path) -> None:
    """One copy engine: the second expert's fetch overlaps the first expert's compute."""
    metrics, profile = run_one_token(write_trace, tmp_path, k=2, engines=1)
    attn, expert, lm_head = hand_times(profile["nodes"][0])
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw
    assert expert < fetch  # so the second fetch, not the first expert, is on the critical path
    expected = LAYERS * (attn + 2 * fetch + expert) + lm_head
    assert metrics["ttft_s"] == pytest.approx(expected, rel=1e-9)
    assert metrics["overlap_s"] == pytest.approx(LAYERS * expert, rel=1e-9)


def test_a_demand_set_larger_than_the_cache_streams_its_overflow(write_trace, tmp_path) -> None:
    """Two experts per layer, one slot: the first miss takes the slot (evicting the previous
    layer's expert), the second finds every byte pinned and is streamed past the cache through
    the same copy engine, so the layer takes what two fetches into the cache would."""
    metrics, profile = run_one_token(write_trace, tmp_path, k=2, engines=1, slots=1)
    attn, expert, lm_head = hand_times(profile["nodes"][0])
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw
    assert metrics["ttft_s"] == pytest.approx(LAYERS * (attn + 2 * fetch + expert) + lm_head,
                                              rel=1e-9)  # fmt: skip
    assert metrics["overflowed"] == LAYERS and metrics["evictions"] == LAYERS - 1
    assert metrics["bytes_demand"] == 2 * LAYERS * load_model("mixtral-8x7b").expert_bytes


# --- latency distributions: deterministic arrivals and service times -------------------------


def every_access_misses(tokens: int) -> np.ndarray:
    """Expert 0 of every layer for every token: with one slot, LRU and no prefetching, every
    access misses (each layer evicts the previous layer's expert), so each pass takes the same
    time but for its attention's context."""
    return np.zeros((tokens, LAYERS, 1), np.int16)


def pass_time(profile: dict, position: int) -> float:
    """A one-token pass at ``position`` in which every layer misses its one expert."""
    attn, expert, lm_head = hand_times(profile["nodes"][0], position)
    bw, latency = link(profile)
    fetch = latency + load_model("mixtral-8x7b").expert_bytes / bw
    return LAYERS * (attn + fetch + expert) + lm_head


def simulate_misses(write_trace, tmp_path: Path, **trace: Any) -> tuple[Any, dict]:
    tokens = trace.pop("tokens")
    path = write_trace(every_access_misses(tokens), "mixtral-8x7b", EXPERTS, **trace)
    cfg = SimConfig(
        trace=str(path), hardware=str(profile_with_engines(tmp_path, 1)), cache={"capacity": 1},
        eviction={"kind": "lru"}, prefetch={"kind": "none"}, runtime="roofline",
        workload={"arrivals": "trace"} if "arrival_s" in trace else {},
        slo={"ttft_s": 1.0},
    )  # fmt: skip
    return simulate(cfg), load_profile(cfg.hardware).model_dump(mode="json")


def test_ttft_percentiles_of_a_queue_with_deterministic_arrivals(write_trace, tmp_path) -> None:
    """Ten one-token requests, one every 0.6 service times: each waits for those before it, so
    request i's TTFT is (i + 1)·S − i·a, an arithmetic sequence; its percentiles and the share
    within a limit follow by hand."""
    n = 10
    profile = load_profile("h100-pcie").model_dump(mode="json")
    service = pass_time(profile, 1)
    gap = 0.6 * service
    arrivals = np.arange(n) * gap
    result, profile = simulate_misses(
        write_trace, tmp_path, tokens=n, request=np.arange(n, dtype=np.int32),
        phase=np.zeros(n, np.uint8), arrival_s=arrivals,
    )  # fmt: skip
    ttft = np.array([(i + 1) * service - i * gap for i in range(n)])
    assert result.per_request["ttft_s"] == pytest.approx(ttft.tolist(), rel=1e-9)
    for q in (50, 90, 99):
        # linear interpolation between closest ranks, written out: rank q/100 · (n − 1)
        rank = q / 100 * (n - 1)
        lo = int(rank)
        expected = ttft[lo] + (rank - lo) * (ttft[min(lo + 1, n - 1)] - ttft[lo])
        assert result.metrics[f"ttft_p{q}_s"] == pytest.approx(expected, rel=1e-9)


def test_slo_attainment_and_goodput_of_a_queue(write_trace, tmp_path) -> None:
    """The same queue against a TTFT limit between two requests' TTFTs: the requests before it
    meet it, and goodput is their number over the makespan."""
    n = 10
    profile = load_profile("h100-pcie").model_dump(mode="json")
    service = pass_time(profile, 1)
    gap = 0.6 * service
    ttft = [(i + 1) * service - i * gap for i in range(n)]
    limit = (ttft[6] + ttft[7]) / 2  # requests 0..6 meet it
    path = write_trace(
        every_access_misses(n), "mixtral-8x7b", EXPERTS, request=np.arange(n, dtype=np.int32),
        phase=np.zeros(n, np.uint8), arrival_s=np.arange(n) * gap,
    )  # fmt: skip
    cfg = SimConfig(
        trace=str(path), hardware=str(profile_with_engines(tmp_path, 1)), cache={"capacity": 1},
        eviction={"kind": "lru"}, prefetch={"kind": "none"}, runtime="roofline",
        workload={"arrivals": "trace"}, slo={"ttft_s": limit},
    )  # fmt: skip
    m = simulate(cfg).metrics
    makespan = n * service  # the server never idles: it is always behind the arrivals
    assert m["makespan_s"] == pytest.approx(makespan, rel=1e-9)
    assert m["slo_requests_met"] == 7
    assert m["slo_attainment"] == pytest.approx(0.7)
    assert m["goodput_rps"] == pytest.approx(7 / makespan, rel=1e-9)


def test_tpot_and_itl_percentiles_of_one_decoding_request(write_trace, tmp_path) -> None:
    """One request: a one-token prefill, then 20 decode tokens, each a pass at the next
    position. Every decode pass is one token's time and one inter-token gap."""
    decode = 20
    result, profile = simulate_misses(
        write_trace, tmp_path, tokens=decode + 1,
        phase=np.array([0] + [1] * decode, np.uint8),
    )  # fmt: skip
    times = np.array([pass_time(profile, 2 + j) for j in range(decode)])
    for q in (50, 90, 99):
        expected = float(np.percentile(times, q))
        assert result.metrics[f"tpot_p{q}_s"] == pytest.approx(expected, rel=1e-9)
        assert result.metrics[f"itl_p{q}_s"] == pytest.approx(expected, rel=1e-9)
    assert result.metrics["slo_attainment"] == 1.0  # TTFT one pass, far below 1 s


def test_itl_counts_another_requests_prefill_between_two_tokens(write_trace, tmp_path) -> None:
    """Two requests decoded together (slots, batch 2): A (1 prompt token, 3 decode tokens)
    and B (2 prompt tokens, 1 decode token) join at once, so the passes are A's prefill, B's two
    prefill chunks, then decode steps {A, B}, {A}, {A}. A's first gap spans B's prefill: the
    inter-token latencies are, from the passes' end times, A's (p3 - p0, p4 - p3, p5 - p4) and
    B's p3 - p2, while TPOT is over the three decode passes alone."""
    experts = every_access_misses(7)
    path = write_trace(
        experts, "mixtral-8x7b", EXPERTS, request=np.array([0, 0, 0, 0, 1, 1, 1], np.int32),
        phase=np.array([0, 1, 1, 1, 0, 0, 1], np.uint8),
    )  # fmt: skip
    cfg = SimConfig(
        trace=str(path), hardware=str(profile_with_engines(tmp_path, 1)), cache={"capacity": 1},
        eviction={"kind": "lru"}, prefetch={"kind": "none"}, runtime="roofline",
        workload={"batch_size": 2, "prefill_chunk_tokens": 1},
    )  # fmt: skip
    result = simulate(cfg)
    table = result.per_pass
    assert table["phase"] == ["prefill"] * 3 + ["decode"] * 3
    assert table["request"] == [0, 1, 1, 0, 0, 0]
    end = np.array(table["end_s"])
    start = np.array(table["start_s"])
    gaps = [end[3] - end[0], end[4] - end[3], end[5] - end[4], end[3] - end[2]]
    decode = (end - start)[3:]
    for q in (50, 90, 99):
        assert result.metrics[f"itl_p{q}_s"] == pytest.approx(np.percentile(gaps, q), rel=1e-12)
        assert result.metrics[f"tpot_p{q}_s"] == pytest.approx(np.percentile(decode, q), rel=1e-12)
    assert result.metrics["itl_p99_s"] > 2.5 * result.metrics["tpot_p99_s"]  # three passes
    assert result.metrics["tokens_generated"] == 2 + 4


def test_a_tpot_limit_applies_to_requests_that_decode(write_trace, tmp_path) -> None:
    """One decoding request (its TPOT the mean of its 20 decode passes, by hand) and one
    prompt-only request (no TPOT: the limit does not apply to it): a limit just below the
    decoding request's TPOT is met by one request, just above by both."""
    decode = 20
    path = write_trace(
        every_access_misses(decode + 2), "mixtral-8x7b", EXPERTS,
        request=np.array([0] * (decode + 1) + [1], np.int32),
        phase=np.array([0] + [1] * decode + [0], np.uint8),
    )  # fmt: skip
    profile = load_profile("h100-pcie").model_dump(mode="json")
    tpot = float(np.mean([pass_time(profile, 2 + j) for j in range(decode)]))
    for limit, met in ((tpot * (1 - 1e-6), 1), (tpot * (1 + 1e-6), 2)):
        cfg = SimConfig(
            trace=str(path), hardware=str(profile_with_engines(tmp_path, 1)),
            cache={"capacity": 1}, eviction={"kind": "lru"}, prefetch={"kind": "none"},
            runtime="roofline", slo={"tpot_s": limit},
        )  # fmt: skip
        m = simulate(cfg).metrics
        assert m["slo_requests_met"] == met
        assert m["slo_attainment"] == pytest.approx(met / 2)


def test_continuous_batching_gives_first_and_decode_tokens_in_one_pass(write_trace, tmp_path):
    """Continuous batching of the same two requests (no token limit, whole prompts): step 0
    runs both prompts (two first tokens), step 1 decodes both, steps 2 and 3 decode A. Each
    pass's LM head computes the logits of its output tokens: 2, 2, 1, 1."""
    from specmd_sim.models import CostModel
    from specmd_sim.timeline import KIND

    path = write_trace(
        every_access_misses(7), "mixtral-8x7b", EXPERTS,
        request=np.array([0, 0, 0, 0, 1, 1, 1], np.int32),
        phase=np.array([0, 1, 1, 1, 0, 0, 1], np.uint8),
    )  # fmt: skip
    cfg = SimConfig(
        trace=str(path), hardware=str(profile_with_engines(tmp_path, 1)), cache={"capacity": 2},
        eviction={"kind": "lru"}, prefetch={"kind": "none"}, runtime="roofline",
        workload={"scheduler": "continuous", "batch_size": 2, "prefill_chunk_tokens": 0},
    )  # fmt: skip
    result = simulate(cfg)
    assert result.per_pass["phase"] == ["prefill", "decode", "decode", "decode"]
    assert result.per_request["decode_tokens"] == [3, 1]
    end = result.per_pass["end_s"]
    assert [r - a for r, a in zip(result.per_request["ttft_s"], result.per_request["arrival_s"],
                                  strict=True)] == pytest.approx([end[0]] * 2)  # fmt: skip
    spans = result.spans
    heads = spans[spans["kind"] == KIND["lm_head"]]
    cost = CostModel(load_model("mixtral-8x7b"), load_profile(cfg.hardware).gpus[0],
                     load_runtime("roofline"))  # fmt: skip
    assert heads["pass_"].tolist() == [0, 1, 2, 3]
    want = [cost.lm_head_time(n) for n in (2, 2, 1, 1)]
    assert (heads["end"] - heads["start"]).tolist() == pytest.approx(want, rel=1e-12)
    assert result.metrics["tokens_generated"] == 2 + 4
