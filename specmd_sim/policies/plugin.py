"""The base of every plug-in: its config, its registered name, and what it is given.

A plug-in class derives from its family's base parametrised by its config,
``class LRUEviction(EvictionPolicy[LRUConfig])``: the type parameter is its ``Config`` (and the
type of ``self.config``), and its ``kind`` is the default of the config's ``kind`` field, so the
name is written once, in ``kind: Literal["lru"] = "lru"``. A subclass of a concrete plug-in (LRU
of FIFO) names its own config with ``Config = LRUConfig``.

A plug-in gets the run's online view (:class:`~specmd_sim.policies.context.RunContext`) as
``self.ctx``. One that needs the future (a bound, an oracle, a profile of the run's own trace)
declares ``offline = True``: it is then given an
:class:`~specmd_sim.policies.context.OfflineContext` (its ``__init__`` takes one and keeps what
it needs of ``ctx.demand``), and the documentation marks it offline. One that reads only the
pass running (an oracle of the next layers) also declares ``offline_within_pass = True``: it
runs under an online schedule too, whose passes are formed as the run reaches them.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Generic, TypeVar, cast

from specmd_sim.policies.context import OfflineContext, RunContext
from specmd_sim.schema_base import InputModel


class PluginConfig(InputModel):
    """Base of every plug-in config: ``kind`` selects the plug-in."""

    kind: str


C = TypeVar("C", bound=PluginConfig)


class Plugin(Generic[C]):
    """What every registered class provides: ``Config`` and ``kind`` (from the type parameter,
    see the module docstring), and one line each of ``description`` and ``source``, shown by
    ``specmd policies list``."""

    kind: ClassVar[str]
    Config: ClassVar[type[PluginConfig]]
    description: ClassVar[str]
    source: ClassVar[str]
    offline: ClassVar[bool] = False  # True: given an OfflineContext (the run's future)
    # True: an offline plug-in that reads only the pass running (the layers ahead of it), so
    # it also runs where passes are formed during the run (workload.schedule: online)
    offline_within_pass: ClassVar[bool] = False
    # the methods a plug-in of this family defines (each a tuple of alternatives: one of them),
    # checked when it is registered (the base's own raise NotImplementedError)
    required: ClassVar[tuple[tuple[str, ...], ...]] = ()

    config: C
    ctx: RunContext

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        if not isinstance(config, self.Config):
            raise TypeError(
                f"{type(self).__name__}: expected a {self.Config.__name__}, "
                f"got {type(config).__name__}"
            )
        if self.offline and not isinstance(ctx, OfflineContext):
            raise TypeError(
                f"{type(self).__name__} is offline: expected an OfflineContext, "
                f"got {type(ctx).__name__}"
            )
        self.config = cast(C, config)  # the isinstance check above: Config is C
        self.ctx = ctx

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" not in cls.__dict__:
            config = _config_parameter(cls)
            if config is None:
                return  # an abstract base, or a subclass inheriting its parent's config
            cls.Config = config
        kind = cls.Config.model_fields["kind"].default
        if "kind" not in cls.__dict__ and isinstance(kind, str):
            cls.kind = kind  # an explicit kind is checked against the config's on registration


def _config_parameter(cls: type) -> type[PluginConfig] | None:
    """The config class ``cls`` was parametrised with (``Base[XConfig]``), if any."""
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin = typing.get_origin(base)
        args = typing.get_args(base)
        if isinstance(origin, type) and issubclass(origin, Plugin) and args:
            arg = args[0]
            if isinstance(arg, type) and issubclass(arg, PluginConfig):
                return arg
    return None


def built_in(cls: type) -> bool:
    """Whether ``cls`` is one of the package's own plug-ins (not a user's)."""
    return cls.__module__.startswith("specmd_sim.policies.")


def plugin_name(cls: type) -> str:
    """``module:Class``, as errors name a plug-in (a user's, most often)."""
    return f"{cls.__module__}:{cls.__qualname__}"
