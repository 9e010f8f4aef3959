"""Pieces of a run that every engine shares: the result's config and inputs echo, progress."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specmd_sim.config import config_to_dict
from specmd_sim.metrics import RunResult
from specmd_sim.scenario import Scenario
from specmd_sim.scenario.build import kv_bytes_per_token

Progress = Callable[[int, int], None]  # (passes done, passes total)


def inputs_echo(scenario: Scenario) -> dict[str, Any]:
    model, trace = scenario.model, scenario.trace
    return {
        "model": model.id,
        "expert_dtype": model.expert_dtype,
        "expert_bytes": model.expert_bytes,
        "routed_bytes": scenario.placement.routed_bytes,  # at each expert's precision
        "hardware": scenario.profile.id,
        "hardware_name": scenario.profile.name,
        "host_name": scenario.profile.hosts[0].name,
        "host_cost_scale": scenario.host_costs.factor,
        "host_costs": scenario.host_costs.note,
        "runtime": scenario.runtime.id,
        "dense_dtype": model.dense_dtype,
        "kv_dtype": model.kv_dtype,
        "kv_bytes_per_token": kv_bytes_per_token(model),
        **scenario.budgets[0].as_dict(),  # of the first GPU
        "trace_model": trace.model,
        "trace_tokens": trace.num_tokens,
        "num_layers": trace.num_layers,
        "num_experts": trace.num_experts,
        "top_k": trace.top_k,
        "passes": scenario.num_passes,
        "requests": len(set(scenario.passes.row_request.tolist())),
        "preemptions": sum(int(passes.preempted.sum()) for passes, _ in scenario.shards),
        "capacity_bytes": scenario.capacity_bytes,
        "capacity_slots": scenario.slots,
        "pass_demand_max": pass_demand_max(scenario),
        "layer_demand_max": max(
            (d.max_layer_demand()[0] for _, d in scenario.shards if d.num_accesses), default=0
        ),
        "gpus": len(scenario.shards),
        **scenario.placement.summary(),
    }


def pass_demand_max(scenario: Scenario) -> int:
    """The most experts one pass demands over all its layers (the sum of its layers' demand
    sets), over every GPU's passes: a cache of fewer slots evicts experts before the next pass
    can reuse them."""
    most = 0
    for passes, demand in scenario.shards:
        if passes.num_passes:
            sizes = np.diff(demand.offsets).reshape(passes.num_passes, -1)
            most = max(most, int(sizes.sum(axis=1).max()))
    return most


def config_echo(scenario: Scenario) -> dict[str, Any]:
    return config_to_dict(scenario.config)


def finish_result(scenario: Scenario, result: RunResult) -> None:
    """Fill the result's config echo and inputs."""
    result.config = config_echo(scenario)
    result.inputs = inputs_echo(scenario)


def report_progress(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None and (done == total or done % 64 == 0):
        progress(done, total)
