"""The DRAM level of a two-level cache (``memory.dram_cache``): its checks and its parts.

With a DRAM cache every expert lives on the NVMe drive (:mod:`.placement`) and host DRAM holds a
dynamic subset of them: an :class:`~specmd_sim.cache.ExpertCache` of ``memory.dram_capacity``
bytes with its own eviction policy, prefetch policy and predictor (the registered plug-ins, one
level down; built by :func:`specmd_sim.scenario.plugins.build_runs`). The GPU cache is filled
from DRAM only; the engines drive both levels through :mod:`specmd_sim.engine.dram`.

The DRAM level's plug-ins see the run as the GPU level's do, except:

- their context counts the DRAM cache's slots and reaches it by the NVMe -> DRAM path (so a
  plug-in's ``fetch_time`` is an NVMe read);
- they draw from a child of the run's generator (``Generator.spawn``), so the GPU level's draws,
  and hence its decisions, are those of the same run without a DRAM cache;
- an offline eviction policy (``belady``) is given the *DRAM-level* access sequence (every
  fetch into the GPU cache, in order, which the engine records before the run), an offline
  predictor or prefetcher the run's routing (what it predicts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.cache import ExpertCache
from specmd_sim.config import SimConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import HardwareProfile, TransferPath, transfer_path
from specmd_sim.hardware.schema import NVMeNode
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import EVICTION
from specmd_sim.scenario.passes import DemandSets
from specmd_sim.scenario.placement import Placement
from specmd_sim.units import format_bytes


@dataclass(eq=False)
class DramObjects:
    """The DRAM level of one run: its cache, plug-ins and the path NVMe reads take."""

    cache: ExpertCache
    eviction: EvictionPolicy[Any]
    prefetch: PrefetchPolicy[Any]
    predictor: ScoreSource | None  # None when the DRAM prefetcher asks for no scores
    stage: TransferPath  # NVMe drive -> host DRAM
    drive: NVMeNode


def needs_sequence(config: SimConfig) -> bool:
    """Whether the DRAM eviction policy is offline (it needs the DRAM-level access sequence)."""
    dram = config.memory.dram_cache
    return dram is not None and EVICTION.get(dram.eviction.kind).offline


def stage_path(profile: HardwareProfile, drive: NVMeNode) -> TransferPath:
    """The path of an NVMe read into the first host's DRAM, the write into that DRAM included."""
    host = profile.hosts[0]
    path = transfer_path(profile, drive.id, host.id)
    capacity = {**path.capacity, f"dram:{host.id}": host.dram_bandwidth_bytes_per_s.value}
    return dataclasses.replace(
        path,
        resources=tuple(capacity),
        capacity=capacity,
        quantities=(*path.quantities, host.dram_bandwidth_bytes_per_s),
    )


def check_dram_cache(
    config: SimConfig, placement: Placement, capacity: int, demand: DemandSets, gpus: int
) -> None:
    """The checks a two-level run needs before it starts (one line each).

    The DRAM cache must hold, besides what it may evict, every expert it cannot: those being
    copied to the GPU (at most the GPU cache's ``capacity`` bytes, every one reserved there) and
    the demand set of the layer running (pinned, as in the GPU cache), so that a DRAM miss always
    finds a victim.
    """
    dram = config.memory.dram_cache
    if dram is None:
        return
    if gpus != 1:
        raise SpecmdError(
            f"memory.dram_cache: expected 1 GPU (one DRAM cache per GPU is not modelled), got "
            f"{gpus}; set parallel.gpus: 1 or memory.dram_cache: null"
        )
    if config.miss.kind == "cpu-execute":
        raise SpecmdError(
            "memory.dram_cache: expected a miss handler that fetches, drops or substitutes "
            "(CPU execution reads experts where they are stored, past the DRAM cache), got "
            "cpu-execute"
        )
    if dram.predictor is not None and getattr(dram.predictor, "fit_on", None) is not None:
        raise SpecmdError(
            f"memory.dram_cache.predictor.fit_on: expected none (only the run's predictor is "
            f"fitted; leave memory.dram_cache.predictor null to use it), got "
            f"{dram.predictor.fit_on!r}"  # type: ignore[attr-defined]
        )
    largest = 0
    if demand.keys.size:
        cum = np.concatenate(([0], np.cumsum(placement.nbytes[demand.keys])))
        largest = int((cum[demand.offsets[1:]] - cum[demand.offsets[:-1]]).max())
    need = capacity + largest
    have = placement.dram_cache_bytes
    if have < need:
        raise SpecmdError(
            f"memory.dram_capacity: expected at least the GPU cache ({format_bytes(capacity)}) "
            f"plus the largest demand set of one layer ({format_bytes(largest)}) = "
            f"{format_bytes(need)} for the DRAM cache (what it cannot evict), got "
            f"{config.memory.dram_capacity!r} = {format_bytes(have)}"
        )
