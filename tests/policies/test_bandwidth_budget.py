"""bandwidth-budget: as many experts as their transfer times fit the layer's remaining compute."""

from __future__ import annotations

import math

import pytest

from specmd_sim import SimConfig
from specmd_sim.scenario import build_scenario
from specmd_sim.scenario.plugins import build_run


def planned(cold: str | None) -> list[tuple[int, float, list[int], object]]:
    config = SimConfig(
        prefetch={"kind": "bandwidth-budget"},
        predictor={"kind": "noisy-oracle", "accuracy": 0.5},  # scores spread over all experts
        precision={"cold_dtype": cold, "hot_fraction": 0.0},
        workload={"max_requests": 1, "prefill_chunk_tokens": 0},  # long passes: big budgets
    )
    run = build_run(build_scenario(config))
    out = []
    run.cache.begin_pass(0)
    for layer in range(3):
        run.cache.begin_layer(layer)  # the router decides: the plug-ins see its demand set
        seconds = run.prefetch.budget(0, layer)
        out.append((layer, seconds, run.prefetch.plan(0, layer, run.predictor, run.cache), run))
    return out


@pytest.mark.parametrize("cold", [None, "int4"])
def test_plan_length_is_the_budget_over_each_experts_transfer_time(cold) -> None:
    for _, seconds, plan, run in planned(cold):
        ctx = run.ctx
        nbytes = int(ctx.nbytes[plan[0]])
        assert len(set(ctx.nbytes.tolist())) == 1  # one size in this run
        fit = math.floor(seconds * ctx.path.bandwidth / nbytes)
        assert 0 < len(plan) == min(fit, 64)  # at most one layer ahead: 64 candidates


def test_smaller_experts_mean_more_of_them() -> None:
    """int4 experts are 3.9x smaller; the budget (expert compute) shrinks too, less so."""
    bf16 = [len(plan) for _, _, plan, _ in planned(None)]
    int4 = [len(plan) for _, _, plan, _ in planned("int4")]
    assert all(i >= 2 * b > 0 for b, i in zip(bf16, int4, strict=True))


def test_a_prefill_budget_counts_the_eager_paths_blocking_copies(tmp_path) -> None:
    """On a runtime whose eager prefill waits for blocking copies in each MoE layer
    (``eager_prefill.blocking_copies``: kTransformers' hand-off), a prefill layer's budget is
    longer by that wait, as the engine times the pass: copies x the host link's latency."""
    import yaml

    from specmd_sim.hardware.topology import host_path
    from specmd_sim.runtime import load_runtime

    base = load_runtime("fused-kernels").model_dump(mode="json", exclude_none=True)
    eager = load_runtime("ktransformers").model_dump(mode="json", exclude_none=True)
    budgets = []
    for copies in (4, None):
        data = {**base, "eager_prefill": {**eager["eager_prefill"]}}
        if copies is None:
            del data["eager_prefill"]["blocking_copies"]
        path = tmp_path / f"runtime-{copies}.yaml"
        path.write_text(yaml.safe_dump(data))
        config = SimConfig(runtime=str(path), prefetch={"kind": "bandwidth-budget"},
                           workload={"max_requests": 1, "prefill_chunk_tokens": 0})  # fmt: skip
        run = build_run(build_scenario(config))
        run.cache.begin_pass(0)  # (pass 0: the prompt's prefill)
        run.cache.begin_layer(0)
        budgets.append(run.prefetch.budget(0, 0))
        link = host_path(run.ctx.profile, run.ctx.cost.gpu.id)
        tokens = run.ctx.history.pass_info(0).tokens
    m = run.ctx.model
    wait = 4 * link.latency_s + tokens * (2 * m.hidden_size * 2 + m.top_k * 12) / link.bandwidth
    assert link.latency_s > 0 and tokens > 1
    assert budgets[0] - budgets[1] == pytest.approx(wait, rel=1e-9)
