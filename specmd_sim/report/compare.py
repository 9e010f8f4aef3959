"""``specmd compare``: several runs, or whole sweeps, side by side.

Built on rows (:mod:`specmd_sim.report.rows`), so run folders and sweep folders mix freely.
For every numeric column that varies there is a curve figure, one line per policy and setting
(cache capacity → hit rate, collision misses and TTFT; host→GPU bandwidth → TTFT, TPOT and
stall; any other numeric field → hit rate and TTFT); when policies differ, bars compare them
on each metric (the mean over the other settings, whiskers from the lowest to the highest);
and a table lists every row. Several seeds of one point are averaged, their range drawn as
error bars.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specmd_sim.metrics import METRICS
from specmd_sim.report.html import Block, table_html, write_page
from specmd_sim.report.rows import CAPACITY, POLICY, SETTING, Axis, Plan, Row
from specmd_sim.report.style import SPARE_COLOURS, base_layout

SHOWN = ("hit_rate", "misses_collision", "ttft_s", "tpot_s", "stall_s")
"""The metrics of the table of every run (those the rows have)."""
_CURVE_METRICS = {
    CAPACITY: ("hit_rate", "misses_collision", "ttft_s"),
    "link_bandwidth_gbps": ("ttft_s", "tpot_s", "stall_s"),
}
_DEFAULT_CURVE_METRICS = ("hit_rate", "ttft_s")
_BAR_METRICS = ("hit_rate", "ttft_s", "tpot_s", "stall_s")
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D",
           *SPARE_COLOURS)  # fmt: skip
MAX_TABLE_ROWS = 500


def _present(rows: list[Row], metrics: tuple[str, ...]) -> list[str]:
    return [m for m in metrics if any(r.get(m) is not None for r in rows)]


_TITLE_UNITS = {"s": " (ms)", "fraction": "", "count": ""}  # times are plotted in ms


def _axis_title(metric: str) -> str:
    """The metric's label with the unit it is plotted in."""
    spec = METRICS[metric]
    return spec.label + _TITLE_UNITS.get(spec.unit, f" ({spec.unit})")


def _scale(metric: str) -> float:
    return 1e3 if METRICS[metric].unit == "s" else 1.0


def _hover_format(metric: str) -> str:
    return ".2%" if METRICS[metric].unit == "fraction" else ".4g"


def _series(plan: Plan, axis: Axis) -> dict[str, list[Row]]:
    """Rows of each line of a curve: policy, setting and the values of the other axes."""
    others = [a for a in plan.axes if a is not axis]
    groups: dict[str, list[Row]] = {}
    for r in plan.rows:
        parts = [r[POLICY]] + ([r[SETTING]] if r[SETTING] else [])
        parts += [f"{a.label.split(' (')[0]}={_short(r.get(a.column))}" for a in others]
        groups.setdefault(" · ".join(parts), []).append(r)
    return groups


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _aggregate(rows: list[Row], x_col: str, metric: str) -> tuple[np.ndarray, ...]:
    """Mean, min and max of ``metric`` at each x (over seeds and duplicates), sorted by x."""
    by_x: dict[float, list[float]] = {}
    for r in rows:
        x, y = r.get(x_col), r.get(metric)
        if x is not None and y is not None:
            by_x.setdefault(float(x), []).append(float(y))
    xs = np.array(sorted(by_x))
    ys = [np.array(by_x[x]) for x in xs]
    mean = np.array([y.mean() for y in ys])
    return (
        xs,
        mean,
        np.array([y.min() for y in ys]),
        np.array([y.max() for y in ys]),
        np.array([y.size for y in ys]),
    )


def curve_figure(plan: Plan, axis: Axis) -> go.Figure | None:
    """Metrics against one numeric axis, a line per series; None without any metric."""
    metrics = _present(plan.rows, _CURVE_METRICS.get(axis.column, _DEFAULT_CURVE_METRICS))
    if not metrics:
        return None
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[_axis_title(m) for m in metrics],
        horizontal_spacing=0.08,
    )  # fmt: skip
    series = _series(plan, axis)
    for i, (name, rows) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        for j, metric in enumerate(metrics, start=1):
            scale = _scale(metric)
            xs, mean, lo, hi, n = _aggregate(rows, axis.column, metric)
            if not xs.size:
                continue
            error = None
            if (n > 1).any():
                error = {"type": "data", "symmetric": False, "array": (hi - mean) * scale,
                         "arrayminus": (mean - lo) * scale, "thickness": 1}  # fmt: skip
            fmt = _hover_format(metric)
            fig.add_trace(
                go.Scatter(
                    x=xs, y=mean * scale, error_y=error, mode="lines+markers", name=name,
                    legendgroup=name, showlegend=j == 1, line={"color": colour, "width": 2},
                    marker={"size": 7}, customdata=n,
                    hovertemplate=f"<b>{html.escape(name)}</b><br>{axis.label}: %{{x:.4g}}<br>"
                    f"{_axis_title(metric)}: %{{y:{fmt}}} (%{{customdata}} run(s))"
                    "<extra></extra>",
                ),
                row=1, col=j,
            )  # fmt: skip
    values = sorted({float(r[axis.column]) for r in plan.rows if r.get(axis.column) is not None})
    ticks = {"tickvals": values, "ticktext": [f"{v:.3g}" for v in values]} if axis.log else {}
    for j, metric in enumerate(metrics, start=1):
        fig.update_xaxes(
            title_text=axis.label, type="log" if axis.log else None, row=1, col=j, **ticks
        )
        if METRICS[metric].unit == "fraction":
            fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=j)
    fig.update_layout(
        **base_layout(
            f"{', '.join(METRICS[m].label for m in metrics)} vs {axis.label}",
            f"{len(plan.rows)} runs, {len(series)} line(s)"
            + ("; seeds averaged, bars from the lowest to the highest" if plan.seeds else ""),
            plot_height=340,
            subplot_titles=True,
        ),
        hovermode="closest",
    )
    return fig


