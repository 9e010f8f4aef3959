"""Routing statistics of a trace, as defined in ``../shared/traces/README.md``.

All functions take plain arrays, so they work on a :class:`~specmd_sim.traces.trace.Trace` and
on the real reference traces alike:

- ``experts`` int ``[T, L, k]`` (or ``[T, k]`` for a single layer): selected expert ids per token
  and layer, ``-1`` = none (a missing record);
- ``request`` int ``[T]`` (optional, default: one request): the request of each row;
- ``num_experts``: ``E``, the routed experts per layer.

Definitions:

- **popularity skew** of a layer = count of its hottest expert ÷ mean count over all ``E``
  experts (``1`` = uniform, at most ``E / k``); :func:`popularity_skew` averages it over layers.
- **repeat share** of a (token ``t``, layer) cell = share of the layer's valid selections at
  ``t`` that were also selected at the previous token *of the same request* in that layer
  (``lag`` tokens earlier in general). Cells without a valid selection at ``t`` or without any
  record at the previous token are skipped. Per layer the cells are averaged; the layers are then
  averaged. Rows are paired in generation order within each request, so interleaved (batched)
  traces are handled. At random (uniform routing) the expected share is ``k / E``.
- **shuffled repeat share**: the same with each request's token order shuffled by the given
  ``numpy.random.Generator``; it keeps popularity and working sets but destroys short-range
  repetition, so ``repeat_share - shuffled_repeat_share`` is the temporal locality.
- **working-set coverage** of a (request, layer) cell = share of the request's selections in that
  layer that fall on its own ``n`` most-used experts (``own``), or on the ``n`` experts most used
  in that layer by all requests together (``global``; ties go to the lower expert id). Both are
  averaged over the (request, layer) cells that have selections. Uniform routing gives
  about ``n / E`` for ``global``; ``own`` is inflated on short requests by sampling noise.

Reference values of the real traces (``../shared/traces/``), computed with these functions
(shuffled baselines: mean of many shuffles):

- Mixtral ``humaneval_p0_ids`` (83 decode tokens): skew 1.575, repeat share 0.364 (lag 2: 0.308,
  lag 4: 0.292), shuffled 0.270, ``k / E`` = 0.25. Its prompt (135 tokens): 1.64, 0.391, 0.279.
  ``gsm8k_p1_ids``: 1.68, 0.346, 0.284. The README's skew of 1.35 is not reproduced on any
  single array (1.40 over all 297 Mixtral rows pooled); on 83 tokens sampling noise alone
  gives about 1.29 under uniform routing.
- Qwen1.5-MoE, 5 layers (25 requests x 82 steps, :func:`stack_requests`): skew 1.74, repeat
  share 0.114, shuffled 0.080, ``k / E`` = 0.067; working-set coverage (n = 8) own 0.279,
  global 0.198 (uniform 0.133).
- OLMoE layer 0 stream (4,471 rows, ``ids[:, None, :]``): skew 5.08.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "popularity_skew",
    "popularity_skew_per_layer",
    "repeat_share",
    "repeat_share_per_layer",
    "routing_stats",
    "shuffled_repeat_share",
    "stack_requests",
    "working_set_coverage",
]


# --- input helpers ------------------------------------------------------------------------


def _experts3(experts: np.ndarray) -> np.ndarray:
    arr = np.asarray(experts)
    if arr.ndim == 2:
        arr = arr[:, None, :]
    if arr.ndim != 3 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"experts: expected an integer array [tokens, layers, k] or [tokens, k], "
            f"got {arr.dtype} {arr.shape}"
        )
    return arr


def _request(request: np.ndarray | None, t: int) -> np.ndarray:
    if request is None:
        return np.zeros(t, np.int64)
    req = np.asarray(request)
    if req.shape != (t,):
        raise ValueError(f"request: expected shape ({t},) (one per token), got {req.shape}")
    return req


def _rows(rows: np.ndarray | Sequence[int] | None, t: int) -> np.ndarray:
    if rows is None:
        return np.arange(t)
    idx = np.asarray(rows)
    if idx.dtype == bool:
        if idx.shape != (t,):
            raise ValueError(f"rows: expected a boolean mask of shape ({t},), got {idx.shape}")
        return np.flatnonzero(idx)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise ValueError(f"rows: expected a 1-D integer index or boolean mask, got {idx.dtype}")
    return idx.astype(np.intp, copy=False)


def stack_requests(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn request-major ids ``[R, S, L, k]`` into ``experts [R*S, L, k]`` and ``request``.

    For the Qwen reference arrays, e.g. ``qwen15_moe_a27b_decode_5layers.npz['ids']``.
    """
    arr = np.asarray(ids)
    if arr.ndim != 4:
        raise ValueError(f"ids: expected shape [requests, steps, layers, k], got {arr.shape}")
    r, s = arr.shape[:2]
    return arr.reshape(r * s, *arr.shape[2:]), np.repeat(np.arange(r, dtype=np.int32), s)


