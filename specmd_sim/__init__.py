"""specmd-sim: a discrete-event simulator of MoE inference with expert offloading.

Public API::

    from specmd_sim import SimConfig, replay, simulate, run_sweep
    result = simulate(SimConfig(cache={"capacity": "5%"}))
    print(result.metrics["hit_rate"], result.metrics["ttft_s"])
    run_sweep("examples/sweep-quick.yaml", "runs/sweep-quick")
"""

__version__ = "0.1.0"

from specmd_sim.config import SimConfig, apply_overrides, build_config
from specmd_sim.engine.replay import replay
from specmd_sim.engine.sim import simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import list_profiles, load_profile
from specmd_sim.metrics import RunResult
from specmd_sim.models import list_models, load_model
from specmd_sim.sweep import run_sweep
from specmd_sim.traces import generate_trace, load_trace, make_trace, save_trace

__all__ = [
    "RunResult",
    "SimConfig",
    "SpecmdError",
    "__version__",
    "apply_overrides",
    "build_config",
    "generate_trace",
    "list_models",
    "list_profiles",
    "load_model",
    "load_profile",
    "load_trace",
    "make_trace",
    "replay",
    "run_sweep",
    "save_trace",
    "simulate",
]
