"""Hardware profile schema (pydantic v2).

A profile is data: a list of *nodes* (GPUs, hosts with DRAM and CPU cores, PCIe switches, NVMe
drives) and *links* between them (PCIe, NVLink, NVLink-C2C, ...). Every number is a
:class:`Quantity` carrying its ``value`` in SI units (the unit is in the field name), the
``source`` it comes from and a confidence ``grade``:

- ``A`` measured on the real hardware (a microbenchmark, with the command in ``source``);
- ``B`` vendor specification or datasheet;
- ``C`` derived or estimated from public figures (the derivation in ``source``);
- ``D`` an assumption, placeholder or rule of thumb.

A run reports the lowest grade among the numbers it used. The topology becomes a networkx graph
in :mod:`specmd_sim.hardware.topology`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from specmd_sim.errors import short_repr
from specmd_sim.hardware.cores import CoreName
from specmd_sim.schema_base import InputModel

Grade = Literal["A", "B", "C", "D"]
GRADE_ORDER: tuple[Grade, ...] = ("A", "B", "C", "D")  # best first


class Quantity(InputModel):
    """A number with provenance. Subclasses constrain ``value``."""

    value: float = Field(description="The value, in the SI unit named by the field.")
    source: str = Field(min_length=1, description="Where the number comes from.")
    grade: Grade = Field(description="Confidence: A measured, B vendor spec, C derived, D assumed.")


# The ranges a profile's numbers may take: wide enough for any machine real or imagined (the
# zero-time limit's near-instant machine runs at 1e30 bytes and FLOP/s, a 1e-15 s latency), narrow
# enough that every time and size the simulator derives from them stays finite and fits the
# integers it is counted in (a rate of 1e-300 B/s made a transfer last longer than a float holds;
# 1e300 bytes of HBM, more cache slots than an int64 counts).
MIN_RATE, MAX_RATE = 1.0, 1e30  # bytes/s or FLOP/s
MAX_BYTES = 2**63 - 1  # as `specmd_sim.units.parse_bytes` takes sizes: below 8 EiB
MAX_SECONDS = 3600.0  # a latency or a fixed cost per operation: at most an hour
MIN_FRACTION = 1e-6  # an efficiency: at least one millionth
MAX_COUNT = 10**9  # kernels per operation, sockets, channels: a billion


class Rate(Quantity):
    value: float = Field(
        ge=MIN_RATE, le=MAX_RATE, description="A rate in [1, 1e30], in the unit named by the field."
    )


class Bytes(Quantity):
    value: float = Field(ge=1, le=MAX_BYTES, description="A size in bytes, in [1, 2**63 - 1].")


class NonNegativeBytes(Quantity):
    value: float = Field(ge=0, le=MAX_BYTES, description="A size in bytes, in [0, 2**63 - 1].")


class Seconds(Quantity):
    value: float = Field(ge=0, le=MAX_SECONDS, description="A duration in seconds, in [0, 3600].")


class PositiveSeconds(Quantity):
    value: float = Field(gt=0, le=MAX_SECONDS, description="A duration in seconds, in (0, 3600].")


class Fraction(Quantity):
    value: float = Field(ge=MIN_FRACTION, le=1, description="A fraction in [1e-6, 1].")


# A CPU core's clock: 0.1 to 10 GHz holds every CPU made, and a clock typed in GHz where Hz are
# meant (3.4 for 3.4e9) is refused rather than making its host a billion times slower
MIN_CLOCK_HZ, MAX_CLOCK_HZ = 1e8, 1e10


class ClockHz(Quantity):
    value: float = Field(
        ge=MIN_CLOCK_HZ, le=MAX_CLOCK_HZ, description="A CPU clock in Hz, in [1e8, 1e10]."
    )


class Count(Quantity):
    value: int = Field(ge=1, le=MAX_COUNT, description="A whole number in [1, 1e9].")


# The widest vector or matrix extension a host CPU has, by name: x86 CPUs have AVX2 since 2013
# (Haswell) and 2015 (AMD Excavator), AVX-512 since Skylake-SP (2017) and Zen 4 (2022), AMX (with
# AVX-512) since Sapphire Rapids (2023); Arm cores NEON (all AArch64) and SVE2 (Armv9, e.g.
# NVIDIA Grace). 'baseline': none of these. A CPU kernel built for an extension runs on a host
# whose level includes it.
IsaName = Literal["baseline", "avx2", "avx512", "amx", "neon", "sve2"]
ISA_INCLUDES: dict[str, frozenset[str]] = {
    "baseline": frozenset(),
    "avx2": frozenset({"avx2"}),
    "avx512": frozenset({"avx2", "avx512"}),
    "amx": frozenset({"avx2", "avx512", "amx"}),
    "neon": frozenset({"neon"}),
    "sve2": frozenset({"neon", "sve2"}),
}


class NamedFact(InputModel):
    """A fact that is a name, not a number, with provenance (subclasses constrain ``value``)."""

    value: str
    source: str = Field(min_length=1, description="Where the fact comes from.")
    grade: Grade = Field(description="Confidence: A measured, B vendor spec, C derived, D assumed.")


class CoreLevel(NamedFact):
    """A host CPU's core microarchitecture, with provenance (the names:
    :data:`specmd_sim.hardware.cores.CORES`)."""

    value: CoreName = Field(
        description="'zen', 'zen-plus', 'zen2', 'zen3', 'zen4', 'zen5', 'skylake', "
        "'sunny-cove' or 'golden-cove' (specmd_sim/hardware/cores.py lists the products each "
        "covers)."
    )


class IsaLevel(NamedFact):
    """A host CPU's widest vector/matrix extension, with provenance."""

    value: IsaName = Field(
        description="'avx2', 'avx512' (AVX2 too), 'amx' (AVX-512 too), 'neon', 'sve2' (NEON "
        "too), or 'baseline' (none of them)."
    )

    def has(self, extension: str) -> bool:
        """Whether the CPU has ``extension`` ('avx2', 'avx512', 'amx', 'neon', 'sve2')."""
        return extension in ISA_INCLUDES[self.value]


