"""specmd-sim: a discrete-event simulator of MoE inference with expert offloading.

Public API::

    from specmd_sim import SimConfig, replay, simulate, run_sweep
    result = simulate(SimConfig(cache={"capacity": "5%"}))
    print(result.metrics["hit_rate"], result.metrics["ttft_s"])
    if __name__ == "__main__":  # (a sweep's workers import the script: spawn)
        run_sweep("examples/sweep-quick.yaml", "runs/sweep-quick")

The API sits above the library it re-exports and below its clients (the CLI, the pytest
plugin): no module of the library imports it (``tests/test_layering.py``). Its names load on
first use (PEP 562), so ``import specmd_sim`` (and the pytest plugin, which every pytest
session of an installed specmd-sim loads) imports none of the engines, pandas or plotly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from specmd_sim.config import SimConfig, apply_overrides, build_config
    from specmd_sim.engine.replay import replay
    from specmd_sim.engine.sim import formed_schedule, simulate
    from specmd_sim.errors import SpecmdError
    from specmd_sim.hardware import list_profiles, load_profile
    from specmd_sim.metrics import RunResult
    from specmd_sim.models import list_models, load_model
    from specmd_sim.policies import load_plugins
    from specmd_sim.sweep import run_sweep
    from specmd_sim.traces import generate_trace, load_trace, make_trace, save_trace

    __version__: str

# name -> the module that defines it
_LAZY = {
    "RunResult": "specmd_sim.metrics",
    "SimConfig": "specmd_sim.config",
    "SpecmdError": "specmd_sim.errors",
    "apply_overrides": "specmd_sim.config",
    "build_config": "specmd_sim.config",
    "formed_schedule": "specmd_sim.engine.sim",
    "generate_trace": "specmd_sim.traces",
    "list_models": "specmd_sim.models",
    "list_profiles": "specmd_sim.hardware",
    "load_model": "specmd_sim.models",
    "load_plugins": "specmd_sim.policies",
    "load_profile": "specmd_sim.hardware",
    "load_trace": "specmd_sim.traces",
    "make_trace": "specmd_sim.traces",
    "replay": "specmd_sim.engine.replay",
    "run_sweep": "specmd_sim.sweep",
    "save_trace": "specmd_sim.traces",
    "simulate": "specmd_sim.engine.sim",
}

__all__ = [
    "RunResult",
    "SimConfig",
    "SpecmdError",
    "__version__",
    "apply_overrides",
    "build_config",
    "formed_schedule",
    "generate_trace",
    "list_models",
    "list_profiles",
    "load_model",
    "load_plugins",
    "load_profile",
    "load_trace",
    "make_trace",
    "replay",
    "run_sweep",
    "save_trace",
    "simulate",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        value: Any = version("specmd-sim")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'specmd_sim' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
