"""``specmd hardware``, ``specmd models`` and ``specmd policies``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from specmd_sim.cli.app import hardware_app, models_app, policies_app
from specmd_sim.cli.common import JsonOpt, PluginOpt, console, print_quantities
from specmd_sim.units import GB, format_bytes

if TYPE_CHECKING:
    from specmd_sim.models import ModelSpec

# --- hardware ------------------------------------------------------------------------------


@hardware_app.command("list")
def hardware_list() -> None:
    """List the bundled profiles (HBM in the datasheet's GB and in GiB, the unit of the models
    list and the run summary)."""
    from specmd_sim.hardware import host_path, list_profiles, load_profile
    from specmd_sim.hardware.schema import NVMeNode
    from specmd_sim.runtime.host_rule import single_thread_speed

    table = Table("id", "GPUs", "GPU", "HBM", "HBM bw", "BF16 dense", "host to GPU", "NVMe",
                  "host 1-thread (Zen 2 GHz)")  # fmt: skip
    for pid in list_profiles():
        p = load_profile(pid)
        gpu = p.gpus[0]
        path = host_path(p, gpu.id)
        kinds = "+".join(dict.fromkeys(h.link.kind for h in path.hops))
        drives = [n for n in p.nodes if isinstance(n, NVMeNode)]
        host = p.hosts[0]
        speed = single_thread_speed(host.boost_clock_hz, host.core)
        core = host.core.value if host.core is not None else ""
        table.add_row(
            pid,
            str(len(p.gpus)),
            gpu.name,
            f"{gpu.hbm_bytes.value / GB:.3g} GB ({format_bytes(gpu.hbm_bytes.value)})",
            f"{gpu.hbm_bandwidth_bytes_per_s.value / 1e12:.2f} TB/s",
            f"{gpu.dense_bf16_flops.value / 1e12:.0f} TFLOP/s",
            f"{kinds} {path.bandwidth / 1e9:.0f} GB/s",
            ", ".join(f"{d.read_bandwidth_bytes_per_s.value / 1e9:.1f} GB/s" for d in drives)
            or "-",
            "-" if speed is None else f"{speed.value:.2f} ({core})",
        )
    console().print(table)


@hardware_app.command("show")
def hardware_show(
    profile: Annotated[str, typer.Argument(help="Profile id or YAML path.")],
    json_: JsonOpt = False,
) -> None:
    """Show every number of a profile with its source and grade."""
    from specmd_sim.hardware import load_profile

    p = load_profile(profile)
    if json_:
        typer.echo(json.dumps(p.model_dump(mode="json"), indent=2))
        return
    facts = [(f"nodes.{h.id}.{name}", fact) for h in p.hosts
             for name, fact in (("isa", h.isa), ("core", h.core)) if fact is not None]  # fmt: skip
    print_quantities(f"{p.id}: {p.name}", list(p.quantities()), facts)


@hardware_app.command("validate")
def hardware_validate(file: Annotated[Path, typer.Argument(help="Profile YAML file.")]) -> None:
    """Validate a profile file (exit 2 with a one-line error if invalid)."""
    from specmd_sim.hardware import build_graph, find_path, load_profile

    p = load_profile(file)
    graph = build_graph(p)
    for gpu in p.gpus:
        find_path(p, graph, p.hosts[0].id, gpu.id)
    typer.echo(f"{file}: valid profile {p.id!r} ({len(p.nodes)} nodes, {len(p.links)} links)")
    if p.id != file.stem:
        typer.echo(
            f"note: its id {p.id!r} is not its file's name {file.stem!r}: runs, reports and "
            "sweeps name the machine by its id, so two files of one id read as one machine; "
            f"a profile's id is its file's name (id: {file.stem}) unless it is a copy meant to "
            "read as the original"
        )


# --- models --------------------------------------------------------------------------------


@models_app.command("list")
def models_list(json_: JsonOpt = False) -> None:
    """List the catalog with derived expert sizes."""
    from specmd_sim.models import list_models

    models = list_models()
    if json_:
        typer.echo(json.dumps([m.model_dump() | m.summary() for m in models], indent=2))
        return
    table = Table("id", "layers", "experts", "top-k", "dtype", "expert", "all routed", "5% slots")
    for m in models:
        table.add_row(
            m.id, str(m.moe_layers), str(m.num_experts), str(m.top_k), m.expert_dtype,
            format_bytes(m.expert_bytes), format_bytes(m.routed_bytes),
            str(int(0.05 * m.routed_bytes) // m.expert_bytes),
        )  # fmt: skip
    console().print(table)


@models_app.command("show")
def models_show(
    model_id: Annotated[
        str, typer.Argument(help="Catalog id, model file (.yaml) or config.json (.json).")
    ],
    json_: JsonOpt = False,
) -> None:
    """Show a model's dimensions and derived bytes and FLOPs."""
    from specmd_sim.models import load_model

    _print_model(load_model(model_id), json_)


