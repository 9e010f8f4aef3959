"""``memory_efficiency_by_tokens``: a measured bandwidth fraction per token count, log-linear
between points, flat beyond; the cost model's memory term divides by it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specmd_sim.hardware import load_profile
from specmd_sim.hardware.schema import TokensCurve
from specmd_sim.models import CostModel, load_model
from specmd_sim.runtime import load_runtime

POINTS = [(1, 1.0), (4, 0.5), (16, 0.25)]
CURVE = {"points": [{"tokens": t, "efficiency": e} for t, e in POINTS], "source": "test",
         "grade": "A"}  # fmt: skip


def test_interpolation_is_log_linear_and_flat_beyond() -> None:
    curve = TokensCurve.model_validate(CURVE)
    assert curve.at(1) == 1.0 and curve.at(4) == 0.5 and curve.at(16) == 0.25
    assert curve.at(2) == pytest.approx(0.75)  # halfway between 1 and 4 in log
    assert curve.at(8) == pytest.approx(0.375)
    assert curve.at(1000) == 0.25


def test_points_must_increase() -> None:
    bad = {**CURVE, "points": [CURVE["points"][1], CURVE["points"][0]]}
    with pytest.raises(ValidationError, match="strictly increasing token counts"):
        TokensCurve.model_validate(bad)


def test_the_memory_term_divides_by_it() -> None:
    data = load_profile("h100-pcie").model_dump(mode="json")
    gpu = data["nodes"][0]
    gpu["memory_efficiency_by_tokens"] = CURVE
    with_curve = type(load_profile("h100-pcie")).model_validate(data).gpus[0]
    plain = load_profile("h100-pcie").gpus[0]
    model, rt = load_model("olmoe-1b-7b"), load_runtime("roofline")
    a, b = CostModel(model, plain, rt), CostModel(model, with_curve, rt)
    launch = plain.kernel_launch_overhead_s.value
    # one token: memory-bound, efficiency 1 -> the same time
    assert b.expert_time(1) == pytest.approx(a.expert_time(1))
    # four tokens: still memory-bound on an H100, half the bandwidth -> twice the memory term
    assert b.expert_time(4) - launch == pytest.approx(2 * (a.expert_time(4) - launch))
    # an operation without a token count is not touched
    assert b.op_time(0.0, 1e9) == a.op_time(0.0, 1e9)
