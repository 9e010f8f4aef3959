"""Online learning from what has already happened: the demand sets of the run so far.

Predictors and policies that learn (popularity, transitions, activation matrices) must only use
the past. :class:`DemandObserver` feeds them each (pass, layer) demand set exactly once, in run
order, up to and including the layer whose router has just decided — never beyond: it reads
them from the run's history (``ctx.history``), which refuses anything later.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specmd_sim.policies.context import RunContext

Observe = Callable[[int, int, np.ndarray], None]  # (pass, layer, expert ids of that layer)


class DemandObserver:
    def __init__(self, ctx: RunContext, observe: Observe) -> None:
        self.ctx = ctx
        self.observe = observe
        self.next = 0  # flat (pass * L + layer) index of the next demand set to feed

    def advance(self, pass_index: int, layer: int) -> None:
        """Feed every demand set up to and including (``pass_index``, ``layer``)."""
        history, num_layers = self.ctx.history, self.ctx.num_layers
        num_experts = self.ctx.num_experts
        upto = pass_index * num_layers + layer
        while self.next <= upto:
            p, lay = divmod(self.next, num_layers)
            self.observe(p, lay, history.keys_of(p, lay) - lay * num_experts)
            self.next += 1