# CUDA reports a GPU's concurrent DMA copy engines (asyncEngineCount) as a single-digit number;
# 64 leaves room for any GPU and bounds what engines cost: a slot and a timeline lane each in
# the timing engine, a thread each in the real executor.
MAX_COPY_ENGINES = 64


class CopyEngineCount(Count):
    value: int = Field(
        ge=1, le=MAX_COPY_ENGINES, description=f"Copy engines, 1..{MAX_COPY_ENGINES}."
    )


# NVMe allows 65,536 commands in one I/O queue (NVMe base specification, "Maximum Queue Entries
# Supported"); the timing engine tabulates a drive's bandwidth at every depth up to its cap.
MAX_QUEUE_DEPTH = 65_536


class QueueDepth(Count):
    value: int = Field(
        ge=1, le=MAX_QUEUE_DEPTH, description=f"Read requests outstanding, 1..{MAX_QUEUE_DEPTH}."
    )


class _Curve(InputModel):
    """Measured points (``points``, strictly increasing in their ``_key``), with provenance."""

    _key: ClassVar[str]  # the points' field they are ordered by
    _what: ClassVar[str]  # its name in messages, plural
    source: str = Field(min_length=1, description="Where the measurements come from.")
    grade: Grade = Field(description="Confidence: A measured, B vendor spec, C derived, D assumed.")

    @model_validator(mode="after")
    def _check_order(self) -> _Curve:
        keys = [getattr(p, self._key) for p in getattr(self, "points")]  # noqa: B009
        if keys != sorted(set(keys)):
            raise ValueError(f"points: expected strictly increasing {self._what}, got {keys}")
        return self


class TokensPoint(InputModel):
    """One measured point: the bandwidth fraction an operation over ``tokens`` tokens reaches."""

    tokens: int = Field(ge=1, description="Tokens the operation multiplies (its GEMM's m).")
    efficiency: float = Field(
        gt=0, le=1, description="Fraction of memory_efficiency x HBM bandwidth it reaches."
    )


