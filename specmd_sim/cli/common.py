"""Options and helpers shared by the commands."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from specmd_sim.errors import SpecmdError, short_repr

if TYPE_CHECKING:
    from specmd_sim.config import SimConfig

# --- shared run options --------------------------------------------------------------------

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="YAML config file (fields of SimConfig).")
]
ModelOpt = Annotated[str | None, typer.Option(help="Catalog model id (default: the trace's).")]
HardwareOpt = Annotated[str | None, typer.Option(help="Hardware profile id or YAML path.")]
RuntimeOpt = Annotated[
    str | None,
    typer.Option(help="Runtime profile (software stack) id or YAML path; `specmd runtimes list`."),
]
TraceOpt = Annotated[str | None, typer.Option(help="Trace .npz path or bundled trace name.")]
CacheOpt = Annotated[
    str | None,
    typer.Option(
        help="Cache capacity: '5%', expert slots (51), bytes ('0.6GiB') or 'auto' (what the GPU "
        "memory budget leaves)."
    ),
]
EvictionOpt = Annotated[str | None, typer.Option(help="Eviction policy kind.")]
PrefetchOpt = Annotated[str | None, typer.Option(help="Prefetch policy kind.")]
SeedOpt = Annotated[int | None, typer.Option(help="Seed of the run's random generator.")]
OutOpt = Annotated[
    Path | None, typer.Option(help="Run folder (default: runs/<engine>-<config hash>).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override any config field: KEY.PATH=VALUE (repeatable)."),
]
PluginOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--plugin",
        help="Import this module of your own plug-ins first, so that configs may name them by "
        "import path (module:Class); repeatable. Nothing a config names is imported otherwise.",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the metrics as one JSON object on stdout.")
]


def load_config(
    config: Path | None,
    model: str | None,
    hardware: str | None,
    trace: str | None,
    cache: str | None,
    eviction: str | None,
    prefetch: str | None,
    seed: int | None,
    overrides: list[str] | None,
    runtime: str | None = None,
    plugins: list[str] | None = None,
) -> SimConfig:
    """The config of the run options: ``--config``, the flags, then the ``--set`` overrides,
    after importing the ``--plugin`` modules."""
    # the config (numpy, pydantic, the registry) loads here, not with the CLI: `--help` and the
    # commands that need no config do without it
    from specmd_sim.config import apply_overrides, build_config, config_to_dict
    from specmd_sim.policies.registry import load_plugins

    load_plugins(plugins or (), "--plugin")
    data: dict[str, Any] = {}
    if config is not None:
        from specmd_sim.hardware.loader import load_yaml

        loaded = load_yaml(config, "config")
        if loaded is not None and not isinstance(loaded, dict):
            raise SpecmdError(f"config {config}: expected a mapping, got {type(loaded).__name__}")
        data = loaded or {}
    flags = {"model": model, "hardware": hardware, "runtime": runtime, "trace": trace, "seed": seed}
    data.update({k: v for k, v in flags.items() if v is not None})
    source = str(config) if config else "config"
    if cache is not None:
        section = data.get("cache", {})
        if not isinstance(section, dict):  # null too: without --cache it is refused as well
            raise SpecmdError(
                f"{source}: cache: expected a section (a mapping) to set --cache in, got "
                f"{short_repr(section)}"
            )
        data["cache"] = {**section, "capacity": cache}
    if eviction is not None:
        data["eviction"] = {"kind": eviction}
    if prefetch is not None:
        data["prefetch"] = {"kind": prefetch}
    if overrides:  # on top of the full config, defaults included, so any field can be set
        data = apply_overrides(config_to_dict(build_config(data, source)), overrides)
    return build_config(data, source)


def print_quantities(
    title: str, quantities: list[Any], extra: Sequence[tuple[str, Any]] = ()
) -> None:
    """A profile's numbers (``(name, Quantity)``; ``extra``: settings with value, source and
    grade) as one table, then their lowest grade."""
    from rich.table import Table

    from specmd_sim.hardware import lowest_grade

    table = Table("field", "value", "grade", "source", title=title)
    for name, q in quantities:
        table.add_row(name, f"{q.value:.4g}", q.grade, q.source)
    for name, setting in extra:
        table.add_row(name, str(setting.value), setting.grade, setting.source)
    out = console()
    out.print(table)
    out.print(f"lowest grade: {lowest_grade([q for _, q in quantities])}")


def console(json_mode: bool = False) -> Console:
    """Where human output goes: stderr in --json mode; wide tables when not on a terminal."""
    stream = sys.stderr if json_mode else sys.stdout
    return Console(stderr=json_mode, highlight=False, width=None if stream.isatty() else 160)
