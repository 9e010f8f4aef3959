"""Where time goes: the TTFT/TPOT decomposition, utilization, and how hardware moves the stall."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.hardware import load_profile


def scaled_link(tmp_path: Path, factor: float) -> Path:
    """h100-pcie with its host link's bandwidth multiplied by ``factor``."""
    data = load_profile("h100-pcie").model_dump(mode="json")
    (host_link,) = [lk for lk in data["links"] if lk["id"] == "pcie0"]
    host_link["bandwidth_bytes_per_s"]["value"] *= factor
    path = tmp_path / f"h100-pcie-x{factor}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def demand_only(**kw) -> SimConfig:
    base = {
        "eviction": {"kind": "lru"},
        "prefetch": {"kind": "none"},
        "timing": {"record_spans": False},
    }
    return SimConfig(**{**base, **kw})


def test_doubling_the_host_link_halves_the_stall(small_trace, tmp_path: Path) -> None:
    """Demand-only Mixtral (352 MB experts): the stall is nearly all link time, so doubling
    the PCIe bandwidth halves it; only the 10 µs per-transfer latency is not halved."""
    trace = str(small_trace("mixtral-8x7b", requests=1))
    one = simulate(demand_only(trace=trace, hardware=str(scaled_link(tmp_path, 1.0)))).metrics
    two = simulate(demand_only(trace=trace, hardware=str(scaled_link(tmp_path, 2.0)))).metrics
    assert one["misses"] == two["misses"] > 0
    assert two["stall_s"] / one["stall_s"] == pytest.approx(0.5, rel=0.02)


def test_gh200_stalls_far_less_than_h100_pcie(small_trace) -> None:
    """NVLink-C2C (450 GB/s) against PCIe Gen5 x16 (53 GB/s), same workload and cache."""
    cfg = {"trace": str(small_trace("olmoe-1b-7b"))}
    pcie = simulate(SimConfig(hardware="h100-pcie", **cfg)).metrics
    c2c = simulate(SimConfig(hardware="gh200", **cfg)).metrics
    assert c2c["stall_s"] < 0.25 * pcie["stall_s"]
    assert c2c["ttft_s"] < pcie["ttft_s"] and c2c["tpot_s"] < pcie["tpot_s"]


@pytest.mark.parametrize("chunk_bytes", [None, 4_000_000])
def test_bytes_through_each_link_equal_the_bytes_admitted(
    small_trace, chunk_bytes: int | None
) -> None:
    """Conservation, with prefetches (some cancelled) and, chunked, demand overtaking."""
    result = simulate(
        SimConfig(
            trace=str(small_trace("olmoe-1b-7b")),
            timing={"record_spans": False, "chunk_bytes": chunk_bytes},
        )
    )
    m, res = result.metrics, result.per_resource
    moved = m["bytes_demand"] + m["bytes_prefetch"]
    assert moved > 0 and m["prefetch_issued"] > 0
    for kind, nbytes in zip(res["kind"], res["bytes"], strict=True):
        if kind != "copy-engine":
            assert nbytes == moved
    engines = [b for k, b in zip(res["kind"], res["bytes"], strict=True) if k == "copy-engine"]
    assert sum(engines) == moved


def test_ttft_and_tpot_decompose_into_compute_stall_and_other(small_trace) -> None:
    """Batch 1, closed loop: nothing waits, so other = 0 and the per-layer parts add up."""
    result = simulate(SimConfig(trace=str(small_trace("olmoe-1b-7b"))))
    m, layers, req = result.metrics, result.per_layer, result.per_request
    assert m["ttft_other_s"] == 0.0 and m["tpot_other_s"] == 0.0
    assert m["ttft_compute_s"] + m["ttft_stall_s"] == pytest.approx(m["ttft_s"], rel=1e-9)
    assert m["tpot_compute_s"] + m["tpot_stall_s"] == pytest.approx(m["tpot_s"], rel=1e-9)
    assert sum(layers["ttft_stall_s"]) == pytest.approx(m["ttft_stall_s"], rel=1e-9)
    assert sum(layers["tpot_stall_s"]) == pytest.approx(m["tpot_stall_s"], rel=1e-9)
    assert sum(layers["tpot_compute_s"]) < m["tpot_compute_s"]  # + the LM head
    for r in range(len(req["request"])):
        parts = req["ttft_compute_s"][r] + req["ttft_stall_s"][r] + req["ttft_other_s"][r]
        assert parts == pytest.approx(req["ttft_s"][r], rel=1e-9)
    # closed loop: each request arrives when the previous one has finished
    assert req["arrival_s"][1] == req["finish_s"][0]
    assert m["stall_s"] == pytest.approx(sum(layers["stall_s"]), rel=1e-12)


def test_utilization_and_overlap_are_fractions(small_trace) -> None:
    result = simulate(SimConfig(trace=str(small_trace("olmoe-1b-7b"))))
    m, res = result.metrics, result.per_resource
    assert 0.0 < m["overlap_fraction"] <= 1.0
    assert m["overlap_s"] == pytest.approx(m["overlap_fraction"] * m["transfer_busy_s"])
    for u, f in zip(res["utilization"], res["busy_fraction"], strict=True):
        assert 0.0 <= u <= f + 1e-12 <= 1.0 + 1e-12
    assert m["link_utilization_max"] == max(
        u for u, k in zip(res["utilization"], res["kind"], strict=True) if k != "copy-engine"
    )
    assert m["throughput_tok_s"] == pytest.approx(m["tokens_generated"] / m["makespan_s"])


def test_overlap_does_not_depend_on_span_recording(small_trace) -> None:
    base = {"trace": str(small_trace("olmoe-1b-7b"))}
    on = simulate(SimConfig(**base)).metrics
    off = simulate(SimConfig(**base, timing={"record_spans": False})).metrics
    assert on == off
