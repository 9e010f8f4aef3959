"""The prefetch-policy contract.

After the router of layer ``l`` decides, the engine asks the policy for an ordered list of flat
expert ids to fetch for layers ``l+1 .. l+lookahead``; the policy reads the predictor's scores
(and may read the cache). The cache then treats listed experts that are already cached as
*hints* (a touch for policies that care) and fetches the absent ones in list order, dropping
those for which nothing can be evicted. Layers past the last one are never targeted (no
prefetching across passes).

Policies that select per target layer implement ``select(probabilities, scores)``; the base
class walks the targets and asks the predictor. ``lookahead`` is the config's ``lookahead``
(0 if it has none: the engine then never calls ``plan``); a policy with
``uses_predictor = False`` is given ``predictor=None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from specmd_sim.policies.context import RunContext
from specmd_sim.policies.plugin import C, Plugin, PluginConfig
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.scores import as_probabilities

if TYPE_CHECKING:
    from specmd_sim.cache.expert_cache import ExpertCache


class PrefetchPolicy(Plugin[C]):
    required = (("select", "plan"),)
    lookahead: int = 0  # 0: the engine never calls plan()
    uses_predictor: ClassVar[bool] = True  # False: plan() gets predictor=None

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.lookahead = int(getattr(config, "lookahead", 0) or 0)
        self.num_layers = ctx.num_layers
        self.num_experts = ctx.num_experts

    def targets(self, layer: int) -> range:
        return range(layer + 1, min(layer + self.lookahead, self.num_layers - 1) + 1)

    def plan(
        self, pass_index: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache
    ) -> list[int]:
        """Flat expert ids to fetch, most wanted first."""
        predictor = needs(predictor, self.kind)
        out: list[int] = []
        for target in self.targets(layer):
            scores = predictor.scores(pass_index, layer, target)
            if scores is None:
                continue
            chosen = self.select(as_probabilities(scores), scores)
            base = target * self.num_experts
            out.extend(int(base + e) for e in chosen)
        return out

    def select(self, probabilities: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Expert ids of one target layer to fetch, most wanted first."""
        raise NotImplementedError


def needs(predictor: ScoreSource | None, kind: str) -> ScoreSource:
    """``predictor``, which a policy with ``uses_predictor`` is always given."""
    if predictor is None:
        raise TypeError(f"prefetch {kind!r} uses a predictor: expected one, got None")
    return predictor


def ranked(probabilities: np.ndarray) -> np.ndarray:
    """Expert ids by descending probability, ties to the lower id; zero-probability last."""
    return np.lexsort((np.arange(probabilities.size), -probabilities))
