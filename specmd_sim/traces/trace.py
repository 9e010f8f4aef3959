"""The routing trace: which experts each token selected in each MoE layer.

A trace is a handful of numpy arrays (see ``docs/trace-format.md``), never Python objects:

- ``experts`` int16 ``[T, L, k]``: the selected expert ids per token and layer, each row ordered
  by descending gate; ``-1`` = none;
- ``gates`` float32 ``[T, L, k]`` (optional): the router weights of those experts;
- ``pred_scores`` float16 ``[D, T, L, E]`` (optional): scores for layer ``l`` predicted ``j``
  layers ahead (index ``j - 1``), i.e. computed at layer ``l - j``; NaN where unavailable;
- ``request`` int32 ``[T]``: the request each token belongs to;
- ``phase`` uint8 ``[T]``: 0 prefill, 1 decode;
- ``arrival_s`` float64 ``[T]`` (optional): the arrival time, in seconds from the start of the
  trace, of the request each row belongs to (equal within a request, non-decreasing over requests
  in order of first appearance);
- ``meta``: a JSON object with at least ``format``, ``version``, ``model``, ``num_layers``,
  ``num_experts`` and ``top_k``.

Rows are in generation order; within one request, prefill rows precede decode rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError, short_repr

FORMAT_NAME = "specmd-trace"
FORMAT_VERSION = 1
PREFILL, DECODE = 0, 1
REQUIRED_META = ("format", "version", "model", "num_layers", "num_experts", "top_k")


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated routing trace. Build one with :func:`make_trace` or load one from disk."""

    experts: np.ndarray
    request: np.ndarray
    phase: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    gates: np.ndarray | None = None
    pred_scores: np.ndarray | None = None
    arrival_s: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def num_layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    @property
    def num_experts(self) -> int:
        return int(self.meta["num_experts"])

    @property
    def model(self) -> str:
        return str(self.meta["model"])

    @cached_property
    def prompt_tokens(self) -> np.ndarray:
        """int64 [highest request id + 1]: each request's prompt tokens (its prefill rows)."""
        prompts = self.request[self.phase == PREFILL]
        return np.bincount(prompts, minlength=int(self.request.max(initial=-1)) + 1)

    @cached_property
    def padded(self) -> bool:
        """Whether some token's layer routes fewer than ``top_k`` experts (ids -1 pad the
        rest); known from the validation of a trace loaded or made."""
        return bool((self.experts < 0).any())

    @property
    def lookahead(self) -> int:
        """How many layers ahead ``pred_scores`` reaches (0 without predictions)."""
        return 0 if self.pred_scores is None else int(self.pred_scores.shape[0])

    def request_arrivals(self) -> np.ndarray | None:
        """Arrival time (s) of each request in order of first appearance; None without them.

        The matching request ids are ``request[np.sort(np.unique(request, return_index=True)[1])]``.
        """
        if self.arrival_s is None:
            return None
        return np.asarray(self.arrival_s[_first_rows(self.request)], dtype=np.float64)


def make_trace(
    experts: np.ndarray,
    *,
    model: str,
    num_experts: int,
    request: np.ndarray | None = None,
    phase: np.ndarray | None = None,
    gates: np.ndarray | None = None,
    pred_scores: np.ndarray | None = None,
    arrival_s: np.ndarray | None = None,
    source: str = "trace",
    **meta: Any,
) -> Trace:
    """Build and validate a trace from arrays; defaults: one request, all decode."""
    experts = _array(source, "experts", experts)
    if experts.ndim != 3:
        raise SpecmdError(
            f"{source}: experts: expected a 3-D array [tokens, layers, k], "
            f"got shape {experts.shape}"
        )
    t, num_layers, k = experts.shape
    if not isinstance(model, str) or not model:
        raise _fail(source, "model", "a model id (a catalog name or a model spec's path)",
                    repr(model))  # fmt: skip
    for key, value in meta.items():  # (written as JSON by save_trace: checked here, not there)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise _fail(source, key, "a JSON value (text, a finite number, true/false, null, "
                        "or lists and mappings of them)", short_repr(value)) from None  # fmt: skip
    full_meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "model": model,
        "num_layers": num_layers,
        "num_experts": num_experts,
        "top_k": k,
        **meta,
    }
    return validate_trace(
        {
            "experts": experts,
            "request": np.zeros(t, np.int32) if request is None else request,
            "phase": np.full(t, DECODE, np.uint8) if phase is None else phase,
            "gates": gates,
            "pred_scores": pred_scores,
            "arrival_s": arrival_s,
        },
        full_meta,
        source,
    )


def _fail(source: str, name: str, expected: str, got: object) -> SpecmdError:
    return SpecmdError(f"{source}: {name}: expected {expected}, got {got}")


