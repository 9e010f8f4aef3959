"""Capacity planning: the smallest value of a knob (the cache, a link's bandwidth) at which a
run meets a target (TPOT at most, throughput at least, ...).

A sweep spec whose ``search`` names ``smallest`` (:class:`SmallestSearch`) runs, at each point
of its grid, a search over one numeric config path instead of one run:

1. **grid scan**: the ``grid`` values in ascending order until one meets the target; none
   meeting it is the outcome ``none``, the smallest meeting it the outcome ``lowest`` (the
   answer may lie below the grid);
2. **refinement** between that value and the grid value below it (which does not meet it) by
   bisection: for whole-number grids (cache slots) until they are 1 apart, else until within
   ``tolerance`` of each other (outcome ``found``; ``max-runs`` if the runs ran out first).

The metric need not be monotone in the knob (with prefetching, TPOT can rise as the cache grows:
more space, more prefetches to wait for), which is why the grid comes first: the answer is the
smallest value meeting the target that the scan and the refinement met, with a value failing it
just below; a smaller value far below may meet it again, and the grid says where to look. Each
probe is an ordinary run of the point's config with only the knob changed (same seed, same
probes, same answer).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from specmd_sim.config import apply_overrides, build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import METRICS
from specmd_sim.schema_base import InputModel
from specmd_sim.sweep.store import Kind
from specmd_sim.units import parse_quantity

Outcome = Literal["found", "lowest", "none", "max-runs"]


class SmallestSearch(InputModel):
    """The ``search`` section of a sweep spec that looks for the smallest value of a knob."""

    smallest: str = Field(
        min_length=1,
        description="The config path searched, e.g. cache.capacity (slots) or "
        "hardware.links.pcie0.bandwidth_bytes_per_s.",
    )
    grid: list[int | float | str] = Field(
        min_length=1,
        description="Values scanned first, ascending (numbers; a hardware path's values may "
        "carry its unit, '16GB/s').",
    )
    metric: str = Field(description="The metric of the target (docs/metrics.md), e.g. tpot_s.")
    at_most: float | None = Field(default=None, description="Met when metric <= this.")
    at_least: float | None = Field(default=None, description="Met when metric >= this.")
    tolerance: float = Field(
        default=0.02, gt=0, lt=1,
        description="Relative width at which refinement stops (fractional grids).",
    )  # fmt: skip
    max_runs: int = Field(default=40, ge=1, le=1000, description="Most runs per point.")
    _numbers: list[float] = PrivateAttr(default_factory=list)  # the grid, parsed
    _whole: bool = PrivateAttr(default=True)  # every grid value a whole number

    @model_validator(mode="after")
    def _check(self) -> SmallestSearch:
        if (self.at_most is None) == (self.at_least is None):
            raise ValueError("expected exactly one of at_most and at_least")
        if self.metric not in METRICS:
            raise ValueError(
                f"metric: expected a metric of docs/metrics.md (tpot_s, ttft_s, "
                f"throughput_tok_s, hit_rate, ...), got {self.metric!r}"
            )
        field_name = self.smallest.rsplit(".", 1)[-1]
        numbers = []
        for v in self.grid:  # parsed once: the search, its probes and the grid read these
            try:
                number = parse_quantity(v, field_name)
            except ValueError as exc:
                raise ValueError(f"grid: {exc}") from None
            if not isinstance(number, int | float):
                raise ValueError(f"grid: expected numbers, got {v!r}")
            numbers.append(float(number))
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            raise ValueError(f"grid: expected strictly ascending values, got {self.grid}")
        self._numbers, self._whole = numbers, all(v.is_integer() for v in numbers)
        return self

    def values(self) -> list[float]:
        """The grid as numbers (units parsed by the knob's field name)."""
        return list(self._numbers)

    def whole(self) -> bool:
        """Whether the knob takes whole numbers (every grid value is one): slots, counts."""
        return self._whole

    def setting(self, value: float) -> int | float:
        """``value`` as the knob is set: a whole number for a whole-number knob (slots)."""
        return int(value) if self._whole else value

    def meets(self, value: float) -> bool:
        if self.at_most is not None:
            return value <= self.at_most
        assert self.at_least is not None  # exactly one, checked
        return value >= self.at_least


@dataclass
class SmallestResult:
    """What a search found; ``best`` is the probe result at ``value`` (at the largest grid
    value when none meets the target)."""

    outcome: Outcome
    value: float | None  # the smallest value meeting the target found; None if none does
    failing: float | None  # the largest value below it that does not; None for 'lowest'
    best: Any
    probes: list[tuple[float, float]] = field(default_factory=list)  # (knob, metric)

    @property
    def runs(self) -> int:
        return len(self.probes)


def search_smallest(
    search: SmallestSearch, probe: Callable[[float], tuple[float, Any]]
) -> SmallestResult:
    """The grid scan, then the refinement (module docstring); ``probe(value)`` runs the point
    with the knob at ``value`` and returns the metric and the result."""
    probes: list[tuple[float, float]] = []
    results: dict[float, Any] = {}

    def meets(value: float) -> bool:
        metric, results[value] = probe(value)
        probes.append((value, metric))
        return search.meets(metric)

    grid, whole = search.values(), search.whole()
    below: float | None = None
    good: float | None = None
    for value in grid:
        if len(probes) >= search.max_runs:
            assert below is not None  # (max_runs >= 1: the values before this one probed, failed)
            return SmallestResult("max-runs", None, below, results[below], probes)
        if meets(value):
            good = value
            break
        below = value
    if good is None:
        return SmallestResult("none", None, grid[-1], results[grid[-1]], probes)
    if below is None:
        return SmallestResult("lowest", good, None, results[good], probes)
    lo, hi = below, good
    while (hi - lo > 1) if whole else (hi - lo > search.tolerance * hi):
        if len(probes) >= search.max_runs:
            return SmallestResult("max-runs", hi, lo, results[hi], probes)
        mid = (lo + hi) // 2 if whole else (lo + hi) / 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return SmallestResult("found", hi, lo, results[hi], probes)


def run_smallest(
    search: SmallestSearch, config: dict[str, Any], engine: str, plugins: tuple[str, ...] = ()
) -> SmallestResult:
    """Search the point ``config`` (a resolved config mapping) with ``engine``: each probe is
    ``config`` with the knob set."""
    from specmd_sim.engine.replay import replay
    from specmd_sim.engine.sim import simulate

    run = simulate if engine == "simulate" else replay

    def probe(value: float) -> tuple[float, Any]:
        shown = search.setting(value)
        where = f"search: {search.smallest}={shown:g}"
        knob = apply_overrides(config, [f"{search.smallest}={json.dumps(shown)}"])
        result = run(build_config(knob, where, plugins=plugins))
        metric = result.metrics.get(search.metric)
        if metric is None:
            raise SpecmdError(f"{where}: expected {search.metric} in the run, got none")
        return float(metric), result

    return search_smallest(search, probe)


# the columns such a search adds to the sweep's table, and their kinds
SMALLEST_COLUMNS: dict[str, Kind] = {
    "search.outcome": "string",
    "search.value": "float",
    "search.failing_value": "float",
    "search.runs": "int",
    "search.probes": "string",
}


def smallest_cells(found: SmallestResult) -> dict[str, Any]:
    """A search's cells of the table row; the probes as JSON ``[[value, metric], ...]``."""
    return {
        "search.outcome": found.outcome,
        "search.value": found.value,
        "search.failing_value": found.failing,
        "search.runs": found.runs,
        "search.probes": json.dumps([list(p) for p in found.probes]),
    }


def smallest_line(row: dict[str, Any], search: SmallestSearch) -> str:
    """A search's row in words (``specmd sweep`` prints one per point)."""
    value, failing, runs = row["search.value"], row["search.failing_value"], row["search.runs"]
    knob, outcome = search.smallest, row["search.outcome"]
    target = (f"{search.metric} <= {search.at_most:g}" if search.at_most is not None
              else f"{search.metric} >= {search.at_least:g}")  # fmt: skip
    if outcome == "none":
        return f"no {knob} of the grid meets {target} (up to {failing:g}; {runs} runs)"
    if outcome == "lowest":
        return (f"{knob} = {value:g}, the smallest of the grid, meets {target}; smaller values "
                f"may too ({runs} runs)")  # fmt: skip
    if outcome == "max-runs":
        got = "none found yet" if value is None else f"{value:g} meets it"
        return f"max_runs spent: {got}, {failing:g} does not ({target}; {runs} runs)"
    return f"{knob} = {value:g} meets {target}, {failing:g} does not ({runs} runs)"
