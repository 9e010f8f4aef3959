"""Runtime profiles: every bundled one loads with provenance, bad files fail in one line, and a
run's metrics and lowest grade follow the runtime it uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.hardware.schema import Quantity
from specmd_sim.runtime import DEFAULT_RUNTIME, RuntimeProfile, list_runtimes, load_runtime
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.runtime.schema import Kernels
from specmd_sim.validate.published import load_dataset

BUNDLED = ["deepspeed-zero3", "fiddler", "fused-kernels", "hf-eager", "ktransformers", "llama-cpp",
           "mixtral-offloading", "moe-infinity", "roofline"]  # fmt: skip


def raw(runtime: str) -> dict[str, Any]:
    return yaml.safe_load((runtime_dir() / f"{runtime}.yaml").read_text())


def write(tmp_path: Path, data: dict[str, Any], name: str = "rt.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_bundled_ids() -> None:
    assert list_runtimes() == BUNDLED
    assert DEFAULT_RUNTIME in BUNDLED


@pytest.mark.parametrize("runtime", BUNDLED)
def test_every_number_has_a_source_and_a_grade(runtime: str) -> None:
    profile = load_runtime(runtime)
    assert isinstance(profile, RuntimeProfile)
    assert profile.id == runtime  # a bundled runtime's id is its file stem
    names = dict(profile.quantities())
    # every numeric field of the YAML (groups such as kernels.* or eager_prefill.kernels.*
    # flattened) is one of quantities()

    def numbers(data: dict, prefix: str = "") -> set[str]:
        found = set()
        for k, v in data.items():
            if not isinstance(v, dict):
                continue
            if "value" in v:
                if isinstance(v["value"], int | float) and not isinstance(v["value"], bool):
                    found.add(prefix + k)
            else:
                found |= numbers(v, f"{prefix}{k}.")
        return found

    assert numbers(raw(runtime)) == set(names)
    # ... and quantities() yields every required number
    required = {
        n for n, f in RuntimeProfile.model_fields.items()
        if f.is_required() and isinstance(getattr(profile, n), Quantity | Kernels)
    }  # fmt: skip
    assert {n.split(".")[0] for n in names} >= required
    for name, q in names.items():
        assert isinstance(q, Quantity)
        assert q.source.strip(), f"{runtime}: {name} has no source"
        assert q.grade in ("A", "B", "C", "D"), name
    settings = dict(profile.settings())
    required_settings = {"dequant", "copy_stream", "cpu_numa_aware", "memory_parity"}
    assert required_settings <= set(settings) <= required_settings | {"cpu_thread_binding"}
    for choice in settings.values():
        assert choice.source.strip() and choice.grade in ("A", "B", "C", "D")


def test_fitted_constants_say_so() -> None:
    """Every constant the validation data set fits says so first in its source, and nothing else
    does (the values themselves are checked by the calibration rows of the validation)."""
    declared = {(f.runtime, f.field) for f in load_dataset().fits}
    assert declared
    marked = {
        (rid, name)
        for rid in list_runtimes()
        for name, q in load_runtime(rid).quantities()
        if q.source.startswith("fitted")
    }
    assert marked == declared


def test_roofline_is_the_hardware_alone() -> None:
    rt = load_runtime("roofline")
    assert rt.dispatch_overhead_s.value == 0 and rt.token_overhead_s.value == 0
    assert rt.expert_call_overhead_s.value == 0 and rt.workspace_bytes.value == 0
    assert {q.value for n, q in rt.quantities() if n.startswith("kernels.")} == {1}
    assert rt.h2d_efficiency.value == 1 and rt.h2d_tensors_per_expert.value == 1


# --- bad files ---------------------------------------------------------------------------


def one_line(exc: pytest.ExceptionInfo[SpecmdError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    data = raw("roofline") | {"turbo": 3}
    path = write(tmp_path, data)
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    message = one_line(info)
    assert str(path) in message and "turbo" in message


def test_unknown_kernel_key_names_the_dotted_field(tmp_path: Path) -> None:
    data = raw("roofline")
    data["kernels"]["softmax"] = {"value": 1, "source": "x", "grade": "B"}
    path = write(tmp_path, data)
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    message = one_line(info)
    assert str(path) in message and "kernels.softmax" in message


def test_negative_overhead_names_the_field(tmp_path: Path) -> None:
    data = raw("fused-kernels")
    data["dispatch_overhead_s"]["value"] = -1e-6
    path = write(tmp_path, data)
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    message = one_line(info)
    assert str(path) in message and "dispatch_overhead_s" in message and "-1e-06" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [("h2d_efficiency", 1.5), ("h2d_efficiency", 0.0), ("h2d_tensors_per_expert", 0)],
)
def test_out_of_range_fields(tmp_path: Path, field: str, value: float) -> None:
    data = raw("roofline")
    data[field]["value"] = value
    with pytest.raises(SpecmdError) as info:
        load_runtime(write(tmp_path, data))
    assert field in one_line(info)


def test_missing_source_and_bad_grade(tmp_path: Path) -> None:
    data = raw("roofline")
    del data["token_overhead_s"]["source"]
    with pytest.raises(SpecmdError) as info:
        load_runtime(write(tmp_path, data))
    assert "token_overhead_s.source" in one_line(info)
    data = raw("roofline")
    data["token_overhead_s"]["grade"] = "E"
    with pytest.raises(SpecmdError) as info:
        load_runtime(write(tmp_path, data))
    assert "token_overhead_s.grade" in one_line(info)


def test_missing_field_and_bad_dequant(tmp_path: Path) -> None:
    data = raw("roofline")
    del data["workspace_bytes"]
    with pytest.raises(SpecmdError) as info:
        load_runtime(write(tmp_path, data))
    assert "workspace_bytes" in one_line(info) and "missing" in str(info.value)
    data = raw("roofline")
    data["dequant"]["value"] = "magic"
    with pytest.raises(SpecmdError) as info:
        load_runtime(write(tmp_path, data))
    assert "dequant" in one_line(info) and "magic" in str(info.value)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    message = one_line(info)
    assert str(path) in message and "cannot read" in message


def test_unknown_id_lists_the_bundled_ones() -> None:
    with pytest.raises(SpecmdError) as info:
        load_runtime("turbo-eager")
    message = one_line(info)
    assert "'turbo-eager'" in message
    for runtime in BUNDLED:
        assert runtime in message


def test_malformed_yaml_and_non_mapping(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("id: [unclosed\n")
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    assert str(path) in one_line(info) and "malformed YAML" in str(info.value)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    assert str(path) in one_line(info) and "mapping" in str(info.value)


def test_bad_runtime_in_a_run_is_a_one_line_error(tmp_path: Path, write_trace) -> None:
    trace = mixtral_trace(write_trace)
    with pytest.raises(SpecmdError) as info:
        simulate(SimConfig(trace=trace, runtime="nope", cache={"capacity": 2}))
    assert "'nope'" in one_line(info)


# --- runs -------------------------------------------------------------------------------

LAYERS, EXPERTS = 32, 8


def mixtral_trace(write_trace) -> str:
    """One request: 2 prompt + 2 generated tokens, experts (t, t+1) mod 8 in every layer."""
    tokens = 4
    experts = np.stack([[t % EXPERTS, (t + 1) % EXPERTS] for t in range(tokens)])
    experts = np.broadcast_to(experts[:, None, :], (tokens, LAYERS, 2)).astype(np.int16)
    return str(write_trace(experts, "mixtral-8x7b", EXPERTS,
                           phase=np.array([0, 0, 1, 1], np.uint8)))  # fmt: skip


def run(trace: str, runtime: str | Path, hardware: str | Path = "h100-pcie"):
    return simulate(
        SimConfig(
            trace=trace,
            hardware=str(hardware),
            runtime=str(runtime),
            cache={"capacity": 4},
            eviction={"kind": "lru"},
            prefetch={"kind": "none"},
            timing={"record_spans": False},
        )
    )


def test_metrics_follow_the_runtime(write_trace) -> None:
    trace = mixtral_trace(write_trace)
    roof = run(trace, "roofline").metrics
    eager = run(trace, "hf-eager").metrics
    assert roof["misses"] == eager["misses"]  # same decisions, different times
    assert roof["makespan_s"] < eager["makespan_s"]
    assert roof["ttft_s"] < eager["ttft_s"]
    assert roof["compute_s"] < eager["compute_s"]
    # hf-eager copies each expert as 3 pageable tensors at half the link: stalls are longer
    assert roof["stall_s"] < eager["stall_s"]


def all_grades(data: Any, grade: str) -> Any:
    """``data`` with every {value, source, grade} entry's grade set to ``grade``."""
    if isinstance(data, dict):
        out = {k: all_grades(v, grade) for k, v in data.items()}
        if "grade" in out and "source" in out:
            out["grade"] = grade
        return out
    if isinstance(data, list):
        return [all_grades(v, grade) for v in data]
    return data


