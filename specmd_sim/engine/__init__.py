"""Engines: ``replay`` (timing-free) and ``simulate`` (SimPy timing) over the same cache and
policy objects, both driven by the passes and demand sets of :mod:`specmd_sim.scenario.passes`."""
