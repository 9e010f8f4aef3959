"""Plotly bar traces shared by the timeline views: exact spans, aggregated bins, markers (as
plotly's JSON: :mod:`~specmd_sim.report.spec`).

Time is drawn in milliseconds on x; rows are numeric y positions (the caller's lane or layer
layout), so bars of any thickness can share a row. Spans are grouped into one trace per
(kind, lane): the lane's name is then part of the trace's hover template instead of a string
per bar, and numeric per-bar data travels as compact typed arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specmd_sim.report.lod import Bins, Detail, bin_bars
from specmd_sim.report.run_data import RunData
from specmd_sim.report.spec import trace
from specmd_sim.report.style import CLASS_LABELS, class_label, kind_colour, kind_label, ms
from specmd_sim.runs import TRACE_FILE
from specmd_sim.timeline import KINDS, TRANSFER_KINDS, lane_process

_CLASS_TEXT = np.array([""] + [CLASS_LABELS[c] for c in sorted(CLASS_LABELS)], dtype=object)
_UNUSED = class_label(-1, transfer=True)
_CONCURRENCY = "<br>average concurrency %{customdata[6]:.2f}"


def _where(token_word: str) -> str:
    return f"pass %{{customdata[0]}} · request %{{customdata[1]}} · {token_word} %{{customdata[2]}}"


def span_hover(kind: str, lane: str, token_word: str) -> str:
    """Hover template of an exact span of ``kind`` on ``lane``. customdata columns: pass,
    request, step, layer, expert in layer, flat expert id, MiB, start (ms)."""
    head = (
        f"<b>{kind_label(kind)}</b> · {lane}<br>"
        "%{customdata[7]:.4f} ms + %{x:.4f} ms<br>" + _where(token_word)
    )
    expert = "expert %{customdata[4]} (id %{customdata[5]})"
    if kind in ("attention", "copy_issue"):
        body = "<br>layer %{customdata[3]}"
    elif kind == "lm_head":
        body = ""
    elif kind == "stall":
        body = f"<br>layer %{{customdata[3]}} · waiting for {expert}<br>access: %{{hovertext}}"
    elif kind in TRANSFER_KINDS:
        body = (
            f"<br>{expert} of layer %{{customdata[3]}} · %{{customdata[6]:.2f}} MiB"
            "<br>serves: %{hovertext}"
        )
    else:
        body = f"<br>layer %{{customdata[3]}} · {expert}<br>access: %{{hovertext}}"
    return head + body + "<extra></extra>"


def span_traces(
    run: RunData,
    idx: np.ndarray,
    y: np.ndarray,
    thickness: float | np.ndarray,
    legend: set[str],
    opacity: float = 1.0,
) -> list[dict]:
    """One bar trace per (kind, lane) for the spans ``idx`` at rows ``y`` (same length); on a
    run of several GPUs, one per GPU served on a lane of another device (``host0/cpu-experts
    for gpu1``).

    ``legend`` collects the kinds already in the legend, so each kind is listed once and its
    traces toggle together (legend group = kind).
    """
    spans = run.spans
    lanes = run.require_spans("timeline").lanes
    s = spans[idx]
    thick = np.broadcast_to(np.asarray(thickness, dtype=np.float64), idx.shape)
    pass_row = np.searchsorted(run.passes["pass_"], s["pass_"])
    pass_row = np.clip(pass_row, 0, max(len(run.passes) - 1, 0))
    step = np.where(s["pass_"] >= 0, run.pass_step[pass_row] if len(run.passes) else -1, -1)
    flat = s["expert"].astype(np.int64)
    custom = np.stack(
        [
            s["pass_"],
            s["request"],
            step,
            s["layer"],
            np.where(flat >= 0, flat % run.num_experts, -1),
            flat,
            s["bytes"] / 2**20,
            s["start"] * 1e3,
        ],
        axis=1,
    ).astype(np.float64)
    klass = run.classes[idx]
    token_word = "token" if run.token_serial else "step"
    # on several GPUs, a lane of another device (the host's CPU experts) serves them all: a
    # trace per GPU served, its hover naming that GPU
    gpu = run.span_gpu[idx] if len(run.gpus) > 1 else np.full(idx.size, -1, np.int64)
    traces: list[dict] = []
    for kind_id, kind in enumerate(KINDS):
        of_kind = s["kind"] == kind_id
        for lane_id in np.unique(s["lane"][of_kind]).tolist():
            on_lane = of_kind & (s["lane"] == lane_id)
            lane = lanes[lane_id]
            served = [-1]
            if len(run.gpus) > 1 and lane_process(lane) not in run.gpus:
                served = np.unique(gpu[on_lane]).tolist()
            for g in served:
                m = on_lane & (gpu == g) if g >= 0 else on_lane
                where = f"{lane} for {run.gpus[g]}" if g >= 0 else lane
                traces.append(_span_trace(s, m, y, thick, custom, klass, kind, where,
                                          token_word, legend, opacity))  # fmt: skip
                legend.add(kind)
    return traces


def _span_trace(
    s: np.ndarray,
    m: np.ndarray,
    y: np.ndarray,
    thick: np.ndarray,
    custom: np.ndarray,
    klass: np.ndarray,
    kind: str,
    lane: str,
    token_word: str,
    legend: set[str],
    opacity: float,
) -> dict:
    """The bar trace of the spans ``s[m]`` (of ``kind``, on ``lane``)."""
    text = _CLASS_TEXT[klass[m].astype(np.int64) + 1]
    if kind in TRANSFER_KINDS:
        text = np.where(klass[m] < 0, _UNUSED, text)
    return trace(
        "bar",
        orientation="h",
        name=kind_label(kind),
        legendgroup=kind,
        showlegend=kind not in legend,
        base=s["start"][m] * 1e3,
        x=(s["end"][m] - s["start"][m]) * 1e3,
        y=y[m],
        width=thick[m],
        marker={"color": kind_colour(kind), "line": {"width": 0}},
        opacity=opacity,
        customdata=custom[m],
        hovertext=text if kind not in ("attention", "lm_head", "copy_issue") else None,
        hovertemplate=span_hover(kind, lane, token_word),
    )


def bin_traces(
    bins: Bins,
    y_of_row: np.ndarray,
    thickness: float,
    row_names: Sequence[str],
    legend: set[str],
) -> list[dict]:
    """One bar trace per kind for the aggregated ``bins`` (see :mod:`specmd_sim.report.lod`)."""
    traces: list[dict] = []
    for kind, bars in bin_bars(bins).items():
        custom = np.stack(
            [
                bars["lo"] * 1e3,
                bars["hi"] * 1e3,
                bars["busy"] * 1e3,
                bars["share"] * 100,
                bars["count"],
                bars["bytes"] / 2**20,
                bars["concurrency"],
            ],
            axis=1,
        )
        traces.append(
            trace(
                "bar",
                orientation="h",
                name=f"{kind_label(kind)} (aggregated)",
                legendgroup=kind,
                showlegend=kind not in legend,
                base=bars["base"] * 1e3,
                x=bars["length"] * 1e3,
                y=y_of_row[bars["row"]],
                width=thickness,
                marker={"color": kind_colour(kind), "line": {"width": 0}},
                opacity=0.7,
                customdata=custom,
                hovertext=np.asarray(row_names, dtype=object)[bars["row"]],
                hovertemplate=(
                    f"<b>{kind_label(kind)}</b> · %{{hovertext}} · aggregated<br>"
                    "bin %{customdata[0]:.3f} – %{customdata[1]:.3f} ms<br>"
                    "busy %{customdata[2]:.3f} ms (%{customdata[3]:.1f}% of the bin)<br>"
                    "%{customdata[4]} spans start here · %{customdata[5]:.1f} MiB"
                    + (_CONCURRENCY if kind in TRANSFER_KINDS else "")
                    + "<extra></extra>"
                ),
            )
        )
        legend.add(kind)
    return traces


def detail_note(detail: Detail, bins: Bins | None, unit: str = "spans", traced: bool = True) -> str:
    """One line saying what the figure draws exactly and what it aggregates (and, where the
    run folder has its trace, that the trace holds every span)."""
    if detail.complete:
        return f"All {detail.total:,} {unit} drawn one by one."
    lo, hi = detail.window or (0.0, 0.0)
    text = f"{detail.shown:,} of {detail.total:,} {unit} drawn one by one ({ms(lo)}–{ms(hi)})"
    if bins is not None and bins.size:
        text += (
            f"; the rest summarised in {bins.size:,} bins of {ms(bins.width)} "
            "(bar length = busy time in the bin)"
        )
    return text + (f". Every span is in {TRACE_FILE}." if traced else ".")


def window_shapes(detail: Detail, bins: Bins | None, yref: str = "y") -> list[dict]:
    """Grey backgrounds over the aggregated time ranges."""
    if detail.complete or bins is None or not bins.size:
        return []
    shapes = []
    gaps = np.flatnonzero(bins.lo[1:] > bins.hi[:-1] + 1e-12)
    starts = np.r_[0, gaps + 1]
    ends = np.r_[gaps, bins.size - 1]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": f"{yref} domain",
                "x0": bins.lo[a] * 1e3,
                "x1": bins.hi[b] * 1e3,
                "y0": 0,
                "y1": 1,
                "fillcolor": "#F3F3F3",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return shapes


def ttft_marks(
    run: RunData,
    y: float | np.ndarray,
    yanchor: str = "middle",
    limit: int = 24,
    gpu: int | None = None,
) -> tuple[list[dict], list[dict]]:
    """Dashed vertical lines (shapes) at each request's first token, labelled with its TTFT at
    height ``y`` of the first y axis (one height, or one per row of ``run.requests``); only
    the requests of GPU ``gpu`` (an index into ``run.gpus``) when given; none beyond ``limit``
    requests (the timeline's request lane still shows where each prefill ends)."""
    req = run.requests
    heights = np.broadcast_to(np.asarray(y, dtype=np.float64), req.shape)
    keep = np.isfinite(req["first_token"])
    if gpu is not None:
        keep &= run.request_gpu == gpu
    req, heights = req[keep], heights[keep]
    if not req.size or req.size > limit:
        return [], []
    shapes, notes = [], []
    for r, height in zip(req, heights.tolist(), strict=True):
        x = float(r["first_token"]) * 1e3
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#333333", "width": 1, "dash": "dash"},
            }
        )
        ttft = ms(float(r["first_token"] - r["arrival"]))
        notes.append(
            {
                "x": x,
                "xref": "x",
                "y": height,
                "yref": "y",
                "yanchor": yanchor,
                "xanchor": "left",
                "text": f"first token r{int(r['request'])} · TTFT {ttft}",
                "showarrow": False,
                "font": {"size": 10, "color": "#222222"},
                "bgcolor": "rgba(255,255,255,0.75)",
            }
        )
    return shapes, notes
