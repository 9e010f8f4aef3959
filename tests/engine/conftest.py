"""Small routing traces for timing tests: a few requests, a few tokens each."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

SHAPES = {"olmoe-1b-7b": (16, 64, 8), "mixtral-8x7b": (32, 8, 2)}  # layers, experts, top-k


@pytest.fixture
def small_trace(write_trace):
    """``small_trace(model, requests, prefill, decode)`` -> path of a random trace (seed 7)."""

    def make(model: str, requests: int = 2, prefill: int = 4, decode: int = 4) -> Path:
        layers, experts, k = SHAPES[model]
        rng = np.random.default_rng(7)
        per = prefill + decode
        tokens = requests * per
        ids = np.argsort(rng.random((tokens, layers, experts)), axis=2)[:, :, :k]
        gates = np.sort(rng.random((tokens, layers, k)), axis=2)[:, :, ::-1]
        return write_trace(
            ids.astype(np.int16),
            model,
            experts,
            name=f"{model}-{requests}x{prefill}+{decode}.npz",
            request=np.repeat(np.arange(requests, dtype=np.int32), per),
            phase=np.tile(np.r_[np.zeros(prefill), np.ones(decode)].astype(np.uint8), requests),
            gates=gates.astype(np.float32),
        )

    return make


@pytest.fixture
def kt_pass_durations(write_trace):
    """``kt_pass_durations(runtimes)`` -> for each runtime (a bundled id or a path), the pass
    durations of DeepSeek-V3 on kTransformers' machine (xeon6454s-rtx4090, every routed expert
    on the CPU), one request of a 2-token prompt and 3 decode tokens (random routing, seed 0)."""
    from specmd_sim import SimConfig, simulate
    from specmd_sim.models import load_model

    model = load_model("deepseek-v3")
    layers, experts, k = model.moe_layers, model.num_experts, model.top_k
    rng = np.random.default_rng(0)
    ids = np.stack([[rng.choice(experts, k, replace=False) for _ in range(layers)]
                    for _ in range(5)])  # fmt: skip
    trace = write_trace(ids.astype(np.int16), "deepseek-v3", experts,
                        phase=np.r_[0, 0, 1, 1, 1].astype(np.uint8))  # fmt: skip

    def run(runtimes: tuple[str, ...]) -> list[np.ndarray]:
        out = []
        for runtime in runtimes:
            r = simulate(SimConfig(trace=str(trace), hardware="xeon6454s-rtx4090",
                                   runtime=runtime, cache={"capacity": 8},
                                   prefetch={"kind": "none"},
                                   miss={"kind": "cpu-execute", "mode": "always"},
                                   timing={"record_spans": False}))  # fmt: skip
            out.append(np.subtract(r.per_pass["end_s"], r.per_pass["start_s"]))
        return out

    return run


@pytest.fixture(scope="module")
def compiled_ahead():
    """The module compiled ahead of time (built here if it is not yet), or a skip saying why
    it cannot be built on this machine."""
    pytest.importorskip("numba")
    from specmd_sim.engine.fast import aot

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = aot.load()
    if module is None:
        name = aot.module_name()
        why = [str(w.message) for w in caught] or [
            f"{p}: {p.read_text().strip()}" for f in aot.folders() for p in f.glob(f"{name}.failed")
        ]
        pytest.skip(f"not compiled ahead of time here: {why or 'numba disabled'}")
    return module
