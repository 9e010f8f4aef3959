"""The page of a miss-ratio curve (``specmd mrc --out``): hit rate against capacity on a log
axis with the offline optimum as its bound, the miss taxonomy, the byte-miss ratio, a table."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specmd_sim.engine.mrc import MissRatioCurve
from specmd_sim.report.html import Block, table_html, write_page
from specmd_sim.report.style import base_layout

_MISSES = (
    ("misses_compulsory", "compulsory", "#9E9E9E"),
    ("misses_capacity", "capacity", "#1F77B4"),
    ("misses_collision", "collision (evicted in the same pass)", "#D62728"),
)


def mrc_figure(curve: MissRatioCurve, title: str) -> go.Figure:
    """Hit rate (and the optimum's), then the misses by class and the byte-miss ratio, over
    the cache's expert slots on a log axis."""
    x = curve.slots.tolist()
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.09,
        subplot_titles=("hit rate", "misses by class and byte-miss ratio"),
        specs=[[{}, {"secondary_y": True}]],
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=curve.hit_rate.tolist(), name="hit rate", mode="lines+markers"),
        row=1, col=1,
    )  # fmt: skip
    if curve.belady_hits is not None:
        bound = (curve.belady_hits / max(curve.accesses, 1)).tolist()
        fig.add_trace(
            go.Scatter(x=x, y=bound, name="offline optimum (belady)", mode="lines",
                       line={"dash": "dash", "color": "#555"}),
            row=1, col=1,
        )  # fmt: skip
    for field, label, colour in _MISSES:
        share = getattr(curve, field) / max(curve.accesses, 1)
        fig.add_trace(
            go.Bar(x=x, y=share.tolist(), name=label, marker_color=colour),
            row=1, col=2,
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=curve.byte_miss_ratio.tolist(), name="byte-miss ratio",
                   mode="lines+markers", line={"color": "#000"}),
        row=1, col=2, secondary_y=True,
    )  # fmt: skip
    fig.update_layout(
        **base_layout(title, f"{curve.accesses:,} accesses; method: {curve.method}",
                      subplot_titles=True, legend="right"),
        barmode="stack",
    )  # fmt: skip
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="cache capacity (expert slots)", row=1, col=col)
    fig.update_yaxes(range=[0, 1], title_text="hit rate", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="share of accesses", row=1, col=2)
    fig.update_yaxes(range=[0, 1], title_text="byte-miss ratio", row=1, col=2, secondary_y=True)
    return fig


def write_mrc_page(curve: MissRatioCurve, path: Path, title: str) -> None:
    """The curve's page at ``path`` (atomically)."""
    rows = curve.rows()
    cells = [[f"{v:.4f}" if isinstance(v, float) else v for v in r.values()] for r in rows]
    table = table_html(list(rows[0]), cells)
    write_page(path, title, [Block("Miss-ratio curve", figures=mrc_figure(curve, title),
                                   html=table)])  # fmt: skip
