"""What a policy or predictor is given when a run starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specmd_sim.engine.demand import DemandSets, Passes
    from specmd_sim.hardware import HardwareProfile, TransferPath
    from specmd_sim.models.cost import CostModel
    from specmd_sim.models.spec import ModelSpec
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
    path: TransferPath  # how experts reach that GPU

    @property
    def num_layers(self) -> int:
        return self.trace.num_layers

    @property
    def num_experts(self) -> int:
        return self.trace.num_experts
