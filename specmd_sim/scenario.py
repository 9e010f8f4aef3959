"""Resolve a :class:`~specmd_sim.config.SimConfig` into loaded inputs, with all checks that can
be made before a run (model/trace agreement, capacity against the largest demand set)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmd_sim.config import SimConfig
from specmd_sim.engine.demand import DemandSets, Passes, build_demand, build_passes
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import HardwareProfile, load_profile
from specmd_sim.models import ModelSpec, load_model
from specmd_sim.traces.io import load_trace
from specmd_sim.traces.trace import Trace
from specmd_sim.units import format_bytes


@dataclass(frozen=True, eq=False)
class Scenario:
    config: SimConfig
    profile: HardwareProfile
    model: ModelSpec
    trace: Trace
    passes: Passes
    demand: DemandSets
    capacity_bytes: int

    @property
    def slots(self) -> int:
        return self.capacity_bytes // self.model.expert_bytes


def build_scenario(config: SimConfig) -> Scenario:
    profile = load_profile(config.hardware)
    trace = load_trace(config.trace)
    model = load_model(config.model or trace.model).with_expert_dtype(config.expert_dtype)
    _check_shapes(model, trace)
    passes = build_passes(trace, config.workload)
    if passes.num_passes == 0:
        raise SpecmdError(f"trace {config.trace}: expected at least one pass, got none")
    demand = build_demand(trace, passes)
    capacity = config.cache.capacity_bytes(model.expert_bytes, model.routed_bytes)
    _check_capacity(config, profile, model, demand, capacity)
    return Scenario(config, profile, model, trace, passes, demand, capacity)


def _check_shapes(model: ModelSpec, trace: Trace) -> None:
    for what, want, got in (
        ("num_layers", model.moe_layers, trace.num_layers),
        ("num_experts", model.num_experts, trace.num_experts),
    ):
        if want != got:
            raise SpecmdError(
                f"trace: {what}: expected {want} for model {model.id}, got {got} "
                f"(the trace was recorded from {trace.model!r}; set --model to match)"
            )
    if trace.top_k > model.num_experts:
        raise SpecmdError(
            f"trace: top_k: expected at most {model.num_experts} experts per token, "
            f"got {trace.top_k}"
        )


def _check_capacity(
    config: SimConfig, profile: HardwareProfile, model: ModelSpec, demand: DemandSets, cap: int
) -> None:
    eb = model.expert_bytes
    slots = cap // eb
    desc = f"{config.cache.capacity!r} = {slots} expert slots ({format_bytes(cap)})"
    if slots < 1:
        raise SpecmdError(
            f"cache.capacity: expected room for at least one expert ({format_bytes(eb)}), "
            f"got {desc}"
        )
    hbm = profile.gpus[0].hbm_bytes.value
    if cap > hbm:
        raise SpecmdError(
            f"cache.capacity: expected at most the GPU's HBM ({format_bytes(hbm)} on "
            f"{profile.id}), got {desc}"
        )
    if demand.keys.size:
        size, p, layer = demand.max_layer_demand()
        if size > slots:
            raise SpecmdError(
                f"cache.capacity: expected room for the largest demand set of one layer "
                f"({size} experts = {format_bytes(size * eb)}, pass {p}, layer {layer}), "
                f"got {desc}; raise cache.capacity or lower workload.prefill_chunk_tokens"
            )


def new_rng(config: SimConfig) -> np.random.Generator:
    """The run's one random generator."""
    return np.random.default_rng(config.seed)
