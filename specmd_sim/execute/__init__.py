"""The real executor: the simulator's decisions run on this machine (``specmd validate real``).

:func:`execute` runs a scenario for real (:mod:`.run`), on a scaled-down float32 model
(:func:`scaled_model`, :mod:`.model`), its copies issued to copy streams by the thread that
computes (:mod:`.issue`; on the ``cpu`` backend copy workers, :mod:`.copies`) over a throttled
link or the device's own; :mod:`.calibrate` measures this machine into a hardware and a runtime
profile the simulator then uses.
"""

from specmd_sim.execute.model import scaled_model
from specmd_sim.execute.run import Backend, execute

__all__ = ["Backend", "execute", "scaled_model"]
