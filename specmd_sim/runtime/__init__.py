"""Runtime profiles: the software stack's costs, combined with any hardware profile."""

from specmd_sim.runtime.loader import DEFAULT_RUNTIME, list_runtimes, load_runtime
from specmd_sim.runtime.schema import RuntimeProfile

__all__ = ["DEFAULT_RUNTIME", "RuntimeProfile", "list_runtimes", "load_runtime"]
