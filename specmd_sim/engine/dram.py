"""The DRAM level of a two-level cache, beside the layer step (``memory.dram_cache``).

Every expert lives on the NVMe drive; host DRAM caches them (:mod:`specmd_sim.scenario.dram`)
and the GPU cache is filled from DRAM. The layer step decides for the GPU cache alone, as in a
run without a DRAM cache; :class:`DramLevel` makes the DRAM level's decisions around it:

- **Accesses.** Each fetch into the GPU cache (demand, prefetch or streamed past it) is one
  DRAM access of its expert, classified like a GPU access (hit, late hit, compulsory,
  collision, capacity miss; the class counts at the expert's layer). A miss reserves DRAM space
  (the DRAM eviction policy chooses victims) and the engine reads the expert from NVMe into
  DRAM, then copies it to the GPU; a policy that does not admit it streams it through a staging
  buffer (counted as ``dram_bypassed``). There is no direct NVMe -> GPU path: runtimes read
  NVMe through a host buffer (the profile's NVMe path crosses host DRAM too).
- **Pins.** An accessed expert stays pinned in DRAM until its copy to the GPU ended (or was
  cancelled), so it is never evicted mid-copy; an expert being read from NVMe is ``loading``,
  never evictable. With ``cache.pin_demand_set`` the layer's demand set is pinned in DRAM too,
  from its router decision to the next one, so a DRAM prefetch never evicts what the layer is
  about to copy (the GPU cache's rule, one level down).
- **Prefetch.** At each router decision the DRAM prefetcher plans for its lookahead layers, as
  the GPU's does; absent experts on its list are read from NVMe into DRAM unless nothing there is
  evictable (then dropped), cached ones are hints.

The engine supplies ``load(key)``: start the NVMe read of ``key``, whose DRAM space is reserved,
and call :meth:`ExpertCache.complete` on the DRAM cache once it landed (replay: at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specmd_sim.cache import AccessClass, ExpertCache, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.policies.context import AccessSequence
from specmd_sim.scenario.dram import DramObjects

_ABSENT = int(State.ABSENT)
_HIT, _LATE = int(AccessClass.HIT), int(AccessClass.LATE_HIT)
_DEMAND, _PREFETCH = FetchReason.DEMAND, FetchReason.PREFETCH

# what an access asks of the engine
READY = 0  # resident in DRAM: copy it to the GPU
READ = 1  # DRAM space reserved: read it from NVMe (load), then copy it
JOIN = 2  # a DRAM prefetch is reading it: copy it once that read landed
STREAM = 3  # not admitted: read it from NVMe into a staging buffer, then copy it
WAIT = 4  # nothing in DRAM is evictable now (reads in flight): reserve again later


class DramLevel:
    """The DRAM cache of one GPU's run and its plug-ins, following the GPU cache's position
    (it listens to the GPU cache's pass starts and router decisions)."""

    def __init__(
        self,
        objs: DramObjects,
        gpu_cache: ExpertCache,
        demand: AccessSequence,
        pin_demand_set: bool,
        load: Callable[[int], None],
        record: bool = False,
    ) -> None:
        self.cache = objs.cache
        self.prefetch = objs.prefetch
        self.predictor = objs.predictor
        self.demand = demand
        self.pin_demand_set = pin_demand_set
        self.load = load
        self.num_experts = gpu_cache.num_experts
        self.prefetching = objs.prefetch.lookahead > 0
        self.pinned: list[int] = []  # the demand set of the layer running
        self.now = 0  # pass * num_layers + layer of the last router decision
        # record=True: each access's key and position (dram_sequence)
        self.keys: list[int] | None = [] if record else None
        self.positions: list[int] = []
        gpu_cache.position_listeners.append(self._position)

    def _position(self, p: int, layer: int) -> None:
        cache = self.cache
        for key in self.pinned:
            cache.unpin(key)
        self.pinned = []
        if layer < 0:
            cache.begin_pass(p)
            return
        self.now = p * self.demand.num_layers + layer
        cache.begin_layer(layer)
        if self.pin_demand_set:
            self.pinned = self.demand.keys_of(p, layer).tolist()
            for key in self.pinned:
                cache.pin(key)
        if not self.prefetching:
            return
        state = cache.state
        for key in self.prefetch.plan(p, layer, self.predictor, cache):
            if state[key] != _ABSENT:
                cache.hint(key)
            elif cache.reserve(key, _PREFETCH):
                self.load(key)

    def access(self, key: int) -> int:
        """A fetch into the GPU cache reads ``key`` from DRAM: classify the access, pin ``key``
        until :meth:`release`, and say what the engine must do first (READY ... WAIT)."""
        cache = self.cache
        if self.keys is not None:
            self.keys.append(key)
            self.positions.append(self.now)
        klass = cache.access(key, key // self.num_experts)
        cache.pin(key)
        if klass == _HIT:
            return READY
        if klass == _LATE:
            return JOIN
        if not cache.admits(key, _DEMAND):
            cache.stream(key)
            return STREAM
        return READ if cache.reserve(key, _DEMAND) else WAIT

    def release(self, key: int) -> None:
        """``key``'s copy to the GPU ended or was cancelled."""
        self.cache.unpin(key)

    def finish(self) -> None:
        for key in self.pinned:
            self.cache.unpin(key)
        self.pinned = []
        self.cache.finish()

    def sequence(self, num_passes: int) -> AccessSequence:
        """The accesses recorded (``record=True``) as an access sequence: per (pass, layer) of
        the router decision they followed, the keys read from DRAM in order."""
        assert self.keys is not None, "DramLevel(record=True) records the sequence"
        keys = np.array(self.keys, np.int32)
        cells = num_passes * self.demand.num_layers
        counts = np.bincount(np.array(self.positions, np.int64), minlength=cells)
        return AccessSequence(
            keys=keys,
            tokens=np.ones(keys.size, np.int32),
            gates=np.full(keys.size, np.nan, np.float32),
            offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            num_layers=self.demand.num_layers,
        )


_NAMES = {
    "accesses": "dram_accesses",
    "hits": "dram_hits",
    "late_hits": "dram_late_hits",
    "misses": "dram_misses",
    "misses_compulsory": "dram_misses_compulsory",
    "misses_capacity": "dram_misses_capacity",
    "misses_collision": "dram_misses_collision",
    "evictions": "dram_evictions",
    "bypassed": "dram_bypassed",
    "prefetch_issued": "dram_prefetch_issued",
    "prefetch_used": "dram_prefetch_used",
    "prefetch_wasted": "dram_prefetch_wasted",
    "prefetch_dropped": "dram_prefetch_dropped",
    "bytes_demand": "bytes_nvme_demand",
    "bytes_prefetch": "bytes_nvme_prefetch",
}


def dram_metrics(cache: ExpertCache) -> dict[str, Any]:
    """The DRAM level's metrics (``dram_*``, ``bytes_nvme_*``) from its cache's counters."""
    totals = cache.stats.totals()
    out: dict[str, Any] = {name: totals[key] for key, name in _NAMES.items()}
    accesses = out["dram_accesses"]
    out["dram_hit_rate"] = out["dram_hits"] / accesses if accesses else 0.0
    out["dram_capacity_bytes"] = cache.capacity_bytes
    return out
