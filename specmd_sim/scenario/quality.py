"""How good a predictor is on a trace: top-k recall and precision per lookahead, and calibration.

The predictor runs as it would in a run (the same passes, the same online history, fitted on
its ``fit_on`` routing), without a cache: at the router of every (pass, layer) it is asked for
each target ``layer + j`` (``j = 1 .. depth``), and its top-``k`` experts (``k`` = the trace's
top-k) are compared with the target's demand set ``S``:

- ``recall`` = |top-k ∩ S| / |S| and ``precision`` = |top-k ∩ S| / k, averaged over the cases
  the predictor answered (for single-token passes |S| = k and the two are equal);
- ``coverage`` = the share of cases it answered at all (learning predictors answer nothing
  before they have seen a layer; a trace's recorded predictions reach only its lookahead):
  without answers, recall and precision are NaN;
- ``ece``: expected calibration error of its scores read as the probability that an expert is
  in ``S``: scores (negative ones as 0) scaled to sum to ``|S|`` over the layer's experts, the
  number the layer will select, and clipped to 1 (a softmax over the experts is a share of one
  selection; a layer makes ``|S|``). 10 equal-width bins, weighted by their counts. 0 = a
  predictor whose "70 %" experts are selected 70 % of the time; what a mass-based prefetcher
  (``cumulative-mass``) relies on.

Per phase (prefill passes, decode passes) and lookahead ``j``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from specmd_sim.config import SimConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.build import build_scenario, new_rng
from specmd_sim.scenario.plugins import make_predictor, run_views

BINS = 10
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class QualityRow:
    phase: str
    lookahead: int
    cases: int  # (pass, layer) pairs with a target that far ahead and a recorded demand set
    coverage: float
    recall: float
    precision: float
    ece: float

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


class _Tally:
    def __init__(self) -> None:
        self.cases = self.answered = 0
        self.recall = self.precision = 0.0
        self.bins = np.zeros((3, BINS))  # count, sum of scores, sum of labels

    def add(self, scores: np.ndarray | None, truth: np.ndarray, k: int) -> None:
        if truth.size == 0:  # nothing recorded for the target (a missing record): no case
            return
        self.cases += 1
        if scores is None:
            return
        scores = np.nan_to_num(np.asarray(scores, np.float64), nan=-np.inf)
        top = np.argsort(-scores, kind="stable")[:k]
        hits = np.intersect1d(top, truth).size
        self.answered += 1
        self.recall += hits / truth.size
        self.precision += hits / k
        label = np.zeros(scores.size)
        label[truth] = 1.0
        mass = np.clip(np.where(np.isfinite(scores), scores, 0.0), 0.0, None)
        if mass.sum() <= 0:
            return
        p = np.minimum(mass * (truth.size / mass.sum()), 1.0)
        b = np.minimum((p * BINS).astype(int), BINS - 1)
        np.add.at(self.bins, (0, b), 1.0)
        np.add.at(self.bins, (1, b), p)
        np.add.at(self.bins, (2, b), label)

    def row(self, phase: str, j: int) -> QualityRow:
        n = self.answered or math.nan  # never answered: recall and precision are unknown
        count, score, label = self.bins
        filled = count > 0
        gap = np.abs(score[filled] - label[filled]).sum()  # sum over bins of n_b * |mean gap|
        ece = float(gap / count.sum()) if count.sum() else float("nan")
        coverage = self.answered / self.cases if self.cases else float("nan")
        return QualityRow(
            phase, j, self.cases, coverage, self.recall / n, self.precision / n, ece
        )  # fmt: skip


def predictor_quality(config: SimConfig, depth: int = 2) -> list[QualityRow]:
    """Recall, precision, coverage and calibration of ``config.predictor`` on ``config.trace``
    (its passes as ``config.workload`` forms them), per phase and lookahead 1 .. ``depth``."""
    scenario = build_scenario(config, check_cache=False)
    layers, num_experts, k = (
        scenario.trace.num_layers,
        scenario.trace.num_experts,
        scenario.trace.top_k,
    )
    if not 1 <= depth <= layers - 1:
        raise SpecmdError(f"--lookahead: expected 1 .. {layers - 1} (MoE layers - 1), got {depth}")
    views = run_views(scenario, 0, new_rng(config))
    predictor = make_predictor(scenario, views)
    history, demand, passes = views.online.history, scenario.demand, scenario.passes
    tallies = {(phase, j): _Tally() for phase in PHASES for j in range(1, depth + 1)}
    for p in range(passes.num_passes):
        phase = PHASES[int(passes.phase[p])]
        for layer in range(layers):
            history.advance(p, layer)
            for j in range(1, min(depth, layers - 1 - layer) + 1):
                target = layer + j
                truth = demand.keys_of(p, target) - target * num_experts
                tallies[(phase, j)].add(predictor.scores(p, layer, target), truth, k)
    return [t.row(phase, j) for (phase, j), t in tallies.items() if t.cases]
