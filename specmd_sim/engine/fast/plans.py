"""Prefetch plans in bulk: every (pass, layer)'s plan of a block of passes at once.

The replay engine asks ``run.prefetch.plan(p, layer, predictor, cache)`` after each router
decision. For the built-in ``top-k`` and ``score-threshold`` prefetchers over the
``noisy-oracle`` and ``trace`` predictors that plan does not depend on the cache: only on the
trace and, for the noisy oracle, on the run's generator, which it draws from in (pass, layer,
target) order, a fixed amount per prediction (``predictors/noisy_oracle.py``). So a block of
passes' plans can be computed before the block is replayed, in a few array operations instead
of one Python call per target layer, which is what the compiled replay needs: its cache loop
then reads ``keys[offsets[i] : offsets[i + 1]]``.

The plans must be the reference's element for element (a different tie-break is a different
run), so the bulk computation keeps every floating-point operation the reference makes:

- the generator's draws: one ``rng.random`` call for many predictions gives the same
  numbers, and leaves the same state, as the per-prediction calls it concatenates (one 64-bit
  output per double);
- ``np.exp``, the row sums and the quotients stay in numpy, on C-contiguous ``[rows, experts]``
  arrays (numpy's vectorized ``exp`` and its summation order are its own; row-wise they equal
  the 1-D calls of the reference, which the tests check);
- the kernels (:mod:`.plan_kernel`, compiled by numba, just in time or ahead of it) do the
  index logic, the selection and the logits, whose operations (``+ - * /``, max) are single and
  correctly rounded, so give the same bits in numba as in numpy.

What it does not do: show the scores to the eviction policy (the run's tapped predictor does),
so a run whose eviction reads them (``on_scores``) is not taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specmd_sim.engine.fast.aot import plan_kernels
from specmd_sim.errors import SpecmdError
from specmd_sim.policies.context import RecordedScores
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.predictors.noisy_oracle import NoisyOraclePredictor
from specmd_sim.policies.predictors.popularity import PopularityPredictor
from specmd_sim.policies.predictors.trace import TracePredictor
from specmd_sim.policies.predictors.transition import TransitionPredictor
from specmd_sim.policies.prefetch.score_threshold import ScoreThresholdPrefetch
from specmd_sim.policies.prefetch.top_k import TopKPrefetch
from specmd_sim.scenario import RunObjects
from specmd_sim.scenario.plugins import _Tapped

# the predictors whose scores are computed in bulk: the noisy oracle's and the trace's from the
# routing ahead, popularity's and transition's from the routing so far (learned in the kernel)
_BULK_PREDICTORS = (NoisyOraclePredictor, TracePredictor, PopularityPredictor,
                    TransitionPredictor)  # fmt: skip


def plans_unsupported(run: RunObjects) -> str | None:
    """None when the run's prefetch plans can be computed in bulk, else why not (one phrase,
    e.g. "prefetch 'oracle'"). A part of the one coverage check
    (:mod:`specmd_sim.engine.coverage`)."""
    prefetch = run.prefetch
    if prefetch.lookahead == 0:
        return None  # the engine never asks for a plan
    if type(prefetch) not in (TopKPrefetch, ScoreThresholdPrefetch):
        return f"prefetch {prefetch.kind!r}"
    predictor = _predictor(run)
    if type(predictor) not in _BULK_PREDICTORS:
        kind = getattr(predictor, "kind", None)
        return f"predictor {kind!r}"
    if type(run.eviction).on_scores is not EvictionPolicy.on_scores:
        return f"eviction {run.eviction.kind!r}, which reads the predictor's scores"
    return None


def _predictor(run: RunObjects) -> object:
    """The run's predictor itself, not the tap that shows its scores to the eviction policy."""
    source = run.predictor
    return source.inner if isinstance(source, _Tapped) else source


