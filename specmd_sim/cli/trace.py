"""``specmd trace``: generate and inspect routing traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specmd_sim.cli.app import trace_app
from specmd_sim.cli.common import JsonOpt, SetOpt, console
from specmd_sim.config import apply_overrides
from specmd_sim.errors import SpecmdError

# --- traces --------------------------------------------------------------------------------


@trace_app.command("generate")
def trace_generate(
    out: Annotated[Path, typer.Option(help="Output .npz path.")],
    preset: Annotated[str, typer.Option(help="Generator preset (olmoe, mixtral, ...).")] = "olmoe",
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    set_: SetOpt = None,
) -> None:
    """Generate a seeded synthetic trace; --set overrides generator knobs (e.g. repeat_prob=0.3)."""
    from pydantic import ValidationError

    from specmd_sim.errors import from_validation_error
    from specmd_sim.traces import PRESETS, SyntheticParams, generate_trace, save_trace

    if preset not in PRESETS:
        raise SpecmdError(f"--preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
    data = apply_overrides(PRESETS[preset].model_dump(), set_ or [])
    try:
        params = SyntheticParams.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error("generator", exc) from None
    trace = generate_trace(params, seed)
    save_trace(trace, out)
    typer.echo(
        f"wrote {out}: {trace.num_tokens} tokens x {trace.num_layers} layers x top-{trace.top_k} "
        f"of {trace.num_experts} experts ({trace.model})"
    )


@trace_app.command("info")
def trace_info(
    trace: Annotated[str, typer.Argument(help="Trace .npz path or bundled name.")],
    json_: JsonOpt = False,
) -> None:
    """Shape, requests and routing statistics of a trace."""
    import numpy as np

    from specmd_sim.traces import load_trace
    from specmd_sim.traces.stats import popularity_skew, repeat_share

    t = load_trace(trace)
    info = {
        "model": t.model,
        "tokens": t.num_tokens,
        "layers": t.num_layers,
        "experts": t.num_experts,
        "top_k": t.top_k,
        "requests": int(np.unique(t.request).size),
        "prefill_tokens": int((t.phase == 0).sum()),
        "decode_tokens": int((t.phase == 1).sum()),
        "has_gates": t.gates is not None,
        "pred_lookahead": t.lookahead,
        "has_arrival_s": t.arrival_s is not None,
        "popularity_skew": popularity_skew(t.experts, t.num_experts),
        "repeat_share": repeat_share(t.experts, t.request),
    }
    if json_:
        typer.echo(json.dumps(info, indent=2))
        return
    table = Table("field", "value", title=str(trace))
    for key, value in info.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console().print(table)
