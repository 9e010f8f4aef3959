"""What the reports compute from a run's spans: where stall and TTFT come from (numpy only).

- :func:`stall_by_cause` — stall seconds per layer, by the class of the access waited for
  (a late hit: its prefetch was still in flight; or a compulsory, capacity or collision miss);
- :func:`stall_by_phase` — stall seconds in prefill and in decode passes;
- :func:`ttft_breakdown` — each request's TTFT split into compute, stall (exposed transfer)
  and other (what is neither: idle gaps), and the same per layer, averaged over requests.

Stall spans count by the pass they belong to (its phase: prefill up to its request's first
token); TTFT counts the time inside each request's window ``[arrival, first token]``.
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
    """Phase of each span's pass: 0 prefill, 1 decode, -1 unknown (or no pass)."""
    out = np.full(spans.size, -1, np.int8)
    passes = run.passes
    if not passes.size:
        return out
    rows = np.searchsorted(passes["pass_"], spans["pass_"])
    ok = (rows < passes.size) & (spans["pass_"] >= 0)
    ok[ok] = passes["pass_"][rows[ok]] == spans["pass_"][ok]
    out[ok] = run.pass_phase[rows[ok]]
    return out


def stall_by_phase(run: RunData) -> dict[str, float]:
    """Stall seconds in prefill and in decode passes."""
    spans = run.spans
    stall = spans[spans["kind"] == KIND["stall"]]
    phase = _phase_of_spans(run, stall)
    d = _duration(stall)
    return {"prefill": float(d[phase == 0].sum()), "decode": float(d[phase == 1].sum())}


TTFT_DTYPE = np.dtype(
    [("request", "i4"), ("ttft", "f8"), ("compute", "f8"), ("stall", "f8"), ("other", "f8")]
)


@dataclass(frozen=True, eq=False)
class TTFTBreakdown:
    """``requests``: one row per request with a first token (``TTFT_DTYPE``, seconds);
    ``layer_compute``/``layer_stall``: per layer, mean over those requests (seconds)."""

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
    """Split each request's TTFT window ``[arrival, first token]`` into compute (attention,
    experts, LM head), stall, and other = TTFT - compute - stall (never below 0): the time
    each covers inside the window, as the timing engine defines it. Where ``result.json``
    carries the engine's own split (``per_request.ttft_compute_s`` ...) the per-request rows
    are those numbers; the per-layer split always comes from the spans."""
    spans = run.spans
    req = run.requests[np.isfinite(run.requests["first_token"])]
    n = run.num_layers
    out = np.zeros(req.size, TTFT_DTYPE)
    layer_compute, layer_stall = np.zeros(n + 1), np.zeros(n + 1)
    compute = spans[np.isin(spans["kind"], _COMPUTE_IDS)]
    stall = spans[spans["kind"] == KIND["stall"]]
    for i, r in enumerate(req):
        a, f = float(r["arrival"]), float(r["first_token"])
        c, s = covered(compute, a, f, n), covered(stall, a, f, n)
        out[i] = (r["request"], f - a, c.sum(), s.sum(), 0.0)
        layer_compute += c
        layer_stall += s
    pr = run.result.get("per_request") or {}
    if "ttft_compute_s" in pr and req.size:
        engine = {int(q): j for j, q in enumerate(pr["request"])}
        for part in ("compute", "stall"):
            values = [pr[f"ttft_{part}_s"][engine[int(q)]] for q in out["request"]]
            out[part] = [np.nan if v is None else v for v in values]
    out["other"] = np.maximum(out["ttft"] - out["compute"] - out["stall"], 0.0)
    count = max(req.size, 1)
    return TTFTBreakdown(out, layer_compute[:n] / count, layer_stall[:n] / count)
