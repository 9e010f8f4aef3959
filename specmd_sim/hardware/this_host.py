"""This machine's CPU as a hardware profile describes a host: its name, sockets, physical cores,
clock and widest vector/matrix extension, read from the operating system (``specmd calibrate``
writes them into the calibrated profile, so the CPU expert kernel's rate,
:meth:`~specmd_sim.models.CostModel.cpu_rate`, can be carried to this machine).

Linux's ``/proc/cpuinfo`` gives the model name, the (socket, core) pairs and the feature flags;
the clock is the base frequency where the kernel reports one
(``/sys/devices/system/cpu/cpu0/cpufreq/base_frequency``), else the nominal one in the model
name (``... @ 2.20GHz``), else the clock ``cpu MHz`` shows at the time. Elsewhere nothing is
read and the profile leaves the fields out. Every field says where it was read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
BASE_FREQUENCY = Path("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency")  # kHz

# the widest extension first: the feature flags (x86 'flags', Arm 'Features') that show it
_ISA_FLAGS = (("amx", ("amx_tile",)), ("avx512", ("avx512f",)), ("avx2", ("avx2",)),
              ("sve2", ("sve2",)), ("neon", ("asimd", "neon")))  # fmt: skip


def host_fields(cpuinfo: str, base_khz: str | None = None) -> dict[str, Any]:
    """The host fields ``cpuinfo`` (the text of ``/proc/cpuinfo``) and ``base_khz`` (the text
    of the cpufreq base frequency, if any) give, each a quantity with its source and grade;
    the ``name`` as text. Fields the text does not give are left out."""
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
    return out


def this_host() -> dict[str, Any]:
    """:func:`host_fields` of this machine (empty where ``/proc/cpuinfo`` is not readable)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return {}
    try:
        base = BASE_FREQUENCY.read_text()
    except OSError:
        base = None
    return host_fields(text, base)


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
