"""Plug-in registries: one per family.

Families: eviction, prefetch, predictor and miss (what to do when a demanded expert is not
resident). A plug-in is one module in its family's package that defines a class deriving from
its family's base parametrised by its config (:mod:`specmd_sim.policies.plugin`):

- its ``Config``: a frozen pydantic model deriving from :class:`PluginConfig` with
  ``kind: Literal["lru"] = "lru"`` and the plug-in's parameters; that default is the plug-in's
  registered ``kind``;
- ``description`` and ``source``: one line each, shown by ``specmd policies list``;

and registers it with ``@EVICTION.register`` (or ``PREFETCH``, ``PREDICTORS``, ``MISS``)::

    class LRUConfig(PluginConfig):
        kind: Literal["lru"] = "lru"

    @EVICTION.register
    class LRUEviction(EvictionPolicy[LRUConfig]):
        description = "Least recently used expert first."
        source = "classic"

Modules of a family package are imported on first use, so adding a plug-in is adding one
module. A kind is looked up in the module its name gives (``least-stale`` in
``least_stale.py``) before the whole package is imported, so a run imports the plug-ins it uses,
not the zoo; a module named otherwise is still found, by the import of the whole package.

A plug-in outside the package is named in a config by its import path, ``kind:
"my_module:MyEviction"``: :meth:`Registry.get` finds the class in the module (whose decorator
registered it) and registers it again under that path, so the resolved config names it in a way
any process (a sweep worker, a CI job) can resolve.

Trust: reading a config never imports code. The module of an import path must already be
loaded, by the user's own program or by :func:`load_plugins` (``--plugin MODULE`` on the
command line, ``plugins=[...]`` in the API); a config, a sweep spec or someone else's
``result.json`` that names a module nobody loaded is refused (docs/design.md, "Trust").
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

from pydantic import ValidationError, create_model

from specmd_sim.errors import SpecmdError, from_validation_error, short_repr
from specmd_sim.policies.context import RunViews
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.miss.base import MissHandler
from specmd_sim.policies.plugin import Plugin, PluginConfig, built_in, plugin_name
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.prefetch.base import PrefetchPolicy

__all__ = [
    "EVICTION",
    "MISS",
    "PREDICTORS",
    "PREFETCH",
    "Plugin",
    "PluginConfig",
    "Registry",
    "UnloadedPlugin",
    "load_plugins",
]

P = TypeVar("P", bound=Plugin[Any])  # the family's base
K = TypeVar("K", bound=type[Plugin[Any]])  # a class being registered


class Registry(Generic[P]):
    def __init__(self, family: str, package: str, base: type[P]) -> None:
        self.family = family
        self.package = package
        self.base = base
        self._entries: dict[str, type[P]] = {}
        self._loaded = False

    def register(self, cls: K) -> K:
        plugin = cls
        if not issubclass(plugin, self.base):
            raise TypeError(
                f"{self.family}: expected a subclass of {self.base.__name__}, got {cls.__name__}"
            )
        if not plugin.__module__.startswith(f"{self.package}."):
            self._load()  # the built-in kinds first, so that a plug-in cannot shadow one
        kind = plugin.kind
        if kind in self._entries and self._entries[kind] is not plugin:
            raise ValueError(f"{self.family} kind {kind!r} is registered twice")
        default_kind = plugin.Config.model_fields["kind"].default
        if default_kind != kind:
            raise ValueError(
                f"{plugin.__name__}.Config.kind defaults to {default_kind!r}, not {kind!r}"
            )
        missing = [" or ".join(names) for names in self.base.required
                   if all(getattr(plugin, n) is getattr(self.base, n) for n in names)]  # fmt: skip
        if missing:
            raise TypeError(
                f"{self.family} {plugin_name(plugin)}: expected it to define "
                f"{', '.join(missing)} ({self.base.__name__}'s own only raise)"
            )
        self._entries[kind] = plugin
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

    def _load_module_of(self, kind: str) -> None:
        """Import the family's module named after ``kind``, if there is one."""
        name = kind.replace("-", "_")
        if self._loaded or not name.isidentifier() or name.startswith("_"):
            return
        module = f"{self.package}.{name}"
        if module not in sys.modules and importlib.util.find_spec(module) is not None:
            importlib.import_module(module)

    def get(self, kind: str) -> type[P]:
        if kind not in self._entries:
            self._load_module_of(kind)
        if kind not in self._entries:
            self._load()
        if kind not in self._entries and ":" in kind:
            self.register(self._resolve(kind))
        if kind not in self._entries:
            raise SpecmdError(
                f"{self.family}.kind: expected one of {', '.join(self.kinds())}, got {kind!r}"
            )
        return self._entries[kind]

    def _resolve(self, path: str) -> type[P]:
        """The plug-in class named ``module:Class``, as a subclass whose kind is ``path``.

        The module must be loaded (nothing is imported here: see "Trust" above) and the class
        registered in this family (its module's ``@register`` decorator ran on import); the
        subclass only renames it, its Config accepting ``kind: path``.
        """
        module_name, _, name = path.partition(":")
        if not _MODULE.fullmatch(module_name) or not name.isidentifier():
            raise SpecmdError(f"{self.family}.kind: expected 'module:Class', got {path!r}")
        module = sys.modules.get(module_name)
        if module is None:
            raise UnloadedPlugin(
                f"{self.family}.kind: expected a plug-in of a loaded module (plug-in code is "
                f"imported only on request: --plugin {module_name}, or plugins="
                f"[{module_name!r}] in the API), got {path!r}"
            )
        cls = getattr(module, name, None)
        kind = getattr(cls, "kind", None)
        registered = self._entries.get(kind) if isinstance(kind, str) else None
        if registered is None or registered is not cls:
            raise SpecmdError(
                f"{self.family}.kind: expected a class registered in the {self.family} "
                f"registry, got {path!r}"
            )
        kind_type: Any = Literal[path]  # a Literal of a runtime value, for pydantic
        config = create_model(
            registered.Config.__name__,
            __base__=registered.Config,
            __module__=registered.__module__,
            kind=(kind_type, path),
        )
        attrs = {"Config": config, "__module__": registered.__module__}  # kind: from Config
        return cast("type[P]", type(registered.__name__, (registered,), attrs))

    def make(self, config: PluginConfig, views: RunViews) -> P:
        """The plug-in ``config`` selects, given the run's offline view if it declares
        ``offline``, else the online view."""
        cls = self.get(config.kind)
        return cls(config, views.view(cls.offline))

    def entries(self) -> list[type[P]]:
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
            first = exc.errors(include_url=False)[0]
            if first["type"] == "extra_forbidden":  # another kind's parameter, most likely
                name = ".".join(str(p) for p in first["loc"])
                fields = ", ".join(f for f in cls.Config.model_fields if f != "kind") or "none"
                raise SpecmdError(
                    f"{self.family}: {name}: expected a parameter of {self.family} "
                    f"{data['kind']!r} ({fields}), got {short_repr(first.get('input'))}; "
                    f"another kind's parameter needs that kind too ({self.family}.kind=...)"
                ) from None
            raise SpecmdError(str(from_validation_error(self.family, exc))) from None


