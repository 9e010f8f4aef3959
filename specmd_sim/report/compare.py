"""``specmd compare``: several runs, or whole sweeps, side by side.

Built on rows (:mod:`specmd_sim.report.rows`), so run folders and sweep folders mix freely.
A *series* is one policy in one *context*: the row's setting and its values of the other axes
(``trace=olmoe-synthetic · hardware=l4``). For every numeric column that varies there is a
curve figure (cache capacity → hit rate, collision misses and TTFT; host→GPU bandwidth → TTFT,
TPOT and stall; any other numeric field → hit rate and TTFT): a series with several x values
is a line, one with a single x a marker, and an axis along which no series has several x
values (a capacity zipped with the trace in a sweep) gets no curve figure, its values telling
the contexts apart instead. With several policies and a few contexts each context has its own
row of panels, a line per policy; otherwise one row, the lines grouped by policy in the
legend. When policies or contexts differ, bars compare the policies on each metric, a bar per
context when there are few; a bar never averages over a setting or an axis silently: the
figure's title says what it averages. Several seeds of one point are averaged, their range
drawn as error bars. A metric axis whose values span a decade or more is logarithmic;
legends stand right of the plots. A table lists every row.
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
from specmd_sim.report.rows import (
    BANDWIDTH,
    CAPACITY,
    POLICY,
    SETTING,
    Axis,
    Plan,
    Row,
    what_ifs,
)
from specmd_sim.report.style import SPARE_COLOURS, base_layout

SHOWN = ("hit_rate", "misses_collision", "ttft_s", "tpot_s", "stall_s")
"""The metrics of the table of every run (those the rows have)."""
_CURVE_METRICS = {  # capacity planning: latency and throughput against the cache and the link
    CAPACITY: ("hit_rate", "misses_collision", "tpot_s", "ttft_s", "throughput_tok_s"),
    BANDWIDTH: ("tpot_s", "ttft_s", "throughput_tok_s", "stall_s"),
}
_DEFAULT_CURVE_METRICS = ("hit_rate", "ttft_s")
_BAR_METRICS = ("hit_rate", "ttft_s", "tpot_s", "stall_s")
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D",
           *SPARE_COLOURS)  # fmt: skip
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x")
MAX_FACETS = 4
"""Contexts drawn as rows of panels at most; beyond, their lines share one row."""
ROW_PX, GAP_PX, HEADING_PX = 300, 90, 26  # a row of panels, the gap between rows, its heading
MAX_BAR_GROUPS = 8
"""Bars per policy at most: beyond, bars average over the axes, then over the settings."""
LOG_SPAN = 10.0
"""A metric axis is logarithmic where its largest positive value is at least this times its
smallest (a decade)."""
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


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _wrap(name: str, width: int = 40) -> str:
    """A legend entry broken into lines at its `` · `` separators, each at most about
    ``width`` characters: a long context does not take half the figure's width."""
    lines: list[str] = []
    for part in name.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "<br>".join(html.escape(line, quote=False) for line in lines)


def _axis_name(axis: Axis) -> str:
    """What an axis is called in a context: ``cache capacity``, ``hardware``."""
    return "hardware" if axis.column == BANDWIDTH else axis.label.split(" (")[0]


def _context(row: Row, axes: list[Axis]) -> str:
    """What sets the row's point apart besides its policy and seed: its setting and its values
    of ``axes`` (the hardware by name where its bandwidth is the axis)."""
    parts = [row[SETTING]] if row[SETTING] else []
    for a in axes:
        value = row.get("config.hardware") if a.column == BANDWIDTH else row.get(a.column)
        if a.column == BANDWIDTH and what_ifs(row):  # a what-if on its link
            value = f"{value} at {row[BANDWIDTH]:.3g} GB/s"
        parts.append(f"{_axis_name(a)}={_short(value)}")
    return " · ".join(parts)


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


def _spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) >= LOG_SPAN * min(positive)


def _value_axis(metric: str, values: list[float]) -> dict[str, Any]:
    """Settings of the axis a metric is plotted on: from 0 (shares in %), or logarithmic
    where the values span a decade or more."""
    if METRICS[metric].unit == "fraction":
        return {"tickformat": ".0%", "rangemode": "tozero"}
    return {"type": "log"} if _spans_decades(values) else {"rangemode": "tozero"}


def _series(plan: Plan, axis: Axis) -> dict[tuple[str, str], list[Row]]:
    """The rows of each series along ``axis``, by (policy, context)."""
    others = [a for a in plan.axes if a is not axis]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in plan.rows:
        if r.get(axis.column) is not None:
            groups.setdefault((r[POLICY], _context(r, others)), []).append(r)
    return groups


