"""Static PNG/SVG copies of figures, where a plotly image engine (kaleido) is available.

Never required: without kaleido, or when kaleido cannot start the Chrome it drives, the caller
gets one line saying why and the HTML pages are written as always. Install it with
``pip install 'specmd-sim[images]'``.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from specmd_sim.atomic import atomic_file
from specmd_sim.errors import SpecmdError
from specmd_sim.report.spec import Spec, to_figure
from specmd_sim.report.style import without_ui_hints

FORMATS = ("png", "svg")
WIDTH = 1400


def check_format(fmt: str) -> None:
    """One line unless ``fmt`` is an image format this module writes."""
    if fmt not in FORMATS:
        raise SpecmdError(f"--image: expected one of {', '.join(FORMATS)}, got {fmt!r}")


def for_image(fig: go.Figure | Spec) -> go.Figure:
    """A copy of ``fig`` (or a figure of the spec, :mod:`~specmd_sim.report.spec`) for a still
    image: the page's hints on dragging and clicking left out
    of its subtitle and annotations (:func:`~specmd_sim.report.style.ui_hint`)."""
    still = to_figure(fig) if isinstance(fig, dict) else go.Figure(fig)
    subtitle = still.layout.title.subtitle.text
    if subtitle:
        still.layout.title.subtitle.text = without_ui_hints(subtitle)
    for note in still.layout.annotations:
        if note.text:
            note.text = without_ui_hints(note.text)
    return still


def export_images(
    figures: dict[str, go.Figure | Spec], out_dir: Path, stem: str, fmt: str
) -> tuple[list[Path], str | None]:
    """Write each figure as ``out_dir/<stem>-<name>.<fmt>``; returns the files written and,
    when export is not possible, why (one line)."""
    check_format(fmt)
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return [], "kaleido is not installed (pip install 'specmd-sim[images]')"
    written: list[Path] = []
    for name, fig in figures.items():
        path = out_dir / f"{stem}-{name}.{fmt}"
        try:
            with atomic_file(path) as tmp:  # a failed export leaves the old file
                still = for_image(fig)
                still.write_image(tmp, format=fmt, width=WIDTH, scale=2 if fmt == "png" else 1)
        except Exception as exc:  # kaleido's failures (no Chrome, a crash) have many types
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return written, f"kaleido could not export images: {type(exc).__name__}: {reason}"
        written.append(path)
    return written, None
