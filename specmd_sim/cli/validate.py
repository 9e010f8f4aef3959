"""``specmd runtimes ...`` (the software-stack profiles) and ``specmd validate published``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from specmd_sim.cli.app import app, runtimes_app, validate_app
from specmd_sim.cli.common import JsonOpt, console, print_quantities

if TYPE_CHECKING:
    from specmd_sim.hardware.schema import CoreLevel
    from specmd_sim.runtime.schema import Setting

_ = app  # the groups are registered on the app in cli/app.py


@runtimes_app.command("list")
def runtimes_list() -> None:
    """List the bundled runtime profiles."""
    from specmd_sim.runtime import DEFAULT_RUNTIME, list_runtimes, load_runtime

    table = Table("id", "dispatch / kernel", "kernels attn / expert", "copies / expert",
                  "h2d efficiency", "copy stream", "dequant", "memory parity")  # fmt: skip
    for rid in list_runtimes():
        r = load_runtime(rid)
        table.add_row(
            rid + (" (default)" if rid == DEFAULT_RUNTIME else ""),
            f"{r.dispatch_overhead_s.value * 1e6:.1f} µs",
            f"{r.kernels.attention.value} / {r.kernels.expert.value}",
            str(r.h2d_tensors_per_expert.value),
            f"{r.h2d_efficiency.value:.2f}",
            r.copy_stream.value,
            r.dequant.value,
            "yes" if r.memory_parity.value else "no",
        )
    console().print(table)


@runtimes_app.command("show")
def runtimes_show(
    runtime: Annotated[str, typer.Argument(help="Runtime id or YAML path.")],
    json_: JsonOpt = False,
) -> None:
    """Show every number of a runtime profile with its source and grade."""
    from specmd_sim.runtime import load_runtime

    r = load_runtime(runtime)
    if json_:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
        return
    facts: list[tuple[str, Setting | CoreLevel]] = list(r.settings())
    if r.host_reference is not None:
        facts.append(("host_reference.core", r.host_reference.core))
    print_quantities(f"{r.id}: {r.name}", list(r.quantities()), facts)


@validate_app.command("published")
def validate_published(
    out: Annotated[Path, typer.Option(help="Markdown report to write.")] = Path(
        "docs/validation.md"
    ),
    group: Annotated[
        list[str] | None, typer.Option("--group", help="Only these groups (repeatable).")
    ] = None,
    fit: Annotated[
        bool,
        typer.Option(
            "--fit",
            help="Fit the data set's declared constants on its calibration "
            "rows and print them (nothing is written).",
        ),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit with code 1 when a target is missed.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Simulate every published measurement of the bundled data set and compare."""
    from specmd_sim.validate.document import check_document, write_part
    from specmd_sim.validate.published import fit_constants, markdown, run_validation

    if not fit:  # (--fit writes nothing)
        check_document(out)
    err = console(json_mode=True)

    def progress(line: str) -> None:
        err.print(line, highlight=False)

    if fit:
        values = fit_constants(progress=progress)
        typer.echo(json.dumps(values, indent=2))
        return
    result = run_validation(groups=group, progress=progress)
    command = "specmd validate published" + "".join(f" --group {g}" for g in group or [])
    write_part(out, "published", markdown(result, command))
    if json_:
        rows = [r.as_dict() for r in result.rows]
        machines = [{"series": p.series, "setup": p.faster.row.setup,
                     "faster": p.faster.group, "slower": p.slower.group, "kept": p.kept}
                    for p in result.machine_pairs]  # fmt: skip
        typer.echo(json.dumps({"rows": rows, "orderings": result.orderings,
                               "machine_pairs": machines, "median_error": result.median_error,
                               "holds": result.holds}, default=str))  # fmt: skip
    else:
        t = result.targets
        c = console()
        table = Table("group", "setup", "role", "published", "simulated", "ratio")
        for r in result.rows:
            ratio = "failed" if r.failure else f"{r.ratio:.2f}"
            if r.row.role == "validation" and r.error > t.row_error:
                ratio = f"[bold red]{ratio}"
            table.add_row(r.group, r.row.setup, r.row.role, f"{r.row.published:.3f}",
                          "-" if r.failure else f"{r.simulated:.3f}", ratio)  # fmt: skip
        c.print(table)
        c.print(
            f"validation rows within ±{t.row_error:.0%}: {result.within} of "
            f"{len(result.validation_rows)}; median error {result.median_error:.1%}; ordering "
            f"preserved in {sum(result.orderings.values())} of {len(result.orderings)} groups "
            f"and {sum(p.kept for p in result.machine_pairs)} of {len(result.machine_pairs)} "
            f"machine pairs; "
            f"targets {'met' if result.holds else 'missed'}; report: {out}"
        )
    if check and not result.holds:
        raise typer.Exit(1)
