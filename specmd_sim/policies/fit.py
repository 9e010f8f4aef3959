"""Fitting a learning predictor on other routing than the one it is evaluated on.

The learning predictors (``popularity``, ``transition``, ``activation-matrix``) learn online
from the run's past. With ``fit_on`` they start from statistics of training routing instead:
another trace (``fit_on: path``), some requests of another trace (``fit_on: {trace: path,
requests: [...]}``) or requests of the evaluated trace that the run does not evaluate
(``fit_on: {requests: [...]}`` with ``workload.requests`` naming the others). The scenario
refuses an overlap, and training requests routed exactly as an evaluated one (a copy of the
run's trace). ``learn_online: false`` stops them learning from the run after fitting (what they
read of the running pass or request to predict from, they still read).

The training routing is given to the predictor as :class:`TrainingRoutes`: the demand sets of
the training requests' passes, built as the run builds its own (same workload), so that a
predictor learns from exactly what it would have seen serving those requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from specmd_sim.policies.context import AccessSequence, PassTable
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.schema_base import InputModel


class FitOn(InputModel):
    """Training routing: a trace (path or bundled name; None = the evaluated trace) and which of
    its requests (None = all)."""

    trace: str | None = Field(default=None, description="Training trace; null = the run's own.")
    requests: tuple[int, ...] | None = Field(
        default=None, description="Request ids of that trace to fit on; null = all."
    )

    @model_validator(mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        return {"trace": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _something(self) -> FitOn:
        if self.trace is None and not self.requests:
            raise ValueError(
                "expected a training trace (fit_on: path) or requests of the run's trace "
                "(fit_on: {requests: [...]}), got neither"
            )
        return self


class FittableConfig(PluginConfig):
    """Config of a predictor that learns: optionally fitted first, optionally frozen after."""

    fit_on: FitOn | None = Field(
        default=None,
        description=(
            "Fit on this routing before the run: a trace path, {trace, requests}, or "
            "{requests} of the run's own trace that the run does not evaluate; null = start "
            "empty (learn online only)."
        ),
    )
    learn_online: bool = Field(
        default=True, description="Keep learning from the run's own past during the run."
    )

    @model_validator(mode="after")
    def _fitted_if_frozen(self) -> FittableConfig:
        if not self.learn_online and self.fit_on is None:
            raise ValueError(
                "learn_online: expected true without fit_on (a predictor that neither is "
                "fitted nor learns predicts nothing), got false"
            )
        return self


@dataclass(frozen=True, eq=False)
class TrainingRoutes:
    """The passes of the training requests and their demand sets (flat keys, as in a run)."""

    demand: AccessSequence
    passes: PassTable
    num_experts: int

    @property
    def num_passes(self) -> int:
        return int(self.passes.request.size)

    def demand_sets(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(pass, layer, local expert ids)`` of every demand set, in pass, layer order."""
        num_layers = self.demand.num_layers
        for p in range(self.num_passes):
            for layer in range(num_layers):
                yield p, layer, self.demand.keys_of(p, layer) - layer * self.num_experts
