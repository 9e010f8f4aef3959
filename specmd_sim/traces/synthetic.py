"""Seeded synthetic routing traces with separate knobs for each property of real routing.

The generator draws, with one ``numpy.random.Generator`` seeded by ``seed`` (no global RNG; same
params and seed ⇒ identical arrays):

1. **Popularity** (``popularity_skew``): per layer, Zipf-like base weights ``w_r ∝ r^-s`` over the
   expert ranks ``r = 1..E``, assigned to the experts by a random permutation per layer. The
   exponent ``s`` is solved so that the hottest weight ÷ the mean weight equals
   ``popularity_skew`` (``1`` = uniform). The *measured* skew of selections
   (:func:`specmd_sim.traces.stats.popularity_skew`) differs from the knob: top-k selection
   without replacement caps it at ``E / k``, and short traces add sampling noise.
2. **Working set** (``working_set_size``, ``working_set_boost``): per request and layer,
   ``working_set_size`` experts chosen uniformly at random have their weight multiplied by
   ``working_set_boost``.
3. **Selection**: each token and layer picks ``k`` distinct experts in proportion to the weights
   (Gumbel-top-k, i.e. successive sampling without replacement). With **repetition**
   (``repeat_prob``), each of the ``k`` slots first repeats, with probability ``repeat_prob``,
   one of the previous token's experts in that layer (same request; ``Binomial(k, repeat_prob)``
   distinct experts of the previous token, chosen uniformly); the other slots are drawn as above.
4. **Gates**: a sorted ``Dirichlet(gate_concentration)`` vector per row (renormalized over the
   top-k, descending); the selected experts are ordered by their perturbed weight (Gumbel key),
   so popular experts tend to get the higher gates.
5. **Predictions** (``predictor_accuracy``, ``lookahead``): ``pred_scores[j-1, t, l]`` is a noisy
   oracle for layer ``l`` of token ``t`` as predicted at layer ``l - j``: each true expert stays
   in the predicted top-k with probability ``predictor_accuracy``, otherwise it is replaced by a
   random expert not selected in that row (so expected recall@k = ``predictor_accuracy``). The
   predicted experts score ``1 - 0.5 i / k`` for slot ``i`` (descending, in the true gate
   order; a replacement takes the slot it replaced), all others a uniform random score in
   ``[0, 0.45)``; NaN where ``l - j < 0``. Scores are not probabilities: only their order and the
   gap between the bands mean anything. The same accuracy is used for every distance ``j``.

Rows are request-major: request 0's ``prompt_tokens`` prefill rows (phase 0), then its
``decode_tokens`` decode rows (phase 1), then request 1, ...; token-serial, so repetition also
links consecutive prompt tokens.

Calibration (statistics from :mod:`specmd_sim.traces.stats`; real values computed with them
from ``../shared/traces/``; shuffled baselines averaged over several shuffles):

- ``mixtral`` preset (Mixtral-8x7B, E = 8, k = 2): popularity_skew 1.55, working set 2 experts
  x 1.35, repeat_prob 0.155, Dirichlet(1) gates, accuracy 0.85. Against ``humaneval_p0_ids``
  (83 decode tokens, one request), the preset's knobs on 1 request x 83 decode tokens give
  (mean ± standard deviation over seeds 0-63):

  ======================  ======  ===============  ============================
  statistic               real    synthetic        tolerance (mean, seeds 0-15)
  ======================  ======  ===============  ============================
  popularity skew         1.575   1.575 ± 0.039    ± 0.05
  repeat share            0.364   0.364 ± 0.006    ± 0.01
  shuffled repeat share   0.270   0.269 ± 0.004    ± 0.01
  ======================  ======  ===============  ============================

  The README's 1.35 for Mixtral's skew is not what its definition gives on ``humaneval_p0``
  (1.575; 1.40 over all 297 Mixtral rows pooled; on 83 tokens uniform routing alone measures
  1.30). Not matched: real repetition fades over about 4 tokens (lag 2: 0.308, lag 4: 0.292),
  the synthetic one after 1-2 (lag 2: 0.280, lag 4: 0.265), since only the previous token is
  repeated. Gates: mean top gate 0.75 (real 0.73). On the preset itself (4 x (32 + 64)
  tokens): skew 1.49, repeat share 0.364, shuffled 0.270; coverage (n = 2) own 0.358 vs
  global 0.339.
- ``olmoe`` preset (OLMoE-1B-7B, E = 64, k = 8): popularity_skew 8.8, working set 8 experts x 6,
  repeat_prob 0.10, Dirichlet(2.5) gates, accuracy 0.85; 4 x (16 + 48) tokens, to keep the default
  run small. Measured when the preset had 8 x (32 + 64) tokens, mean over seeds 0-15: skew 5.11 ±
  0.09, like OLMoE layer 0 (5.08 over its 4,471 rows; only layer 0 was recorded, so every layer
  gets layer 0's skew, probably more than deeper layers have). Repeat share 0.352 vs shuffled
  0.294 (excess 0.058, between Qwen1.5-MoE's 0.034 and Mixtral's 0.094; OLMoE layer 0's prefill
  rows show about 0.09); working-set coverage (n = 8) own 0.450 vs global 0.366, a gap of +0.084
  like Qwen1.5-MoE's 0.279 vs 0.198. Gates: mean sorted gates 0.26, 0.19, ... 0.04 (real layer 0:
  0.26, 0.18, ... 0.07).

The mixtral calibration is checked in ``tests/traces/test_synthetic.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from specmd_sim.errors import SpecmdError, short_repr
from specmd_sim.models.loader import load_model
from specmd_sim.schema_base import InputModel
from specmd_sim.traces.trace import DECODE, PREFILL, Trace, make_trace

GENERATOR = "specmd-sim synthetic v1"
_LOW_SCORE_MAX = 0.45  # non-predicted experts score in [0, 0.45); predicted ones in (0.5, 1]
_CHUNK_CELLS = 1 << 22  # rows x layers x experts per pred_scores draw (part of the RNG stream)
# tokens x layers x experts (x lookahead): pred_scores in at most 1 GiB (float16); the
# per-request weights (float64) in at most 4 GiB even with one token per request
MAX_CELLS = 1 << 29


class SyntheticParams(InputModel):
    """Knobs of the synthetic trace generator; the shape comes from the catalog model."""

    model: str = Field(
        description="Catalog model id (e.g. 'olmoe-1b-7b'); gives moe_layers, num_experts, top_k."
    )
    num_requests: int = Field(ge=1, description="Number of requests (count, >= 1).")
    prompt_tokens: int = Field(
        ge=0, description="Prefill tokens per request (count, >= 0), token-serial rows."
    )
    decode_tokens: int = Field(ge=0, description="Decode tokens per request (count, >= 0).")
    popularity_skew: float = Field(
        ge=1.0,
        description=(
            "Per-layer popularity: hottest ÷ mean base weight of the Zipf-like per-layer weights "
            "(ratio, 1 = uniform, < num_experts)."
        ),
    )
    working_set_size: int = Field(
        ge=0,
        description="Preferred experts per request and layer (count, 0..num_experts; 0 = off).",
    )
    working_set_boost: float = Field(
        ge=1.0,
        description="Weight multiplier of a request's preferred experts (factor, >= 1; 1 = off).",
    )
    repeat_prob: float = Field(
        ge=0.0,
        le=1.0,
        description=(
            "Probability that a slot repeats one of the previous token's experts in that layer "
            "(probability, 0..1; 0 = off)."
        ),
    )
    predictor_accuracy: float = Field(
        ge=0.0,
        le=1.0,
        description=(
            "Top-k accuracy of the recorded noisy-oracle predictor: probability that a true "
            "expert is in the predicted top-k (probability, 0..1)."
        ),
    )
    lookahead: int = Field(
        default=1,
        ge=0,
        description="D of pred_scores: layers predicted ahead (count, 0..moe_layers-1; 0 = none).",
    )
    top_k: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Experts routed per token and layer (count, 1..num_experts; default: the model's "
            "top_k; fewer, as when a runtime activates fewer experts than the model was "
            "trained with)."
        ),
    )
    gate_concentration: float = Field(
        default=1.0,
        gt=0.0,
        description=(
            "Dirichlet concentration of the top-k gates (> 0; 1 = uniform on the simplex, "
            "larger = flatter gates)."
        ),
    )

    @model_validator(mode="after")
    def _check_against_model(self) -> SyntheticParams:
        try:
            spec = load_model(self.model)
        except SpecmdError as exc:
            raise ValueError(str(exc)) from None
        if self.prompt_tokens + self.decode_tokens < 1:
            raise ValueError("prompt_tokens + decode_tokens must be >= 1")
        if self.popularity_skew >= spec.num_experts:
            raise ValueError(
                f"popularity_skew must be < num_experts ({spec.num_experts}) of {self.model}"
            )
        if self.working_set_size > spec.num_experts:
            raise ValueError(
                f"working_set_size must be <= num_experts ({spec.num_experts}) of {self.model}"
            )
        if self.top_k is not None and self.top_k > spec.num_experts:
            raise ValueError(f"top_k must be <= num_experts ({spec.num_experts}) of {self.model}")
        if self.lookahead > spec.moe_layers - 1:
            raise ValueError(
                f"lookahead must be <= moe_layers - 1 ({spec.moe_layers - 1}) of {self.model}"
            )
        cells = self.num_tokens * spec.moe_layers * spec.num_experts * max(self.lookahead, 1)
        if cells > MAX_CELLS:
            raise ValueError(
                f"num_requests x (prompt_tokens + decode_tokens): expected at most {MAX_CELLS:,} "
                f"token x layer x expert cells (x lookahead) with {self.model}, got {cells:,}"
            )
        return self

    @property
    def num_tokens(self) -> int:
        return self.num_requests * (self.prompt_tokens + self.decode_tokens)


PRESETS: dict[str, SyntheticParams] = {
    "olmoe": SyntheticParams(
        model="olmoe-1b-7b",
        num_requests=4,
        prompt_tokens=16,
        decode_tokens=48,
        popularity_skew=8.8,
        working_set_size=8,
        working_set_boost=6.0,
        repeat_prob=0.10,
        predictor_accuracy=0.85,
        lookahead=1,
        gate_concentration=2.5,
    ),
    "mixtral": SyntheticParams(
        model="mixtral-8x7b",
        num_requests=4,
        prompt_tokens=32,
        decode_tokens=64,
        popularity_skew=1.55,
        working_set_size=2,
        working_set_boost=1.35,
        repeat_prob=0.155,
        predictor_accuracy=0.85,
        lookahead=1,
        gate_concentration=1.0,
    ),
}


def zipf_exponent(skew: float, num_experts: int) -> float:
    """The exponent ``s`` with ``num_experts * 1 / sum_r r^-s = skew`` (bisection)."""
    if not 1.0 <= skew < num_experts:
        raise ValueError(f"skew: expected 1 <= skew < {num_experts}, got {skew}")
    log_r = np.log(np.arange(1, num_experts + 1, dtype=np.float64))

    def ratio(s: float) -> float:
        return num_experts / float(np.exp(-s * log_r).sum())

    lo, hi = 0.0, 1.0
    while ratio(hi) < skew:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if ratio(mid) < skew:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def generate(params: SyntheticParams, seed: int) -> Trace:
    """A synthetic trace for ``params``; the same ``params`` and ``seed`` give identical arrays."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise SpecmdError(f"generator: seed: expected an integer >= 0, got {short_repr(seed)}")
    spec = load_model(params.model)
    num_layers, num_experts = spec.moe_layers, spec.num_experts
    k = spec.top_k if params.top_k is None else params.top_k
    rng = np.random.default_rng(seed)

    log_w = _base_log_weights(params, num_layers, num_experts, rng)  # [L, E]
    log_w = log_w[None] + _working_set_log_boost(params, num_layers, num_experts, rng)  # [R,L,E]
    experts = _select(params, log_w, k, rng)  # [T, L, k] int16, descending gate order
    t = experts.shape[0]
    gates = _gates(params, t, num_layers, k, rng)
    seq = params.prompt_tokens + params.decode_tokens
    request = np.repeat(np.arange(params.num_requests, dtype=np.int32), seq)
    phase = np.tile(
        np.r_[
            np.full(params.prompt_tokens, PREFILL, np.uint8),
            np.full(params.decode_tokens, DECODE, np.uint8),
        ],
        params.num_requests,
    )
    pred = _pred_scores(params, experts, num_experts, rng) if params.lookahead else None
    meta: dict[str, Any] = {
        "generator": GENERATOR,
        "seed": int(seed),
        "params": params.model_dump(mode="json", exclude_none=True),  # unset top_k: the model's
    }
    return make_trace(
        experts,
        model=params.model,
        num_experts=num_experts,
        request=request,
        phase=phase,
        gates=gates,
        pred_scores=pred,
        source="synthetic trace",
        **meta,
    )


