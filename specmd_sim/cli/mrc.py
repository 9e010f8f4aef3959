"""``specmd mrc``: the miss-ratio curve of a config over many cache capacities."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from specmd_sim.cli.app import app
from specmd_sim.cli.common import (
    ConfigOpt,
    EvictionOpt,
    HardwareOpt,
    JsonOpt,
    ModelOpt,
    PluginOpt,
    PrefetchOpt,
    RuntimeOpt,
    SeedOpt,
    SetOpt,
    TraceOpt,
    console,
    load_config,
)
from specmd_sim.errors import SpecmdError

DEFAULT_CAPACITIES = "1%,2%,5%,10%,20%,50%"


@app.command("mrc")
def mrc(
    capacities: Annotated[
        str,
        typer.Option(
            help="Comma-separated cache capacities, each as --cache takes it ('5%', 51 slots, "
            "'0.6GiB')."
        ),
    ] = DEFAULT_CAPACITIES,
    belady: Annotated[
        bool, typer.Option("--belady", help="Also the offline optimum at each capacity.")
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write the curve's page (HTML) to this file.")
    ] = None,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hardware: HardwareOpt = None,
    runtime: RuntimeOpt = None,
    trace: TraceOpt = None,
    eviction: EvictionOpt = None,
    prefetch: PrefetchOpt = None,
    seed: SeedOpt = None,
    set_: SetOpt = None,
    plugin: PluginOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Hit rate, miss taxonomy and byte-miss ratio over many capacities: exact in one pass for
    classic LRU (eviction lru, cache.pin_demand_set=false, no prefetch), one replay per
    capacity otherwise."""
    from rich.table import Table

    from specmd_sim.atomic import check_output
    from specmd_sim.engine.mrc import miss_ratio_curve, stack_method_applies

    if out is not None:
        check_output(out, "--out", folder=False)
    sizes = [_capacity(c) for c in capacities.split(",")]
    cfg = load_config(
        config, model, hardware, trace, None, eviction, prefetch, seed, set_, runtime, plugin
    )
    curve = miss_ratio_curve(cfg, sizes, belady=belady)
    rows = curve.rows()
    if out is not None:
        from specmd_sim.report.mrc import write_mrc_page

        write_mrc_page(curve, out, f"Miss-ratio curve: {cfg.eviction.kind} on {cfg.trace}")
    if json_:
        typer.echo(json.dumps({"method": curve.method, "rows": rows}, indent=2))
        return
    why = stack_method_applies(cfg)
    method = "exact, one pass" if why is None else f"one replay per capacity ({why})"
    table = Table(*rows[0], title=f"{cfg.eviction.kind} on {cfg.trace}: {method}")
    for row in rows:
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else f"{v}" for v in row.values()))
    console().print(table)
    if out is not None:
        typer.echo(f"page: {out}")


def _capacity(text: str) -> str | int:
    """A capacity as the config takes it: an integer is a number of slots."""
    from specmd_sim.config import capacity_spec

    text = text.strip()
    if not text:
        raise SpecmdError("--capacities: expected comma-separated capacities, got an empty one")
    try:
        capacity_spec(text)
    except ValueError as exc:
        raise SpecmdError(f"--capacities: {exc}") from None
    return int(text) if text.isdigit() else text