def curve_figure(plan: Plan, axis: Axis) -> go.Figure | None:
    """Metrics against one numeric axis, a line per series; None without any metric or when
    no series has two x values."""
    metrics = _present(plan.rows, _CURVE_METRICS.get(axis.column, _DEFAULT_CURVE_METRICS))
    series = _series(plan, axis)
    if not metrics or all(len({r[axis.column] for r in rows}) < 2 for rows in series.values()):
        return None
    policies = list(dict.fromkeys(p for p, _ in series))
    contexts = list(dict.fromkeys(c for _, c in series))
    facet = len(policies) > 1 and 1 < len(contexts) <= MAX_FACETS
    facets = contexts if facet else [""]
    plot_height = ROW_PX * len(facets) + GAP_PX * (len(facets) - 1)
    fig = make_subplots(
        rows=len(facets), cols=len(metrics), horizontal_spacing=0.08,
        vertical_spacing=GAP_PX / plot_height if facet else 0.0, shared_xaxes=True,
        subplot_titles=[_axis_title(m) for _ in facets for m in metrics],
    )  # fmt: skip
    values: dict[tuple[int, int], list[float]] = {}
    legend: set[tuple[str, str]] = set()  # (group, name) of the lines already listed
    markers_only = 0
    for (policy, context), rows in series.items():
        row = facets.index(context) + 1 if facet else 1
        style = _line_style(policy, context, policies, contexts, facet)
        legend_key = (style["legendgroup"], style["name"])
        for j, metric in enumerate(metrics, start=1):
            scale = _scale(metric)
            xs, mean, lo, hi, n = _aggregate(rows, axis.column, metric)
            if not xs.size:
                continue
            markers_only += j == 1 and xs.size == 1
            values.setdefault((row, j), []).extend((mean * scale).tolist())
            error = None
            if (n > 1).any():
                error = {"type": "data", "symmetric": False, "array": (hi - mean) * scale,
                         "arrayminus": (mean - lo) * scale, "thickness": 1}  # fmt: skip
            where = html.escape(policy + (f" · {context}" if context else ""))
            fig.add_trace(
                go.Scatter(
                    x=xs, y=mean * scale, error_y=error,
                    mode="lines+markers" if xs.size > 1 else "markers",
                    **style, showlegend=j == 1 and legend_key not in legend,
                    customdata=n,
                    hovertemplate=f"<b>{where}</b><br>{axis.label}: %{{x:.4g}}<br>"
                    f"{_axis_title(metric)}: %{{y:{_hover_format(metric)}}} "
                    "(%{customdata} run(s))<extra></extra>",
                ),
                row=row, col=j,
            )  # fmt: skip
        legend.add(legend_key)
    xs_all = sorted({float(r[axis.column]) for r in plan.rows if r.get(axis.column) is not None})
    log_x = axis.log or _spans_decades(xs_all)
    ticks = {"tickvals": xs_all, "ticktext": [f"{v:.3g}" for v in xs_all]} if log_x else {}
    for row in range(1, len(facets) + 1):
        for j, metric in enumerate(metrics, start=1):
            fig.update_xaxes(type="log" if log_x else None, row=row, col=j, **ticks)
            fig.update_yaxes(**_value_axis(metric, values.get((row, j), [])), row=row, col=j)
    fig.update_xaxes(title_text=axis.label, row=len(facets))
    what = (f"a row of panels per {_what_contexts(plan, axis)}, a line per policy" if facet
            else f"{len(series)} series")  # fmt: skip
    layout = base_layout(
        f"{', '.join(METRICS[m].label for m in metrics)} vs {axis.label}",
        f"{len(plan.rows)} runs; {what}"
        + (f"; {markers_only} series with one x value as markers" if markers_only else "")
        + ("; seeds averaged, bars from the lowest to the highest" if plan.seeds else ""),
        plot_height=plot_height,
        subplot_titles=True,
        legend="right",
    )
    headings = []
    if facet:  # each row's context, above its panels' titles
        layout["margin"]["t"] += HEADING_PX
        layout["height"] += HEADING_PX
        for row, context in enumerate(facets, start=1):
            top = fig.get_subplot(row, 1).yaxis.domain[1]
            headings.append(
                {"text": f"<b>{html.escape(context)}</b>", "x": 0, "xref": "paper",
                 "xanchor": "left", "y": top + 28 / plot_height, "yref": "paper",
                 "yanchor": "bottom", "showarrow": False, "font": {"size": 13}}
            )  # fmt: skip
    fig.update_layout(
        **layout,
        annotations=[*fig.layout.annotations, *headings],
        hovermode="closest",
    )
    return fig


def _what_contexts(plan: Plan, axis: Axis) -> str:
    """The names of what the contexts along ``axis`` are made of: ``trace, hardware``."""
    names = [c.removeprefix("config.") for c in plan.setting_columns]
    return ", ".join(names + [_axis_name(a) for a in plan.axes if a is not axis])


