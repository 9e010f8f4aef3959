"""``specmd trace``: generate and inspect routing traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specmd_sim.cli.app import trace_app
from specmd_sim.cli.common import JsonOpt, PluginOpt, SetOpt, console
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

    from specmd_sim.atomic import check_output
    from specmd_sim.config import apply_overrides
    from specmd_sim.errors import from_validation_error
    from specmd_sim.traces import PRESETS, SyntheticParams, generate_trace, save_trace

    check_output(out, "--out", folder=False)  # before generating
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
    predictor: Annotated[
        str | None,
        typer.Option(
            help="Also measure this predictor on the trace (trace, transition, popularity, "
            "activation-matrix, noisy-oracle): top-k recall and precision per lookahead, "
            "calibration; --set predictor.fit_on=... and workload.* apply."
        ),
    ] = None,
    lookahead: Annotated[int, typer.Option(help="Deepest lookahead measured.")] = 2,
    set_: SetOpt = None,
    plugin: PluginOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Shape, requests and routing statistics of a trace, and how good a predictor is on it."""
    import numpy as np

    from specmd_sim.policies.registry import load_plugins
    from specmd_sim.traces import load_trace
    from specmd_sim.traces.stats import popularity_skew, repeat_share

    load_plugins(plugin or (), "--plugin")
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
    rows = None if predictor is None else _predictor_rows(trace, predictor, lookahead, set_)
    if json_:
        if rows is not None:
            info["predictor"] = {"kind": predictor, "quality": rows}
        typer.echo(json.dumps(info, indent=2))
        return
    table = Table("field", "value", title=str(trace))
    for key, value in info.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console().print(table)
    if rows:
        quality = Table(*rows[0], title=f"predictor {predictor}: top-{t.top_k} against the truth")
        for row in rows:
            quality.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
        console().print(quality)


def _predictor_rows(
    trace: str, kind: str, lookahead: int, assignments: list[str] | None
) -> list[dict[str, float | int | str]]:
    from specmd_sim.config import apply_overrides, build_config
    from specmd_sim.scenario.quality import predictor_quality

    data = apply_overrides({"trace": trace, "predictor": {"kind": kind}}, assignments or [])
    config = build_config(data, "--predictor and --set")
    return [row.as_dict() for row in predictor_quality(config, lookahead)]


@trace_app.command("import")
def trace_import(
    src: Annotated[Path, typer.Argument(help="File or folder written by the other tool.")],
    format_: Annotated[
        str,
        typer.Option(
            "--format",
            help="Source format: vllm, sglang, speculative-moe, vllm-moe-logger or long "
            "(docs/trace-format.md).",
        ),
    ],
    model: Annotated[str, typer.Option(help="Catalog model id (or model file) it was run on.")],
    out: Annotated[Path, typer.Option(help="Output .npz path.")],
    num_experts: Annotated[
        int | None, typer.Option(help="Experts per layer (default: the model's).")
    ] = None,
    num_layers: Annotated[
        int | None,
        typer.Option(help="Layers: the shape of sglang payloads; the trace's layers otherwise."),
    ] = None,
    top_k: Annotated[int | None, typer.Option(help="Experts per token and layer.")] = None,
    prefill_tokens: Annotated[
        int | None,
        typer.Option(help="Rows of each request that are prefill, where the input does not say."),
    ] = None,
    only_logged_layers: Annotated[
        bool,
        typer.Option(
            "--only-logged-layers", help="Keep only the layers that have records (meta maps them)."
        ),
    ] = False,
) -> None:
    """Import routing recorded by another tool (vLLM, SGLang, ...) as a trace."""
    from specmd_sim.atomic import check_output
    from specmd_sim.traces import save_trace
    from specmd_sim.traces.importers import import_trace

    check_output(out, "--out", folder=False)  # before importing
    result = import_trace(
        src,
        format_,
        model=model,
        num_experts=num_experts,
        num_layers=num_layers,
        top_k=top_k,
        prefill_tokens=prefill_tokens,
        only_logged_layers=only_logged_layers,
        read_table=read_table_columns,
    )
    trace = result.trace
    save_trace(trace, out)
    typer.echo(
        f"wrote {out}: {trace.num_tokens} tokens x {trace.num_layers} layers x top-{trace.top_k} "
        f"of {trace.num_experts} experts ({trace.model}), {len(set(trace.request.tolist()))} "
        f"requests from {format_} {src}"
    )
    for line in result.report:
        typer.echo(f"  {line}")


def read_table_columns(path: Path) -> dict[str, object]:
    """A Parquet (or other pyarrow-readable) table as columns, for the ``long`` importer."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
