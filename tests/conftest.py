"""Shared fixtures: paths to the reference traces and small trace builders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specmd_sim.traces import make_trace, save_trace

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    """The reference traces of ../shared/traces; skips when the folder is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not present (a user's fresh clone)")
    return SHARED_TRACES


@pytest.fixture
def write_trace(tmp_path: Path):
    """Save arrays as a trace file and return its path."""

    def write(experts: np.ndarray, model: str, num_experts: int, name: str = "t.npz", **kw):
        trace = make_trace(np.asarray(experts), model=model, num_experts=num_experts, **kw)
        return save_trace(trace, tmp_path / name)

    return write