class TokensCurve(_Curve):
    """Bandwidth fraction against token count; log-linear in tokens between points, flat
    beyond the ends."""

    _key: ClassVar[str] = "tokens"
    _what: ClassVar[str] = "token counts"
    points: list[TokensPoint] = Field(min_length=1, description="Points, by token count.")

    def at(self, tokens: int) -> float:
        xs = np.log([p.tokens for p in self.points])
        return float(np.interp(np.log(max(tokens, 1)), xs, [p.efficiency for p in self.points]))


class GPUNode(InputModel):
    """A GPU: HBM (the expert cache lives here), tensor cores and DMA copy engines."""

    kind: Literal["gpu"]
    id: str = Field(min_length=1, description="Unique node id, e.g. 'gpu0'.")
    name: str = Field(description="Product name, e.g. 'NVIDIA H100 PCIe 80GB'.")
    hbm_bytes: Bytes = Field(description="HBM capacity in bytes.")
    hbm_bandwidth_bytes_per_s: Rate = Field(description="Peak HBM bandwidth, bytes/s.")
    dense_bf16_flops: Rate = Field(description="Peak dense BF16 tensor FLOP/s (no sparsity).")
    dense_fp8_flops: Rate | None = Field(
        default=None, description="Peak dense FP8 FLOP/s; absent where FP8 is unsupported."
    )
    compute_efficiency: Fraction = Field(
        description="Achieved fraction of peak FLOP/s for MoE GEMMs (model FLOPs utilization)."
    )
    memory_efficiency: Fraction = Field(description="Achieved fraction of peak HBM bandwidth.")
    memory_efficiency_by_tokens: TokensCurve | None = Field(
        default=None,
        description=(
            "Measured fraction of that bandwidth an operation over few tokens reaches (GEMMs "
            "at small m are neither compute- nor bandwidth-bound); None: 1 at every count."
        ),
    )
    kernel_launch_overhead_s: Seconds = Field(description="Fixed cost per kernel launch, s.")
    sm_count: Count | None = Field(
        default=None,
        description="Streaming multiprocessors: a kernel whose grid has fewer thread blocks "
        "than this runs on that share of the GPU's peak (the runtime's decode_attention); "
        "None: not stated.",
    )
    copy_engines_h2d: CopyEngineCount = Field(
        description="DMA copy engines usable host-to-device at once."
    )
    copy_engines_d2h: CopyEngineCount = Field(
        description="DMA copy engines usable device-to-host at once."
    )


class HostNode(InputModel):
    """A host: DRAM holding the offloaded experts, and CPU cores."""

    kind: Literal["host"]
    id: str = Field(min_length=1, description="Unique node id, e.g. 'host'.")
    name: str = Field(description="CPU / platform name.")
    dram_bytes: Bytes = Field(description="DRAM capacity in bytes.")
    dram_bandwidth_bytes_per_s: Rate = Field(description="Peak DRAM bandwidth, bytes/s.")
    cpu_flops: Rate = Field(description="Peak CPU FLOP/s at the precision experts run in.")
    sockets: Count | None = Field(
        default=None,
        description=(
            "CPU sockets (NUMA nodes); DRAM bandwidth and capacity are the totals over all of "
            "them, split evenly. None = one. A runtime that is not NUMA-aware reads one socket's "
            "share (see the runtime profile's cpu_numa_aware)."
        ),
    )
    dram_channels: Count | None = Field(
        default=None, description="DRAM channels over all sockets (documents the bandwidth)."
    )
    # The CPU as a machine that runs kernels: a runtime that states its CPU expert kernel's
    # throughput per core and cycle (its ``cpu_kernel_ops_per_cycle``) runs it at cores x clock x
    # that throughput on a host that gives all three; otherwise at cpu_flops x the runtime's
    # cpu_flops_efficiency.
    physical_cores: Count | None = Field(
        default=None,
        description="Physical CPU cores over all sockets (for a VM, the cores its vCPUs are).",
    )
    cpu_clock_hz: Rate | None = Field(
        default=None, description="All-core clock under vector load, Hz (base clock if unknown)."
    )
    isa: IsaLevel | None = Field(
        default=None,
        description="The widest vector/matrix extension: avx2, avx512, amx, neon, sve2, baseline.",
    )
    # The CPU as the thread that runs the model: its single-thread speed (boost clock x the
    # core's work per clock, specmd_sim/hardware/cores.py) scales a runtime's host-side costs
    # (specmd_sim/runtime/host_rule.py); without both, they stay as the runtime states them.
    boost_clock_hz: ClockHz | None = Field(
        default=None,
        description="The clock one busy core reaches (the spec sheet's maximum boost), Hz.",
    )
    core: CoreLevel | None = Field(
        default=None, description="The core's microarchitecture (its work per clock)."
    )