# --- popularity ---------------------------------------------------------------------------


def popularity_skew_per_layer(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """Per layer: count of the hottest expert ÷ mean count over all experts; NaN if empty."""
    ex = _experts3(experts)
    num_layers = ex.shape[1]
    valid = ex >= 0
    layer = np.broadcast_to(np.arange(num_layers)[None, :, None], ex.shape)
    flat = layer[valid].astype(np.int64) * num_experts + ex[valid].astype(np.int64)
    counts = np.bincount(flat, minlength=num_layers * num_experts)
    counts = counts[: num_layers * num_experts].reshape(num_layers, num_experts)
    total = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, counts.max(axis=1) * num_experts / total, np.nan)


def popularity_skew(experts: np.ndarray, num_experts: int) -> float:
    """Popularity skew (hottest ÷ mean expert count) averaged over the non-empty layers."""
    per_layer = popularity_skew_per_layer(experts, num_experts)
    return _nanmean(per_layer)


# --- short-range repetition ---------------------------------------------------------------


def _pairs(request: np.ndarray, rows: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) row pairs ``lag`` apart within each request, in the order of ``rows``."""
    if lag < 1:
        raise ValueError(f"lag: expected an integer >= 1, got {lag}")
    order = rows[np.argsort(request[rows], kind="stable")]
    same = request[order[lag:]] == request[order[:-lag]] if order.size > lag else np.zeros(0, bool)
    return order[:-lag][same], order[lag:][same]


def repeat_share_per_layer(
    experts: np.ndarray,
    request: np.ndarray | None = None,
    rows: np.ndarray | Sequence[int] | None = None,
    *,
    lag: int = 1,
) -> np.ndarray:
    """Per layer: mean share of a token's experts also selected ``lag`` tokens earlier.

    ``rows`` (optional): the rows to consider, as integer indices in the order to consider them
    (e.g. a permutation) or a boolean mask (e.g. ``phase == 1``); consecutive considered rows of
    the same request form the pairs. NaN for a layer without any pair.
    """
    ex = _experts3(experts)
    t, num_layers, _ = ex.shape
    req = _request(request, t)
    prev_rows, cur_rows = _pairs(req, _rows(rows, t), lag)
    if prev_rows.size == 0:
        return np.full(num_layers, np.nan)
    cur, prev = ex[cur_rows], ex[prev_rows]
    valid = cur >= 0
    hit = (cur[..., :, None] == prev[..., None, :]).any(axis=-1) & valid
    n_cur = valid.sum(axis=-1)
    counted = (n_cur > 0) & (prev >= 0).any(axis=-1)
    share = np.where(counted, hit.sum(axis=-1) / np.maximum(n_cur, 1), 0.0)
    cells = counted.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cells > 0, share.sum(axis=0) / cells, np.nan)


def repeat_share(
    experts: np.ndarray,
    request: np.ndarray | None = None,
    rows: np.ndarray | Sequence[int] | None = None,
    *,
    lag: int = 1,
) -> float:
    """Share of a layer's experts at token t also selected at token t-lag (same request, layer).

    Averaged over cells per layer, then over layers; see :func:`repeat_share_per_layer`.
    """
    return _nanmean(repeat_share_per_layer(experts, request, rows, lag=lag))


def shuffled_repeat_share(
    experts: np.ndarray,
    request: np.ndarray | None = None,
    rows: np.ndarray | Sequence[int] | None = None,
    *,
    rng: np.random.Generator,
    lag: int = 1,
    num_shuffles: int = 1,
) -> float:
    """Repeat share with each request's token order shuffled by ``rng`` (mean of shuffles)."""
    ex = _experts3(experts)
    idx = _rows(rows, ex.shape[0])
    values = [
        repeat_share(ex, request, idx[rng.permutation(idx.size)], lag=lag)
        for _ in range(num_shuffles)
    ]
    return float(np.mean(values))


