"""The SimPy timing engine: a GPU compute stream, DMA copy engines and contended links.

- :mod:`.flows` shares link bandwidth max-min fairly among concurrent transfers;
- :mod:`.copy_engines` bounds concurrent transfers per GPU and direction, demand first;
- :mod:`.run` drives passes and layers on the compute stream and issues fetches.
"""

from specmd_sim.engine.sim.run import formed_schedule, simulate

__all__ = ["formed_schedule", "simulate"]
