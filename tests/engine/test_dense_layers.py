"""Models with dense-FFN layers (DeepSeek) spend their time at the start of every pass."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim import SimConfig, simulate
from specmd_sim.hardware import load_profile
from specmd_sim.models import CostModel, load_model
from specmd_sim.runtime import DEFAULT_RUNTIME, load_runtime
from specmd_sim.timeline import KIND


def test_dense_layers_run_once_per_pass(write_trace) -> None:
    rng = np.random.default_rng(0)
    ids = np.stack([[rng.permutation(64)[:6] for _ in range(26)] for _ in range(3)])
    trace = write_trace(ids.astype(np.int16), "deepseek-v2-lite", 64)
    result = simulate(SimConfig(trace=str(trace), cache={"capacity": "10%"}))
    spans = result.spans
    dense = spans[(spans["kind"] == KIND["attention"]) & (spans["layer"] == -1)]
    assert dense["pass_"].tolist() == [0, 1, 2]
    gpu, runtime = load_profile("h100-pcie").gpus[0], load_runtime(DEFAULT_RUNTIME)
    cost = CostModel(load_model("deepseek-v2-lite"), gpu, runtime)
    # one decode token per pass at positions 1, 2, 3 (attended = kv tokens = position)
    expected = [cost.dense_layers_time(1, pos, pos) for pos in (1, 2, 3)]
    assert (dense["end"] - dense["start"]).tolist() == pytest.approx(expected, rel=1e-12)
    assert load_model("deepseek-v2-lite").dense_layers == 1


def test_models_without_dense_layers_have_none() -> None:
    gpu, runtime = load_profile("h100-pcie").gpus[0], load_runtime(DEFAULT_RUNTIME)
    cost = CostModel(load_model("olmoe-1b-7b"), gpu, runtime)
    assert cost.dense_layers_time(4, 10, 10) == 0.0