class UnloadedPlugin(SpecmdError):
    """A kind names a plug-in by import path whose module nobody loaded (it is not imported)."""


_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def plugin_origin(exc: BaseException) -> str | None:
    """Where the user's plug-in code is on the traceback of ``exc`` (raised there, or in what
    it called): ``module (file:line, in function)`` of the deepest frame of a module that
    registered a plug-in outside the package; None where none is (a fault of the simulator's
    own is shown with its traceback)."""
    modules = {c.__module__ for registry in SECTIONS.values() for c in registry._entries.values()
               if not built_in(c)}  # fmt: skip
    found, tb = None, exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") in modules:
            code = frame.f_code
            where = f"{Path(code.co_filename).name}:{tb.tb_lineno}, in {code.co_name}"
            found = f"{frame.f_globals['__name__']} ({where})"
        tb = tb.tb_next
    return found


def load_plugins(modules: Iterable[str], source: str = "plugins") -> None:
    """Import the user's plug-in modules, whose decorators register their classes: the one way
    specmd-sim runs code named by the user (``--plugin MODULE``, ``plugins=[...]``); ``source``
    names the input in errors."""
    for module in modules:
        if not _MODULE.fullmatch(module):
            raise SpecmdError(f"{source}: expected a module name (a.b.c), got {module!r}")
        try:
            importlib.import_module(module)
        except Exception as exc:  # the user's code: any failure of its import is one line
            raise SpecmdError(
                f"{source}: expected an importable module, got {module!r} "
                f"({type(exc).__name__}: {exc})"
            ) from None


EVICTION: Registry[EvictionPolicy[Any]] = Registry(
    "eviction", "specmd_sim.policies.eviction", EvictionPolicy
)
PREFETCH: Registry[PrefetchPolicy[Any]] = Registry(
    "prefetch", "specmd_sim.policies.prefetch", PrefetchPolicy
)
PREDICTORS: Registry[Predictor[Any]] = Registry(
    "predictor", "specmd_sim.policies.predictors", Predictor
)
MISS: Registry[MissHandler[Any]] = Registry("miss", "specmd_sim.policies.miss", MissHandler)
SECTIONS: dict[str, Registry[Any]] = {
    "eviction": EVICTION, "prefetch": PREFETCH, "predictor": PREDICTORS, "miss": MISS,
}  # fmt: skip
"""The config section each registry's plug-ins are named in."""


def is_offline(section: str, kind: str) -> bool:
    """Whether the plug-in ``kind`` of config section ``section`` is given the run's future (a
    bound or an oracle, which no real system has); False for a kind this process cannot load
    (a plug-in module not imported)."""
    registry = SECTIONS.get(section)
    if registry is None:
        return False
    try:
        return bool(registry.get(kind).offline)
    except SpecmdError:
        return False


def plugin_label(section: str, kind: str) -> str:
    """A plug-in's kind as every page names it, marked where it is offline: ``belady
    (offline)``."""
    return f"{kind} (offline)" if is_offline(section, kind) else kind
