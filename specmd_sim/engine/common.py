"""Pieces of a run that both engines share: the result's inputs echo and progress reporting."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from specmd_sim.config import config_to_dict
from specmd_sim.metrics import RunResult
from specmd_sim.scenario import Scenario

Progress = Callable[[int, int], None]  # (passes done, passes total)


def inputs_echo(scenario: Scenario) -> dict[str, Any]:
    model, trace = scenario.model, scenario.trace
    return {
        "model": model.id,
        "expert_dtype": model.expert_dtype,
        "expert_bytes": model.expert_bytes,
        "routed_bytes": scenario.placement.routed_bytes,  # at each expert's precision
        "hardware": scenario.profile.id,
        "trace_model": trace.model,
        "trace_tokens": trace.num_tokens,
        "num_layers": trace.num_layers,
        "num_experts": trace.num_experts,
        "top_k": trace.top_k,
        "passes": scenario.num_passes,
        "requests": len(set(scenario.passes.row_request.tolist())),
        "capacity_bytes": scenario.capacity_bytes,
        "capacity_slots": scenario.slots,
        "gpus": len(scenario.shards),
        **scenario.placement.summary(),
    }


def config_echo(scenario: Scenario) -> dict[str, Any]:
    return config_to_dict(scenario.config)


def finish_result(scenario: Scenario, warm: list[int], result: RunResult) -> RunResult:
    """Fill the config echo and inputs, and the Belady gap when the config asks for it."""
    result.config = config_echo(scenario)
    result.inputs = inputs_echo(scenario)
    if scenario.config.belady_gap:
        result.metrics.update(belady_gap(scenario, result.metrics, warm))
    return result


def belady_gap(scenario: Scenario, metrics: dict[str, Any], warm: list[int]) -> dict[str, Any]:
    """Replay the same trace, capacity and prefetcher with the offline optimum.

    Policies that may stream experts past the cache are compared with ``belady-bypass``
    (optimal admission and eviction), all others with always-admit ``belady``. The optimum
    starts with the same warm contents as the policy (``static-hot``'s preloaded hot set),
    else a warm-started policy could beat a cold optimum.
    """
    from specmd_sim.engine.replay import replay
    from specmd_sim.policies.registry import EVICTION

    config = scenario.config
    policy = EVICTION.get(config.eviction.kind)
    reference = "belady-bypass" if getattr(policy, "may_bypass", False) else "belady"
    optimal_config = config.model_copy(
        update={"eviction": EVICTION.parse_config(reference), "belady_gap": False}
    )
    optimal = replay(dataclasses.replace(scenario, config=optimal_config), warm=warm).metrics
    return {
        "belady_reference": reference,
        "belady_misses": optimal["misses"],
        "belady_hit_rate": optimal["hit_rate"],
        "belady_gap_misses": metrics["misses"] - optimal["misses"],
    }


def report_progress(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None and (done == total or done % 64 == 0):
        progress(done, total)
