"""What a policy or predictor is given when a run starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specmd_sim.hardware import HardwareProfile, TransferPath
    from specmd_sim.models.cost import CostModel
    from specmd_sim.models.spec import ModelSpec
    from specmd_sim.scenario.passes import DemandSets, Passes
    from specmd_sim.scenario.placement import Placement
    from specmd_sim.traces.trace import Trace


@dataclass(frozen=True, eq=False)
class RunContext:
    """Read-only inputs of a run, shared by all plug-ins of that run.

    ``rng`` is the run's one random generator; plug-ins draw from it in a deterministic order
    (the engines call them in pass, layer order), so the same seed gives the same run.
    """

    model: ModelSpec
    trace: Trace
    passes: Passes
    demand: DemandSets
    rng: np.random.Generator
    slots: int
    profile: HardwareProfile
    cost: CostModel  # compute times on the run's GPU
    path: TransferPath  # how experts reach that GPU from host DRAM
    placement: Placement  # bytes and dtype of each expert, its storage tier
    paths: tuple[TransferPath, ...]  # every path experts reach the GPU by (paths[0] = path)
    source: np.ndarray  # int32 per key: index into paths; -1 = the GPU's own shard

    def fetch_time(self, key: int) -> float:
        """Seconds to move expert ``key`` to the GPU alone on its path (0 for the GPU's own
        shard): latency + its bytes / the path's bandwidth."""
        i = int(self.source[key])
        if i < 0:
            return 0.0
        path = self.paths[i]
        return path.latency_s + int(self.placement.nbytes[key]) / path.bandwidth

    @property
    def num_layers(self) -> int:
        return self.trace.num_layers

    @property
    def num_experts(self) -> int:
        return self.trace.num_experts
