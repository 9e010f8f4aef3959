"""The host rule (``specmd_sim/runtime/host_rule.py``): a runtime's host-side costs scale by its
reference host's single-thread speed over the run's host's, worked out by hand."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.hardware.cores import CORES, CoreName, cpuinfo_core
from specmd_sim.hardware.schema import HostNode
from specmd_sim.models import load_model
from specmd_sim.models.cost import CostModel
from specmd_sim.runtime import load_runtime
from specmd_sim.runtime.host_rule import for_host, single_thread_speed


def host(clock: float | None, core: str | None, grade: str = "B") -> HostNode:
    data: dict[str, Any] = {
        "kind": "host", "id": "host", "name": "a CPU",
        "dram_bytes": {"value": 1e11, "source": "t", "grade": "B"},
        "dram_bandwidth_bytes_per_s": {"value": 1e11, "source": "t", "grade": "B"},
        "cpu_flops": {"value": 1e12, "source": "t", "grade": "B"},
    }  # fmt: skip
    if clock is not None:
        data["boost_clock_hz"] = {"value": clock, "source": "t", "grade": grade}
    if core is not None:
        data["core"] = {"value": core, "source": "t", "grade": grade}
    return HostNode.model_validate(data)


def test_the_schema_names_every_core_of_the_table() -> None:
    assert set(typing.get_args(CoreName)) == set(CORES)


def test_speed_is_the_boost_clock_times_the_cores_work_per_clock() -> None:
    h = host(5.7e9, "zen4")
    speed = single_thread_speed(h.boost_clock_hz, h.core)
    assert speed is not None
    assert speed.value == pytest.approx(5.7 * 1.19 * 1.13, rel=1e-2)  # Zen 3 +19%, Zen 4 +13%
    assert speed.grade == "C"  # the chained vendor claims grade it, not the clock's B
    assert single_thread_speed(h.boost_clock_hz, None) is None


def test_mixtral_offloading_on_a_faster_desktop_host_by_hand() -> None:
    rt = load_runtime("mixtral-offloading")  # reference: EPYC 7742, 3.4 GHz Zen 2 = 3.4
    scaled, what = for_host(rt, host(4.8e9, "skylake"))  # 4.8 GHz x 1.00 = 4.8
    factor = 3.4 / 4.8
    assert what.factor == pytest.approx(factor)
    assert scaled.dispatch_overhead_s.value == pytest.approx(56.6e-6 * factor)
    assert scaled.token_overhead_s.value == pytest.approx(2.0e-3 * factor)
    assert scaled.expert_call_overhead_s == rt.expert_call_overhead_s  # zero stays as it was
    assert scaled.dispatch_overhead_s.grade == "D"  # the assumed reference host grades it
    assert "x 0.7083 for the run's host" in scaled.dispatch_overhead_s.source
    assert "x0.708" in what.note and "4.80 GHz x 1.00, skylake" in what.note
    # the numbers that changed are exactly the two non-zero host costs
    before, after = dict(rt.quantities()), dict(scaled.quantities())
    assert {n for n in before if after[n] != before[n]} == {"dispatch_overhead_s",
                                                             "token_overhead_s"}  # fmt: skip


def test_the_eager_path_scales_too() -> None:
    rt = load_runtime("ktransformers")  # reference: Xeon Gold 6454S, 3.4 GHz Golden Cove
    assert rt.eager_prefill is not None
    scaled, what = for_host(rt, host(5.7e9, "zen4"))
    factor = (3.4 * CORES["golden-cove"].ipc) / (5.7 * CORES["zen4"].ipc)
    assert what.factor == pytest.approx(factor)
    assert scaled.eager_prefill is not None
    assert scaled.eager_prefill.op_overhead_s.value == pytest.approx(8e-6 * factor)
    assert scaled.token_overhead_s.value == pytest.approx(31.7e-3 * factor)
    assert scaled.dispatch_overhead_s == rt.dispatch_overhead_s  # 0 (a CUDA graph)


@pytest.mark.parametrize(("clock", "core"), [(None, "zen2"), (3e9, None), (None, None)])
def test_a_host_that_does_not_state_its_speed_leaves_the_costs(
    clock: float | None, core: str | None
) -> None:
    rt = load_runtime("hf-eager")
    same, what = for_host(rt, host(clock, core))  # (the rows' desktops, laptops, rented servers)
    assert same is rt and what.factor == 1.0
    assert "states no boost clock or no core" in what.note


def test_a_runtime_without_a_reference_host_is_not_scaled() -> None:
    rt = load_runtime("roofline")
    same, what = for_host(rt, host(5e9, "zen5"))
    assert same is rt and "names no reference host" in what.note


def test_the_reference_host_itself_changes_nothing() -> None:
    rt = load_runtime("ktransformers")
    same, what = for_host(rt, load_profile("xeon6454s-rtx4090").hosts[0])
    assert same is rt and what.factor == 1.0  # grades stay too


def test_the_cost_model_charges_the_scaled_dispatch() -> None:
    """An op of k kernels: roofline + k x (launch + dispatch x factor), by hand."""
    profile = load_profile("h100-sxm")  # a DGX H100: Xeon 8480C, 3.8 GHz Golden Cove
    gpu, rt = profile.gpus[0], load_runtime("mixtral-offloading")
    scaled, what = for_host(rt, profile.hosts[0])
    factor = 3.4 / (3.8 * CORES["golden-cove"].ipc)
    assert what.factor == pytest.approx(factor)
    model = load_model("mixtral-8x7b")
    bare = CostModel(model, gpu, rt).op_time(0.0, 0.0, kernels=10)
    fast = CostModel(model, gpu, scaled).op_time(0.0, 0.0, kernels=10)
    launch = gpu.kernel_launch_overhead_s.value
    assert bare == pytest.approx(10 * (launch + 56.6e-6))
    assert fast == pytest.approx(10 * (launch + 56.6e-6 * factor))


def _run(trace: str, hardware_set: dict[str, Any], runtime_set: dict[str, Any]) -> Any:
    return simulate(SimConfig.model_validate({
        "hardware": "h100-pcie", "runtime": "hf-eager", "trace": trace,
        "cache": {"capacity": 4}, "eviction": "lru", "prefetch": "none",
        "timing": {"record_spans": False}, "hardware_set": hardware_set,
        "runtime_set": runtime_set,
    }))  # fmt: skip


def test_a_run_scaled_by_the_rule_is_the_run_scaled_by_hand(write_trace: Any) -> None:
    """h100-pcie's host stated as a what-if, a Ryzen 9 7950X's 5.7 GHz Zen 4 (7.6 Zen 2 GHz),
    against hf-eager's reference (3.4): every host-side cost is x 3.4 / 7.6. The same run on a
    host of the reference's speed with those costs multiplied by hand gives the same times."""
    experts = np.stack([[t % 8, (t + 1) % 8] for t in range(4)])
    experts = np.broadcast_to(experts[:, None, :], (4, 32, 2)).astype(np.int16)
    trace = str(write_trace(experts, "mixtral-8x7b", 8, phase=np.array([0, 0, 1, 1], np.uint8)))
    desktop = {"nodes.host.boost_clock_hz": "5.7GHz", "nodes.host.core": "zen4"}
    ruled = _run(trace, desktop, {})
    factor = 3.4 / (5.7 * CORES["zen4"].ipc)
    assert ruled.inputs["host_cost_scale"] == pytest.approx(factor)
    assert f"host costs x{factor:.3f}" in ruled.inputs["host_costs"]
    by_hand = {"dispatch_overhead_s": 8e-6 * factor, "expert_call_overhead_s": 30e-6 * factor,
               "token_overhead_s": 2e-3 * factor}  # fmt: skip
    at_reference = {"nodes.host.boost_clock_hz": "3.4GHz", "nodes.host.core": "zen2"}
    hand = _run(trace, at_reference, by_hand)
    assert hand.inputs["host_cost_scale"] == 1.0
    for metric in ("ttft_s", "tpot_s", "makespan_s", "stall_s"):
        assert ruled.metrics[metric] == pytest.approx(hand.metrics[metric], rel=1e-12), metric
    plain = _run(trace, at_reference, {})  # and the rule moved them
    assert plain.metrics["tpot_s"] > ruled.metrics["tpot_s"]