def policy_figure(plan: Plan) -> go.Figure | None:
    """Bars per policy on each metric (mean over the rest, whiskers min–max), coloured by
    setting when there are few; None with a single policy and a single setting."""
    policies = plan.policies
    settings = plan.settings if len(plan.settings) <= 8 else [""]
    if len(policies) < 2 and len(settings) < 2:
        return None
    metrics = _present(plan.rows, _BAR_METRICS)
    if not metrics:
        return None
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[_axis_title(m) for m in metrics],
        horizontal_spacing=0.06,
    )  # fmt: skip
    for i, setting in enumerate(settings):
        colour = PALETTE[i % len(PALETTE)]
        for j, metric in enumerate(metrics, start=1):
            scale = _scale(metric)
            means, lo, hi, counts = [], [], [], []
            for policy in policies:
                values = [r[metric] for r in plan.rows
                          if r[POLICY] == policy and (setting == "" or r[SETTING] == setting)
                          and r.get(metric) is not None]  # fmt: skip
                v = np.array(values, dtype=np.float64) * scale
                means.append(v.mean() if v.size else None)
                lo.append(v.mean() - v.min() if v.size else 0)
                hi.append(v.max() - v.mean() if v.size else 0)
                counts.append(v.size)
            fmt = _hover_format(metric)
            fig.add_trace(
                go.Bar(
                    x=policies, y=means, name=setting or "all runs", legendgroup=setting,
                    showlegend=j == 1 and bool(setting), marker_color=colour,
                    error_y={"type": "data", "symmetric": False, "array": hi,
                             "arrayminus": lo, "thickness": 1},
                    customdata=counts,
                    hovertemplate=f"%{{x}}<br>{_axis_title(metric)}: %{{y:{fmt}}} "
                    "(mean of %{customdata} run(s))<extra></extra>",
                ),
                row=1, col=j,
            )  # fmt: skip
            if METRICS[metric].unit == "fraction":
                fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=j)
    fig.update_layout(
        **base_layout(
            "Policies side by side",
            "Each bar is the mean over the runs of that policy"
            + (" and setting" if settings != [""] else "")
            + "; whiskers span the lowest to the highest.",
            plot_height=360,
            subplot_titles=True,
        ),
        barmode="group",
    )
    fig.update_xaxes(tickangle=-30)
    return fig


def compare_table(plan: Plan) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the table of every run: source, policy, what varies, metrics."""
    columns = (
        [POLICY]
        + plan.setting_columns
        + [a.column for a in plan.axes]
        + (["config.seed"] if plan.seeds else [])
    )
    metrics = _present(plan.rows, SHOWN)
    names = {a.column: a.label for a in plan.axes}
    header = ["source", *[names.get(c, c.removeprefix("config.")) for c in columns], *metrics]
    body = []
    for r in plan.rows:
        cells = [r.get("source", "")]
        cells += [_short(r.get(c)) for c in columns]
        cells += [METRICS[m].format(r.get(m)) for m in metrics]
        body.append(cells)
    return header, body


def compare_figures(plan: Plan) -> dict[str, go.Figure]:
    """Every figure of the comparison, by name."""
    figures: dict[str, go.Figure] = {}
    for axis in plan.axes:
        fig = curve_figure(plan, axis)
        if fig is not None:
            figures[f"vs-{axis.column.removeprefix('config.').replace('.', '-')}"] = fig
    fig = policy_figure(plan)
    if fig is not None:
        figures["policies"] = fig
    return figures


def write_compare(plan: Plan, path: Path, sources: list[str]) -> dict[str, go.Figure]:
    """Write the comparison page; returns its figures by name."""
    figures = compare_figures(plan)
    varying = [a.label for a in plan.axes] + [
        c.removeprefix("config.") for c in plan.policy_columns + plan.setting_columns
    ]
    summary = (
        f"{len(plan.rows)} run(s) from {len(sources)} folder(s)"
        + (f"; {plan.failed} failed run(s) left out" if plan.failed else "")
        + (f". What varies: {', '.join(varying)}" if varying else ". Nothing varies but the source")
        + (" (and the seed, averaged)." if plan.seeds else ".")
    )
    header, body = compare_table(plan)
    note = ""
    if len(body) > MAX_TABLE_ROWS:
        note = f'<p class="note">First {MAX_TABLE_ROWS} of {len(body)} rows.</p>'
    blocks = [
        Block(
            "What is compared",
            summary,
            html="<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in sources) + "</ul>",
        )
    ]
    blocks += [Block(fig.layout.title.text, figures=fig) for fig in figures.values()]
    blocks.append(Block("Every run", html=table_html(header, body[:MAX_TABLE_ROWS]) + note))
    write_page(path, "specmd compare", blocks)
    return figures
