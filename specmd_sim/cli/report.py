"""``specmd report``, ``specmd compare``, ``specmd timeline`` and ``specmd chrome``: pages (and
the Chrome trace) from finished runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from specmd_sim.atomic import check_output
from specmd_sim.cli.app import app
from specmd_sim.cli.common import console
from specmd_sim.errors import SpecmdError

ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="Also write every figure as a static image: png or svg (needs kaleido: "
        "pip install 'specmd-sim\\[images]'; skipped with a note otherwise).",
    ),
]
RunDirArg = Annotated[Path, typer.Argument(help="A run folder (written by specmd run).")]


def _check_outputs(out: Path | None, default: Path, image: str | None) -> Path:
    """The page to write: ``out`` (checked before any work, as ``--out``) or ``default``
    (checked once its run folder is known to exist); and ``--image``'s format."""
    if image is not None:
        from specmd_sim.report.images import check_format

        check_format(image)
    if out is not None:
        check_output(out, "--out", folder=False)
        return out
    return default


def _images(figures: dict[str, Any], page: Path, fmt: str | None) -> None:
    if fmt is None:
        return
    from specmd_sim.report.images import export_images

    written, reason = export_images(figures, page.parent, page.stem, fmt)
    for path in written:
        typer.echo(f"wrote {path}")
    if reason:
        typer.echo(f"image export skipped: {reason}", err=True)


def window_name(span: tuple[float, float]) -> str:
    """``(0.5, 0.52)`` s as ``500-520ms``: what a window's page is called."""
    return f"{span[0] * 1e3:g}-{span[1] * 1e3:g}ms"


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"START:END"`` in milliseconds to seconds."""
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise SpecmdError(
            f"--window: expected START:END in milliseconds (e.g. 500:520), got {text!r}"
        ) from None
    if not hi > lo >= 0:
        raise SpecmdError(f"--window: expected 0 <= START < END, got {text!r}")
    return lo / 1e3, hi / 1e3


@app.command("report")
def report(
    run_dir: RunDirArg,
    out: Annotated[
        Path | None, typer.Option(help="Output page (default: RUN_DIR/report.html).")
    ] = None,
    image: ImageOpt = None,
) -> None:
    """One run on one page: summary, miss taxonomy per layer, prefetching, stall breakdown
    and TTFT decomposition (the last two for timing-engine runs)."""
    from specmd_sim.report import RunData
    from specmd_sim.report.run_report import write_run_report

    path = _check_outputs(out, run_dir / "report.html", image)
    run = RunData.load(run_dir)
    check_output(path, "report page", folder=False)
    figures = write_run_report(run, path)
    typer.echo(f"wrote {path}")
    _images(figures, path, image)


@app.command("timeline")
def timeline(
    run_dir: RunDirArg,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output page (default: RUN_DIR/timeline.html; with --window, "
            "RUN_DIR/timeline-START-ENDms.html, so the run's page stays as it is)."
        ),
    ] = None,
    max_spans: Annotated[
        int, typer.Option(min=100, help="Spans drawn one by one; the rest is aggregated.")
    ] = 8_000,
    window: Annotated[
        str | None,
        typer.Option(help="Draw the spans of START:END (milliseconds) one by one."),
    ] = None,
    image: ImageOpt = None,
) -> None:
    """Rebuild the per-resource and per-layer timeline of a timing-engine run from its
    spans.npz."""
    from specmd_sim.report import RunData, write_timeline

    span = parse_window(window)
    default = "timeline.html" if span is None else f"timeline-{window_name(span)}.html"
    path = _check_outputs(out, run_dir / default, image)
    run = RunData.load(run_dir)
    run.require_spans("specmd timeline")
    makespan = float(run.metrics.get("makespan_s") or 0.0)
    if span is not None and span[0] >= makespan:  # (a window past the run: nothing to draw)
        raise SpecmdError(
            f"--window: expected a window starting within the run (0 to {makespan * 1e3:g} "
            f"ms), got {window!r}"
        )
    check_output(path, "timeline page", folder=False)
    figures = write_timeline(run, path, max_spans, span)
    typer.echo(f"wrote {path}")
    _images(figures, path, image)


@app.command("chrome")
def chrome(
    run_dir: RunDirArg,
    out: Annotated[
        Path | None, typer.Option(help="Output file (default: RUN_DIR/trace.json.gz).")
    ] = None,
) -> None:
    """Write a timing-engine run's trace in the Chrome JSON format (gzipped), for
    chrome://tracing and tools that read only JSON; the run folder's trace.pftrace.gz holds the
    same for ui.perfetto.dev, smaller and faster to write."""
    from specmd_sim.report import RunData
    from specmd_sim.runs import CHROME_TRACE_FILE, trace_options
    from specmd_sim.timeline import untraceable, write_chrome_trace

    path = _check_outputs(out, run_dir / CHROME_TRACE_FILE, None)
    run = RunData.load(run_dir)
    run.require_spans("specmd chrome")
    check_output(path, "Chrome trace", folder=False)
    recording = run.recording
    assert recording is not None  # (require_spans)
    makespan = float(run.result["metrics"].get("makespan_s") or 0.0)
    if (reason := untraceable(recording, makespan)) is not None:
        raise SpecmdError(f"specmd chrome: no trace of {str(run_dir)!r}: {reason}")
    options = trace_options(run.result, recording)
    write_chrome_trace(path, recording.spans, recording.lanes, **options)
    typer.echo(f"wrote {path}")


@app.command("compare")
def compare(
    paths: Annotated[list[Path], typer.Argument(help="Run folders and sweep folders, in any mix.")],
    out: Annotated[Path, typer.Option(help="Output page.")] = Path("compare.html"),
    image: ImageOpt = None,
) -> None:
    """Several runs or sweeps side by side: curves against what varies (cache capacity,
    link bandwidth, ...), policy bars and a table of every run."""
    from specmd_sim.report.compare import compare_table, write_compare
    from specmd_sim.report.rows import load_rows, plan

    _check_outputs(out, out, image)
    rows = load_rows(paths)
    layout = plan(rows)
    if not layout.rows:
        raise SpecmdError(f"compare: expected at least one successful run, got {len(rows)} failed")
    figures = write_compare(layout, out, [str(p) for p in paths])
    header, body = compare_table(layout)
    table = Table(*header, title=f"{len(body)} run(s)")
    for cells in body[:40]:
        table.add_row(*cells)
    out_console = console()
    out_console.print(table)
    if len(body) > 40:
        out_console.print(f"(first 40 of {len(body)} rows; all are in {out})")
    typer.echo(f"wrote {out}")
    _images(figures, out, image)