# --- per-request working sets -------------------------------------------------------------


def working_set_coverage(
    experts: np.ndarray, request: np.ndarray | None = None, n: int = 8
) -> tuple[float, float]:
    """``(own, global)``: share of a request's selections on its own vs the global top-``n``.

    Per (request, layer) cell: selections that fall on the request's own ``n`` most-used experts
    in that layer, resp. on the layer's ``n`` most-used experts over all requests (ties: lower
    expert id), divided by the cell's selections; both averaged over non-empty cells.
    """
    if n < 1:
        raise ValueError(f"n: expected an integer >= 1, got {n}")
    ex = _experts3(experts)
    t, num_layers, _ = ex.shape
    _, req = np.unique(_request(request, t), return_inverse=True)
    num_req = int(req.max()) + 1
    valid = ex >= 0
    if not valid.any():
        return float("nan"), float("nan")
    num_e = int(ex.max()) + 1
    layer = np.broadcast_to(np.arange(num_layers)[None, :, None], ex.shape)
    reqs = np.broadcast_to(req.reshape(t, 1, 1), ex.shape)
    flat = (reqs[valid].astype(np.int64) * num_layers + layer[valid]) * num_e + ex[valid]
    counts = np.bincount(flat, minlength=num_req * num_layers * num_e)
    counts = counts.reshape(num_req, num_layers, num_e)
    total = counts.sum(axis=2)
    n_top = min(n, num_e)
    own = np.sort(counts, axis=2)[:, :, num_e - n_top :].sum(axis=2)
    top_global = np.argsort(-counts.sum(axis=0), axis=1, kind="stable")[:, :n_top]  # [L, n]
    on_global = np.take_along_axis(
        counts, np.broadcast_to(top_global[None], (num_req, num_layers, n_top)), axis=2
    ).sum(axis=2)
    cells = total > 0
    return (
        float((own[cells] / total[cells]).mean()),
        float((on_global[cells] / total[cells]).mean()),
    )


# --- summary ------------------------------------------------------------------------------


def routing_stats(
    experts: np.ndarray,
    request: np.ndarray | None,
    num_experts: int,
    *,
    rng: np.random.Generator,
    n: int = 8,
    num_shuffles: int = 4,
) -> dict[str, float]:
    """All statistics at once (the shuffled baseline drawn from ``rng``)."""
    ex = _experts3(experts)
    own, glob = working_set_coverage(ex, request, n)
    return {
        "popularity_skew": popularity_skew(ex, num_experts),
        "repeat_share": repeat_share(ex, request),
        "shuffled_repeat_share": shuffled_repeat_share(
            ex, request, rng=rng, num_shuffles=num_shuffles
        ),
        "random_repeat_share": ex.shape[2] / num_experts,
        "working_set_own": own,
        "working_set_global": glob,
        "working_set_uniform": min(n, num_experts) / num_experts,
    }


def _nanmean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else float("nan")
