"""Rate search: the highest Poisson arrival rate whose SLO attainment meets a target.

A sweep spec with a ``search`` section (:class:`RateSearch`) runs, at each point of its grid,
not one simulation but a search over ``workload.arrival_rate_per_s`` (with ``workload.arrivals:
poisson``): the rate is *good* when the run's ``slo_attainment`` (the fraction of requests
meeting the config's ``slo``) is at least ``attainment``. :func:`search_rate`:

1. runs ``min_rate_per_s``; if it is not good, no rate is found (outcome ``lower-bound``);
2. brackets: doubles the highest good rate (capped at ``max_rate_per_s``) until a rate is not
   good; if ``max_rate_per_s`` itself is good, that is the answer (outcome ``upper-bound``: the
   true highest rate may lie above it);
3. bisects between the highest good rate and the lowest bad one until they are within
   ``tolerance`` of each other (``bad - good <= tolerance * good``; outcome ``found``).

Every run counts against ``max_runs``; when they are spent first, the bracket reached so far is
reported (outcome ``max-runs``). Bracketing and bisection take at most
``1 + ceil(log2(max/min)) + ceil(log2(1/tolerance))`` runs (:func:`runs_needed`).

When attainment falls monotonically with the rate, the true threshold lies in ``[rate, bad
rate]``. It need not be monotone (a random arrival pattern, a cache that warms differently):
the answer is then *a* good rate with a bad one within the tolerance above it, the highest the
bracketing and bisection met; a higher rate may be good again. Each probe is one ordinary run
of the point's config with only the rate changed, so the same seed gives the same probes and
the same answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from specmd_sim.config import apply_overrides, build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.schema_base import InputModel
from specmd_sim.sweep.store import Kind

Outcome = Literal["found", "upper-bound", "lower-bound", "max-runs"]
RATE_PATH = "workload.arrival_rate_per_s"
ARRIVALS_PATH = "workload.arrivals"


class RateSearch(InputModel):
    """The ``search`` section of a sweep spec."""

    attainment: float = Field(
        gt=0, le=1,
        description="Target SLO attainment, a fraction in (0, 1]: a rate is good when at "
        "least this fraction of the requests meets the config's slo.",
    )  # fmt: skip
    min_rate_per_s: float = Field(
        gt=0, description="Lowest arrival rate tried (the first run), requests/s."
    )
    max_rate_per_s: float = Field(
        gt=0, description="Highest arrival rate tried, requests/s: the search stops there."
    )
    tolerance: float = Field(
        default=0.05, gt=0, lt=1,
        description="Relative width at which bisection stops, a fraction: the lowest bad rate "
        "is at most (1 + tolerance) times the rate found.",
    )  # fmt: skip
    max_runs: int = Field(
        default=24, ge=1, le=1000,
        description="Most runs per point, runs; when spent, the bracket reached is reported.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _check_bounds(self) -> RateSearch:
        if self.min_rate_per_s >= self.max_rate_per_s:
            raise ValueError(
                "expected min_rate_per_s < max_rate_per_s, got "
                f"{self.min_rate_per_s:g} >= {self.max_rate_per_s:g}"
            )
        return self


def runs_needed(search: RateSearch) -> int:
    """The most runs bracketing and bisection can take (without the ``max_runs`` bound)."""
    doublings = math.ceil(math.log2(search.max_rate_per_s / search.min_rate_per_s))
    return 1 + doublings + math.ceil(math.log2(1 / search.tolerance))


@dataclass
class SearchResult:
    """What a search found; ``best`` is the probe result at ``rate`` (at ``min_rate_per_s``
    when no rate is good)."""

    outcome: Outcome
    rate: float | None  # the highest good rate found; None when even the lowest is bad
    bad_rate: float | None  # the lowest bad rate above it; None when max_rate_per_s is good
    best: Any  # the probe's result at ``rate`` (or at the lowest rate)
    probes: list[tuple[float, float]] = field(default_factory=list)  # (rate, attainment)

    @property
    def runs(self) -> int:
        return len(self.probes)


def search_rate(search: RateSearch, probe: Callable[[float], tuple[float, Any]]) -> SearchResult:
    """Search the highest good rate; ``probe(rate)`` runs one point at ``rate`` and returns its
    SLO attainment and its result (kept for the rate found). See the module docstring."""
    probes: list[tuple[float, float]] = []
    best: list[Any] = []  # the result at the highest good rate, or at the lowest rate

    def good(rate: float) -> bool:
        attainment, result = probe(rate)
        probes.append((rate, attainment))
        met = attainment >= search.attainment
        if met or not best:  # only a good rate's result is kept (and the first)
            best[:] = [result]
        return met

    def done(outcome: Outcome, rate: float | None, bad: float | None) -> SearchResult:
        return SearchResult(outcome, rate, bad, best[0], probes)

    lo = search.min_rate_per_s
    if not good(lo):
        return done("lower-bound", None, lo)
    hi: float | None = None
    while hi is None:  # bracket: double the good rate until one is bad
        if lo >= search.max_rate_per_s:
            return done("upper-bound", lo, None)
        if len(probes) >= search.max_runs:
            return done("max-runs", lo, None)
        rate = min(2 * lo, search.max_rate_per_s)
        if good(rate):
            lo = rate
        else:
            hi = rate
    while hi - lo > search.tolerance * lo:  # bisect [good, bad]
        if len(probes) >= search.max_runs:
            return done("max-runs", lo, hi)
        mid = (lo + hi) / 2
        if good(mid):
            lo = mid
        else:
            hi = mid
    return done("found", lo, hi)


def at_rate(config: dict[str, Any], rate: float) -> dict[str, Any]:
    """A config mapping with Poisson arrivals at ``rate`` requests/s (a probe of the search)."""
    return apply_overrides(config, [f"{ARRIVALS_PATH}=poisson", f"{RATE_PATH}={json.dumps(rate)}"])


def run_search(
    search: RateSearch, config: dict[str, Any], plugins: tuple[str, ...] = ()
) -> SearchResult:
    """Search the point ``config`` (a resolved config mapping with an ``slo``) with the timing
    engine: each probe is ``config`` with Poisson arrivals at the probed rate."""
    from specmd_sim.engine.sim import simulate

    def probe(rate: float) -> tuple[float, Any]:
        where = f"search: rate {rate:g}/s"
        result = simulate(build_config(at_rate(config, rate), where, plugins=plugins))
        attainment = result.metrics.get("slo_attainment")
        if attainment is None:
            raise SpecmdError(f"{where}: expected slo_attainment, got none (no requests)")
        return float(attainment), result

    return search_rate(search, probe)


# the columns a search adds to the sweep's table, and their kinds
SEARCH_COLUMNS: dict[str, Kind] = {
    "search.outcome": "string",
    "search.rate_per_s": "float",
    "search.failing_rate_per_s": "float",
    "search.runs": "int",
    "search.probes": "string",
}


def search_cells(found: SearchResult) -> dict[str, Any]:
    """A search's cells of the table row (:data:`SEARCH_COLUMNS`); the probes as JSON
    ``[[rate, attainment], ...]`` in the order they ran."""
    return {
        "search.outcome": found.outcome,
        "search.rate_per_s": found.rate,
        "search.failing_rate_per_s": found.bad_rate,
        "search.runs": found.runs,
        "search.probes": json.dumps([list(p) for p in found.probes]),
    }


def search_line(row: dict[str, Any]) -> str:
    """A search's row in words (``specmd sweep`` prints one per point)."""
    rate, bad, runs = row["search.rate_per_s"], row["search.failing_rate_per_s"], row["search.runs"]
    there = f"attainment {_number(row.get('slo_attainment'))}, goodput "
    there += f"{_number(row.get('goodput_rps'))} req/s; {runs} runs"
    outcome = row["search.outcome"]
    if outcome == "lower-bound":
        return f"no rate found: even the lowest, {bad:g} req/s, misses the target ({there})"
    if outcome == "upper-bound":
        return (
            f"{rate:g} req/s, the highest rate tried, meets the target ({there}); the highest "
            "rate meeting it may lie above"
        )
    if outcome == "max-runs":
        above = "none failed yet" if bad is None else f"{bad:g} req/s does not"
        return f"max_runs spent: {rate:g} req/s meets the target, {above} ({there})"
    return f"{rate:g} req/s meets the target, {bad:g} req/s does not ({there})"


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3g}"
