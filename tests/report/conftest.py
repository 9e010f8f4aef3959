"""Small runs shared by the report tests: a tiny OLMoE-shaped trace (2 requests of 4 prompt
and 4 decode tokens, 16 passes), run once per session by each engine."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.metrics import RunResult
from specmd_sim.report import RunData, write_timeline
from specmd_sim.runs import TIMELINE_FILE, write_run
from specmd_sim.traces import PRESETS, generate_trace, save_trace


@pytest.fixture(scope="session")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": 2, "prompt_tokens": 4, "decode_tokens": 4}
    )
    return save_trace(generate_trace(params, 0), tmp_path_factory.mktemp("trace") / "tiny.npz")


@pytest.fixture(scope="session")
def tiny_config(tiny_trace: Path) -> Callable[..., SimConfig]:
    """``tiny_config(**fields)``: a config on the tiny trace."""

    def make(**changes: object) -> SimConfig:
        return SimConfig(trace=str(tiny_trace), **changes)

    return make


@pytest.fixture(scope="session")
def timed(tiny_config: Callable[..., SimConfig]) -> RunResult:
    """The timing engine on the tiny trace (with 4 MiB transfer chunks: more spans)."""
    return simulate(tiny_config(timing={"chunk_bytes": 4 * 2**20}))


@pytest.fixture(scope="session")
def timed_dir(timed: RunResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "timed"
    write_run(run_dir, timed)
    write_timeline(RunData.from_result(timed, run_dir), run_dir / TIMELINE_FILE)
    return run_dir


@pytest.fixture(scope="session")
def chrome_dir(timed_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``timed_dir`` to which ``specmd chrome`` added the Chrome JSON trace."""
    from support.cli import run_specmd

    run_dir = tmp_path_factory.mktemp("runs") / "chrome"
    shutil.copytree(timed_dir, run_dir)
    proc = run_specmd("chrome", run_dir)
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture(scope="session")
def replay_dir(
    tiny_config: Callable[..., SimConfig], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "replayed"
    write_run(run_dir, replay(tiny_config()))
    return run_dir


@pytest.fixture(scope="session")
def two_gpus(tiny_config: Callable[..., SimConfig]) -> RunResult:
    """The timing engine on the tiny trace with two GPUs, experts sharded (a request each)."""
    return simulate(
        tiny_config(hardware="hgx-h100-8gpu", parallel={"gpus": 2, "mode": "expert-sharded"})
    )
