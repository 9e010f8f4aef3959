"""The per-resource timeline: a lane per compute stream, copy engine and link of each device.

Rows, top to bottom: ``requests`` (each request's prefill, ending at its first token, then its
decode), ``passes`` (one bar per forward pass, coloured by phase, with its stall share), then
one lane per resource, grouped by device (:func:`specmd_sim.timeline.lane_process`); a lane
whose spans overlap is split into sub-lanes. On a run of several GPUs each GPU has its own
request and pass rows (``gpu1/requests``, ``gpu1/passes``) above its lanes. Spans are coloured
by kind; hovering one shows its pass, request, token, layer, expert, bytes and access class.
Dashed lines mark each request's first token (TTFT), labelled on its GPU's request row. Under
the lanes, one small plot per counter (cache occupancy and bytes in flight in MiB, the bandwidth
each link, DRAM and NVMe drive carries in GB/s), its axis naming the counter's GPU (or
``network`` and the resource). Beyond ``max_spans`` spans the view follows
:mod:`specmd_sim.report.lod` and says so.

:func:`write_timeline` writes ``timeline.html``: this view, then the per-layer view.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from specmd_sim.perfetto import lane_rows_compiled
from specmd_sim.report.bars import (
    bin_traces,
    detail_note,
    span_traces,
    ttft_marks,
    window_shapes,
)
from specmd_sim.report.html import Block, write_page
from specmd_sim.report.lod import bin_spans, choose_detail, step_bins
from specmd_sim.report.run_data import RunData
from specmd_sim.report.spec import Spec, add, axes, grid, merge, tidy, to_figure, trace
from specmd_sim.report.style import PHASE_COLOURS, base_layout, ms, ui_hint
from specmd_sim.runs import TRACE_FILE
from specmd_sim.timeline import KIND, counter_label, lane_process

DEFAULT_MAX_SPANS = 8_000
"""Spans drawn one by one by default; beyond, the rest is aggregated (see ``lod``)."""
MAX_PASS_BARS = 3_000
MAX_COUNTER_POINTS = 4_000
_UNITS = {"bytes": ("MiB", 1 / 2**20), "bytes/s": ("GB/s", 1e-9)}
"""How a counter's unit (:func:`~specmd_sim.timeline.counter_label`) is drawn: unit, scale."""


@dataclass(frozen=True, eq=False)
class Tracks:
    """The rows of the timeline, top to bottom (row ``y`` is named ``names[y]``): each GPU's
    request and pass rows, then its lanes; ``row`` is the lane row of each span (an index into
    ``lane_names`` and ``lane_y``), ``request_y`` and ``pass_y`` the rows of each GPU
    (:attr:`RunData.gpus`)."""

    names: list[str]
    row: np.ndarray
    lane_names: list[str]
    lane_y: np.ndarray
    request_y: np.ndarray
    pass_y: np.ndarray


def tracks(run: RunData) -> Tracks:
    """Lanes grouped by device, in order of the device's first appearance. One GPU: the
    ``requests`` and ``passes`` rows on top. Several: each GPU's own (``gpu1/requests``,
    ``gpu1/passes``) right above its lanes. A lane whose spans overlap is split into
    ``"<lane> #k"`` sub-lanes."""
    rec = run.require_spans("the timeline")
    spans = rec.spans
    gpus = run.gpus if len(run.gpus) > 1 else []
    devices = list(dict.fromkeys(lane_process(n) for n in rec.lanes))
    devices += [g for g in gpus if g not in devices]
    names = [] if gpus else ["requests", "passes"]
    row = np.zeros(len(spans), np.int64)
    order, bounds, sub, n_sub = rec.lane_rows(lane_rows_compiled)
    lane_names: list[str] = []
    lane_y: list[int] = []
    request_y, pass_y = np.zeros(len(run.gpus), np.int64), np.ones(len(run.gpus), np.int64)
    for device in devices:
        if device in gpus:
            g = gpus.index(device)
            request_y[g], pass_y[g] = len(names), len(names) + 1
            names += [f"{device}/requests", f"{device}/passes"]
        for lane_id in (i for i, n in enumerate(rec.lanes) if lane_process(n) == device):
            idx = order[bounds[lane_id] : bounds[lane_id + 1]]
            row[idx] = len(lane_names) + sub[idx]
            lane = rec.lanes[lane_id]
            n = int(n_sub[lane_id])
            subs = [lane] if n <= 1 else [f"{lane} #{k}" for k in range(n)]
            lane_y += range(len(names), len(names) + len(subs))
            lane_names += subs
            names += subs
    return Tracks(names, row, lane_names, np.array(lane_y, np.float64), request_y, pass_y)


