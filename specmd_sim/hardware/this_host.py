"""This machine's CPU as a hardware profile describes a host: its name, sockets, physical cores,
clock, widest vector/matrix extension, boost clock and core, read from the operating system
(``specmd calibrate`` writes them into the calibrated profile, so the CPU expert kernel's rate,
:meth:`~specmd_sim.models.CostModel.cpu_rate`, and the runtime's host-side costs,
:mod:`specmd_sim.runtime.host_rule`, can be carried to this machine).

Linux's ``/proc/cpuinfo`` gives the model name, the (socket, core) pairs and the feature flags;
the clock is the base frequency where the kernel reports one
(``/sys/devices/system/cpu/cpu0/cpufreq/base_frequency``), else the nominal one in the model
name (``... @ 2.20GHz``), else the clock ``cpu MHz`` shows at the time. The boost clock is
cpufreq's ``cpuinfo_max_freq`` where the driver counts the boost clocks in it (``intel_pstate``,
``intel_cpufreq``, ``amd-pstate``; ``acpi-cpufreq`` gives the highest clock below boost, and a
virtual machine often has no cpufreq: then none), the core
the one :func:`~specmd_sim.hardware.cores.cpuinfo_core` finds for the vendor, family and model
numbers. Elsewhere nothing is read and the profile leaves the fields out. Every field says
where it was read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from specmd_sim.hardware.cores import cpuinfo_core

CPUINFO = Path("/proc/cpuinfo")
BASE_FREQUENCY = Path("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency")  # kHz
MAX_FREQUENCY = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz
DRIVER = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver")
# the cpufreq drivers whose cpuinfo_max_freq is the highest boost clock (Linux
# Documentation/admin-guide/pm/intel_pstate.rst, amd-pstate.rst); acpi-cpufreq's stops below boost
BOOST_DRIVERS = frozenset({"intel_pstate", "intel_cpufreq", "amd-pstate", "amd-pstate-epp"})

# the widest extension first: the feature flags (x86 'flags', Arm 'Features') that show it
_ISA_FLAGS = (("amx", ("amx_tile",)), ("avx512", ("avx512f",)), ("avx2", ("avx2",)),
              ("sve2", ("sve2",)), ("neon", ("asimd", "neon")))  # fmt: skip


def host_fields(cpuinfo: str, base_khz: str | None = None, max_khz: str | None = None,
                driver: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The host fields ``cpuinfo`` (the text of ``/proc/cpuinfo``), ``base_khz`` and
    ``max_khz`` (the texts of cpufreq's base and maximum frequencies) and ``driver`` (its
    scaling driver), where given, give, each a quantity with its source and grade; the
    ``name`` as text. Fields the texts do not give are left out."""
    blocks = [dict(_pairs(b)) for b in cpuinfo.split("\n\n") if b.strip()]
    blocks = [b for b in blocks if "processor" in b]
    out: dict[str, Any] = {}
    if not blocks:
        return out
    first = blocks[0]
    name = first.get("model name") or first.get("Hardware") or first.get("CPU part")
    if name:
        out["name"] = re.sub(r"\s+", " ", name)
    where = "read from /proc/cpuinfo by specmd calibrate"
    pairs = {(b.get("physical id", "0"), b["core id"]) for b in blocks if "core id" in b}
    sockets = {b["physical id"] for b in blocks if "physical id" in b}
    if pairs:
        out["physical_cores"] = _q(len(pairs), f"{where}: distinct (physical id, core id)")
    else:
        out["physical_cores"] = _q(len(blocks), f"{where}: processors (no core topology given: "
                                   "logical CPUs)", "C")  # fmt: skip
    if sockets:
        out["sockets"] = _q(len(sockets), f"{where}: distinct physical id")
    clock = _clock(first, base_khz, where)
    if clock is not None:
        out["cpu_clock_hz"] = clock
    flags = set((first.get("flags") or first.get("Features") or "").split())
    if flags:
        isa = next((level for level, names in _ISA_FLAGS if flags & set(names)), "baseline")
        out["isa"] = _q(isa, f"{where}: feature flags")
    driver = (driver or "").strip()
    top = (max_khz or "").strip()
    if driver in BOOST_DRIVERS and top.isdigit() and int(top) > 0:
        out["boost_clock_hz"] = _q(int(top) * 1e3, "read from /sys/devices/system/cpu/"
                                   f"cpu0/cpufreq/cpuinfo_max_freq ({driver}) by "
                                   "specmd calibrate")  # fmt: skip
    core = _core(first)
    if core is not None:
        out["core"] = _q(core, f"{where}: vendor_id, cpu family and model "
                         "(specmd_sim/hardware/cores.py)", "B")  # fmt: skip
    return out


def _core(first: dict[str, str]) -> str | None:
    try:
        family, model = int(first.get("cpu family", "")), int(first.get("model", ""))
    except ValueError:
        return None
    return cpuinfo_core(first.get("vendor_id", ""), family, model)


def this_host() -> dict[str, Any]:
    """:func:`host_fields` of this machine (empty where ``/proc/cpuinfo`` is not readable)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return {}
    base, top, driver = (_read(p) for p in (BASE_FREQUENCY, MAX_FREQUENCY, DRIVER))
    return host_fields(text, base, top, driver)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _pairs(block: str) -> list[tuple[str, str]]:
    out = []
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.append((key.strip(), value.strip()))
    return out


def _clock(first: dict[str, str], base_khz: str | None, where: str) -> dict[str, Any] | None:
    if base_khz is not None and base_khz.strip().isdigit():
        return _q(int(base_khz) * 1e3, "read from /sys/devices/system/cpu/cpu0/cpufreq/"
                  "base_frequency by specmd calibrate: the base clock")  # fmt: skip
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", first.get("model name", ""))
    if nominal:
        return _q(float(nominal.group(1)) * 1e9, f"{where}: the nominal clock in the model name")
    mhz = first.get("cpu MHz")
    if mhz:
        return _q(float(mhz) * 1e6, f"{where}: 'cpu MHz', the clock at the time (not a base "
                  "clock; it moves with load and power settings)", "C")  # fmt: skip
    return None


def _q(value: Any, source: str, grade: str = "A") -> dict[str, Any]:
    return {"value": value, "source": source, "grade": grade}
