"""Where each routed expert is stored, and at which precision (config ``memory``, ``precision``).

Precision: per layer, the ``precision.hot_fraction`` most often routed experts of the trace
(ties by id) keep the model's expert dtype; the others are stored, moved and run at
``precision.cold_dtype``. Bytes per expert follow the dtype (``docs/design.md``).

Tiers: host DRAM holds ``memory.dram_capacity`` bytes of experts (default: what the host's DRAM
holds), filled in ``memory.placement`` order (``hot-first``: most often routed in the trace
first; ``layer-order``: layer by layer); the rest lives on an NVMe drive of the profile. Both
rankings read the whole trace in advance, like an offline profiling run. A runtime that keeps
*memory parity* (``memory_parity``) stores on the host only the experts the GPU cache does not
hold: they need the cache's bytes less DRAM, and none may live on NVMe (an evicted expert is
copied back to DRAM).

Two-level cache (``memory.dram_cache``): every expert lives on the NVMe drive and host DRAM is a
dynamic cache of ``memory.dram_capacity`` bytes in front of it (``dram_cache_bytes``), filled and
emptied during the run by its own plug-ins (:mod:`specmd_sim.scenario.dram`). It starts with
what the static tier would hold (``dram_warm``: ``memory.placement`` order, as many as fit), or
empty with ``memory.dram_cache.warm: false``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specmd_sim.config import SimConfig, resolve_size
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import HardwareProfile
from specmd_sim.hardware.schema import NVMeNode
from specmd_sim.models import ModelSpec
from specmd_sim.traces.trace import Trace
from specmd_sim.units import format_bytes

TIER_DRAM, TIER_NVME = 0, 1


class _Sized:
    """Totals over the keys' bytes (``nbytes``, int64 per key)."""

    nbytes: np.ndarray

    @property
    def routed_bytes(self) -> int:
        return int(self.nbytes.sum())

    @property
    def largest(self) -> int:
        return int(self.nbytes.max())


@dataclass(frozen=True, eq=False)
class Placement(_Sized):
    dtype: tuple[str, ...]  # per key: storage precision
    nbytes: np.ndarray  # int64 [keys]: bytes per key
    tier: np.ndarray  # uint8 [keys]: TIER_DRAM or TIER_NVME
    nvme: NVMeNode | None  # the drive holding TIER_NVME experts
    num_experts: int  # per layer
    dtype_hot: str  # the model's expert dtype; the others are cold
    dram_cache_bytes: int = 0  # capacity of the DRAM cache (memory.dram_cache); 0 = none
    dram_warm: tuple[int, ...] = ()  # keys the DRAM cache starts with, in placement order

    def summary(self) -> dict[str, object]:
        """Counts and bytes per tier, and the precisions (for the result's ``inputs``)."""
        on_nvme = self.tier == TIER_NVME
        return {
            "experts_dram": int((~on_nvme).sum()),
            "experts_nvme": int(on_nvme.sum()),
            "bytes_nvme": int(self.nbytes[on_nvme].sum()),
            "nvme": None if self.nvme is None else self.nvme.id,
            "expert_dtypes": "+".join(sorted(set(self.dtype))),
            "experts_cold": int(sum(d != self.dtype_hot for d in self.dtype)),
        }


_COUNT_ENTRIES = 1 << 16
"""Ids counted at once by :func:`routing_counts` (in whole rows): its temporaries stay in the
CPU's cache."""