class SwitchNode(InputModel):
    """A PCIe switch or similar fabric element: only routes; its links carry the bandwidth."""

    kind: Literal["switch"]
    id: str = Field(min_length=1, description="Unique node id, e.g. 'pcie-sw0'.")
    name: str = Field(default="", description="Free-form label.")


class QueueDepthPoint(InputModel):
    """One measured point of a drive's read bandwidth at a queue depth (e.g. from fio)."""

    queue_depth: int = Field(ge=1, le=MAX_QUEUE_DEPTH, description="Outstanding read requests.")
    bandwidth_bytes_per_s: float = Field(
        ge=MIN_RATE, le=MAX_RATE, description="Read bandwidth at that depth, bytes/s."
    )


class QueueDepthCurve(_Curve):
    """Read bandwidth against queue depth; linear between points, flat beyond the ends."""

    _key: ClassVar[str] = "queue_depth"
    _what: ClassVar[str] = "queue depths"
    points: list[QueueDepthPoint] = Field(min_length=1, description="Points, by queue depth.")


class NVMeNode(InputModel):
    """An NVMe SSD tier holding experts that do not fit in DRAM.

    Its read bandwidth depends on the queue depth ``q`` (reads outstanding on the drive): with
    a measured ``read_bandwidth_by_queue_depth`` curve, interpolated; otherwise Little's law,
    ``min(read_bandwidth, q * read_request_bytes / read_latency)``.
    """

    kind: Literal["nvme"]
    id: str = Field(min_length=1, description="Unique node id, e.g. 'nvme0'.")
    name: str = Field(description="Drive name.")
    capacity_bytes: Bytes = Field(description="Capacity in bytes.")
    read_bandwidth_bytes_per_s: Rate = Field(
        description="Sequential read bandwidth at a deep queue (the drive's peak), bytes/s."
    )
    read_latency_s: PositiveSeconds = Field(description="Latency of one read request, s.")
    read_request_bytes: Bytes = Field(
        description="Bytes per read request: a transfer of n bytes keeps ceil(n / this) in flight."
    )
    max_queue_depth: QueueDepth = Field(
        description="Most read requests outstanding on the drive at once (the I/O queue size)."
    )
    read_bandwidth_by_queue_depth: QueueDepthCurve | None = Field(
        default=None, description="Measured bandwidth per queue depth; replaces Little's law."
    )

    def bandwidth_quantities(self) -> list[Quantity]:
        """The numbers :meth:`read_bandwidth` reads."""
        return [
            self.read_bandwidth_bytes_per_s, self.read_request_bytes, self.read_latency_s,
            self.max_queue_depth,
        ]  # fmt: skip

    def read_bandwidth(self, queue_depth: int) -> float:
        """Bytes/s the drive delivers with ``queue_depth`` reads outstanding (capped)."""
        q = min(max(queue_depth, 1), self.max_queue_depth.value)
        peak = self.read_bandwidth_bytes_per_s.value
        curve = self.read_bandwidth_by_queue_depth
        if curve is None:
            return min(peak, q * self.read_request_bytes.value / self.read_latency_s.value)
        depths = [p.queue_depth for p in curve.points]
        rates = [p.bandwidth_bytes_per_s for p in curve.points]
        return min(peak, float(np.interp(q, depths, rates)))


