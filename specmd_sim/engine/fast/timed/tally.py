"""What the compiled core records (the twin of :mod:`specmd_sim.engine.sim.tally`): spans, compute
and stall intervals, counter samples.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.fast.timed.state import (
    F_SSUM,
    F_T0,
    G_NSIV,
    G_NSPANS,
    I_PHASE,
    PI_REQUEST,
    SK_STALL,
    TL_PHASE_STALL,
    TL_STALL,
)
from specmd_sim.engine.jit import compiled


@compiled
def _sample(out: np.ndarray, IG: np.ndarray, counter: int, time: float, value: float,
            g: int) -> None:  # fmt: skip
    """A counter's sample into ``out``'s next row (``IG[counter]`` of them): time, value, GPU."""
    n = IG[counter]
    out[n, 0], out[n, 1], out[n, 2] = time, value, g
    IG[counter] = n + 1


@compiled
def _span(spF: np.ndarray, spI: np.ndarray, IG: np.ndarray, lane: int, kind: int, start: float,
          end: float, pass_: int, layer: int, expert: int, nbytes: int, request: int,
          klass: int) -> None:  # fmt: skip
    n = IG[G_NSPANS]
    spF[n, 0], spF[n, 1] = start, end
    spI[n, 0], spI[n, 1], spI[n, 2], spI[n, 3] = lane, kind, pass_, layer
    spI[n, 4], spI[n, 5], spI[n, 6], spI[n, 7] = expert, nbytes, request, klass
    IG[G_NSPANS] = n + 1


_interval = _sample  # (an interval's row: its start, its end, the GPU)


@compiled
def _stall(spF: np.ndarray, spI: np.ndarray, IG: np.ndarray, IS: np.ndarray, FS: np.ndarray,
           siv: np.ndarray, TL: np.ndarray, PI: np.ndarray, lane: int, row: int, layer: int,
           key: int, klass: int, now: float, record: bool, g: int) -> None:  # fmt: skip
    """GpuStream._wait's end: the wait since ``FS[F_T0]`` is a stall (span and tally; ``row``:
    the pass's row in ``PI``, its number in the spans)."""
    t0, phase = FS[F_T0], IS[I_PHASE]
    if record:
        _span(spF, spI, IG, lane, SK_STALL, t0, now, row, layer, key, 0, PI[row, PI_REQUEST],
              klass)  # fmt: skip
    if now > t0:
        _interval(siv, IG, G_NSIV, t0, now, g)
        FS[F_SSUM] += now - t0
    TL[TL_STALL, layer] += now - t0
    TL[TL_PHASE_STALL + phase, layer] += now - t0