def test_a_clock_typed_in_ghz_is_refused(tmp_path: Path) -> None:
    data = load_profile("h100-sxm").model_dump(mode="json", exclude_none=True)
    data["nodes"][1]["boost_clock_hz"]["value"] = 3.8  # GHz, where Hz are meant
    path = tmp_path / "ghz.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecmdError, match=r"boost_clock_hz.value: .* 100000000, got 3.8$"):
        load_profile(str(path))


def test_a_calibrated_pair_scales_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """specmd calibrate writes one machine as the host and the runtime's reference: x1."""
    from specmd_sim.execute import calibrate
    from specmd_sim.runtime.schema import HostReference

    fields = {"name": "a CPU", "boost_clock_hz": {"value": 4.2e9, "source": "t", "grade": "A"},
              "core": {"value": "zen3", "source": "t", "grade": "B"}}  # fmt: skip
    monkeypatch.setattr(calibrate, "this_host", lambda: fields)
    ref = HostReference.model_validate(calibrate._host_reference()["host_reference"])
    rt = load_runtime("hf-eager").model_copy(update={"host_reference": ref})
    same, what = for_host(rt, host(4.2e9, "zen3"))
    assert same is rt and what.factor == 1.0


def test_a_bad_core_is_one_clear_line(tmp_path: Path) -> None:
    data = load_profile("rtx3060").model_dump(mode="json", exclude_none=True)
    data["nodes"][1]["core"] = {"value": "zen9", "source": "t", "grade": "D"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecmdError) as err:
        load_profile(str(path))
    message = str(err.value)
    assert "core" in message and "zen9" in message and "\n" not in message