# --- the parts --------------------------------------------------------------------------


def _base_log_weights(
    params: SyntheticParams, num_layers: int, num_experts: int, rng: np.random.Generator
) -> np.ndarray:
    s = zipf_exponent(params.popularity_skew, num_experts)
    by_rank = -s * np.log(np.arange(1, num_experts + 1, dtype=np.float64))
    rank_of = np.argsort(rng.random((num_layers, num_experts)), axis=1)  # a permutation per layer
    return by_rank[rank_of]


def _working_set_log_boost(
    params: SyntheticParams, num_layers: int, num_experts: int, rng: np.random.Generator
) -> np.ndarray:
    shape = (params.num_requests, num_layers, num_experts)
    if params.working_set_size == 0 or params.working_set_boost == 1.0:
        return np.zeros(shape)
    rank = np.argsort(np.argsort(rng.random(shape), axis=2), axis=2)
    return np.where(rank < params.working_set_size, math.log(params.working_set_boost), 0.0)


def _select(
    params: SyntheticParams, log_w: np.ndarray, k: int, rng: np.random.Generator
) -> np.ndarray:
    """Token-serial selection, vectorized over requests x layers; rows ordered by Gumbel key."""
    num_req, num_layers, _ = log_w.shape
    seq = params.prompt_tokens + params.decode_tokens
    out = np.empty((num_req, seq, num_layers, k), np.int16)
    prev: np.ndarray | None = None
    for pos in range(seq):
        keys = log_w + rng.gumbel(size=log_w.shape)
        rank_keys = keys
        if prev is not None and params.repeat_prob > 0.0:
            num_rep = rng.binomial(k, params.repeat_prob, size=(num_req, num_layers))
            slot_rank = np.argsort(rng.random((num_req, num_layers, k)), axis=2)
            forced = np.zeros(log_w.shape, bool)
            np.put_along_axis(forced, prev, slot_rank < num_rep[..., None], axis=2)
            rank_keys = np.where(forced, np.inf, keys)
        top = np.argpartition(-rank_keys, k - 1, axis=2)[..., :k]
        order = np.argsort(-np.take_along_axis(keys, top, axis=2), axis=2, kind="stable")
        top = np.take_along_axis(top, order, axis=2)
        out[:, pos] = top
        prev = top
    return out.reshape(num_req * seq, num_layers, k)


