"""The compiled kernels of :class:`~specmd_sim.engine.fast.plans.BulkPlans`: the noisy oracle's
logits and top-k plans, and the selection of each prediction's plan from its scores.

Plain Python over numpy arrays (:func:`specmd_sim.engine.jit.compiled`); the entry points
(:data:`~specmd_sim.engine.fast.aot.ENTRY_POINTS`) are also compiled ahead of time with the
replay kernel, so a replay with a built-in prefetcher imports no numba either.
"""

from __future__ import annotations

import numpy as np

from specmd_sim.engine.jit import compiled


@compiled
def oracle_logits(
    u: np.ndarray,
    offsets: np.ndarray,
    keys: np.ndarray,
    pass_lo: int,
    num_layers: int,
    target: np.ndarray,
    accuracy: float,
    confidence: float,
    near_miss: float,
    out: np.ndarray,
) -> None:
    """Row ``r`` of ``out``: the logits, less their maximum, of the ``r``-th prediction from
    pass ``pass_lo`` on (each pass's are of layers ``target``, in order), from the next of the
    draws ``u`` (``NoisyOraclePredictor.scores``, whose layout they follow) and its target's
    demand set (``keys``, ``offsets``: the run's access sequence)."""
    num_experts = out.shape[1]
    dropped = np.empty(num_experts, np.int64)
    outside = np.empty(num_experts, np.int64)
    member = np.zeros(num_experts, np.bool_)
    d, r = 0, 0
    for q in range(out.shape[0] // target.size):
        for t in target:
            span = (pass_lo + q) * num_layers + t
            first, m = offsets[span], offsets[span + 1] - offsets[span]
            base = t * num_experts
            for e in range(num_experts):
                out[r, e] = u[d + e]
            n = _dropped(u, d, keys, first, m, base, accuracy, member, dropped, outside)
            j = 0
            for i in range(m):
                expert = keys[first + i] - base
                if j < n and dropped[j] == i:
                    near = 1.0 - (u[d + num_experts + i] - accuracy) / (1.0 - accuracy)
                    out[r, expert] = confidence - near_miss * near
                    expert = outside[j]
                    j += 1
                out[r, expert] = confidence + (m - i) / m
            _less_max(out, r)
            d += num_experts + 2 * m
            r += 1


@compiled
def oracle_top(
    u: np.ndarray,
    offsets: np.ndarray,
    keys: np.ndarray,
    pass_lo: int,
    num_layers: int,
    num_experts: int,
    target: np.ndarray,
    per_layer: np.ndarray,
    accuracy: float,
    k: int,
    plan: np.ndarray,
    count: int,
    ends: np.ndarray,
) -> int:
    """Top-``k`` plans of the noisy oracle's predictions from pass ``pass_lo`` on (their draws
    ``u``, as :func:`oracle_logits` reads them), where every true demand set has at least
    ``k`` experts, without their scores: the first ``k`` predicted experts in position order,
    into ``plan`` from ``count`` on (``ends`` and the new count as :func:`select`'s). That is
    what the scores give: with ``confidence >= 1`` a predicted expert's logit,
    ``confidence + (m - i) / m``, exceeds every other's (below 1, or below ``confidence`` for a
    missed true one) and the next position's by ``1 / m``, a factor ``e^(1/m)`` after the
    softmax, far beyond its rounding: no ties, the same order."""
    dropped = np.empty(num_experts, np.int64)
    outside = np.empty(num_experts, np.int64)
    member = np.zeros(num_experts, np.bool_)
    d = 0
    for q in range(ends.size // num_layers):
        j_row = 0
        for layer in range(num_layers):
            for _ in range(per_layer[layer]):
                t = target[j_row]
                j_row += 1
                span = (pass_lo + q) * num_layers + t
                first, m = offsets[span], offsets[span + 1] - offsets[span]
                base = t * num_experts
                n = _dropped(u, d, keys, first, m, base, accuracy, member, dropped, outside)
                j = 0
                for i in range(k):  # dropped is ascending: matched in turn
                    expert = keys[first + i] - base
                    if j < n and dropped[j] == i:
                        expert = outside[j]
                        j += 1
                    plan[count] = base + expert
                    count += 1
                d += num_experts + 2 * m
            ends[q * num_layers + layer] = count
    return count


@compiled
def _dropped(
    u: np.ndarray,
    d: int,
    keys: np.ndarray,
    first: int,
    m: int,
    base: int,
    accuracy: float,
    member: np.ndarray,
    dropped: np.ndarray,
    outside: np.ndarray,
) -> int:
    """The prediction whose draws start at ``u[d]``, of the true set ``keys[first:first + m]``
    (flat ids from ``base``): its dropped positions that are replaced, ascending, into
    ``dropped``, and their replacements into ``outside``; how many (``member`` is all False
    before and after)."""
    num_experts = member.size
    n = 0
    for i in range(m):
        if u[d + num_experts + i] >= accuracy:
            dropped[n] = i
            n += 1
    if n:
        for i in range(m):
            member[keys[first + i] - base] = True
        n = _replacements(u, d + num_experts + m, member, m, n, outside)
        for i in range(m):
            member[keys[first + i] - base] = False
    return n


@compiled
def _replacements(
    u: np.ndarray, at: int, member: np.ndarray, m: int, n: int, outside: np.ndarray
) -> int:
    """The experts that replace ``n`` dropped ones, into ``outside``: the ``j``-th is the
    ``floor(u[at + j] * R)``-th (``R``: how many are left) of the experts neither ``member``
    (of the ``m`` true ones) nor taken yet, in ascending id order; how many there are (fewer
    than ``n`` when the outsiders run out: the other dropped experts stay predicted)."""
    remaining, found = member.size - m, 0
    while found < n and remaining > 0:
        pick = min(int(u[at + found] * remaining), remaining - 1)
        chosen = -1
        for e in range(member.size):
            if not member[e]:
                if pick == 0:
                    chosen = e
                    break
                pick -= 1
        outside[found] = chosen
        member[chosen] = True
        found += 1
        remaining -= 1
    for j in range(found):
        member[outside[j]] = False
    return found


@compiled
def _less_max(out: np.ndarray, r: int) -> None:
    """Row ``r`` of ``out`` less its maximum (no NaN in it)."""
    top = out[r, 0]
    for e in range(1, out.shape[1]):
        top = max(top, out[r, e])
    for e in range(out.shape[1]):
        out[r, e] = out[r, e] - top


@compiled
def select(
    scores: np.ndarray,
    present: np.ndarray,
    per_layer: np.ndarray,
    target: np.ndarray,
    threshold: float,
    cap: int,
    keys: np.ndarray,
    count: int,
    offsets: np.ndarray,
) -> int:
    """The plans of the passes whose predictions are the rows of ``scores`` (per pass,
    ``per_layer[l]`` of them after the router of layer ``l``, of layers ``target``): for each
    row that is ``present``, its experts whose score is at least ``threshold`` (never NaN), at
    most ``cap`` of them by descending score, ties to the lower id (top-k's stable argsort,
    score-threshold's ``ranked``), as flat ids into ``keys`` from ``count`` on;
    ``offsets[i]``: where the ``i``-th (pass, layer)'s plan ends. The new count."""
    num_experts, width = scores.shape[1], min(cap, scores.shape[1])
    bound = np.empty(width)
    candidate = np.empty(num_experts, np.int64)
    value = np.empty(num_experts)
    r = 0
    for q in range(scores.shape[0] // target.size):
        j = 0
        for layer in range(per_layer.size):
            for _ in range(per_layer[layer]):
                if present[r]:
                    n = _best(scores, r, threshold, bound, candidate, value, keys, count)
                    base = target[j] * num_experts
                    for i in range(count, count + n):
                        keys[i] += base
                    count += n
                r += 1
                j += 1
            offsets[q * per_layer.size + layer] = count
    return count


@compiled
def _best(
    scores: np.ndarray,
    r: int,
    threshold: float,
    bound: np.ndarray,
    candidate: np.ndarray,
    value: np.ndarray,
    chosen: np.ndarray,
    at: int,
) -> int:
    """Into ``chosen`` from ``at`` on: the experts whose score (row ``r`` of ``scores``) is at least
    ``threshold``, at most ``w = bound.size`` of them by descending score, ties to the lower
    id; how many.

    Written without data-dependent branches (an unpredictable branch costs more than the
    comparisons it saves): first most experts are ruled out, as the maxima of the ``w``
    stripes ``e = s mod w`` are ``w`` experts, so at least ``w`` score at least the least of
    them, and one below it cannot be chosen (a stripe of NaNs only leaves its maximum at
    -inf: nothing is ruled out); then each candidate's rank is counted."""
    num_experts, width = scores.shape[1], bound.size
    for s in range(width):
        bound[s] = -np.inf
    for start in range(0, num_experts, width):
        for s in range(min(width, num_experts - start)):
            v = scores[r, start + s]
            bound[s] = v if v > bound[s] else bound[s]
    least = bound[0]
    for s in range(1, width):
        least = bound[s] if bound[s] < least else least
    c = 0
    for e in range(num_experts):
        v = scores[r, e]
        candidate[c] = e
        value[c] = v
        c += (v >= least) & (v >= threshold)
    for a in range(c):
        v, rank = value[a], 0
        for b in range(c):  # ties: the lower id first
            rank += (value[b] > v) | ((value[b] == v) & (b < a))
        if rank < width:
            chosen[at + rank] = candidate[a]
    return min(c, width)


@compiled
def learned_scores(
    keys: np.ndarray,
    offsets: np.ndarray,
    num_layers: int,
    num_experts: int,
    per_layer: np.ndarray,
    target: np.ndarray,
    distance: int,
    learn: bool,
    table: np.ndarray,
    popular: np.ndarray,
    out: np.ndarray,
    present: np.ndarray,
) -> None:
    """The scores of the predictors that learn from the run's own routing, for the predictions
    of a block of passes (their demand sets ``keys`` between ``offsets``, indexed from the
    block's first pass; per pass, ``per_layer[l]`` predictions after the router of layer ``l``,
    of layers ``target``): row ``r`` of ``out`` and whether it predicts (``present``).

    Each (pass, layer) demand set is learned before its layer's predictions, as the predictors'
    ``DemandObserver`` feeds it (with ``learn``): ``popular[l, e]`` counts the sets of layer
    ``l`` holding ``e``, and with ``distance`` d > 0 (``transition``) ``table[j - 1, l, x, y]``
    the passes in which ``x`` at layer ``l`` was followed by ``y`` at layer ``l + j`` (j <= d).
    A prediction of layer ``t`` from layer ``l`` is then ``TransitionPredictor.scores``': the
    sum of the table's rows of the layer's own experts, over their total, where ``t - l <= d``
    and that total is not 0; else ``t``'s popularity over its total, where that is not 0 (the
    whole of ``PopularityPredictor.scores``, ``distance`` 0); else none. Counts are whole
    numbers, so every sum is exact and each score the reference's quotient, bit for bit.
    ``table`` and ``popular`` carry the counts from block to block (and from ``fit_on``)."""
    row = np.empty(num_experts)
    r = 0
    for span in range(offsets.size - 1):
        layer = span % num_layers
        a, b = offsets[span], offsets[span + 1]
        if learn:
            _learn(keys, offsets, span, layer, num_experts, distance, table, popular)
        for _ in range(per_layer[layer]):
            t = target[r % target.size]
            total = 0.0
            if 1 <= t - layer <= distance and b > a:
                total = _followers(keys, a, b, layer, t - layer, num_experts, table, row)
            if total == 0.0:
                for e in range(num_experts):
                    row[e] = popular[t, e]
                    total += row[e]
            present[r] = total > 0.0
            if total > 0.0:
                for e in range(num_experts):
                    out[r, e] = row[e] / total
            r += 1


@compiled
def _learn(keys: np.ndarray, offsets: np.ndarray, span: int, layer: int, num_experts: int,
           distance: int, table: np.ndarray, popular: np.ndarray) -> None:  # fmt: skip
    """:func:`learned_scores`' counts of the demand set of ``span`` (a (pass, layer) of the
    block, of ``layer``), after the earlier layers' of its pass."""
    a, b = offsets[span], offsets[span + 1]
    here = layer * num_experts
    for j in range(1, min(distance, layer) + 1):
        before = (layer - j) * num_experts
        for x in range(offsets[span - j], offsets[span - j + 1]):
            for y in range(a, b):
                table[j - 1, layer - j, keys[x] - before, keys[y] - here] += 1
    for y in range(a, b):
        popular[layer, keys[y] - here] += 1


@compiled
def _followers(keys: np.ndarray, a: int, b: int, layer: int, j: int, num_experts: int,
               table: np.ndarray, row: np.ndarray) -> float:  # fmt: skip
    """Into ``row``: the sum of the table's rows at distance ``j`` of the experts
    ``keys[a:b]`` of ``layer``; its total."""
    for e in range(num_experts):
        row[e] = 0.0
    base = layer * num_experts
    for x in range(a, b):
        for e in range(num_experts):
            row[e] += table[j - 1, layer, keys[x] - base, e]
    total = 0.0
    for e in range(num_experts):
        total += row[e]
    return total
