"""The per-layer view: layer on the y axis, time on x.

Each layer's row holds two bands. Above: the compute stream's work for that layer (attention,
expert compute and the stalls waiting for its experts). Below: the transfers that fetch the
layer's experts (demand fetches and prefetches, on whichever copy engine; concurrent transfers
get sub-bands). A forward pass draws a staircase from layer 0 down; a prefetch for layer
``l+1`` sits under layer ``l``'s compute when it is hidden, and a stall appears where it is
not. The right panel totals each layer's compute and stall over the whole run, so the layers
that stall stand out. On a run of several GPUs each GPU has its own view (its spans, passes,
first tokens and totals; every panel and the y axis name it), chosen in a menu.

Beyond ``max_spans`` spans this view draws only the detail window of
:mod:`specmd_sim.report.lod` (by default the start of the run) and says so: summarised into
time bins, a layer's row would show little more than its 1/L share of each bin, which the
right panel already totals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from specmd_sim.report.analysis import layer_totals
from specmd_sim.report.bars import span_traces, ttft_marks
from specmd_sim.report.lod import Detail, choose_detail
from specmd_sim.report.run_data import RunData
from specmd_sim.report.spec import Spec, add, axes, grid, merge, tidy, to_figure, trace
from specmd_sim.report.style import base_layout, kind_colour, ms, ui_hint
from specmd_sim.timeline import KIND, TRANSFER_KINDS, track_rows

BAND = 0.38  # height of each band, in layer rows
FIRST_VIEW_PASSES = 3
MAX_PASS_LINES = 300


def _has_dense(spans: np.ndarray) -> bool:
    """Whether the run has dense-layer spans (attention spans outside any MoE layer)."""
    return bool(((spans["kind"] == KIND["attention"]) & (spans["layer"] < 0)).any())


@dataclass(frozen=True, eq=False)
class _View:
    """What the per-layer figure shows of one GPU: its traces (a range of ``fig.data``), the
    markers, panel titles and notes, the x range shown first and the subtitle."""

    traces: range
    shapes: list[dict]
    annotations: list[dict]
    first_view: list[float] | None
    subtitle: str


def layer_figure(
    run: RunData,
    max_spans: int = 8_000,
    window: tuple[float, float] | None = None,
) -> go.Figure:
    """The per-layer view of a timing-engine run (``window`` in seconds); on a run of several
    GPUs, one view per GPU, chosen in a menu (the first shown)."""
    return to_figure(layer_spec(run, max_spans, window))


def layer_spec(
    run: RunData,
    max_spans: int = 8_000,
    window: tuple[float, float] | None = None,
) -> Spec:
    """:func:`layer_figure` as plotly's JSON (:mod:`~specmd_sim.report.spec`)."""
    spans = run.require_spans("the per-layer view").spans
    n_layers = run.num_layers
    layer = np.where(spans["layer"] >= 0, spans["layer"], n_layers).astype(np.int64)
    has_head = bool((layer == n_layers).any())
    n_y = n_layers + int(has_head)
    detail = choose_detail(spans, max_spans, window)
    exact = np.flatnonzero(detail.exact)
    gpus: list[int | None] = list(range(len(run.gpus))) if len(run.gpus) > 1 else [None]

    layout = grid(
        rows=1,
        cols=2,
        shared_yaxes=True,
        column_widths=[0.84, 0.16],
        horizontal_spacing=0.015,
        subplot_titles=_panel_titles(run, gpus[0]),
    )
    fig: Spec = {"data": [], "layout": layout}
    titles = layout.get("annotations", [])
    views: list[_View] = []
    for gpu in gpus:
        idx = exact if gpu is None else exact[run.span_gpu[exact] == gpu]
        first_trace = len(fig["data"])
        legend: set[str] = set()
        for item in span_traces(run, idx, *_bands(spans, idx, layer), legend):
            add(fig, item, row=1, col=1, cols=2)
        for item in _totals(run, gpu):
            add(fig, item, row=1, col=2, cols=2)
        shapes, notes = ttft_marks(run, y=-0.5, yanchor="top", gpu=gpu)
        first_view, view_note = _first_view(run, detail.window, window is not None, gpu)
        named = [t for t in _panel_titles(run, gpu) if t]  # plotly skips an empty title
        views.append(
            _View(
                range(first_trace, len(fig["data"])),
                shapes + _pass_lines(run, detail.window, gpu),
                [dict(a, text=t) for a, t in zip(titles, named, strict=True)] + notes,
                first_view,
                _note(detail)
                + "<br>"
                + view_note
                + (ui_hint(" Choose the GPU in the menu on the right.") if gpu is not None else ""),
            )
        )
    shown = views[0]
    for i, item in enumerate(fig["data"]):
        item["visible"] = i in shown.traces
    base = base_layout(
        f"Per-layer view — {run.title}",
        shown.subtitle,
        plot_height=max(34 * n_y, 300),
        subplot_titles=True,
    )
    merge(
        layout,
        {
            **base,
            "barmode": "overlay",
            "bargap": 0,
            "shapes": shown.shapes,
            "annotations": shown.annotations,
            "updatemenus": _gpu_menu(run, views, len(fig["data"]), base["legend"]["y"]),
            "hovermode": "closest",
        },
    )
    tidy(layout)
    # spans of no MoE layer: the LM head, and the dense-FFN layers of models that have them
    other = "dense layers + LM head" if _has_dense(spans) else "LM head"
    labels = [f"layer {i}" for i in range(n_layers)] + ([other] if has_head else [])
    axes(
        layout,
        "y",
        tickvals=np.arange(n_y),
        ticktext=labels,
        range=[n_y - 0.5, -0.5],
        fixedrange=True,
        showgrid=False,
        zeroline=False,
    )
    if gpus[0] is not None:
        axes(layout, "y", row=1, col=1, cols=2, title={"text": run.gpus[0]})
    axes(layout, "x", row=1, col=1, cols=2, title={"text": "time (ms)"})
    if shown.first_view is not None:
        axes(layout, "x", row=1, col=1, cols=2, range=shown.first_view)
    axes(layout, "x", row=1, col=2, cols=2, title={"text": "total over the run (s)"},
         fixedrange=True)  # fmt: skip
    return fig