def _gates(
    params: SyntheticParams, t: int, num_layers: int, k: int, rng: np.random.Generator
) -> np.ndarray:
    g = rng.dirichlet(np.full(k, params.gate_concentration), size=(t, num_layers))
    return -np.sort(-g, axis=2).astype(np.float32)


def _pred_scores(
    params: SyntheticParams, experts: np.ndarray, num_experts: int, rng: np.random.Generator
) -> np.ndarray:
    t, num_layers, k = experts.shape
    depth = params.lookahead
    out = np.empty((depth, t, num_layers, num_experts), np.float16)
    slot_score = (1.0 - 0.5 * np.arange(k) / k).astype(np.float16)
    spare = min(k, num_experts - k)  # replacements available per row
    rows_per_chunk = max(1, _CHUNK_CELLS // (num_layers * num_experts))
    for j in range(1, depth + 1):
        for start in range(0, t, rows_per_chunk):
            ex = experts[start : start + rows_per_chunk].astype(np.intp)
            n = ex.shape[0]
            low = rng.random((n, num_layers, num_experts), dtype=np.float32) * _LOW_SCORE_MAX
            keep = rng.random((n, num_layers, k)) < params.predictor_accuracy
            predicted = ex
            if spare > 0 and not keep.all():
                # Replacement candidates: the non-selected experts with the highest low scores.
                masked = low.copy()
                np.put_along_axis(masked, ex, -1.0, axis=2)
                cand = np.argpartition(-masked, spare - 1, axis=2)[..., :spare]
                keep[..., spare:] = True  # no distinct replacement left for these slots
                repl = np.zeros_like(ex)
                repl[..., :spare] = cand
                predicted = np.where(keep, ex, repl)
            block = low.astype(np.float16)
            np.put_along_axis(
                block, predicted, np.broadcast_to(slot_score, predicted.shape), axis=2
            )
            block[:, :j] = np.nan
            out[j - 1, start : start + n] = block
    return out
