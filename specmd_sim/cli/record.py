"""``specmd trace record``: a Hugging Face MoE model's routing into a v1 trace (the ``record``
extra: torch and transformers)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specmd_sim.cli.app import trace_app


def model_file_of(trace_path: Path) -> Path:
    """Where the recorder writes the model spec of ``trace_path``: ``NAME.model.yaml``."""
    return trace_path.with_name(trace_path.name.removesuffix(".npz") + ".model.yaml")


def default_model_id(ref: str) -> str:
    """A model id from a folder, ``config.json`` path or hub id: its last name, as a slug."""
    from specmd_sim.models.hf_config import slug

    path = Path(ref)
    return slug(path.parent.name if path.name == "config.json" else path.name)


@trace_app.command("record")
def trace_record(
    model: Annotated[
        str, typer.Option(help="Model folder or hub id; with --random-weights a config.json.")
    ],
    out: Annotated[Path, typer.Option(help="Output .npz path (the model spec goes beside it).")],
    prompts: Annotated[
        Path | None,
        typer.Option(
            help="Prompt file: .jsonl (prompt/text) or text, one per line; default "
            "the bundled eight."
        ),
    ] = None,
    random_weights: Annotated[
        bool, typer.Option(help="Random weights from the config (no download; byte tokens).")
    ] = False,
    max_new_tokens: Annotated[int, typer.Option(help="Greedy decode steps per prompt.")] = 32,
    lookahead: Annotated[
        int, typer.Option(help="Pre-gated prediction depth D for pred_scores (0 = none).")
    ] = 1,
    dtype: Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16.")] = "auto",
    model_id: Annotated[
        str | None, typer.Option(help="Id of the model spec (default: from --model).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of random weights.")] = 0,
) -> None:
    """Run a model on prompts and write its routing, gates and pre-gated predictions."""
    import yaml

    from specmd_sim.atomic import check_output, write_text
    from specmd_sim.errors import SpecmdError
    from specmd_sim.models.hf_config import spec_from_hf_config
    from specmd_sim.record import bundled_prompts, read_prompts, record_trace
    from specmd_sim.record.model import load_hf_model
    from specmd_sim.traces import save_trace

    for name, value in (("--max-new-tokens", max_new_tokens), ("--lookahead", lookahead)):
        if value < 0:  # checked again against the model once it is loaded
            raise SpecmdError(f"{name}: expected >= 0, got {value}")
    spec_path = model_file_of(out)
    for path in (out, spec_path):  # before the model is loaded (and torch imported)
        check_output(path, "--out", folder=False)
    texts = bundled_prompts() if prompts is None else read_prompts(prompts)
    loaded = load_hf_model(model, random_weights=random_weights, dtype=dtype, seed=seed)
    spec = spec_from_hf_config(
        loaded.model.config.to_dict(), model_id=model_id or default_model_id(model), source=model
    )

    def progress(done: int, total: int) -> None:
        typer.echo(f"recorded request {done}/{total}", err=True)

    recording = record_trace(
        loaded, texts, spec, max_new_tokens=max_new_tokens, lookahead=lookahead,
        progress=progress,
    )  # fmt: skip
    trace = recording.trace
    save_trace(trace, out)
    write_text(spec_path, yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False), "--out")
    requests = f"{len(texts)} request" + ("s" if len(texts) != 1 else "")
    typer.echo(
        f"wrote {out}: {trace.num_tokens} tokens x {trace.num_layers} MoE layers x "
        f"top-{trace.top_k} of {trace.num_experts} experts, {requests}, "
        f"pred lookahead {trace.lookahead}; model spec {spec_path}"
    )