def _panel_titles(run: RunData, gpu: int | None) -> list[str]:
    if gpu is None:
        return ["", "compute and stall per layer"]
    name = run.gpus[gpu]
    return [f"{name}: spans by layer", f"{name}: compute and stall per layer"]


def _gpu_menu(run: RunData, views: list[_View], n_traces: int, y: float) -> list[dict]:
    """A dropdown (at height ``y`` of the paper, on the right) that shows one GPU's view;
    none for a single view."""
    if len(views) < 2:
        return []
    buttons = []
    for name, view in zip(run.gpus, views, strict=True):
        layout: dict = {
            "shapes": view.shapes,
            "annotations": view.annotations,
            "title.subtitle.text": view.subtitle,
            "yaxis.title.text": name,
        }
        if view.first_view is not None:
            layout["xaxis.range"] = view.first_view
        else:
            layout["xaxis.autorange"] = True
        visible = [i in view.traces for i in range(n_traces)]
        buttons.append({"label": name, "method": "update", "args": [{"visible": visible}, layout]})
    return [
        {
            "type": "dropdown",
            "buttons": buttons,
            "active": 0,
            "x": 1.0,
            "xanchor": "right",
            "y": y,
            "yanchor": "bottom",
            "pad": {"t": 0, "r": 0},
        }
    ]