def routing_counts(trace: Trace) -> np.ndarray:
    """How often each flat key ``layer * num_experts + expert`` is routed in the trace (counted
    in chunks of rows, each layer with one bin more, at its start, for the padding ids -1)."""
    layers, experts = trace.num_layers, trace.num_experts
    bins = layers * (experts + 1)
    base = (np.arange(layers, dtype=np.int64) * (experts + 1) + 1)[:, None]
    counts = np.zeros(bins, np.int64)
    step = max(1, _COUNT_ENTRIES // (layers * trace.top_k))
    for lo in range(0, trace.num_tokens, step):
        counts += np.bincount((trace.experts[lo : lo + step] + base).reshape(-1), minlength=bins)
    return counts.reshape(layers, experts + 1)[:, 1:].reshape(-1)


@dataclass(frozen=True, eq=False)
class ExpertSizes(_Sized):
    """Storage precision and bytes of every key, before tiers are assigned."""

    dtype: tuple[str, ...]
    nbytes: np.ndarray  # int64 [keys]
    num_experts: int
    dtype_hot: str
    expert_bytes: int  # of one expert at the model's expert dtype
    trace: Trace = field(repr=False)
    _counts: np.ndarray | None = field(default=None, repr=False)

    @property
    def counts(self) -> np.ndarray:
        """How often the trace routes each key (int64 [keys]); counted on first use (a pass
        over the trace), as only a ranking reads them."""
        if self._counts is None:
            object.__setattr__(self, "_counts", routing_counts(self.trace))
        assert self._counts is not None
        return self._counts


def expert_sizes(config: SimConfig, model: ModelSpec, trace: Trace) -> ExpertSizes:
    layers, experts = trace.num_layers, trace.num_experts
    cold = config.precision.cold_dtype
    counts = None
    if cold is None or cold == model.expert_dtype:
        dtype = [model.expert_dtype] * (layers * experts)
    else:
        counts = routing_counts(trace)
        dtype = _dtypes(config, model, counts.reshape(layers, experts))
    sizes = {d: model.expert_bytes_at(d) for d in set(dtype)}
    nbytes = np.array([sizes[d] for d in dtype], np.int64)
    return ExpertSizes(
        tuple(dtype), nbytes, experts, model.expert_dtype, model.expert_bytes, trace, counts
    )


def build_placement(
    config: SimConfig, profile: HardwareProfile, model: ModelSpec, trace: Trace
) -> Placement:
    """The placement of a run whose host keeps every expert (no memory parity)."""
    return place(config, profile, expert_sizes(config, model, trace))


def place(
    config: SimConfig, profile: HardwareProfile, sizes: ExpertSizes, parity: int | None = None
) -> Placement:
    """Assign each key its tier. ``parity``: the bytes of the GPU cache when the runtime keeps
    memory parity (the host holds only the experts the cache does not, so they need that much
    less DRAM); then nothing may spill to NVMe."""
    nbytes = sizes.nbytes
    tier = np.zeros(nbytes.size, np.uint8)
    memory = config.memory
    host = profile.hosts[0]
    dram = host.dram_bytes.value
    if memory.dram_capacity is None:
        budget = dram
    else:
        budget = resolve_size(memory.dram_capacity, sizes.expert_bytes, sizes.routed_bytes)
        if budget > dram:
            raise SpecmdError(
                f"memory.dram_capacity: expected at most the host's DRAM ({format_bytes(dram)} "
                f"on {profile.id}), got {memory.dram_capacity!r} = {format_bytes(budget)}"
            )
    if memory.dram_cache is not None and parity is not None:
        raise SpecmdError(
            f"memory.dram_cache: expected a runtime without memory parity (the host would hold "
            f"only what the GPU cache does not, so DRAM could not cache), got runtime "
            f"{config.runtime}; set memory.dram_cache: null or use another runtime"
        )
    if parity is not None:
        outside = sizes.routed_bytes - parity
        if outside > budget:
            raise SpecmdError(
                f"memory: expected the experts outside the GPU cache ({format_bytes(outside)}: "
                f"{format_bytes(sizes.routed_bytes)} routed - {format_bytes(parity)} cached) to "
                f"fit the {format_bytes(budget)} of host DRAM on {profile.id} (runtime "
                f"{config.runtime} keeps memory parity, so none can live on NVMe), got "
                f"{format_bytes(outside - budget)} more; raise cache.capacity or use a "
                "lower-precision model"
            )
        budget += parity
    # the order decides which keys DRAM holds only where not all of them fit, and what a DRAM
    # cache starts with
    if memory.placement == "hot-first" and (
        memory.dram_cache is not None or sizes.routed_bytes > budget
    ):
        order = np.lexsort((np.arange(nbytes.size), -sizes.counts))
    else:
        order = np.arange(nbytes.size)
    fits = np.cumsum(nbytes[order]) <= budget
    if memory.dram_cache is not None:
        return _dram_cache(config, profile, sizes, int(budget), order[fits])
    tier[order[~fits]] = TIER_NVME
    nvme = None
    spill = int(nbytes[order[~fits]].sum())
    if spill or memory.nvme is not None:
        nvme = _nvme(profile, memory.nvme, spill, budget, sizes.routed_bytes, budget < dram)
    return Placement(sizes.dtype, nbytes, tier, nvme, sizes.num_experts, sizes.dtype_hot)


def _dram_cache(
    config: SimConfig, profile: HardwareProfile, sizes: ExpertSizes, budget: int, warm: np.ndarray
) -> Placement:
    """Every expert on the NVMe drive, DRAM a cache of ``budget`` bytes in front of it that
    starts (``memory.dram_cache.warm``) with ``warm``: what the static tier would hold."""
    dram_cache = config.memory.dram_cache
    assert dram_cache is not None
    total = sizes.routed_bytes
    if not any(isinstance(n, NVMeNode) for n in profile.nodes):
        raise SpecmdError(
            f"memory.dram_cache: expected a hardware profile with an NVMe node (every expert "
            f"lives on NVMe, DRAM caches them), got {profile.id} without one; set "
            f"memory.dram_cache: null or use a profile with an NVMe drive"
        )
    why = f"memory.dram_cache is set: every expert ({format_bytes(total)}) lives on NVMe"
    nvme = _nvme(profile, config.memory.nvme, total, budget, total, False, why)
    tier = np.full(sizes.nbytes.size, TIER_NVME, np.uint8)
    initial = tuple(warm.tolist()) if dram_cache.warm else ()
    return Placement(
        sizes.dtype, sizes.nbytes, tier, nvme, sizes.num_experts, sizes.dtype_hot, budget, initial
    )


def _dtypes(config: SimConfig, model: ModelSpec, counts: np.ndarray) -> list[str]:
    """Mixed precision: per layer, the most often routed keep the model's dtype."""
    cold = config.precision.cold_dtype
    assert cold is not None
    layers, experts = counts.shape
    hot = round(config.precision.hot_fraction * experts)
    out: list[str] = [cold] * (layers * experts)
    for layer in range(layers):
        rank = np.lexsort((np.arange(experts), -counts[layer]))
        for e in rank[:hot].tolist():
            out[layer * experts + e] = model.expert_dtype
    return out


def _nvme(
    profile: HardwareProfile,
    wanted: str | None,
    spill: int,
    budget: float,
    total: int,
    capped: bool,
    why: str | None = None,
) -> NVMeNode:
    """The drive for the ``spill`` of the ``total`` bytes of experts that do not fit the
    ``budget`` bytes of DRAM (0: none spill, a drive was named); ``capped``: the budget is a
    ``memory.dram_capacity`` below the host's DRAM."""
    drives = [n for n in profile.nodes if isinstance(n, NVMeNode)]
    why = why or (
        f"{format_bytes(spill)} of the {format_bytes(total)} of experts do not "
        f"fit the {format_bytes(budget)} of DRAM for experts"
        if spill
        else "memory.nvme is set"
    )
    if not drives:
        raise SpecmdError(
            f"memory: expected an NVMe node in hardware profile {profile.id} ({why}), got none; "
            + ("raise memory.dram_capacity, " if capped else "")
            + "use a smaller expert_dtype or a profile with more DRAM or an NVMe drive"
        )
    if wanted is None:
        drive = drives[0]
    else:
        match = [d for d in drives if d.id == wanted]
        if not match:
            raise SpecmdError(
                f"memory.nvme: expected one of the NVMe nodes {[d.id for d in drives]} of "
                f"{profile.id}, got {wanted!r}"
            )
        drive = match[0]
    if spill > drive.capacity_bytes.value:
        raise SpecmdError(
            f"memory: expected the {format_bytes(spill)} of experts outside DRAM to fit NVMe "
            f"drive {drive.id} ({format_bytes(drive.capacity_bytes.value)}), got too many"
        )
    return drive


def shard_owner(num_experts: int, gpus: int) -> np.ndarray:
    """Owner GPU of each expert index of a layer in expert-sharded mode: contiguous blocks,
    ``expert * gpus // num_experts`` (block sizes differ by at most one expert)."""
    return (np.arange(num_experts) * gpus // num_experts).astype(np.int32)


def shard_mask(placement: Placement | ExpertSizes, gpu: int, gpus: int) -> np.ndarray:
    """Keys whose owner is ``gpu`` (all layers)."""
    owner = shard_owner(placement.num_experts, gpus)
    return np.tile(owner == gpu, placement.nbytes.size // placement.num_experts)