@pytest.mark.parametrize(
    ("vendor", "family", "model", "core"),
    [
        ("AuthenticAMD", 0x17, 0x31, "zen2"),  # EPYC 7742 (Rome)
        ("AuthenticAMD", 0x17, 0x01, "zen"),  # EPYC 7001 (Naples)
        ("AuthenticAMD", 0x17, 0x08, "zen-plus"),  # Ryzen 2000 (Pinnacle Ridge)
        ("AuthenticAMD", 0x19, 0x01, "zen3"),  # EPYC 7003 (Milan)
        ("AuthenticAMD", 0x19, 0x61, "zen4"),  # Ryzen 7000 (Raphael)
        ("AuthenticAMD", 0x1A, 0x44, "zen5"),  # Ryzen 9000 (Granite Ridge)
        ("AuthenticAMD", 0x1A, 0x50, None),  # Zen 6 (Linux amd.c): not in the table
        ("AuthenticAMD", 0x19, 0xB0, None),  # a family 19h model of no known range
        ("GenuineIntel", 6, 0x66, "skylake"),  # Cannon Lake (Palm Cove)
        ("GenuineIntel", 6, 0x55, "skylake"),  # Skylake-SP / Cascade Lake
        ("GenuineIntel", 6, 0x8D, "sunny-cove"),  # Tiger Lake-H (Willow Cove)
        ("GenuineIntel", 6, 0x8F, "golden-cove"),  # Sapphire Rapids
        ("GenuineIntel", 6, 0x3F, None),  # Haswell: not in the table
        ("CentaurHauls", 6, 0x0F, None),
    ],
)
def test_cpuinfo_names_the_core(vendor: str, family: int, model: int, core: str | None) -> None:
    assert cpuinfo_core(vendor, family, model) == core


def test_no_assumed_speed_moves_a_validation_row() -> None:
    """A machine a published measurement ran on has a speed only where a source states its CPU:
    an assumed one that moved results would be a constant per machine (and the measured laptop,
    desktop and rented servers ran slower than their assumed CPUs' boost clocks). A machine a
    profile defines for users, which no row measured, has the speed of the CPU it defines."""
    from specmd_sim.hardware.loader import list_profiles
    from specmd_sim.validate.published import load_dataset

    measured = {g.hardware for g in load_dataset().groups}
    with_speed = set()
    for name in list_profiles():
        for h in load_profile(name).hosts:
            if name in measured:
                for q in (h.boost_clock_hz, h.core):
                    assert q is None or q.grade != "D", name
            if single_thread_speed(h.boost_clock_hz, h.core) is not None:
                with_speed.add(name)
    assert {"xeon6454s-rtx4090", "t4-azure", "i9-10900x-rtx2080"} <= with_speed & measured
    assert {"h100-sxm", "h100-pcie", "rtx4090", "rtx5090"} <= with_speed - measured
    assert not with_speed & {"rtx3060", "rtx3080-mobile", "rtx-a6000", "t4", "rtx6000-ada"}
