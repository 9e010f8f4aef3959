"""Expand a sweep spec into points: resolved configs, their axis values and their ids.

The base config is ``spec.base`` with ``spec.set`` applied on top of its full resolved form (so
any field can be set, as with ``specmd run --set``). Each point applies its axis values to that
base the same way:

- ``capacity`` (or ``cache``) sets ``cache.capacity``;
- ``eviction``, ``prefetch``, ``predictor`` and ``miss`` take a kind (``lru``), which starts that
  section afresh, or a whole section (``{kind: least-stale, order: layer}``);
- any other name is a config path (``hardware``, ``seed``, ``predictor.accuracy``).

Values are applied shallowest first (a kind before the parameters of its section), so
``eviction`` and ``eviction.order`` may be axes of the same sweep. A point's id is
``<engine>-<hash of its resolved config>``, the name ``specmd run`` gives its run folder; two
points with the same id are an error. With a rate ``search`` (:mod:`specmd_sim.sweep.search`)
a point's config is the search's first probe: Poisson arrivals at ``min_rate_per_s``, after the
axes; it must have an ``slo``. With a ``smallest`` search (:mod:`specmd_sim.sweep.smallest`) it
is the knob at the grid's first value.

A grid is counted from the lengths of its factors (:func:`count_points`) before any point is
built, and :func:`iter_points` builds its points one at a time, so that a grid of millions of
points is refused (:func:`check_size`) or streamed, never held whole by accident.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from specmd_sim.config import SimConfig, apply_overrides, build_config, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.runs import config_hash
from specmd_sim.sweep.search import RateSearch, at_rate
from specmd_sim.sweep.smallest import SmallestSearch
from specmd_sim.sweep.spec import SweepSpec

AXIS_ALIASES = {"capacity": "cache.capacity", "cache": "cache.capacity"}
MAX_POINTS = 10_000  # a sweep larger than this must be confirmed (--max-points)
PLUGIN_SECTIONS = frozenset({"eviction", "prefetch", "predictor", "miss"})


@dataclass(frozen=True, eq=False)
class Point:
    """One run of a sweep."""

    index: int  # position in the expansion order
    axes: dict[str, Any]  # axis name -> value as written in the spec
    config: SimConfig
    point_id: str  # "<engine>-<config hash>"

    @property
    def key(self) -> str:
        """A readable name from the axis values (``hardware=gh200,capacity=16``)."""
        return point_key(self.axes)


def axis_path(name: str, value: Any) -> str:
    """The config path an axis value is assigned to."""
    path = AXIS_ALIASES.get(name, name)
    if path in PLUGIN_SECTIONS and not isinstance(value, dict):
        return f"{path}.kind"
    return path


def axis_label(value: Any) -> Any:
    """An axis value as a table cell: scalars as they are, a plug-in section as
    ``kind(param=value, ...)``, anything else as JSON."""
    if isinstance(value, dict) and isinstance(value.get("kind"), str):
        params = ", ".join(f"{k}={_text(v)}" for k, v in value.items() if k != "kind")
        return f"{value['kind']}({params})" if params else value["kind"]
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def point_key(axes: dict[str, Any]) -> str:
    """``name=value`` pairs joined by commas, or ``run`` for a sweep without axes."""
    if not axes:
        return "run"
    return ",".join(f"{name}={_text(axis_label(value))}" for name, value in axes.items())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def base_config(spec: SweepSpec, source: str = "sweep spec") -> dict[str, Any]:
    """The full resolved base config (``base`` then ``set``), as a mapping."""
    base = config_to_dict(build_config(spec.base, f"{source}: base"))
    if spec.set:
        where = f"{source}: set"
        base = config_to_dict(build_config(apply_overrides(base, spec.set, where), where))
    return base


def apply_axes(base: dict[str, Any], axes: dict[str, Any]) -> dict[str, Any]:
    """The config mapping of one point (a copy of ``base``)."""
    assignments = [(axis_path(name, value), value) for name, value in axes.items()]
    assignments.sort(key=lambda item: item[0].removesuffix(".kind").count("."))
    return apply_overrides(base, [f"{path}={json.dumps(value)}" for path, value in assignments])


def count_points(spec: SweepSpec) -> int:
    """The number of points of the spec, from the lengths of its factors (nothing is built)."""
    return math.prod(_lengths(spec))


def _lengths(spec: SweepSpec) -> list[int]:
    return [len(next(iter(factor.values()))) for factor in spec.factors()]


def check_size(spec: SweepSpec, max_points: int = MAX_POINTS, source: str = "sweep spec") -> int:
    """The number of points; one line if it exceeds ``max_points``, saying how to confirm."""
    count = count_points(spec)
    if count > max_points:
        shape = " x ".join(str(n) for n in _lengths(spec))
        raise SpecmdError(
            f"{source}: axes: expected at most {max_points:,} points, got {count:,} ({shape}); "
            f"pass --max-points {count} to run them all"
        )
    return count


def iter_points(spec: SweepSpec, source: str = "sweep spec") -> Iterator[Point]:
    """Every point of the spec, in order, each with a validated config, built one at a time."""
    base = base_config(spec, source)
    # each factor contributes one "row" per value: {axis: value} for all its axes
    rows = [
        [dict(zip(factor, values, strict=True)) for values in zip(*factor.values(), strict=True)]
        for factor in spec.factors()
    ]

    def axes_of(combo: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        return {name: value for row in combo for name, value in row.items()}

    seen: dict[str, int] = {}  # point id -> index of the point that has it
    for index, combo in enumerate(itertools.product(*rows)):
        axes = axes_of(combo)
        where = f"{source}: point {index} ({point_key(axes)})"
        data = apply_axes(base, axes)
        search = spec.search
        if isinstance(search, SmallestSearch):  # the point is the search's first probe
            first = search.setting(search.values()[0])
            data = apply_overrides(data, [f"{search.smallest}={json.dumps(first)}"])
        elif search is not None:
            data = at_rate(data, search.min_rate_per_s)
        config = build_config(data, where)
        if isinstance(search, RateSearch) and config.slo is None:
            raise SpecmdError(
                f"{where}: slo: expected the limits the search meets ({{ttft_s: ..., tpot_s: "
                "...} in base, set or an axis), got none"
            )
        point = Point(index, axes, config, f"{spec.engine}-{config_hash(config)}")
        if point.point_id in seen:
            first = seen[point.point_id]
            other = axes_of(next(itertools.islice(itertools.product(*rows), first, None)))
            raise SpecmdError(
                f"{where}: expected distinct configs, got the same config as point {first} "
                f"({point_key(other)})"
            )
        seen[point.point_id] = index
        yield point


def expand(spec: SweepSpec, source: str = "sweep spec") -> list[Point]:
    """Every point of the spec, in order, as a list (:func:`iter_points` streams them)."""
    return list(iter_points(spec, source))