def timeline_figure(
    run: RunData,
    max_spans: int = DEFAULT_MAX_SPANS,
    window: tuple[float, float] | None = None,
    bar_budget: int = 3_000,
) -> go.Figure:
    """The per-resource timeline of a timing-engine run (``window`` in seconds)."""
    return to_figure(timeline_spec(run, max_spans, window, bar_budget))


def timeline_spec(
    run: RunData,
    max_spans: int = DEFAULT_MAX_SPANS,
    window: tuple[float, float] | None = None,
    bar_budget: int = 3_000,
) -> Spec:
    """:func:`timeline_figure` as plotly's JSON (:mod:`~specmd_sim.report.spec`)."""
    rec = run.require_spans("the timeline")
    spans = rec.spans
    t = tracks(run)
    names = t.names
    detail = choose_detail(spans, max_spans, window)
    bins = bin_spans(spans, t.row, len(t.lane_names), detail, bar_budget)
    counters = {n: c for n, c in sorted(rec.counters.items()) if c.size}
    n_plots = 1 + len(counters)
    lane_px = 30 * len(names) + 40
    layout = grid(
        rows=n_plots,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.04, 0.5 / len(counters)) if counters else 0.0,  # (8 GPUs: 33)
        row_heights=[lane_px] + [90] * len(counters),
    )
    fig: Spec = {"data": [], "layout": layout}
    legend: set[str] = set()
    exact = np.flatnonzero(detail.exact)
    traces = span_traces(run, exact, t.lane_y[t.row[exact]], 0.8, legend)
    if bins is not None:
        traces += bin_traces(bins, t.lane_y, 0.8, t.lane_names, legend)
    traces += _request_traces(run, t.request_y[run.request_gpu])
    traces += _pass_traces(run, t.pass_y[run.pass_gpu], detail.window)
    for item in traces:
        add(fig, item, row=1)
    for i, (name, samples) in enumerate(counters.items(), start=2):
        for item in _counter_traces(name, samples, run, detail.window):
            add(fig, item, row=i)
        axes(layout, "y", row=i, title={"text": _counter_title(name), "font": {"size": 10}},
             fixedrange=True)  # fmt: skip
    shapes, notes = ttft_marks(run, y=t.request_y[run.request_gpu])
    subtitle = (
        detail_note(detail, bins, traced=run.traced)
        + "<br>"
        + ui_hint(
            "Drag to zoom in time, double-click to reset; click a legend entry to hide a kind."
        )
    )
    merge(
        layout,
        {
            **base_layout(
                f"Per-resource timeline — {run.title}",
                subtitle,
                plot_height=lane_px + 110 * len(counters),
            ),
            "barmode": "overlay",
            "bargap": 0,
            "dragmode": "zoom",
            "shapes": window_shapes(detail, bins) + shapes,
            "annotations": notes,
            "hovermode": "closest",
        },
    )
    tidy(layout)
    axes(
        layout,
        "y",
        row=1,
        tickvals=np.arange(len(names)),
        ticktext=names,
        range=[len(names) - 0.5, -0.5],
        fixedrange=True,
        showgrid=False,
        zeroline=False,
    )
    axes(layout, "x", showspikes=True, spikemode="across", spikethickness=1, spikedash="dot")
    axes(layout, "x", row=n_plots, title={"text": "time (ms)"})
    if window is not None and detail.window is not None:
        axes(layout, "x", range=[detail.window[0] * 1e3, detail.window[1] * 1e3])
    return fig


def _counter_title(name: str) -> str:
    """A counter's axis title: its device (``gpu1/...`` counters of a run of several GPUs),
    label and unit."""
    label, unit = counter_label(name)
    device = name.rpartition("/")[0]
    return f"{device + ' · ' if device else ''}{label}<br>({_UNITS.get(unit, (unit, 1.0))[0]})"