def test_lowest_grade_includes_runtime_numbers(tmp_path: Path, write_trace) -> None:
    trace = mixtral_trace(write_trace)
    hardware = write(tmp_path, all_grades(load_profile("h100-pcie").model_dump(mode="json"), "B"),
                     "hw-b.yaml")  # fmt: skip
    assert run(trace, "roofline", hardware).hardware_grade == "B"  # roofline: all grade B
    for field, grade in (("token_overhead_s", "D"), ("dispatch_overhead_s", "C")):
        data = raw("roofline")
        data[field]["grade"] = grade
        runtime = write(tmp_path, data, f"rt-{field}.yaml")
        assert run(trace, runtime, hardware).hardware_grade == grade
    data = raw("roofline")
    data["kernels"]["expert"]["grade"] = "D"
    assert run(trace, write(tmp_path, data, "rt-k.yaml"), hardware).hardware_grade == "D"


def test_copy_settings_count_in_the_grade(tmp_path: Path, write_trace) -> None:
    """h2d_efficiency is read by every transfer: graded D, the run is D."""
    trace = mixtral_trace(write_trace)
    hardware = write(tmp_path, all_grades(load_profile("h100-pcie").model_dump(mode="json"), "B"),
                     "hw-b.yaml")  # fmt: skip
    data = raw("roofline")
    data["h2d_efficiency"]["grade"] = "D"
    assert run(trace, write(tmp_path, data), hardware).hardware_grade == "D"
