"""``specmd reproduce STUDY``: rerun a published study and check its findings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specmd_sim.cli.app import app
from specmd_sim.cli.common import console
from specmd_sim.errors import SpecmdError


@app.command("reproduce")
def reproduce(
    study: Annotated[str, typer.Argument(help="Study to reproduce: specmd.")],
    quick: Annotated[
        bool, typer.Option("--quick", help="A subset: under two minutes on 2 cores.")
    ] = False,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("runs/reproduce-specmd"),
    shared: Annotated[
        Path | None,
        typer.Option(help="Folder of reference traces (default: ../shared/traces if present)."),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Processes (default: all cores).")] = None,
    trace: Annotated[
        list[Path] | None,
        typer.Option(
            "--trace",
            help="Also a trace of yours as a subject (repeatable); a recorded one's own "
            "predictions are used too (specmd trace record).",
        ),
    ] = None,
) -> None:
    """Rerun the SpecMD study's grid and say, with numbers, which findings hold here."""
    from specmd_sim.reproduce import STUDIES

    if study not in STUDIES:
        raise SpecmdError(f"study: expected one of {', '.join(STUDIES)}, got {study!r}")
    err = console(json_mode=True)
    result = STUDIES[study](out, quick=quick, shared=shared, workers=workers,
                            progress=lambda line: err.print(line, highlight=False),
                            traces=trace or ())  # fmt: skip
    table = Table("finding", "trace", "here", "controls", "verdict", title=f"{study} findings")
    for f in result.findings:
        colour = {"reproduced": "green", "structural": "yellow"}.get(f.verdict, "bold red")
        controls = "; ".join(f"{k} {v.text(f.show)}" for k, v in f.nulls.items())
        table.add_row(f.claim, f.subject, f.ours.text(f.show), controls,
                      f"[{colour}]{f.verdict}")  # fmt: skip
    out_console = console()
    out_console.print(table)
    out_console.print(
        f"results: {out / 'runs.csv'}, {out / 'findings.json'}, {out / 'reproduction.md'}"
    )