def _bands(spans: np.ndarray, idx: np.ndarray, layer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row position and thickness of the spans ``idx``: compute above the layer's centre
    line, transfers below (overlapping ones of a layer in sub-bands)."""
    transfer = np.isin(spans["kind"][idx], [KIND[k] for k in TRANSFER_KINDS])
    y = layer[idx] + np.where(transfer, BAND / 2 + 0.02, -BAND / 2 - 0.02)
    thickness = np.full(idx.size, BAND)
    _split_transfer_bands(spans, idx, transfer, layer[idx], y, thickness)
    return y, thickness


def _split_transfer_bands(
    spans: np.ndarray,
    idx: np.ndarray,
    is_transfer: np.ndarray,
    layer: np.ndarray,
    y: np.ndarray,
    thickness: np.ndarray,
) -> None:
    """Give overlapping transfers of one layer separate sub-bands (in place)."""
    for lyr in np.unique(layer[is_transfer]).tolist():
        m = np.flatnonzero(is_transfer & (layer == lyr))
        sub, n_sub = track_rows(spans["start"][idx[m]], spans["end"][idx[m]])
        if n_sub <= 1:
            continue
        step = BAND / n_sub
        y[m] = lyr + 0.02 + (sub + 0.5) * step
        thickness[m] = step * 0.9


def _totals(run: RunData, gpu: int | None) -> list[dict]:
    """Each layer's compute, then its stall, over the run: of one GPU (``gpu``, from its
    spans), or the engine's ``per_layer`` table, whose hover adds the layer's hit rate and
    misses."""
    table = run.per_layer
    if gpu is None and "stall_s" not in table:
        return []
    layers = np.arange(run.num_layers)
    if gpu is None:
        compute, stall = np.asarray(table["compute_s"]), np.asarray(table["stall_s"])
    else:
        compute, stall = layer_totals(run, gpu)
    where = "layer %{y}" if gpu is None else f"{run.gpus[gpu]} · layer %{{y}}"
    hover = f"<b>{where}</b>: %{{text}} s %{{meta}}<extra></extra>"  # the value, not its end
    custom = None
    if gpu is None:
        custom = np.stack(
            [
                table["hit_rate"],
                table["late_hits"],
                table["misses_compulsory"],
                table["misses_capacity"],
                table["misses_collision"],
            ],
            axis=1,
        ).astype(np.float64)
        hover = hover.removesuffix("<extra></extra>") + (
            "<br>hit rate %{customdata[0]:.1%} · late hits %{customdata[1]}<br>misses: "
            "compulsory %{customdata[2]}, capacity %{customdata[3]}, collision "
            "%{customdata[4]}<extra></extra>"
        )
    return [
        trace(
            "bar",
            orientation="h",
            y=layers,
            x=values,
            base=base,  # stall drawn after compute: the bar's length is the layer's total
            text=[f"{v:.4f}" for v in values.tolist()],
            textposition="none",
            name=f"{what} per layer",
            meta=what,
            marker={"color": kind_colour(kind), "line": {"width": 0}},
            width=0.7,
            customdata=custom,
            hovertemplate=hover,
            showlegend=False,
        )
        for values, base, what, kind in (
            (compute, None, "compute", "expert"),
            (stall, compute, "stall", "stall"),
        )
    ]


def _note(detail: Detail) -> str:
    if detail.complete:
        return f"All {detail.total:,} spans drawn one by one."
    lo, hi = detail.window or (0.0, 0.0)
    return (
        f"{detail.shown:,} of {detail.total:,} spans: this view shows {ms(lo)}–{ms(hi)} only "
        "(the right panel totals the whole run; specmd timeline --window draws another window)."
    )


def _first_view(
    run: RunData, window: tuple[float, float] | None, asked: bool, gpu: int | None
) -> tuple[list[float] | None, str]:
    """The x range shown first: the window asked for, else a few passes (of GPU ``gpu``),
    where the staircase is readable."""
    if asked and window is not None:
        return [window[0] * 1e3, window[1] * 1e3], ui_hint("Drag to zoom, double-click to reset.")
    passes = run.passes if gpu is None else run.passes[run.pass_gpu == gpu]
    if window is not None:
        passes = passes[(passes["end"] > window[0]) & (passes["start"] < window[1])]
    if passes.size <= FIRST_VIEW_PASSES:
        return None, ui_hint("Drag to zoom, double-click to reset.")
    first, last = passes[0], passes[FIRST_VIEW_PASSES - 1]
    return (
        [float(first["start"]) * 1e3, float(last["end"]) * 1e3],
        f"Showing passes {int(first['pass_'])}–{int(last['pass_'])} at first."
        + ui_hint(" Drag to zoom, double-click to see the whole window."),
    )


def _pass_lines(run: RunData, window: tuple[float, float] | None, gpu: int | None) -> list[dict]:
    """Thin vertical lines at the starts of the passes (of GPU ``gpu``) inside the detail
    window (none if too many)."""
    passes = run.passes if gpu is None else run.passes[run.pass_gpu == gpu]
    if window is not None:
        passes = passes[(passes["start"] >= window[0]) & (passes["start"] < window[1])]
    if not passes.size or passes.size > MAX_PASS_LINES:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "y domain",
            "x0": t,
            "x1": t,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#BBBBBB", "width": 1, "dash": "dot"},
            "layer": "below",
        }
        for t in (passes["start"] * 1e3).tolist()
    ]