def _array(source: str, name: str, value: Any) -> np.ndarray:
    """``value`` as an array; nested lists of unequal lengths are refused in one line."""
    try:
        return np.asarray(value)
    except ValueError:  # numpy: "... has an inhomogeneous shape after N dimensions ..."
        raise _fail(source, name, "an array (lists of equal lengths)", "ragged lists") from None


def _as(source: str, name: str, arr: Any, kinds: str, dtype: type, ndim: int) -> np.ndarray:
    arr = _array(source, name, arr)
    if arr.dtype.kind not in kinds:
        raise _fail(source, name, f"a {np.dtype(dtype).name} array", f"dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise _fail(source, name, f"{ndim} dimensions", f"shape {arr.shape}")
    if arr.dtype.kind in "iu" and np.dtype(dtype).kind in "iu" and arr.size:
        info = np.iinfo(dtype)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise _fail(
                source, name, f"values that fit {np.dtype(dtype).name}", f"range [{lo}, {hi}]"
            )
    return arr.astype(dtype, copy=False)


def validate_meta(meta: Any, source: str) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise _fail(source, "meta", "a JSON object", type(meta).__name__)
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise _fail(source, "meta", f"keys {list(REQUIRED_META)}", f"missing {missing}")
    if meta["format"] != FORMAT_NAME:
        raise _fail(source, "meta.format", repr(FORMAT_NAME), repr(meta["format"]))
    if meta["version"] != FORMAT_VERSION:
        raise _fail(source, "meta.version", str(FORMAT_VERSION), repr(meta["version"]))
    for key in ("num_layers", "num_experts", "top_k"):
        value = meta[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _fail(source, f"meta.{key}", "an integer >= 1", repr(value))
    if meta["num_experts"] > np.iinfo(np.int16).max:
        raise _fail(source, "meta.num_experts", "at most 32767", meta["num_experts"])
    return meta


def validate_trace(arrays: dict[str, Any], meta: Any, source: str) -> Trace:
    """Check shapes, dtypes and ranges; return a :class:`Trace` or raise a one-line error."""
    meta = validate_meta(meta, source)
    experts = _as(source, "experts", arrays["experts"], "iu", np.int16, 3)
    t, num_layers, k = experts.shape
    if t < 1:
        raise _fail(source, "experts", "at least one token", "0 tokens")
    if (num_layers, k) != (meta["num_layers"], meta["top_k"]):
        raise _fail(
            source,
            "experts",
            f"shape [T, {meta['num_layers']}, {meta['top_k']}] (meta num_layers, top_k)",
            f"shape {list(experts.shape)}",
        )
    num_experts = meta["num_experts"]
    lowest = _check_expert_ids(experts, num_experts, source)

    request = _as(source, "request", arrays["request"], "iu", np.int32, 1)
    phase = _as(source, "phase", arrays["phase"], "iu", np.uint8, 1)
    for name, arr in (("request", request), ("phase", phase)):
        if arr.shape != (t,):
            raise _fail(source, name, f"shape [{t}] (one per token)", f"shape {list(arr.shape)}")
    if request.size and int(request.min()) < 0:
        raise _fail(source, "request", "ids >= 0", int(request.min()))
    if phase.size and int(phase.max()) > DECODE:
        raise _fail(source, "phase", "0 (prefill) or 1 (decode)", int(phase.max()))
    _check_phase_order(request, phase, source)

    gates = arrays.get("gates")
    if gates is not None:
        gates = _as(source, "gates", gates, "f", np.float32, 3)
        if gates.shape != experts.shape:
            raise _fail(
                source, "gates", f"shape {list(experts.shape)} like experts", list(gates.shape)
            )
    pred = arrays.get("pred_scores")
    if pred is not None:
        pred = _as(source, "pred_scores", pred, "f", np.float16, 4)
        if pred.shape[1:] != (t, num_layers, num_experts) or pred.shape[0] < 1:
            raise _fail(
                source,
                "pred_scores",
                f"shape [D >= 1, {t}, {num_layers}, {num_experts}]",
                f"shape {list(pred.shape)}",
            )
    arrival = arrays.get("arrival_s")
    if arrival is not None:
        arrival = _check_arrivals(arrival, request, source)
    trace = Trace(experts, request, phase, meta, gates, pred, arrival)
    trace.__dict__["padded"] = lowest < 0  # (where cached_property keeps what it computed)
    return trace


def _check_expert_ids(experts: np.ndarray, num_experts: int, source: str) -> int:
    """Ids in ``[-1, num_experts - 1]``, distinct within a row, and at least one routed; the
    lowest id."""
    lo, hi = int(experts.min()), int(experts.max())
    if lo < -1 or hi >= num_experts:
        bad = (experts < -1) | (experts >= num_experts)
        tok, layer, slot = (int(i) for i in np.argwhere(bad)[0])
        raise _fail(
            source,
            "experts",
            f"expert ids in [-1, {num_experts - 1}] (meta num_experts = {num_experts})",
            f"{int(experts[tok, layer, slot])} at token {tok}, layer {layer}, slot {slot}",
        )
    if hi < 0:  # -1 pads missing records; a trace of nothing but padding
        raise _fail(source, "experts", "at least one routed expert (ids >= 0)", "none (all -1)")
    step = max(1, _CHECK_ENTRIES // (experts.shape[1] * experts.shape[2]))
    for row in range(0, experts.shape[0], step):
        dup = _duplicates(experts[row : row + step])
        if dup.any():
            tok, layer = (int(i) for i in np.argwhere(dup)[0])
            tok += row
            raise _fail(
                source,
                "experts",
                "distinct expert ids within a token's layer",
                f"{experts[tok, layer].tolist()} at token {tok}, layer {layer}",
            )
    return lo


_CHECK_ENTRIES = 1 << 16
"""Ids checked for duplicates at once (in whole rows): the temporaries stay in the CPU's cache
(4x faster than chunks of a few MiB; measured)."""
_PAIRWISE_K = 16
"""Up to this top-k, comparing every two slots is faster than sorting each row (measured)."""


def _duplicates(experts: np.ndarray) -> np.ndarray:
    """``[T, L]``: whether the row has a routed expert twice (ids in ``[-1, E - 1]``)."""
    k = experts.shape[2]
    if k > _PAIRWISE_K:
        ordered = np.sort(experts, axis=2)
        return ((ordered[:, :, 1:] == ordered[:, :, :-1]) & (ordered[:, :, 1:] >= 0)).any(axis=2)
    slots = np.ascontiguousarray(np.moveaxis(experts, 2, 0))
    # each slot's padding (-1) as an id of its own, so that only routed ids can match
    slots = np.where(slots < 0, (-1 - np.arange(k, dtype=np.int16))[:, None, None], slots)
    dup = np.zeros(experts.shape[:2], bool)
    for i in range(k):
        for j in range(i + 1, k):
            dup |= slots[i] == slots[j]
    return dup


def _first_rows(request: np.ndarray) -> np.ndarray:
    """The first row of each request, in order of first appearance."""
    return np.sort(np.unique(request, return_index=True)[1])


def _check_arrivals(arrival: Any, request: np.ndarray, source: str) -> np.ndarray:
    """``arrival_s``: one finite time >= 0 per row, equal within a request, FCFS over requests."""
    name, t = "arrival_s", request.size
    arrival = _as(source, name, arrival, "iuf", np.float64, 1)
    if arrival.shape != (t,):
        raise _fail(source, name, f"shape [{t}] (one per token)", f"shape {list(arrival.shape)}")
    finite = np.isfinite(arrival)
    if not finite.all():
        row = int(np.argmin(finite))
        raise _fail(source, name, "finite times", f"{float(arrival[row])} at row {row}")
    negative = arrival < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise _fail(source, name, "times >= 0", f"{float(arrival[row])} at row {row}")
    _, first, inverse = np.unique(request, return_index=True, return_inverse=True)
    first_of_row = first[inverse.reshape(-1)]
    differs = arrival != arrival[first_of_row]
    if differs.any():
        row = int(np.argmax(differs))
        req = int(request[row])
        first_row = int(first_of_row[row])
        raise _fail(
            source,
            name,
            "one arrival time per request (equal on all its rows)",
            f"request {req} with {float(arrival[first_row])} at row {first_row} and "
            f"{float(arrival[row])} at row {row}",
        )
    rows = np.sort(first)
    times = arrival[rows]
    earlier = times[1:] < times[:-1]
    if earlier.any():
        i = int(np.argmax(earlier))
        raise _fail(
            source,
            name,
            "request arrivals non-decreasing in order of first appearance (FCFS)",
            f"request {int(request[rows[i + 1]])} at {float(times[i + 1])} s before request "
            f"{int(request[rows[i]])} at {float(times[i])} s (which appears first)",
        )
    return arrival


def _check_phase_order(request: np.ndarray, phase: np.ndarray, source: str) -> None:
    """Within each request, all prefill rows must come before any decode row."""
    order = np.lexsort((np.arange(request.size), request))
    req_sorted, phase_sorted = request[order], phase[order]
    same = req_sorted[1:] == req_sorted[:-1]
    backwards = same & (phase_sorted[1:] < phase_sorted[:-1])
    if backwards.any():
        row = int(order[1:][backwards][0])
        raise _fail(
            source,
            "phase",
            "each request's prefill tokens before its decode tokens",
            f"a prefill token after decode at row {row} (request {int(request[row])})",
        )
