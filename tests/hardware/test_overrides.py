"""What-ifs on a profile without a file (`--set hardware.<path>=<value>`, `runtime.<path>`): the
path syntax, units, provenance, one-line errors, and a run that equals the same run on an edited
profile file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.config import apply_overrides, build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.hardware.overrides import override_profile
from specmd_sim.runs import config_hash
from specmd_sim.runtime import load_runtime
from specmd_sim.units import parse_quantity

H100 = load_profile("h100-pcie")


def test_a_link_by_its_id_with_a_unit_becomes_a_grade_d_what_if() -> None:
    changed = override_profile(H100, {"links.pcie0.bandwidth_bytes_per_s": "64GB/s"}, "t")
    link = changed.links[0]
    assert link.id == "pcie0" and link.bandwidth_bytes_per_s.value == 64e9
    assert link.bandwidth_bytes_per_s.grade == "D"
    assert link.bandwidth_bytes_per_s.source == "override links.pcie0.bandwidth_bytes_per_s=64GB/s"
    assert changed.links[1] == H100.links[1] and changed.nodes == H100.nodes  # nothing else
    # by index, a plain number in SI units; and the grade stated after the value
    same = override_profile(H100, {"links.0.bandwidth_bytes_per_s": 6.4e10,
                                   "links.0.bandwidth_bytes_per_s.grade": "B"}, "t")  # fmt: skip
    assert same.links[0].bandwidth_bytes_per_s.value == 64e9
    assert same.links[0].bandwidth_bytes_per_s.grade == "B"


def test_fields_a_profile_leaves_out_are_added() -> None:
    """The host's clock and ISA (optional) and a runtime's CPU kernel table (an optional
    section) are created by their path."""
    host = override_profile(H100, {"nodes.host.cpu_clock_hz": "2.5GHz",
                                   "nodes.host.isa": "avx512"}, "t").hosts[0]  # fmt: skip
    assert host.cpu_clock_hz is not None and host.cpu_clock_hz.value == 2.5e9
    assert host.isa is not None and host.isa.has("avx2")
    changes = {"cpu_kernel_ops_per_cycle.avx512": 30.0, "kernels.attention": 49,
               "copy_stream": "compute"}  # fmt: skip
    runtime = override_profile(load_runtime("fused-kernels"), changes, "t")
    assert runtime.cpu_kernel_ops_per_cycle is not None
    assert runtime.cpu_kernel_ops_per_cycle.avx512 is not None
    assert runtime.cpu_kernel_ops_per_cycle.avx512.value == 30.0
    assert runtime.kernels.attention.value == 49 and runtime.copy_stream.value == "compute"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("links.pcie9.bandwidth_bytes_per_s", "1GB/s",
         "links.pcie9: expected an item id among pcie0, nvme-pcie0 or an index below 2, got "
         "'pcie9'"),
        ("links.pcie0.bandwidth_bytes_per_s", "64GB",
         "links.pcie0.bandwidth_bytes_per_s: expected a value in B/s such as"),
        ("links.pcie0.bandwith_bytes_per_s", 5,
         "links.0.bandwith_bytes_per_s: expected a field of the profile"),
        ("nodes.gpu0.hbm_bytes", -5, "nodes.0.gpu.hbm_bytes.value: input should be greater"),
        ("links..x", 1, "expected a dotted path such as"),
        ("nodes.gpu0.hbm_bytes.value.x", 1, "expected a section, got a value"),
    ],
)  # fmt: skip
def test_a_wrong_what_if_is_one_line_naming_it(path: str, value: object, message: str) -> None:
    with pytest.raises(SpecmdError) as err:
        override_profile(H100, {path: value}, "hardware_set (profile h100-pcie)")
    text = str(err.value)
    assert text.startswith("hardware_set (profile h100-pcie): ") and message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("64GB/s", "bandwidth_bytes_per_s", 64e9),
        ("25 GiB/s", "bandwidth_bytes_per_s", 25 * 2**30),
        ("64GBps", "bandwidth_bytes_per_s", 64e9),
        ("80GiB", "hbm_bytes", 80 * 2**30),
        ("5us", "latency_s", 5e-6),
        ("10 ms", "kernel_launch_overhead_s", 0.01),
        ("1.5", "latency_s", 1.5),
        ("989TFLOPS", "dense_bf16_flops", 989e12),
        ("989 TFLOP/s", "dense_bf16_flops", 989e12),
        ("2.2GHz", "cpu_clock_hz", 2.2e9),
        ("compute", "copy_stream", "compute"),  # no unit: as is
    ],
)
def test_values_with_the_unit_of_their_field(text: str, field: str, value: object) -> None:
    expected = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
    assert parse_quantity(text, field) == expected


@pytest.mark.parametrize(
    ("text", "field"), [("64GB", "bandwidth_bytes_per_s"), ("5GB/s", "latency_s"),
                        ("5kg", "hbm_bytes"), ("fast", "cpu_clock_hz")],
)  # fmt: skip
def test_a_value_in_the_wrong_unit_names_the_field_and_the_unit(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: expected a value in .* got '{text}'$"):
        parse_quantity(text, field)


def test_set_routes_profile_paths_to_the_what_ifs_and_keeps_the_id() -> None:
    sets = ["hardware=h200", "hardware.links.pcie0.bandwidth_bytes_per_s=64GB/s",
            "runtime.kernels.attention=49", "seed=3"]  # fmt: skip
    data = apply_overrides({}, sets)
    assert data == {"hardware": "h200", "seed": 3,
                    "hardware_set": {"links.pcie0.bandwidth_bytes_per_s": "64GB/s"},
                    "runtime_set": {"kernels.attention": 49}}  # fmt: skip
    config = build_config(data)
    assert config.hardware_set == {"links.pcie0.bandwidth_bytes_per_s": "64GB/s"}
    assert config_hash(config) != config_hash(build_config({"hardware": "h200", "seed": 3}))


def test_a_run_with_a_what_if_is_the_run_on_the_edited_profile(tmp_path: Path) -> None:
    """The same link bandwidth given by --set and by a profile file: the same run."""
    base = {"trace": "mixtral-synthetic", "cache": {"capacity": 32},
            "workload": {"max_requests": 1}, "timing": {"record_spans": False}}  # fmt: skip
    edited = H100.model_dump(mode="json")
    edited["links"][0]["bandwidth_bytes_per_s"]["value"] = 20e9
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(edited))
    on_file = simulate(SimConfig(**base, hardware=str(path))).metrics
    what_if = simulate(SimConfig(**base, hardware_set={
        "links.pcie0.bandwidth_bytes_per_s": "20GB/s"})).metrics  # fmt: skip
    plain = simulate(SimConfig(**base)).metrics
    assert what_if == on_file
    assert what_if["tpot_s"] > plain["tpot_s"]  # 20 GB/s against the profile's 53


def test_a_wrong_what_if_fails_the_run_with_one_line() -> None:
    with pytest.raises(SpecmdError, match=r"^hardware_set \(profile h100-pcie\): links\.pcie9"):
        simulate(SimConfig(hardware_set={"links.pcie9.bandwidth_bytes_per_s": 1e9}))


def test_a_what_if_written_as_sections_is_one_line() -> None:
    """`hardware_set` maps a dotted path to one value; the path written as nested sections
    (`--set hardware_set.links.pcie0...`) is refused naming the key, not misread."""
    with pytest.raises(SpecmdError, match=r"hardware_set: expected a dotted path mapped to one "
                                          r"value .* got a dict at 'links'"):  # fmt: skip
        build_config(apply_overrides({}, ["hardware_set.links.pcie0.bandwidth_bytes_per_s=1"]))
