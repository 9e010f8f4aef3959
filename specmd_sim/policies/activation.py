"""Expert activation matrices (EAMs), as MoE-Infinity traces them.

An EAM of a request counts, per (layer, expert), how often the request activated that expert.
:class:`ActivationMatrices` keeps the running request's EAM (fed only with what already
happened, through :class:`~specmd_sim.policies.observe.DemandObserver`) and a bounded FIFO
store of finished requests' EAMs. ``predict(layer)`` returns, for a later layer, the row of the
stored EAM most similar to the running one (cosine similarity of the flattened matrices; ties
to the most recent), normalized to a distribution; without history, the running request's own
row; without either, None.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.fit import TrainingRoutes
from specmd_sim.policies.observe import DemandObserver


class ActivationMatrices:
    def __init__(self, ctx: RunContext, history: int, keep_finished: bool = True) -> None:
        self.ctx = ctx
        self.keep_finished = keep_finished
        self.current = np.zeros((ctx.num_layers, ctx.num_experts))
        self.store: deque[np.ndarray] = deque(maxlen=history)
        self.request = -1
        self.observer = DemandObserver(ctx, self._observe)
        self._match: np.ndarray | None = None
        self._match_at = (-1, -1)

    def _observe(self, pass_index: int, layer: int, experts: np.ndarray) -> None:
        request = self.ctx.history.pass_info(pass_index).request
        if request != self.request:
            if self.current.any() and self.keep_finished:
                self.store.append(self.current / np.linalg.norm(self.current))
            self.current = np.zeros_like(self.current)
            self.request = request
        self.current[layer, experts] += 1

    def fit(self, data: TrainingRoutes) -> None:
        """Store the EAM of each training request, in the order they ran."""
        eams: dict[int, np.ndarray] = {}
        for p, layer, experts in data.demand_sets():
            request = int(data.passes.request[p])
            eam = eams.setdefault(request, np.zeros_like(self.current))
            eam[layer, experts] += 1
        for eam in eams.values():
            if eam.any():
                self.store.append(eam / np.linalg.norm(eam))

    def best_match(self, pass_index: int, layer: int) -> np.ndarray | None:
        """The stored EAM closest to the running one, after (pass, layer) was observed."""
        if self._match_at == (pass_index, layer):
            return self._match
        self.observer.advance(pass_index, layer)
        match = None
        if self.store:
            stored = np.stack(self.store)  # [n, L, E], each of unit norm
            sims = np.tensordot(stored, self.current, axes=([1, 2], [0, 1]))
            best = len(sims) - 1 - int(np.argmax(sims[::-1]))  # ties: most recent
            match = stored[best]
        elif self.current.any():
            match = self.current
        self._match, self._match_at = match, (pass_index, layer)
        return match

    def predict(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        match = self.best_match(pass_index, layer)
        if match is None:
            return None
        row = match[target]
        total = row.sum()
        return row / total if total > 0 else None