def _line_style(
    policy: str, context: str, policies: list[str], contexts: list[str], facet: bool
) -> dict[str, Any]:
    """Name, legend group, colour and dash of a series' line. Faceted, or in a single context:
    a line per policy (a colour each). Otherwise a colour per policy, or per context with a
    single policy; with both several, the context's dash and marker, grouped under its
    policy in the legend."""
    i, k = policies.index(policy), contexts.index(context)
    several = len(policies) > 1 and len(contexts) > 1 and not facet
    colour = PALETTE[(i if len(policies) > 1 else k) % len(PALETTE)]
    name = policy if facet or len(contexts) == 1 or not context else context
    style: dict[str, Any] = {
        "name": _wrap(name),
        "legendgroup": policy if len(policies) > 1 else name,
        "line": {"color": colour, "width": 2, "dash": DASHES[k % len(DASHES)] if several
                 else "solid"},
        "marker": {"size": 7, "symbol": SYMBOLS[k % len(SYMBOLS)] if several else "circle"},
    }  # fmt: skip
    if several and len(policies) > 1:
        style["legendgrouptitle"] = {"text": policy}
    return style


def _bar_groups(plan: Plan) -> tuple[list[str], list[str]]:
    """The group (bar colour) of each row, and what each bar averages over besides seeds:
    nothing while the contexts (settings and every axis) are at most
    :data:`MAX_BAR_GROUPS`, else the axes, else the settings and the axes."""

    def described(names: list[str], columns: list[str]) -> list[str]:
        return [f"{n} ({len({repr(r.get(c)) for r in plan.rows})} values)"
                for n, c in zip(names, columns, strict=True)]  # fmt: skip

    axes = [_axis_name(a) for a in plan.axes]
    axis_columns = [a.column for a in plan.axes]
    groups = [_context(r, plan.axes) for r in plan.rows]
    if len(set(groups)) <= MAX_BAR_GROUPS:
        return groups, []
    groups = [r[SETTING] for r in plan.rows]
    if len(set(groups)) <= MAX_BAR_GROUPS:
        return groups, described(axes, axis_columns)
    settings = [c.removeprefix("config.") for c in plan.setting_columns]
    return [""] * len(plan.rows), described(settings + axes, plan.setting_columns + axis_columns)


def policy_figure(plan: Plan) -> go.Figure | None:
    """Horizontal bars per policy on each metric, one per context where there are few
    (:func:`_bar_groups`), whiskers from the lowest to the highest; None with a single policy
    and a single context, or without any metric."""
    policies = plan.policies
    groups, averaged = _bar_groups(plan)
    names = list(dict.fromkeys(groups))
    metrics = _present(plan.rows, _BAR_METRICS)
    if (len(policies) < 2 and len(names) < 2) or not metrics:
        return None
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[_axis_title(m) for m in metrics],
        horizontal_spacing=0.03, shared_yaxes=True,
    )  # fmt: skip
    for j, metric in enumerate(metrics, start=1):
        scale, fmt = _scale(metric), _hover_format(metric)
        shown: list[float] = []
        for i, name in enumerate(names):
            means, lo, hi, counts = [], [], [], []
            for policy in policies:
                v = np.array([r[metric] for r, g in zip(plan.rows, groups, strict=True)
                              if g == name and r[POLICY] == policy
                              and r.get(metric) is not None], dtype=np.float64) * scale  # fmt: skip
                means.append(v.mean() if v.size else None)
                lo.append(v.mean() - v.min() if v.size else 0)
                hi.append(v.max() - v.mean() if v.size else 0)
                counts.append(v.size)
            shown += [m for m in means if m is not None]
            where = html.escape(name) + "<br>" if name else ""
            fig.add_trace(
                go.Bar(
                    y=policies, x=means, orientation="h", name=_wrap(name) or "all runs",
                    legendgroup=name, showlegend=j == 1 and bool(name),
                    marker_color=PALETTE[i % len(PALETTE)],
                    error_x={"type": "data", "symmetric": False, "array": hi,
                             "arrayminus": lo, "thickness": 1},
                    customdata=counts,
                    hovertemplate=f"<b>%{{y}}</b><br>{where}{_axis_title(metric)}: "
                    f"%{{x:{fmt}}} (mean of %{{customdata}} run(s))<extra></extra>",
                ),
                row=1, col=j,
            )  # fmt: skip
        fig.update_xaxes(**_value_axis(metric, shown), row=1, col=j)
    bars = max(len(names), 1)
    fig.update_layout(
        **base_layout(
            "Policies side by side"
            + (f" — each bar the mean over {', '.join(averaged)}" if averaged else ""),
            "Each bar is the mean over the runs of that policy"
            + (" in that context" if len(names) > 1 else "")
            + (" (seeds)" if plan.seeds and not averaged else "")
            + "; whiskers span the lowest to the highest.",
            plot_height=max(200, len(policies) * (12 * bars + 14)),
            subplot_titles=True,
            legend="right",
        ),
        barmode="group",
        bargap=0.25,
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
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
