"""The compiled core's event heap (the twin of :mod:`specmd_sim.engine.sim.events`, SimPy's
queue): ``(time, priority, id)`` smallest on top.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast.timed.state import (
    G_EID,
    G_HEAP_N,
)
from specmd_sim.engine.jit import compiled


@compiled
def _before(hT: np.ndarray, hI: np.ndarray, a: int, b: int) -> bool:
    if hT[a] != hT[b]:
        return hT[a] < hT[b]
    if hI[a, 0] != hI[b, 0]:
        return hI[a, 0] < hI[b, 0]
    return hI[a, 1] < hI[b, 1]


@compiled
def _swap(hT: np.ndarray, hI: np.ndarray, a: int, b: int) -> None:
    hT[a], hT[b] = hT[b], hT[a]
    for c in range(4):
        hI[a, c], hI[b, c] = hI[b, c], hI[a, c]


@compiled
def schedule(IG: np.ndarray, hT: np.ndarray, hI: np.ndarray, time: float, prio: int, kind: int,
             arg: int) -> None:  # fmt: skip
    """Push an event, numbered after every event scheduled before it."""
    i = IG[G_HEAP_N]
    if i == hT.size:
        raise RuntimeError("timing engine: more events pending at once than the heap holds")
    IG[G_HEAP_N] = i + 1
    hT[i] = time
    hI[i, 0], hI[i, 1], hI[i, 2], hI[i, 3] = prio, IG[G_EID], kind, arg
    IG[G_EID] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(hT, hI, i, parent):
            break
        _swap(hT, hI, i, parent)
        i = parent


@compiled
def _pop(IG: np.ndarray, hT: np.ndarray, hI: np.ndarray) -> None:
    size = IG[G_HEAP_N] - 1
    IG[G_HEAP_N] = size
    if size == 0:
        return
    _swap(hT, hI, 0, size)
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(hT, hI, child + 1, child):
            child += 1
        if not _before(hT, hI, child, i):
            break
        _swap(hT, hI, i, child)
        i = child
