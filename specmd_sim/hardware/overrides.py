"""What-ifs on a profile: a hardware or runtime profile with some of its fields set by dotted path.

A config's ``hardware_set`` and ``runtime_set`` (``--set hardware.<path>=<value>``,
``--set runtime.<path>=<value>``, the same as sweep axes) map a path to a value:

- a path's parts name a mapping's keys, or a list's items by their ``id`` or index:
  ``links.pcie0.bandwidth_bytes_per_s``, ``nodes.gpu0.hbm_bytes``, ``nodes.1.cpu_clock_hz``,
  ``kernels.attention``;
- a path that ends at a number with provenance (a quantity, or a setting such as
  ``copy_stream``) sets its value, and marks it as the override: the source names the
  assignment and the grade is D (an assumption), so a run's lowest grade says it is a what-if;
  ``<path>.source`` and ``<path>.grade`` set those instead;
- a value may carry the unit its field's name gives: ``'64GB/s'`` for ``..._bytes_per_s``,
  ``'80GiB'`` for ``..._bytes``, ``'5us'`` for ``..._s``, ``'989TFLOPS'``, ``'2.2GHz'``
  (:func:`specmd_sim.units.parse_quantity`).

The result is validated by the profile's own schema, so an override can make nothing a profile
file could not; a wrong path or value is one line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specmd_sim.errors import SpecmdError, from_validation_error, short_repr
from specmd_sim.units import parse_quantity

M = TypeVar("M", bound=BaseModel)
PROVENANCE = ("value", "source", "grade")


def override_profile(model: M, overrides: Mapping[str, Any], source: str) -> M:
    """``model`` with the fields at ``overrides``' paths set (see the module docstring);
    ``source`` names the overrides in errors (e.g. ``"hardware_set (profile h100-pcie)"``)."""
    if not overrides:
        return model
    data = model.model_dump(mode="json")
    for path, value in overrides.items():
        _assign(data, path, value, source)
    try:
        return type(model).model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "extra_forbidden":  # a path past the profile's fields
            where = ".".join(str(p) for p in first["loc"])
            raise SpecmdError(
                f"{source}: {where}: expected a field of the profile (docs/hardware.md, "
                f"docs/runtimes.md), got {str(first['loc'][-1])!r}"
            ) from None
        raise from_validation_error(source, exc) from None


def _assign(data: dict[str, Any], path: str, raw: Any, source: str) -> None:
    parts = path.split(".")
    if not all(p.strip() for p in parts):
        raise SpecmdError(
            f"{source}: expected a dotted path such as links.pcie0.bandwidth_bytes_per_s, "
            f"got {short_repr(path)}"
        )
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        node = _child(node, part, ".".join(parts[: i + 1]), source)
    leaf = parts[-1]
    if isinstance(node, list):
        raise SpecmdError(f"{source}: {path}: expected a field name after a list item's id")
    if not isinstance(node, dict):
        raise SpecmdError(f"{source}: {path}: expected a section, got a value")
    label = f"override {path}={raw}"
    if leaf in PROVENANCE and "value" in node:  # '<field>.value', '.source', '.grade'
        if leaf == "value":
            node["value"] = _value(raw, parts[-2] if len(parts) > 1 else leaf, path, source)
            node["source"], node["grade"] = label, "D"
        else:
            node[leaf] = raw
        return
    value = _value(raw, leaf, path, source)
    current = node.get(leaf)
    if current is None or (isinstance(current, dict) and "value" in current):
        node[leaf] = {"value": value, "source": label, "grade": "D"}
    else:
        node[leaf] = value


def _child(node: Any, part: str, where: str, source: str) -> Any:
    if isinstance(node, list):
        ids = [item.get("id") for item in node if isinstance(item, dict)]
        if part in ids:
            return node[ids.index(part)]
        if part.isdigit() and int(part) < len(node):
            return node[int(part)]
        raise SpecmdError(
            f"{source}: {where}: expected an item id among {', '.join(map(str, ids))} or an "
            f"index below {len(node)}, got {part!r}"
        )
    if not isinstance(node, dict):
        raise SpecmdError(f"{source}: {where}: expected a section, got a value")
    child = node.get(part)
    if child is None:  # an optional section the profile leaves out
        child = node[part] = {}
    return child


def _value(raw: Any, field: str, path: str, source: str) -> Any:
    try:
        return parse_quantity(raw, field)
    except ValueError as exc:  # 'field: expected ..., got ...'
        raise SpecmdError(f"{source}: {path}: {str(exc).split(': ', 1)[-1]}") from None