class BulkPlans:
    """The prefetch plans of a run (:func:`plans_unsupported` must be None), block by block.

    The noisy oracle draws from the run's generator, so the blocks must follow each other in
    pass order from pass 0, as the engine's calls would. Its predictions are made in chunks of
    about ``CHUNK_ROWS``, whatever the block: a chunk's draws, logits, exponentials and scores
    (``(4 E + 2 m) x 8`` bytes a prediction) then stay in the CPU's caches from one step to the
    next, where a block's would each be a pass over main memory (and freshly mapped memory
    at that). The trace's predictions, which draw nothing, are read a block at a time (one
    gather per distance and target layer): ``E x 8`` bytes a prediction.
    """

    CHUNK_ROWS = 2048  # predictions per chunk: ~5 MB at 64 experts

    def __init__(self, run: RunObjects, ahead_of_time: bool = False) -> None:
        # the replay's kernels compiled ahead of time (which spare a replay numba), or numba's
        # JIT (the timing engines load numba for their core anyway): see aot.kernels
        self.kernels = plan_kernels(ahead_of_time)
        reason = plans_unsupported(run)
        if reason is not None:
            raise SpecmdError(
                f"expected a run whose prefetch plans are computed in bulk, got {reason}"
            )
        self.num_layers = run.ctx.num_layers
        self.num_experts = run.ctx.num_experts
        self.passes = run.scenario.passes  # (an online schedule's grows: blocks of those formed)
        self.rng = run.ctx.rng
        self.demand = run.scenario.demand
        self.next_pass = 0
        # the state at the last block's start, kept where a block may end early (:meth:`rewind`)
        self.rewindable = False
        self._block_start: tuple[int, Any, tuple[np.ndarray, np.ndarray] | None] = (0, {}, None)
        prefetch = run.prefetch
        # per pass, its predictions' (layer, target) in call order, and their count per layer;
        # none without lookahead (the engine never asks for a plan)
        pairs = [
            (layer, target)
            for layer in range(self.num_layers)
            for target in (prefetch.targets(layer) if prefetch.lookahead else ())
        ]
        self.row_layer = np.array([layer for layer, _ in pairs], np.int64)
        self.row_target = np.array([target for _, target in pairs], np.int64)
        self.per_layer = np.bincount(self.row_layer, minlength=self.num_layers)
        self.threshold, self.cap, self.probabilities = -np.inf, 1, False  # top-k's selection
        self.top_only = False  # top-k: the noisy oracle's plans may need no scores
        if isinstance(prefetch, TopKPrefetch):
            self.top_only, self.cap = True, prefetch.k
        elif isinstance(prefetch, ScoreThresholdPrefetch):
            self.threshold = prefetch.config.threshold
            self.cap = prefetch.config.max_per_layer or self.num_experts
            self.probabilities = True
        predictor = _predictor(run)
        self.oracle = predictor if isinstance(predictor, NoisyOraclePredictor) else None
        self.recorded: RecordedScores | None = None
        self.learned: _Learned | None = None
        if isinstance(predictor, PopularityPredictor | TransitionPredictor):
            self.learned = _Learned(predictor)
        if isinstance(predictor, TracePredictor):
            trace, passes = run.scenario.trace, run.scenario.passes
            assert trace.pred_scores is not None  # the predictor refuses a trace without them
            self.recorded = RecordedScores(trace.pred_scores, passes.rows, passes.start)

    def block(self, pass_lo: int, pass_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets int64 [(pass_hi - pass_lo) * L + 1], keys int64): for each (p, layer) of
        passes pass_lo..pass_hi-1 in order, keys[offsets[i]:offsets[i+1]] is exactly the list
        run.prefetch.plan(p, layer, run.predictor, run.cache) returns, and the run's rng is left
        exactly as those calls in that order would leave it. Blocks are asked in pass order."""
        formed = self.passes.num_passes
        if pass_lo != self.next_pass or not pass_lo <= pass_hi <= formed:
            raise ValueError(
                f"expected the block from pass {self.next_pass} (blocks follow each other), "
                f"up to at most {formed}; got passes {pass_lo}..{pass_hi}"
            )
        if self.rewindable:
            learned = self.learned
            kept = None if learned is None else (learned.table.copy(), learned.popular.copy())
            self._block_start = (pass_lo, self.rng.bit_generator.state, kept)
        self.next_pass = pass_hi
        passes, width, layers = pass_hi - pass_lo, self.row_target.size, self.num_layers
        offsets = np.zeros(passes * layers + 1, np.int64)
        keys = np.empty(passes * width * min(self.cap, self.num_experts), np.int64)
        if passes == 0 or width == 0:
            return offsets, keys
        step = max(1, self.CHUNK_ROWS // width) if self.oracle is not None else passes
        count = 0
        for lo in range(pass_lo, pass_hi, step):
            hi = min(pass_hi, lo + step)
            ends = offsets[(lo - pass_lo) * layers + 1 : (hi - pass_lo) * layers + 1]
            if self.oracle is not None:
                u, smallest = self._draws(lo, hi)
                if self.top_only and smallest >= self.cap:  # the predicted experts, in order
                    count = self.kernels.oracle_top(
                        u, self.demand.offsets, self.demand.keys, lo, layers, self.num_experts,
                        self.row_target, self.per_layer, self.oracle.config.accuracy, self.cap,
                        keys, count, ends,
                    )  # fmt: skip
                    continue
                scores = self._oracle(u, lo, hi)
                present = np.ones(scores.shape[0], np.bool_)
            elif self.learned is not None:
                scores, present = self._learned(lo, hi)
            else:
                scores, present = self._recorded(lo, hi)
            if self.probabilities:
                scores = _probabilities(scores)
            count = self.kernels.select(scores, present, self.per_layer, self.row_target,
                                        self.threshold, self.cap, keys, count, ends)  # fmt: skip
        return offsets, keys[:count]

    def rewind(self, pass_lo: int, pass_hi: int) -> None:
        """The last block (from ``pass_lo``) ends at ``pass_hi`` instead: the generator and
        the learned counts are left as the plans of its passes up to there leave them (drawn
        again from the block's start; :attr:`rewindable` must be set before the block)."""
        start, state, kept = self._block_start
        assert self.rewindable and start == pass_lo, "the block rewound is the last one"
        self.rng.bit_generator.state = state
        if kept is not None and self.learned is not None:
            self.learned.table[...], self.learned.popular[...] = kept
        self.next_pass = pass_lo
        self.block(pass_lo, pass_hi)

    def _draws(self, lo: int, hi: int) -> tuple[np.ndarray, int]:
        """The noisy oracle's draws for the predictions of passes ``lo..hi - 1`` (one call: the
        concatenation of the predictions' own), and the smallest true demand set predicted."""
        experts, layers = self.num_experts, self.num_layers
        offsets = self.demand.offsets
        sizes = np.diff(offsets[lo * layers : hi * layers + 1]).reshape(hi - lo, layers)
        sizes = sizes[:, self.row_target]
        rows = (hi - lo) * self.row_target.size
        return self.rng.random(rows * experts + 2 * int(sizes.sum())), int(sizes.min())

    def _oracle(self, u: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The noisy oracle's scores of the predictions of passes ``lo..hi - 1`` from their
        draws ``u``, a row each (``NoisyOraclePredictor.scores``: its ``exp``, ``sum`` and
        quotient, on the kernel's logits less their maximum)."""
        assert self.oracle is not None
        config, experts, layers = self.oracle.config, self.num_experts, self.num_layers
        rows = (hi - lo) * self.row_target.size
        shifted = np.empty((rows, experts))
        self.kernels.oracle_logits(u, self.demand.offsets, self.demand.keys, lo, layers,
                                   self.row_target, config.accuracy, config.confidence,
                                   config.near_miss, shifted)  # fmt: skip
        p = np.exp(shifted)  # not in place: the reference's own call
        return p / p.sum(axis=1, keepdims=True)

    def _learned(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The scores of the predictions of passes ``lo..hi - 1`` of a predictor that learns
        from the routing so far (:func:`.plan_kernel.learned_scores`), and which rows predict."""
        learned = self.learned
        assert learned is not None
        layers = self.num_layers
        rows = (hi - lo) * self.row_target.size
        scores = np.zeros((rows, self.num_experts))
        present = np.zeros(rows, np.bool_)
        offsets = self.demand.offsets[lo * layers : hi * layers + 1]
        self.kernels.learned_scores(
            self.demand.keys_of_passes(lo, hi), offsets - offsets[0], layers, self.num_experts,
            self.per_layer, self.row_target, learned.distance, learned.learn, learned.table,
            learned.popular, scores, present,
        )  # fmt: skip
        return scores, present

    def _recorded(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The trace's scores of the predictions of passes ``lo..hi - 1``
        (``TracePredictor.scores``: the max over the pass's tokens, NaN as -inf, a single
        token's row as recorded) and which rows predict (the distance is recorded and not
        every score is NaN)."""
        recorded = self.recorded
        assert recorded is not None
        passes, width = hi - lo, self.row_target.size
        values = np.zeros((passes, width, self.num_experts))
        present = np.zeros((passes, width), np.bool_)
        bounds = recorded.start[lo : hi + 1]
        rows = recorded.rows[bounds[0] : bounds[-1]]
        seg = bounds[:-1] - bounds[0]
        single = np.flatnonzero(np.diff(bounds) == 1)
        depth = recorded.scores.shape[0]
        for j in range(width):
            target = int(self.row_target[j])
            distance = target - int(self.row_layer[j])
            if distance > depth:
                continue
            block = np.asarray(recorded.scores[distance - 1, rows, target], np.float32)
            nan = np.isnan(block)
            best = np.maximum.reduceat(np.where(nan, -np.inf, block), seg, axis=0)
            best[single] = block[seg[single]]
            values[:, j] = best
            present[:, j] = ~np.logical_and.reduceat(nan.all(axis=1), seg)
        return values.reshape(passes * width, -1), present.reshape(-1)


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """:func:`specmd_sim.policies.scores.as_probabilities` of each row, with its operations
    (so its bits): a softmax where a valid score is negative, else the scores over their sum;
    NaN -> 0; all-zero rows uniform over the valid scores, all-NaN rows uniform."""
    s = np.asarray(scores, np.float64)
    valid = ~np.isnan(s)
    out = np.where(valid, s, 0.0)
    with np.errstate(all="ignore"):  # what the reference would warn of, and rows not asked
        negative = np.flatnonzero((valid & (s < 0)).any(axis=1))
        if negative.size:
            sub, ok = out[negative], valid[negative]
            top = np.where(ok, sub, -np.inf).max(axis=1, keepdims=True)
            out[negative] = np.where(ok, np.exp(sub - top), 0.0)
        total = out.sum(axis=1, keepdims=True)
        even = np.where(valid, 1.0 / valid.sum(axis=1, keepdims=True), 0.0)
        probabilities = np.where(total > 0, out / total, even)
    probabilities[~valid.any(axis=1)] = 1.0 / s.shape[1]
    return probabilities


class _Learned:
    """The counts of a predictor that learns from the run's routing, as the bulk kernel keeps
    them: from the predictor's own before the run (zero, or what ``fit_on`` fitted)."""

    def __init__(self, predictor: PopularityPredictor | TransitionPredictor) -> None:
        self.learn = bool(predictor.config.learn_online)
        if isinstance(predictor, TransitionPredictor):
            self.distance = predictor.d
            self.table = np.ascontiguousarray(predictor.table, np.int32)
            self.popular = np.ascontiguousarray(predictor.popular, np.float64)
        else:
            self.distance = 0
            self.table = np.zeros((1, 1, 1, 1), np.int32)
            self.popular = np.ascontiguousarray(predictor.counts, np.float64)
