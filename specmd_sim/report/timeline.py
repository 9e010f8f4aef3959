"""The per-resource timeline: a lane per compute stream and copy engine, spans coloured by kind.

Beyond ``max_spans`` spans the figure shows the earliest ones (the first passes, where TTFT
is) and says so in its title; the Perfetto trace always holds every span.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from specmd_sim.cache.states import AccessClass
from specmd_sim.timeline import KINDS

COLOURS = {
    "attention": "#4C78A8",
    "expert": "#54A24B",
    "lm_head": "#B279A2",
    "stall": "#E45756",
    "demand_fetch": "#F58518",
    "prefetch": "#72B7B2",
}


def timeline_figure(
    spans: np.ndarray,
    lanes: list[str],
    title: str = "specmd-sim timeline",
    max_spans: int = 20_000,
    ttft_s: float | None = None,
) -> go.Figure:
    total = len(spans)
    shown = (
        spans[np.argsort(spans["start"], kind="stable")[:max_spans]] if total > max_spans else spans
    )
    if total > max_spans:
        until = float(shown["start"].max()) * 1e3
        title += (
            f" — first {len(shown):,} of {total:,} spans (to {until:.3f} ms); all in trace.json"
        )
    fig = go.Figure()
    for kind_id, kind in enumerate(KINDS):
        s = shown[shown["kind"] == kind_id]
        if not len(s):
            continue
        names = np.array([""] + [c.name.lower() for c in AccessClass])
        custom = np.stack([s["pass_"], s["layer"], s["expert"], s["bytes"], s["request"]], axis=1)
        fig.add_trace(
            go.Bar(
                name=kind,
                orientation="h",
                y=np.asarray(lanes, dtype=object)[s["lane"]],
                text=names[s["klass"].astype(np.int64) + 1],
                textposition="none",
                base=s["start"] * 1e3,
                x=(s["end"] - s["start"]) * 1e3,
                marker_color=COLOURS[kind],
                customdata=custom,
                hovertemplate=(
                    f"<b>{kind}</b><br>start %{{base:.4f}} ms, %{{x:.4f}} ms<br>"
                    "pass %{customdata[0]} layer %{customdata[1]} request %{customdata[4]}<br>"
                    "expert %{customdata[2]} bytes %{customdata[3]} %{text}"
                    "<extra></extra>"
                ),
            )
        )
    if ttft_s is not None:
        fig.add_vline(x=ttft_s * 1e3, line_dash="dash", annotation_text="TTFT (mean)")
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis_title="time (ms)",
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(lanes))},
        height=220 + 40 * len(lanes),
        legend_title="span kind",
    )
    return fig


def write_timeline_html(path: Path, fig: go.Figure) -> None:
    """Self-contained HTML (plotly.js inlined) that opens offline."""
    fig.write_html(path, include_plotlyjs=True, full_html=True)
