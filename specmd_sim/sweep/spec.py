"""The sweep spec: a base config, the axes to vary, and the engine to run.

A spec is a small YAML file::

    name: quick                      # a label (optional)
    engine: replay                   # replay | simulate (default simulate)
    base:                            # config fields of every point (as `specmd run --config`)
      trace: mixtral-synthetic
    set: [workload.max_requests=1]   # KEY.PATH=VALUE overrides of base (as `--set`)
    axes:                            # every combination of these (product)
      hardware: [h100-pcie, slow-link-5gbps]
      eviction: [lru, least-stale]
    zip:                             # groups whose axes advance together
      - capacity: [8, 16]
        prefetch: [none, top-k]
    search:                          # optional: at each point, the highest arrival rate that
      attainment: 0.9                # meets the config's slo (specmd_sim.sweep.search)
      min_rate_per_s: 0.5
      max_rate_per_s: 64

The points are the product of every entry of ``axes`` and every ``zip`` group, in that order,
the last factor varying fastest (:mod:`specmd_sim.sweep.grid` expands them). Building a spec
has no side effects and checks only its own shape; the configs of the points are checked when
the grid is expanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.schema_base import InputModel
from specmd_sim.sweep.search import ARRIVALS_PATH, RATE_PATH, RateSearch
from specmd_sim.sweep.smallest import SmallestSearch

Engine = Literal["replay", "simulate"]


class SweepSpec(InputModel):
    """One sweep: the base config, its axes and the engine."""

    name: str | None = Field(default=None, description="A label for the sweep.")
    engine: Engine = Field(
        default="simulate",
        description="replay (timing-free: hit rates, misses) or simulate (timing: TTFT, stalls).",
    )
    base: dict[str, Any] = Field(
        default_factory=dict,
        description="Config fields shared by every point (the fields of SimConfig).",
    )
    set: list[str] = Field(
        default_factory=list,
        description="KEY.PATH=VALUE overrides applied to base, as the --set option of specmd run.",
    )
    axes: dict[str, list[Any]] = Field(
        default_factory=dict,
        description=(
            "Axes combined as a product: name -> values. A name is hardware, model, trace, "
            "capacity, eviction, prefetch, predictor, miss, seed or any config path "
            "(predictor.accuracy)."
        ),
    )
    zip: list[dict[str, list[Any]]] = Field(
        default_factory=list,
        description="Groups of axes that advance together (equal lengths); each group is one "
        "more factor of the product.",
    )
    search: RateSearch | SmallestSearch | None = Field(
        default=None,
        description="At each point, a search instead of one run: the highest Poisson arrival "
        "rate whose SLO attainment meets a target (attainment, min_rate_per_s, ...; engine "
        "simulate, the config's slo gives the limits), or the smallest value of a knob meeting "
        "a metric's target (smallest, grid, metric, at_most / at_least).",
    )

    @field_validator("search", mode="before")
    @classmethod
    def _search_kind(cls, value: Any) -> Any:
        """A search that names ``smallest`` is a capacity search, any other a rate search (so
        a wrong field gets one message, not one per kind)."""
        if isinstance(value, dict):
            kind = SmallestSearch if "smallest" in value else RateSearch
            return kind.model_validate(value)
        return value

    @model_validator(mode="after")
    def _check_axes(self) -> SweepSpec:
        seen: set[str] = set()
        groups = [("axes", {name: values}) for name, values in self.axes.items()]
        groups += [(f"zip[{i}]", group) for i, group in enumerate(self.zip)]
        for where, group in groups:
            if not group:
                raise ValueError(f"{where}: expected at least one axis, got an empty group")
            lengths = {name: len(values) for name, values in group.items()}
            for name, length in lengths.items():
                if not name.strip() or name != name.strip():
                    raise ValueError(f"{where}: expected an axis name, got {name!r}")
                if name in seen:
                    raise ValueError(f"{where}.{name}: expected each axis once, got it twice")
                seen.add(name)
                if length == 0:
                    raise ValueError(f"{where}.{name}: expected at least one value, got []")
            if len(set(lengths.values())) > 1:
                raise ValueError(
                    f"{where}: expected axes of equal length to zip, got lengths {lengths}"
                )
        if isinstance(self.search, SmallestSearch):
            if self.search.smallest in seen:
                raise ValueError(
                    f"search: expected no axis {self.search.smallest} (the search sets it), got one"
                )
        elif self.search is not None:
            if self.engine != "simulate":
                raise ValueError(
                    "search: expected engine: simulate (slo_attainment is a timing metric), "
                    f"got engine: {self.engine}"
                )
            owned = sorted(seen & {RATE_PATH, ARRIVALS_PATH, "workload"})
            if owned:
                raise ValueError(
                    f"search: expected no axis {owned[0]} (the search sets the arrivals and "
                    "their rate), got one"
                )
        return self

    def factors(self) -> list[dict[str, list[Any]]]:
        """The factors of the product, in order: one per entry of ``axes``, then the zip
        groups."""
        return [{name: values} for name, values in self.axes.items()] + list(self.zip)


def parse_spec(data: object, source: str = "sweep spec") -> SweepSpec:
    """Validate a spec mapping, with one-line errors naming the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecmdError(f"{source}: expected a mapping, got {type(data).__name__}")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None


def load_spec(path: Path | str) -> SweepSpec:
    """Read and validate a sweep spec YAML file."""
    from specmd_sim.hardware.loader import load_yaml

    path = Path(path)
    return parse_spec(load_yaml(path, "sweep spec"), f"sweep spec {path}")
