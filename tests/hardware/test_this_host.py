"""This machine's CPU read for the calibrated profile (``specmd calibrate``): the fields
/proc/cpuinfo gives, worked out by hand from sample texts."""

from __future__ import annotations

import pytest

from specmd_sim.hardware.schema import HostNode
from specmd_sim.hardware.this_host import host_fields, this_host


def processor(n: int, socket: int, core: int, flags: str, name: str) -> str:
    return (f"processor\t: {n}\nmodel name\t: {name}\nphysical id\t: {socket}\n"
            f"core id\t\t: {core}\ncpu MHz\t\t: 3000.000\nflags\t\t: {flags}\n")  # fmt: skip


def two_sockets(flags: str, name: str = "Intel(R) Xeon(R) Gold 6454S @ 2.20GHz") -> str:
    """2 sockets x 2 cores x 2 threads: 8 processors, 4 physical cores."""
    return "\n".join(
        processor(n, n // 4, (n // 2) % 2, flags, name) for n in range(8)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "isa"),
    [
        ("fpu sse2 avx2 avx512f avx512_vnni amx_bf16 amx_tile", "amx"),
        ("fpu sse2 avx2 avx512f avx512_bf16", "avx512"),
        ("fpu sse2 avx avx2 fma", "avx2"),
        ("fpu sse2 avx", "baseline"),
    ],
)
def test_cores_sockets_and_the_widest_extension(flags: str, isa: str) -> None:
    fields = host_fields(two_sockets(flags))
    assert fields["physical_cores"]["value"] == 4  # hyper-threads counted once
    assert fields["sockets"]["value"] == 2
    assert fields["isa"]["value"] == isa
    assert fields["name"] == "Intel(R) Xeon(R) Gold 6454S @ 2.20GHz"


def test_the_clock_is_the_base_one_where_the_system_gives_it() -> None:
    text = two_sockets("avx2")
    assert host_fields(text, "2100000\n")["cpu_clock_hz"]["value"] == 2.1e9  # cpufreq, kHz
    nominal = host_fields(text)["cpu_clock_hz"]  # else the model name's nominal clock
    assert nominal["value"] == pytest.approx(2.2e9) and nominal["grade"] == "A"
    current = host_fields(two_sockets("avx2", name="Intel(R) Xeon(R) Processor"))["cpu_clock_hz"]
    assert current["value"] == 3.0e9 and current["grade"] == "C"  # 'cpu MHz': graded lower


def test_an_arm_host_without_topology_counts_its_processors() -> None:
    text = "\n".join(f"processor\t: {n}\nFeatures\t: fp asimd sve sve2\nCPU part\t: 0xd4f\n"
                     for n in range(4))  # fmt: skip
    fields = host_fields(text)
    assert fields["physical_cores"]["value"] == 4 and fields["physical_cores"]["grade"] == "C"
    assert fields["isa"]["value"] == "sve2" and "sockets" not in fields
    assert "cpu_clock_hz" not in fields


def test_nothing_readable_gives_no_fields() -> None:
    assert host_fields("") == {}


def test_this_machines_fields_make_a_valid_host() -> None:
    fields = this_host()
    node = {"kind": "host", "id": "host", **fields, "name": fields.get("name", "this machine"),
            "dram_bytes": {"value": 1e9, "source": "t", "grade": "A"},
            "dram_bandwidth_bytes_per_s": {"value": 1e9, "source": "t", "grade": "A"},
            "cpu_flops": {"value": 1e9, "source": "t", "grade": "A"}}  # fmt: skip
    HostNode.model_validate(node)


def test_the_boost_clock_and_the_core_for_the_host_rule() -> None:
    """cpufreq's maximum (kHz) is the boost clock; vendor, family and model name the core."""
    text = "".join(
        f"processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 97\n"
        f"model name\t: AMD Ryzen 9 7950X 16-Core Processor\nphysical id\t: 0\n"
        f"core id\t\t: {n}\nflags\t\t: avx2 avx512f\n\n"
        for n in range(2)
    )
    fields = host_fields(text, None, "5881000\n", "amd-pstate-epp\n")
    assert fields["boost_clock_hz"]["value"] == 5.881e9
    assert fields["core"]["value"] == "zen4"  # family 19h, model 61h: Raphael
    HostNode.model_validate({  # the calibrated profile's host takes them
        "kind": "host", "id": "host", "name": fields["name"],
        "dram_bytes": {"value": 1e11, "source": "t", "grade": "A"},
        "dram_bandwidth_bytes_per_s": {"value": 1e11, "source": "t", "grade": "A"},
        "cpu_flops": {"value": 1e12, "source": "t", "grade": "A"},
        **{k: v for k, v in fields.items() if k != "name"},
    })  # fmt: skip
    # acpi-cpufreq's maximum stops below boost (an EPYC 7742 shows its 2.25 GHz base there)
    assert "boost_clock_hz" not in host_fields(text, None, "2250000", "acpi-cpufreq")
    for bad in ("0", "n/a", ""):
        assert "boost_clock_hz" not in host_fields(text, None, bad, "intel_pstate")
    bare = host_fields(text.replace("AuthenticAMD", "HygonGenuine"))  # a core the table lacks,
    assert "boost_clock_hz" not in bare and "core" not in bare  # a VM without cpufreq