def _request_traces(run: RunData, y: np.ndarray) -> list[dict]:
    """The prefill and decode bars of each request, at row ``y[i]`` for request row ``i``."""
    req = run.requests
    if not req.size:
        return []
    first = np.where(np.isfinite(req["first_token"]), req["first_token"], req["arrival"])
    traces = []
    for name, lo, hi, colour in (
        ("prefill", req["arrival"], first, PHASE_COLOURS["prefill"]),
        ("decode", first, req["end"], PHASE_COLOURS["decode"]),
    ):
        keep = hi > lo
        if not keep.any():
            continue
        custom = np.stack(
            [req["request"], (first - req["arrival"]) * 1e3, req["decode_tokens"], lo * 1e3],
            axis=1,
        )[keep]
        gpu = np.array([run.gpu_label(g) for g in run.request_gpu], dtype=object)[keep]
        hover = (
            "<b>%{hovertext}request %{customdata[0]}: prefill</b><br>arrives "
            "%{customdata[3]:.4f} ms, first token after %{customdata[1]:.4f} ms (TTFT)"
            if name == "prefill"
            else "<b>%{hovertext}request %{customdata[0]}: decode</b><br>%{customdata[2]} "
            "decode tokens, %{x:.4f} ms"
        )
        traces.append(
            trace(
                "bar",
                orientation="h",
                name=name,
                legendgroup="phase",
                showlegend=False,
                base=lo[keep] * 1e3,
                x=(hi - lo)[keep] * 1e3,
                y=y[keep],
                width=0.8,
                marker={"color": colour, "line": {"width": 0.5, "color": "#FFFFFF"}},
                customdata=custom,
                hovertext=gpu,
                hovertemplate=hover + "<extra></extra>",
            )
        )
    return traces


def _pass_traces(run: RunData, y: np.ndarray, window: tuple[float, float] | None) -> list[dict]:
    """A bar per pass (at row ``y[i]`` for pass row ``i``), coloured by phase; beyond
    ``MAX_PASS_BARS`` only those of the detail window."""
    passes = run.passes
    if not passes.size:
        return []
    keep = np.ones(passes.size, bool)
    if passes.size > MAX_PASS_BARS and window is not None:
        keep = (passes["start"] < window[1]) & (passes["end"] > window[0])
    spans = run.spans
    stall = spans["kind"] == KIND["stall"]
    pos = np.searchsorted(passes["pass_"], np.compress(stall, spans["pass_"]))
    stall_s = np.bincount(
        np.clip(pos, 0, passes.size - 1),
        weights=np.compress(stall, spans["end"]) - np.compress(stall, spans["start"]),
        minlength=passes.size,
    )
    dur = passes["end"] - passes["start"]
    names = ("prefill", "decode")
    colour = np.array([PHASE_COLOURS[k] for k in names], dtype=object)[passes["phase"]]
    phase_name = np.array(names, dtype=object)[passes["phase"]]
    gpu = np.array([run.gpu_label(g) for g in range(len(run.gpus))], dtype=object)[run.pass_gpu]
    token_word = "token" if run.token_serial else "step"
    custom = np.stack(
        [
            passes["pass_"],
            passes["request"],
            run.pass_step,
            passes["start"] * 1e3,
            stall_s * 1e3,
            100 * stall_s / np.where(dur > 0, dur, 1),
        ],
        axis=1,
    )
    return [
        trace(
            "bar",
            orientation="h",
            name="passes",
            showlegend=False,
            base=passes["start"][keep] * 1e3,
            x=dur[keep] * 1e3,
            y=y[keep],
            width=0.8,
            marker={"color": colour[keep], "line": {"width": 0.5, "color": "#FFFFFF"}},
            customdata=custom[keep],
            hovertext=phase_name[keep],
            text=gpu[keep],
            textposition="none",
            hovertemplate=(
                "<b>%{text}pass %{customdata[0]}</b> · request %{customdata[1]} · %{hovertext} · "
                f"{token_word} %{{customdata[2]}}<br>"
                "%{customdata[3]:.4f} ms + %{x:.4f} ms<br>"
                "stall %{customdata[4]:.4f} ms (%{customdata[5]:.1f}% of the pass)"
                "<extra></extra>"
            ),
        )
    ]


