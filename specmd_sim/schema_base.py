"""The base of every input schema: configs, hardware and runtime profiles, model specs,
synthetic-trace parameters, plug-in configs and sweep specs.

An :class:`InputModel` is frozen, refuses unknown fields and non-finite floats, and keeps its
scalars strict where pydantic's lax mode guesses: YAML ``true`` is a boolean, never the number
1, so a number field (``int``, ``float``, an integer ``Literal``) refuses booleans, and a
boolean field takes only ``true`` or ``false`` (not ``1``, ``0``, ``"yes"`` or ``"on"``).
Everything else stays lax: an integer fills a float field, and a string in number notation
fills a number field, since PyYAML (YAML 1.1) reads ``1e-3`` (no dot) as a string and every
input, ``--set`` values included, is YAML.

The checks are added to the model's core schema, so they hold wherever a field's type appears:
alone, optional, in a union, or as the items of a list, tuple or mapping. A nested model is
checked by its own schema (a class of another base keeps that base's rules).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import core_schema

from specmd_sim.errors import short_repr


def _number(expected: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool | np.bool_):
            raise ValueError(f"expected {expected}, got {short_repr(value)}")
        return value

    return check


def _boolean(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {short_repr(value)}")
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "int": _number("an integer"),
    "float": _number("a number"),
    "bool": _boolean,
}
_SUBSCHEMAS = (
    "schema", "items_schema", "keys_schema", "values_schema", "extras_schema", "choices",
    "fields", "steps", "lax_schema", "strict_schema", "json_schema", "python_schema",
    "definitions",
)  # fmt: skip


def _strict_scalars(schema: Any, owner: type) -> Any:
    """``schema`` (of the model ``owner``) with every int, float and bool schema, and every
    integer literal, behind its check; other models nested in it are left as they are."""
    if isinstance(schema, list | tuple):
        return type(schema)(_strict_scalars(s, owner) for s in schema)
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind == "model" and schema["cls"] is not owner:
        return schema
    if kind in _CHECKS:
        return core_schema.no_info_before_validator_function(_CHECKS[kind], schema)
    if kind == "literal" and _integer_literal(schema["expected"]):
        expected = " or ".join(map(repr, schema["expected"]))
        return core_schema.no_info_before_validator_function(_number(expected), schema)
    if kind is None:  # a mapping of names to schemas: model fields, tagged-union choices
        return {name: _strict_scalars(s, owner) for name, s in schema.items()}
    return {
        key: _strict_scalars(value, owner) if key in _SUBSCHEMAS else value
        for key, value in schema.items()
    }


def _integer_literal(expected: list[Any]) -> bool:
    kinds = {type(e) for e in expected}
    return int in kinds and bool not in kinds


class InputModel(BaseModel):
    """Frozen, no unknown fields, finite floats, strict booleans (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _strict_scalars(handler(source), cls)
