"""What the reports compute from a run's spans and tables: where stall and TTFT come from.

- :func:`stall_by_cause` — stall seconds per layer, by the class of the access waited for
  (a late hit: its prefetch was still in flight; or a compulsory, capacity or collision miss);
- :func:`stall_by_phase` — stall seconds in prefill and in decode passes;
- :func:`request_parts` — each request's TTFT or TPOT split into compute, stall (exposed
  transfer) and other, as the engine reports them (``per_request``);
- :func:`ttft_breakdown` — those TTFT rows, and the same split per layer (from the spans),
  averaged over requests;
- :func:`layer_totals` — compute and stall seconds per layer over the run, of one GPU.

Stall spans count by the phase of the pass they belong to (``per_pass``); the per-layer TTFT
split counts the time of each span of the request's GPU inside its window ``[arrival, first
token]`` (on a run of several GPUs the others work for other requests meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmd_sim.cache.states import AccessClass
from specmd_sim.report.run_data import RunData
from specmd_sim.timeline import COMPUTE_KINDS, KIND

STALL_CAUSES = (
    AccessClass.LATE_HIT,
    AccessClass.COMPULSORY,
    AccessClass.CAPACITY,
    AccessClass.COLLISION,
)
_COMPUTE_IDS = [KIND[k] for k in COMPUTE_KINDS]


def _duration(spans: np.ndarray) -> np.ndarray:
    return spans["end"] - spans["start"]


def stall_by_cause(run: RunData) -> np.ndarray:
    """``[num_layers, len(STALL_CAUSES)]`` stall seconds (a stall of unknown class counts
    nowhere; none is recorded today)."""
    spans = run.spans
    stall = spans[(spans["kind"] == KIND["stall"]) & (spans["layer"] >= 0)]
    out = np.zeros((run.num_layers, len(STALL_CAUSES)))
    for j, cause in enumerate(STALL_CAUSES):
        s = stall[stall["klass"] == cause]
        np.add.at(out[:, j], s["layer"].astype(np.int64), _duration(s))
    return out


def _phase_of_spans(run: RunData, spans: np.ndarray) -> np.ndarray:
    """Phase of each span's pass: 0 prefill, 1 decode, -1 no pass."""
    out = np.full(spans.size, -1, np.int8)
    passes = run.passes
    if not passes.size:
        return out
    rows = np.searchsorted(passes["pass_"], spans["pass_"])
    ok = (rows < passes.size) & (spans["pass_"] >= 0)
    ok[ok] = passes["pass_"][rows[ok]] == spans["pass_"][ok]
    out[ok] = passes["phase"][rows[ok]]
    return out


def stall_by_phase(run: RunData) -> dict[str, float]:
    """Stall seconds in prefill and in decode passes."""
    spans = run.spans
    stall = spans[spans["kind"] == KIND["stall"]]
    phase = _phase_of_spans(run, stall)
    d = _duration(stall)
    return {"prefill": float(d[phase == 0].sum()), "decode": float(d[phase == 1].sum())}


PARTS_DTYPE = np.dtype(
    [("request", "i4"), ("total", "f8"), ("compute", "f8"), ("stall", "f8"), ("other", "f8")]
)


def request_parts(run: RunData, window: str) -> np.ndarray:
    """``per_request``'s ``<window>_s`` (``ttft`` or ``tpot``) and its compute, stall and other
    parts, one row per request that has that window (``PARTS_DTYPE``, seconds)."""
    table = run.result.get("per_request") or {}
    keys = [f"{window}{part}_s" for part in ("", "_compute", "_stall", "_other")]
    rows = [(r, *values) for r, *values in zip(table.get("request", []),
                                               *(table.get(k, []) for k in keys), strict=True)
            if values[0] is not None]  # fmt: skip
    return np.array(rows, dtype=PARTS_DTYPE)


@dataclass(frozen=True, eq=False)
class TTFTBreakdown:
    """``requests``: :func:`request_parts` of TTFT; ``layer_compute``/``layer_stall``: per
    layer, mean over those requests (seconds)."""

    requests: np.ndarray
    layer_compute: np.ndarray
    layer_stall: np.ndarray


def covered(spans: np.ndarray, t0: float, t1: float, num_layers: int) -> np.ndarray:
    """Seconds of ``spans`` inside ``[t0, t1]``, per layer (index ``num_layers``: spans of no
    layer, such as the LM head)."""
    lo = np.clip(spans["start"], t0, t1)
    hi = np.clip(spans["end"], t0, t1)
    layer = np.where(spans["layer"] >= 0, spans["layer"], num_layers).astype(np.int64)
    return np.bincount(layer, weights=hi - lo, minlength=num_layers + 1)


def ttft_breakdown(run: RunData) -> TTFTBreakdown:
    """Each request's TTFT split as the engine reports it, and per layer the compute
    (attention, experts) and stall spans of its GPU inside each request's window
    ``[arrival, first token]``, averaged over the requests."""
    spans = run.spans
    parts = request_parts(run, "ttft")
    req = run.requests
    arrival = dict(zip(req["request"].tolist(), req["arrival"].tolist(), strict=True))
    gpu_of = dict(zip(req["request"].tolist(), run.request_gpu.tolist(), strict=True))
    n = run.num_layers
    layer_compute, layer_stall = np.zeros(n + 1), np.zeros(n + 1)
    is_compute = np.isin(spans["kind"], _COMPUTE_IDS)
    is_stall = spans["kind"] == KIND["stall"]
    for r, ttft in zip(parts["request"].tolist(), parts["total"].tolist(), strict=True):
        a, mine = arrival[r], run.span_gpu == gpu_of[r]
        layer_compute += covered(spans[is_compute & mine], a, a + ttft, n)
        layer_stall += covered(spans[is_stall & mine], a, a + ttft, n)
    count = max(parts.size, 1)
    return TTFTBreakdown(parts, layer_compute[:n] / count, layer_stall[:n] / count)


def layer_totals(run: RunData, gpu: int) -> tuple[np.ndarray, np.ndarray]:
    """Compute (attention, experts) and stall seconds per layer over the whole run, of the
    spans of GPU ``gpu`` (an index into ``run.gpus``); summed over the GPUs, ``per_layer``'s
    ``compute_s`` and ``stall_s``."""
    spans = run.spans
    spans = spans[(run.span_gpu == gpu) & (spans["layer"] >= 0)]
    layer = spans["layer"].astype(np.int64)
    n = run.num_layers

    def total(mask: np.ndarray) -> np.ndarray:
        return np.bincount(layer[mask], weights=_duration(spans[mask]), minlength=n)

    return total(np.isin(spans["kind"], _COMPUTE_IDS)), total(spans["kind"] == KIND["stall"])