@models_app.command("import")
def models_import(
    config_json: Annotated[
        Path,
        typer.Argument(
            help="A Hugging Face config.json (families: mixtral, olmoe, qwen2_moe, qwen3_moe, "
            "deepseek_v2, deepseek_v3, gpt_oss)."
        ),
    ],
    id_: Annotated[
        str | None, typer.Option("--id", help="Model id (default: the folder's name).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the spec as a model file (YAML, usable as --model PATH)."),
    ] = None,
    expert_dtype: Annotated[
        str | None,
        typer.Option(help="Routed experts' precision (default: from the config), e.g. int4."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Derive a model spec from a config.json and show it like `models show`."""
    import yaml

    from specmd_sim.atomic import check_output, write_text
    from specmd_sim.models.hf_config import load_hf_config

    if out is not None:
        check_output(out, "--out", folder=False)
    m = load_hf_config(config_json, model_id=id_, expert_dtype=expert_dtype)
    _print_model(m, json_)
    if out is not None:
        header = (
            f"# Model file derived by `specmd models import` from {config_json}.\n"
            "# Fields: see ModelSpec in specmd_sim/models/spec.py; load it as --model PATH.\n"
        )
        body = yaml.safe_dump(m.model_dump(mode="json", exclude_none=True), sort_keys=False)
        write_text(out, header + body, "--out")
        typer.echo(f"wrote {out}", err=json_)


def _print_model(m: ModelSpec, json_: bool) -> None:
    data = m.model_dump() | m.summary()
    if json_:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table("field", "value", title=m.name)
    for key, value in data.items():
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    console().print(table)


# --- policies ------------------------------------------------------------------------------


@policies_app.command("list")
def policies_list(json_: JsonOpt = False, plugin: PluginOpt = None) -> None:
    """Every registered eviction policy, prefetch policy, predictor and miss handler, with
    those of the ``--plugin`` modules (each also named by its import path, module:Class)."""
    from specmd_sim.policies.plugin import built_in, plugin_name
    from specmd_sim.policies.registry import SECTIONS, load_plugins

    load_plugins(plugin or (), "--plugin")
    rows = [
        {"family": reg.family, "kind": cls.kind, "offline": bool(cls.offline),
         "description": cls.description, "source": cls.source,
         **({} if built_in(cls) else {"import_path": plugin_name(cls)})}
        for reg in SECTIONS.values()
        for cls in reg.entries()
    ]  # fmt: skip
    if json_:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("family", "kind", "description", "source")
    for row in rows:
        kind = f"{row['kind']} (offline)" if row["offline"] else str(row["kind"])
        if "import_path" in row:
            kind += f" ({row['import_path']})"
        table.add_row(str(row["family"]), kind, str(row["description"]), str(row["source"]))
    console().print(table)
    console().print("(offline): given the run's future routing — a bound or an oracle, which no "
                    "real system has", highlight=False)  # fmt: skip


@policies_app.command("docs")
def policies_docs() -> None:
    """Print docs/policies.md: every plug-in with its parameters and exact rule."""
    from specmd_sim.policies.docs import render

    typer.echo(render(), nl=False)
