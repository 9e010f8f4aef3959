"""Where time goes: busy intervals of the compute stream and the links, and the decomposition of
each request's TTFT and TPOT into compute, stall (exposed transfer) and other.

The compute stream runs one operation at a time, so its compute and stall intervals are disjoint
and appended in time order; the time either covers inside a window ``[t0, t1]`` is read off
prefix sums. ``other = window − compute − stall``: the stream idle inside the window (waiting
for a request's arrival); below ``1e-9`` of the window it is float rounding and reported as 0.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

_ROUNDING = 1e-9  # relative: a smaller "other" is float rounding of the window's parts


class Intervals:
    """Disjoint ``[start, end)`` intervals, appended in time order, as arrays of doubles (an
    interval takes 16 bytes, where two lists of Python floats take 64: the engine adds one per
    operation, and a long run keeps them all)."""

    def __init__(self) -> None:
        self.starts = array("d")
        self.ends = array("d")
        self.sum = 0.0  # running total length

    def add(self, start: float, end: float) -> None:
        if end > start:
            self.starts.append(start)
            self.ends.append(end)
            self.sum += end - start

    def array(self) -> np.ndarray:
        """``[n, 2]`` float array of the intervals."""
        return np.column_stack((self.starts, self.ends)) if self.starts else np.zeros((0, 2))

    def total(self) -> float:
        return float(np.sum(np.subtract(self.ends, self.starts))) if self.starts else 0.0

    def covered(self, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        """Time covered inside each window ``[t0[i], t1[i]]``."""
        return self._upto(np.asarray(t1, float)) - self._upto(np.asarray(t0, float))

    def _upto(self, t: np.ndarray) -> np.ndarray:
        if not self.starts:
            return np.zeros_like(t)
        s, e = np.asarray(self.starts), np.asarray(self.ends)
        cum = np.concatenate(([0.0], np.cumsum(e - s)))
        i = np.searchsorted(s, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - s[j], 0.0, e[j] - s[j])
        return np.where(i >= 0, cum[j] + inside, 0.0)


class Busy:
    """Counts concurrent users of something; records the intervals with at least one."""

    def __init__(self) -> None:
        self.active = 0
        self.since = 0.0
        self.intervals = Intervals()

    def start(self, now: float) -> None:
        if self.active == 0:
            self.since = now
        self.active += 1

    def stop(self, now: float) -> None:
        self.active -= 1
        if self.active == 0:
            self.intervals.add(self.since, now)


def request_table(
    requests: list[int],
    arrival: dict[int, float],
    first_token: dict[int, float],
    last_token: dict[int, float],
    decode_tokens: dict[int, int],
    compute: Intervals,
    stall: Intervals,
) -> dict[str, list[Any]]:
    """Per request: arrival, TTFT and TPOT, each split into compute, stall and other.

    TTFT covers ``[arrival, first token]`` (requests with a prefill; None otherwise). TPOT
    covers ``[first token (or arrival), last token]`` divided by the decode tokens (None
    without decode tokens).
    """
    arr = np.array([arrival[r] for r in requests])
    has_first = np.array([r in first_token for r in requests], bool)
    first = np.array([first_token.get(r, arrival[r]) for r in requests])
    last = np.array([last_token.get(r, first_token.get(r, arrival[r])) for r in requests])
    n_dec = np.array([decode_tokens.get(r, 0) for r in requests])
    table: dict[str, list[Any]] = {"request": list(requests), "arrival_s": arr.tolist()}
    windows = {
        "ttft": (arr, first, np.ones(len(requests)), has_first),
        "tpot": (first, last, np.maximum(n_dec, 1), n_dec > 0),
    }
    for name, (t0, t1, div, valid) in windows.items():
        total = t1 - t0
        busy = compute.covered(t0, t1)
        wait = stall.covered(t0, t1)
        other = total - busy - wait
        other = np.where(other > _ROUNDING * total, other, 0.0)
        for part, values in (("", total), ("_compute", busy), ("_stall", wait), ("_other", other)):
            table[f"{name}{part}_s"] = [
                float(v / d) if ok else None
                for v, d, ok in zip(values.tolist(), div.tolist(), valid.tolist(), strict=True)
            ]
    table["decode_tokens"] = n_dec.tolist()
    table["finish_s"] = last.tolist()
    return table


def mean_of(values: list[Any]) -> float | None:
    """Mean of the non-None values; None if there are none."""
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None
