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
points with the same id are an error.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from specmd_sim.config import SimConfig, apply_overrides, build_config, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.runs import config_hash
from specmd_sim.sweep.spec import SweepSpec

AXIS_ALIASES = {"capacity": "cache.capacity", "cache": "cache.capacity"}
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
        base = config_to_dict(build_config(apply_overrides(base, spec.set), f"{source}: set"))
    return base


def apply_axes(base: dict[str, Any], axes: dict[str, Any]) -> dict[str, Any]:
    """The config mapping of one point (a copy of ``base``)."""
    assignments = [(axis_path(name, value), value) for name, value in axes.items()]
    assignments.sort(key=lambda item: item[0].removesuffix(".kind").count("."))
    return apply_overrides(base, [f"{path}={json.dumps(value)}" for path, value in assignments])


def expand(spec: SweepSpec, source: str = "sweep spec") -> list[Point]:
    """Every point of the spec, in order, each with a validated config."""
    base = base_config(spec, source)
    factors = spec.factors()
    # each factor contributes one "row" per value: {axis: value} for all its axes
    rows = [
        [dict(zip(factor, values, strict=True)) for values in zip(*factor.values(), strict=True)]
        for factor in factors
    ]
    points: list[Point] = []
    seen: dict[str, Point] = {}
    for index, combo in enumerate(itertools.product(*rows)):
        axes = {name: value for row in combo for name, value in row.items()}
        where = f"{source}: point {index} ({point_key(axes)})"
        config = build_config(apply_axes(base, axes), where)
        point = Point(index, axes, config, f"{spec.engine}-{config_hash(config)}")
        if point.point_id in seen:
            raise SpecmdError(
                f"{where}: expected distinct configs, got the same config as point "
                f"{seen[point.point_id].index} ({seen[point.point_id].key})"
            )
        seen[point.point_id] = point
        points.append(point)
    return points
