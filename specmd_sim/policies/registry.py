"""Plug-in registries: one per family (eviction, prefetch, predictor).

Families: eviction, prefetch, predictor and miss (what to do when a demanded expert is not
resident). A plug-in is one module in its family's package that defines a class with

- ``kind``: the registered name, equal to the ``kind`` of its config (``"lru"``);
- ``Config``: a frozen pydantic model deriving from :class:`PluginConfig` with
  ``kind: Literal["lru"] = "lru"`` and the plug-in's parameters;
- ``description`` and ``source``: one line each, shown by ``specmd policies list``;

and registers it with ``@EVICTION.register`` (or ``PREFETCH``, ``PREDICTORS``). Modules of a
family package are imported on first use, so adding a plug-in is adding one module.

A plug-in outside the package is named in a config by its import path, ``kind:
"my_module:MyEviction"``: :meth:`Registry.get` imports the module (whose decorator registers the
class) and registers the class again under that path, so the resolved config names it in a way
any process (a sweep worker, a CI job) can resolve.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from specmd_sim.errors import SpecmdError, from_validation_error


class PluginConfig(BaseModel):
    """Base of every plug-in config: ``kind`` selects the plug-in."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str


class Plugin:
    """What every registered class provides (see module docstring)."""

    kind: ClassVar[str]
    Config: ClassVar[type[PluginConfig]]
    description: ClassVar[str]
    source: ClassVar[str]


T = TypeVar("T", bound=type[Plugin])


class Registry(Generic[T]):
    def __init__(self, family: str, package: str) -> None:
        self.family = family
        self.package = package
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, cls: T) -> T:
        kind = cls.kind
        if kind in self._entries and self._entries[kind] is not cls:
            raise ValueError(f"{self.family} kind {kind!r} is registered twice")
        default_kind = cls.Config.model_fields["kind"].default
        if default_kind != kind:
            raise ValueError(
                f"{cls.__name__}.Config.kind defaults to {default_kind!r}, not {kind!r}"
            )
        self._entries[kind] = cls
        return cls

    def _load(self) -> None:
        if self._loaded:
            return
        package = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")
        self._loaded = True

    def kinds(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def get(self, kind: str) -> T:
        self._load()
        if kind not in self._entries and ":" in kind:
            self.register(self._import(kind))
        if kind not in self._entries:
            raise SpecmdError(
                f"{self.family}.kind: expected one of {', '.join(self.kinds())}, got {kind!r}"
            )
        return self._entries[kind]

    def _import(self, path: str) -> T:
        """The plug-in class named ``module:Class``, as a subclass whose kind is ``path``.

        The class must be registered in this family (its module's ``@register`` decorator ran
        on import); the subclass only renames it, its Config accepting ``kind: path``.
        """
        module_name, _, name = path.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise SpecmdError(
                f"{self.family}.kind: expected an importable 'module:Class', got {path!r} ({exc})"
            ) from None
        if not isinstance(cls, type) or self._entries.get(getattr(cls, "kind", None)) is not cls:
            raise SpecmdError(
                f"{self.family}.kind: expected a class registered in the {self.family} "
                f"registry, got {path!r}"
            )
        config = create_model(
            cls.Config.__name__,
            __base__=cls.Config,
            __module__=cls.__module__,
            kind=(Literal[path], path),  # type: ignore[valid-type]
        )
        attrs = {"kind": path, "Config": config, "__module__": cls.__module__}
        return type(cls.__name__, (cls,), attrs)  # type: ignore[return-value]

    def entries(self) -> list[T]:
        return [self.get(kind) for kind in self.kinds()]

    def parse_config(self, data: Any) -> PluginConfig:
        """Turn ``{"kind": ..., **params}`` (or a bare kind string) into the plug-in's Config."""
        if isinstance(data, PluginConfig):
            data = data.model_dump()
        if isinstance(data, str):
            data = {"kind": data}
        if not isinstance(data, dict) or "kind" not in data:
            raise ValueError(f"expected a mapping with a 'kind' or a kind name, got {data!r}")
        cls = self.get(str(data["kind"]))
        try:
            return cls.Config.model_validate(data)
        except ValidationError as exc:
            raise SpecmdError(str(from_validation_error(self.family, exc))) from None


EVICTION: Registry[Any] = Registry("eviction", "specmd_sim.policies.eviction")
PREFETCH: Registry[Any] = Registry("prefetch", "specmd_sim.policies.prefetch")
PREDICTORS: Registry[Any] = Registry("predictor", "specmd_sim.policies.predictors")
MISS: Registry[Any] = Registry("miss", "specmd_sim.policies.miss")
