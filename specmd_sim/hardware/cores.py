"""CPU cores by microarchitecture: how much single-thread work each does per clock.

A host's *single-thread speed* is what the host-side costs of a runtime (Python, the
dispatcher, a kernel's launch, a copy's issue: one thread's work) scale with. It is the clock
one busy core runs at (the spec sheet's maximum boost) times the core's work per clock
relative to AMD Zen 2, the unit. :func:`single_thread_speed` gives it in "Zen 2 GHz": 3.4 for
the EPYC 7742 (Zen 2 at 3.4 GHz), 7.6 for a Ryzen 9 7950X (Zen 4 at 5.7 GHz x 1.34).

The work per clock of each core below chains the vendors' own generation-over-generation
claims of instructions per clock (IPC) from Zen 2 and from Skylake; the one link between the
two vendors, Skylake against Zen 2, is assumed (no vendor publishes one). The rule that host
costs scale as the inverse of this speed, and its sources, are in
:mod:`specmd_sim.runtime.host_rule`.

``specmd calibrate`` reads this machine's core from ``/proc/cpuinfo`` (vendor, family and
model numbers, :data:`CPUINFO_CORES`) and its maximum clock from cpufreq
(:mod:`specmd_sim.hardware.this_host`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CoreName = Literal[
    "zen", "zen-plus", "zen2", "zen3", "zen4", "zen5", "skylake", "sunny-cove", "golden-cove"
]


@dataclass(frozen=True)
class Core:
    """A microarchitecture's single-thread work per clock relative to Zen 2."""

    ipc: float
    covers: str  # the product lines built on it
    source: str
    grade: Literal["A", "B", "C", "D"]  # B: the vendor's claim; C: claims chained; D: assumed


CORES: dict[str, Core] = {
    "zen2": Core(1.0, "AMD Ryzen 3000, EPYC 7002 (Rome), Threadripper 3000", "the unit", "B"),
    "zen-plus": Core(0.87, "AMD Ryzen 2000 (Zen+)",
                     "AMD: Zen 2 +15% IPC over Zen+ (Computex 2019 keynote): 1 / 1.15", "C"),
    "zen": Core(0.84, "AMD Ryzen 1000, EPYC 7001 (Naples)",
                "AMD: Zen+ +3% IPC over Zen (Ryzen 2000 launch, 2018): 0.87 / 1.03", "C"),
    "zen3": Core(1.19, "AMD Ryzen 5000, EPYC 7003 (Milan)",
                 "AMD: +19% IPC over Zen 2 (Ryzen 5000 launch, October 2020)", "B"),
    "zen4": Core(1.34, "AMD Ryzen 7000, EPYC 9004 (Genoa)",
                 "AMD: +13% IPC over Zen 3 (Ryzen 7000 launch, August 2022): 1.19 x 1.13",
                 "C"),
    "zen5": Core(1.56, "AMD Ryzen 9000, EPYC 9005 (Turin)",
                 "AMD: +16% IPC over Zen 4 (Computex 2024 keynote): 1.34 x 1.16", "C"),
    "skylake": Core(1.0, "Intel Skylake to Comet Lake desktops, Cannon Lake, Xeon Scalable "
                    "1st/2nd gen (Skylake-SP, Cascade Lake), Core X 7000-10000",
                    "assumed equal to Zen 2 per clock: neither vendor publishes a cross-vendor "
                    "IPC figure (AMD's Zen 2 launch compared with Intel on whole benchmarks)",
                    "D"),
    "sunny-cove": Core(1.18, "Intel Ice Lake (client, Xeon 3rd gen Ice Lake-SP), Tiger Lake "
                       "(Willow Cove), Rocket Lake (Cypress Cove)",
                       "Intel: Sunny Cove +18% IPC over Skylake (Ice Lake launch, Computex "
                       "2019); Willow and Cypress Cove keep its IPC", "C"),
    "golden-cove": Core(1.4, "Intel Alder/Raptor Lake P-cores, Xeon 4th/5th gen (Sapphire "
                        "Rapids, Emerald Rapids)",
                        "Intel: Golden Cove +19% IPC over Cypress Cove (Architecture Day 2021): "
                        "1.18 x 1.19; Raptor Cove keeps its IPC (Raptor Lake's gains are clocks "
                        "and caches)", "C"),
}  # fmt: skip
"""The cores a host profile may name, by name."""

# /proc/cpuinfo's (vendor_id, cpu family, model) -> core, for `specmd calibrate` (the model
# numbers: Linux arch/x86/include/asm/intel-family.h; AMD's family 17h/19h/1Ah model ranges)
CPUINFO_CORES: dict[tuple[str, int], dict[int, str]] = {
    ("GenuineIntel", 6): {
        0x4E: "skylake",
        0x5E: "skylake",
        0x55: "skylake",
        0x8E: "skylake",
        0x9E: "skylake",
        0xA5: "skylake",
        0xA6: "skylake",
        0x66: "skylake",  # Cannon Lake (Palm Cove, a Skylake-class core)
        0x6A: "sunny-cove",
        0x6C: "sunny-cove",
        0x7D: "sunny-cove",
        0x7E: "sunny-cove",
        0x8C: "sunny-cove",
        0x8D: "sunny-cove",
        0xA7: "sunny-cove",
        0x97: "golden-cove",
        0x9A: "golden-cove",
        0xB7: "golden-cove",
        0xBA: "golden-cove",
        0xBF: "golden-cove",
        0x8F: "golden-cove",
        0xCF: "golden-cove",
    },
}


def cpuinfo_core(vendor: str, family: int, model: int) -> str | None:
    """The core of a CPU ``/proc/cpuinfo`` describes by ``vendor`` (``vendor_id``), ``family``
    and ``model``; None where the table does not know it."""
    if vendor != "AuthenticAMD":
        return CPUINFO_CORES.get((vendor, family), {}).get(model)
    if family == 0x17:  # Zen at models 01h and 11h, Zen+ at 08h and 18h, Zen 2 from 30h
        return "zen2" if model >= 0x30 else "zen-plus" if model in (0x08, 0x18) else "zen"
    if family == 0x19:  # Zen 3 at models 00h-0Fh and 20h-5Fh, Zen 4 at 10h-1Fh and 60h-AFh
        if model <= 0x0F or 0x20 <= model <= 0x5F:
            return "zen3"
        return "zen4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else None
    if family == 0x1A:  # Zen 5 at models 00h-4Fh and 60h-7Fh (the others: Zen 6, Linux amd.c)
        return "zen5" if model <= 0x4F or 0x60 <= model <= 0x7F else None
    return None
