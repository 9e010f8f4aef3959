"""A config resolved into what a run needs, before any engine starts.

- :mod:`.build` — :func:`build_scenario`: load the profile, model and trace and make every
  check that can be made before a run (shapes, GPUs, capacity against the memory budget);
- :mod:`.passes` — the pass table and the demand set of every (pass, layer), whose
  concatenation is the access sequence;
- :mod:`.schedule` — the scheduler that forms the passes (batching, chunked prefill, admission
  order): before the run, or step by step as a timed run reaches them;
- :mod:`.placement` — where each expert is stored (DRAM or NVMe), its bytes and precision;
- :mod:`.plugins` — per GPU the run's context, expert cache and plug-ins (:class:`RunObjects`).

This package sits below ``engine/``: every engine starts from a :class:`Scenario` and the
objects :func:`build_runs` makes, and nothing here knows how time passes.
"""

from specmd_sim.scenario.build import Scenario, build_scenario, new_rng, with_capacity
from specmd_sim.scenario.plugins import RunObjects, build_run, build_runs

__all__ = [
    "RunObjects",
    "Scenario",
    "build_run",
    "build_runs",
    "build_scenario",
    "new_rng",
    "with_capacity",
]