def _counter_traces(
    name: str, samples: np.ndarray, run: RunData, window: tuple[float, float] | None
) -> list[dict]:
    """A counter as a step line: exact inside the detail window (and everywhere when it has
    few changes), elsewhere its min-max band and time-weighted mean per bin."""
    label, unit = counter_label(name)
    label = f"{name.rpartition('/')[0]} {label}".lstrip()  # "gpu1 cache used"
    shown, scale = _UNITS.get(unit, ("", 1.0))
    t, v = samples["time"], samples["value"] * scale
    hover = f"{label}: %{{y:.1f}} {shown}<extra></extra>"
    line = {"color": "#555555", "width": 1, "shape": "hv"}
    t_end = max(float(run.metrics.get("makespan_s") or 0.0), float(t.max()))
    segments = [(float(t.min()), t_end)]
    traces: list[dict] = []
    if t.size > MAX_COUNTER_POINTS and window is not None:
        inside = (t >= window[0]) & (t < window[1])
        if inside.sum() <= MAX_COUNTER_POINTS:
            segments = [
                (a, b) for a, b in ((segments[0][0], window[0]), (window[1], t_end)) if b > a
            ]
            k = np.flatnonzero(inside)
            before = max(int(k[0]) - 1, 0) if k.size else 0
            k = np.r_[before, k] if k.size else k
            traces.append(
                trace(
                    "scatter",
                    x=t[k] * 1e3,
                    y=v[k],
                    mode="lines",
                    line=line,
                    name=label,
                    showlegend=False,
                    hovertemplate=hover,
                )
            )
    if t.size <= MAX_COUNTER_POINTS:
        x = np.r_[t, t_end] * 1e3
        return [
            trace(
                "scatter",
                x=x,
                y=np.r_[v, v[-1]],
                mode="lines",
                line=line,
                name=label,
                showlegend=False,
                hovertemplate=hover,
            )
        ]
    total = sum(b - a for a, b in segments)
    for a, b in segments:
        n = max(2, int(MAX_COUNTER_POINTS // 2 * (b - a) / total))
        x, vmin, vmax, mean = step_bins(t, v, a, b, n)
        x = np.r_[x, b] * 1e3
        band = {
            "mode": "lines",
            "line": {"width": 0, "shape": "hv"},
            "showlegend": False,
            "hoverinfo": "skip",
        }
        traces += [
            trace("scatter", x=x, y=np.r_[vmin, vmin[-1]], name=f"{label} (min)", **band),
            trace(
                "scatter",
                x=x,
                y=np.r_[vmax, vmax[-1]],
                name=f"{label} (max)",
                fill="tonexty",
                fillcolor="rgba(85,85,85,0.18)",
                **band,
            ),
            trace(
                "scatter",
                x=x,
                y=np.r_[mean, mean[-1]],
                mode="lines",
                line=line,
                name=f"{label} (mean in bin)",
                showlegend=False,
                hovertemplate=f"mean {hover}",
            ),
        ]
    return traces


def write_timeline(
    run: RunData,
    path: Path,
    max_spans: int = DEFAULT_MAX_SPANS,
    window: tuple[float, float] | None = None,
) -> dict[str, Spec]:
    """Write ``timeline.html`` (the per-resource view, then the per-layer view) as one
    self-contained page; returns the figures by name, as plotly's JSON (``spec.to_figure``
    makes each a ``go.Figure``)."""
    from specmd_sim.report.layers import layer_spec

    figures = {
        "timeline": timeline_spec(run, max_spans, window),
        "layers": layer_spec(run, max_spans, window),
    }
    m = run.metrics
    every = ""  # (a run too long for a trace has none: timeline.untraceable)
    if run.traced:
        every = (
            f" The same spans, with every detail, are in {TRACE_FILE} (open it at ui.perfetto.dev)."
        )
    write_page(
        path,
        f"specmd timeline — {run.title}",
        [
            Block(
                "Timeline",
                f"TTFT {ms(m.get('ttft_s'))} · TPOT {ms(m.get('tpot_s'))} · stall "
                f"{ms(m.get('stall_s'))} · transfer hidden behind compute "
                f"{ms(m.get('overlap_s'))} · makespan {ms(m.get('makespan_s'))}.{every}",
                figures["timeline"],
            ),
            Block(
                "Per layer",
                "Each layer's row: compute (attention, experts, stalls) above, the transfers "
                "that fetch its experts below; the right panel totals each layer's compute and "
                "stall over the run."
                + (" One GPU at a time: choose it in the menu." if len(run.gpus) > 1 else ""),
                figures["layers"],
            ),
        ],
    )
    return figures
