"""Bandwidth-budget prefetch: as many experts as the link can move while the layer computes.

At layer ``l``'s router, the expected compute time of ``l`` (its attention already ran; its
experts' compute is what remains: the sum of the expert times of its demand set at each expert's
precision, plus the next layer's attention) is a time budget. Candidates are ranked most
probable first across the target layers (probability discounted by ``decay`` per layer of
distance); the policy takes them in that order while their transfer times, each expert's bytes
over the bandwidth of the path it comes by (host DRAM, NVMe, a peer GPU), fit the budget
(with one path and one size: ``floor(budget * bandwidth / expert_bytes)`` experts), and at
least ``min_experts``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import Field

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy, needs
from specmd_sim.policies.registry import PREFETCH
from specmd_sim.policies.scores import as_probabilities
from specmd_sim.traces.trace import PREFILL


class BandwidthBudgetConfig(PluginConfig):
    kind: Literal["bandwidth-budget"] = "bandwidth-budget"
    min_experts: int = Field(default=0, ge=0, description="Fetch at least this many.")
    decay: float = Field(
        default=0.5, gt=0.0, le=1.0, description="Weight per layer of distance beyond the next."
    )
    lookahead: int = Field(default=1, ge=1, description="How many layers ahead to prefetch.")


@PREFETCH.register
class BandwidthBudgetPrefetch(PrefetchPolicy[BandwidthBudgetConfig]):
    description = "As many experts as fit in the current layer's expected compute time."
    source = "compute-overlap budgeting (HybriMoE, ProMoE, MoE-Lightning)"

    def budget(self, pass_index: int, layer: int) -> float:
        """Seconds of transfer the layer's remaining compute can hide."""
        ctx = self.ctx
        cost, history = ctx.cost, ctx.history
        chosen = history.demand_set(pass_index, layer)
        dtype = ctx.dtype
        seconds = sum(
            cost.expert_time(int(n), dtype[int(key)])
            for key, n in zip(chosen.keys, chosen.tokens, strict=True)
        )
        this = history.pass_info(pass_index)
        # the pass's kernels as the engine times them, from what is known when it starts: a
        # prefill pass on the runtime's eager path (its blocking copies included) and prefill
        # kernels (its request's context so far taken for its prompt), a decode pass on its
        # decode kernel
        prefill = this.phase == PREFILL
        pairs = 0
        if prefill and cost.materialized_new_tokens is not None:
            pairs = cost.materialized_pairs(np.array([this.tokens]), np.array([this.context_end]))
        decoding = 0 if prefill else this.tokens
        return (
            seconds
            + cost.batch_attention_time(
                this.tokens, this.attended, this.kv_tokens, prefill, decoding, pairs
            )
            + (cost.handoff_time(self.ctx.path, this.tokens) if prefill and cost.hands_off else 0)
        )

    def _transfer_time(self, key: int) -> float:
        ctx = self.ctx
        i = int(ctx.source[key])
        return 0.0 if i < 0 else int(ctx.nbytes[key]) / ctx.paths[i].bandwidth

    @cached_property
    def _quickest(self) -> float:
        """The shortest transfer time of any expert not in the GPU's own shard."""
        ctx = self.ctx
        keys = range(ctx.num_layers * ctx.num_experts)
        return min((t for t in map(self._transfer_time, keys) if t > 0), default=0.0)

    def plan(
        self, pass_index: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache
    ) -> list[int]:
        seconds = self.budget(pass_index, layer)
        minimum = self.config.min_experts
        if minimum == 0 and seconds < self._quickest:
            return []  # not even one expert fits: ask the predictor nothing
        predictor = needs(predictor, self.kind)
        keys: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for distance, target in enumerate(self.targets(layer)):
            scores = predictor.scores(pass_index, layer, target)
            if scores is None:
                continue
            keys.append(target * self.num_experts + np.arange(self.num_experts))
            weights.append(as_probabilities(scores) * self.config.decay**distance)
        if not keys:
            return []
        k, w = np.concatenate(keys), np.concatenate(weights)
        order = np.lexsort((k, -w))
        plan: list[int] = []
        spent = 0.0
        for key in k[order[w[order] > 0]].tolist():
            spent += self._transfer_time(key)
            if spent > seconds and len(plan) >= minimum:
                break
            plan.append(key)
        return plan