Node = Annotated[GPUNode | HostNode | SwitchNode | NVMeNode, Field(discriminator="kind")]

LinkKind = Literal[
    "pcie-gen3", "pcie-gen4", "pcie-gen5", "nvlink", "nvlink-c2c", "ethernet", "emulated"
]  # emulated: the real executor's throttled slow tier (specmd calibrate)


class Link(InputModel):
    """A full-duplex link; ``bandwidth_bytes_per_s`` is per direction."""

    id: str = Field(min_length=1, description="Unique link id, e.g. 'pcie-gpu0'.")
    kind: LinkKind = Field(description="Link technology.")
    a: str = Field(description="Node id of one end.")
    b: str = Field(description="Node id of the other end.")
    bandwidth_bytes_per_s: Rate = Field(description="Achievable bandwidth per direction, bytes/s.")
    latency_s: Seconds = Field(description="Fixed per-transfer latency (setup + DMA), s.")


class HardwareProfile(InputModel):
    """A machine: nodes and the links between them. See ``docs/hardware.md``."""

    schema_version: Literal[1] = Field(description="Profile schema version; currently 1.")
    id: str = Field(min_length=1, description="Profile id; a bundled profile's file stem.")
    name: str = Field(description="Human-readable name.")
    description: str = Field(default="", description="What this machine is and why it exists.")
    nodes: list[Node] = Field(min_length=2, description="GPUs, hosts, switches, NVMe drives.")
    links: list[Link] = Field(min_length=1, description="Links between nodes.")

    @model_validator(mode="after")
    def _check_topology(self) -> HardwareProfile:
        ids = Counter(n.id for n in self.nodes)
        dup = sorted(i for i, count in ids.items() if count > 1)
        if dup:
            raise ValueError(f"nodes: expected unique node ids, got duplicates {short_repr(dup)}")
        link_ids = Counter(link.id for link in self.links)
        dup = sorted(i for i, count in link_ids.items() if count > 1)
        if dup:
            raise ValueError(f"links: expected unique link ids, got duplicates {short_repr(dup)}")
        known = set(ids)
        for link in self.links:
            if link.a == link.b:
                raise ValueError(
                    f"links[{link.id}]: expected two different nodes, got {link.a!r} twice"
                )
            for side, end in (("a", link.a), ("b", link.b)):
                if end not in known:
                    raise ValueError(
                        f"links[{link.id}].{side}: expected one of the node ids "
                        f"{short_repr(sorted(known))}, got {short_repr(end)}"
                    )
        if not self.gpus:
            raise ValueError("nodes: expected at least one node of kind 'gpu', got none")
        if not self.hosts:
            raise ValueError("nodes: expected at least one node of kind 'host', got none")
        return self

    @property
    def gpus(self) -> list[GPUNode]:
        return [n for n in self.nodes if isinstance(n, GPUNode)]

    @property
    def hosts(self) -> list[HostNode]:
        return [n for n in self.nodes if isinstance(n, HostNode)]

    def node(self, node_id: str) -> GPUNode | HostNode | SwitchNode | NVMeNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def quantities(self) -> Iterator[tuple[str, Quantity]]:
        """Every number of the profile with a dotted path, e.g. ``('nodes.gpu0.hbm_bytes', q)``."""
        for owner, prefix in [(n, f"nodes.{n.id}") for n in self.nodes] + [
            (link, f"links.{link.id}") for link in self.links
        ]:
            for name in type(owner).model_fields:
                value = getattr(owner, name)
                if isinstance(value, Quantity):
                    yield f"{prefix}.{name}", value


def lowest_grade(quantities: list[Quantity]) -> Grade:
    """The worst grade among ``quantities`` (``'A'`` if empty)."""
    return worst_grade(*(q.grade for q in quantities))


def worst_grade(*grades: Grade) -> Grade:
    """The worst of ``grades`` (``'A'`` if none)."""
    return max(grades, key=GRADE_ORDER.index, default="A")
