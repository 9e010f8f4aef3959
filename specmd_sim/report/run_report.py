"""``specmd report RUN_DIR``: one run on one page.

Headline numbers, the run's inputs, every metric, the miss taxonomy per layer, prefetch
accounting and, for timing-engine runs, the stall breakdown (per layer and cause, per phase) and
the TTFT decomposition (per request, and per layer). Replay runs have no timing, so their page
stops after the prefetch accounting and says so.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specmd_sim.cache.states import AccessClass
from specmd_sim.metric_spec import PERCENTILES
from specmd_sim.metrics import METRICS, TABLES
from specmd_sim.report.analysis import (
    STALL_CAUSES,
    request_parts,
    stall_by_cause,
    stall_by_phase,
    ttft_breakdown,
)
from specmd_sim.report.html import Block, cards_html, table_html, write_page
from specmd_sim.report.run_data import RunData
from specmd_sim.report.style import (
    CLASS_COLOURS,
    CLASS_LABELS,
    PHASE_COLOURS,
    base_layout,
    kind_colour,
    ms,
)
from specmd_sim.runs import CHROME_TRACE_FILE, TIMELINE_FILE, TRACE_FILE
from specmd_sim.units import format_bytes

_TAXONOMY = (
    ("hits", AccessClass.HIT),
    ("late_hits", AccessClass.LATE_HIT),
    ("misses_compulsory", AccessClass.COMPULSORY),
    ("misses_capacity", AccessClass.CAPACITY),
    ("misses_collision", AccessClass.COLLISION),
)
_OTHER_COLOUR = "#BAB0AC"
_CARDS = ("hit_rate", "late_hits", "misses_collision", "ttft_s", "ttft_p99_s", "tpot_s",
          "tpot_p99_s", "itl_p99_s", "slo_attainment", "goodput_rps", "stall_s", "overlap_s",
          "makespan_s")  # fmt: skip


def taxonomy_figure(run: RunData) -> go.Figure:
    """Accesses per layer, stacked by class."""
    table = run.per_layer
    layers = np.asarray(table["layer"])
    accesses = np.maximum(np.asarray(table["accesses"], dtype=np.float64), 1)
    fig = go.Figure()
    for key, klass in _TAXONOMY:
        counts = np.asarray(table.get(key, np.zeros(layers.size)), dtype=np.float64)
        fig.add_bar(
            x=layers,
            y=counts,
            name=CLASS_LABELS[klass],
            marker_color=CLASS_COLOURS[klass],
            customdata=counts / accesses,
            hovertemplate=f"layer %{{x}}: %{{y}} {CLASS_LABELS[klass]}"
            " (%{customdata:.1%} of its accesses)<extra></extra>",
        )
    m = run.metrics
    fig.update_layout(
        **base_layout(
            "Miss taxonomy per layer",
            f"{m['accesses']:,} accesses{_of_all(run)}: {m['hit_rate']:.1%} hits, "
            f"{m['late_hits']:,} late hits, misses {m['misses_compulsory']:,} compulsory / "
            f"{m['misses_capacity']:,} capacity / {m['misses_collision']:,} collision "
            "(evicted earlier in the same pass).",
            plot_height=340,
        ),
        barmode="stack",
        bargap=0.15,
    )
    fig.update_xaxes(title_text="MoE layer", dtick=1 if layers.size <= 64 else None)
    fig.update_yaxes(title_text="accesses")
    return fig


def prefetch_figure(run: RunData) -> go.Figure:
    """Prefetch accounting and the bytes moved for demand and prefetch."""
    m = run.metrics
    keys: tuple[str, ...] = (
        "prefetch_issued", "prefetch_completed", "prefetch_used", "prefetch_wasted",
        "prefetch_cancelled", "prefetch_dropped",
    )  # fmt: skip
    keys = tuple(k for k in keys if k in m)
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.65, 0.35], horizontal_spacing=0.16,
        subplot_titles=["prefetches", "bytes moved"],
    )  # fmt: skip
    fig.add_bar(
        y=[k.removeprefix("prefetch_") for k in keys],
        x=[m[k] for k in keys],
        orientation="h",
        marker_color=kind_colour("prefetch"),
        hovertemplate="%{y}: %{x:,}<extra></extra>",
        showlegend=False,
        row=1,
        col=1,
    )
    fig.add_bar(
        y=["demand", "prefetch"],
        x=[m.get("bytes_demand", 0) / 2**30, m.get("bytes_prefetch", 0) / 2**30],
        orientation="h",
        marker_color=[kind_colour("demand_fetch"), kind_colour("prefetch")],
        hovertemplate="%{y}: %{x:.2f} GiB<extra></extra>",
        showlegend=False,
        row=1,
        col=2,
    )
    issued = m.get("prefetch_issued") or 0
    used = m.get("prefetch_used") or 0
    fig.update_layout(
        **base_layout(
            "Prefetching",
            f"{issued:,} prefetches issued{_of_all(run)}, {used / issued:.1%} of them used "
            "before eviction."
            if issued
            else "No prefetches were issued.",
            plot_height=230,
            subplot_titles=True,
        )
    )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="count", row=1, col=1)
    fig.update_xaxes(title_text="GiB", row=1, col=2)
    return fig


def stall_figure(run: RunData) -> go.Figure:
    """Stall per layer by cause, and per phase."""
    by_cause = stall_by_cause(run) * 1e3
    by_phase = stall_by_phase(run)
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.78, 0.22], horizontal_spacing=0.08,
        subplot_titles=["per layer, by what the compute stream waited for", "per phase"],
    )  # fmt: skip
    layers = np.arange(run.num_layers)
    for j, cause in enumerate(STALL_CAUSES):
        fig.add_bar(
            x=layers, y=by_cause[:, j], name=f"waiting on a {CLASS_LABELS[cause]}",
            marker_color=CLASS_COLOURS[cause], row=1, col=1,
            hovertemplate=f"layer %{{x}}: %{{y:.4g}} ms waiting on {CLASS_LABELS[cause]}es"
            "<extra></extra>",
        )  # fmt: skip
    fig.add_bar(
        x=list(by_phase), y=[v * 1e3 for v in by_phase.values()], showlegend=False,
        marker_color=[PHASE_COLOURS["prefill"], PHASE_COLOURS["decode"]], row=1, col=2,
        hovertemplate="%{x}: %{y:.4g} ms<extra></extra>",
    )  # fmt: skip
    total = run.metrics.get("stall_s") or 0.0
    late = by_cause[:, 0].sum() / 1e3
    fig.update_layout(
        **base_layout(
            "Stall breakdown",
            f"The compute stream{_of_gpus(run)} waited {ms(total)} in all ({ms(late)} for "
            "prefetches still in flight, the rest for demand fetches of missed experts); "
            f"{ms(run.metrics.get('overlap_s'))} of transfer time was hidden behind compute.",
            plot_height=330,
            subplot_titles=True,
        ),
        barmode="stack",
    )
    fig.update_xaxes(title_text="MoE layer", dtick=1 if run.num_layers <= 64 else None,
                     row=1, col=1)  # fmt: skip
    fig.update_yaxes(title_text="stall (ms)", row=1, col=1)
    fig.update_yaxes(title_text="stall (ms)", row=1, col=2)
    return fig


def _of_all(run: RunData) -> str:
    """``" (all 4 GPUs)"`` (summed) on a run of several GPUs, else ``""``."""
    return f" (all {len(run.gpus)} GPUs)" if len(run.gpus) > 1 else ""


def _of_gpus(run: RunData) -> str:
    """``"s of the 4 GPUs"`` (summed) on a run of several GPUs, else ``""``."""
    return f"s of the {len(run.gpus)} GPUs" if len(run.gpus) > 1 else ""


def _request_labels(run: RunData, requests: np.ndarray) -> list[str]:
    """``request 3``, or ``request 3 · gpu1`` on a run of several GPUs."""
    if len(run.gpus) == 1:
        return [f"request {int(x)}" for x in requests]
    gpu_of = dict(zip(run.requests["request"].tolist(), run.request_gpu.tolist(), strict=True))
    return [f"request {int(x)} · {run.gpus[gpu_of[int(x)]]}" for x in requests]


def ttft_figure(run: RunData) -> go.Figure:
    """TTFT per request split into compute, stall and other; TPOT likewise where the engine
    reports it; and TTFT per layer."""
    b = ttft_breakdown(run)
    r = b.requests
    tpot = request_parts(run, "tpot")
    panels = ["TTFT per request"] + (["TPOT per request"] if tpot.size else [])
    panels.append("TTFT per layer (mean over requests)")
    widths = [0.32, 0.28, 0.40] if tpot.size else [0.45, 0.55]
    fig = make_subplots(
        rows=1, cols=len(panels), column_widths=widths, horizontal_spacing=0.08,
        subplot_titles=panels,
    )  # fmt: skip
    parts = (("compute", kind_colour("expert")), ("stall", kind_colour("stall")),
             ("other", _OTHER_COLOUR))  # fmt: skip
    labels = _request_labels(run, r["request"])
    for name, colour in parts:
        fig.add_bar(
            y=labels, x=r[name] * 1e3, orientation="h", name=name, marker_color=colour,
            legendgroup=name, row=1, col=1,
            customdata=100 * r[name] / np.where(r["total"] > 0, r["total"], 1),
            hovertemplate=f"%{{y}}: {name} %{{x:.4g}} ms (%{{customdata:.1f}}% of TTFT)"
            "<extra></extra>",
        )  # fmt: skip
    if tpot.size:
        for name, colour in parts:
            fig.add_bar(
                y=_request_labels(run, tpot["request"]), x=tpot[name] * 1e3,
                orientation="h", name=name, marker_color=colour, legendgroup=name,
                showlegend=False, row=1, col=2,
                hovertemplate=f"%{{y}}: {name} %{{x:.4g}} ms per output token<extra></extra>",
            )  # fmt: skip
        fig.update_yaxes(autorange="reversed", row=1, col=2)
        fig.update_xaxes(title_text="ms per token", row=1, col=2)
    layers = np.arange(run.num_layers)
    for name, values in (("compute", b.layer_compute), ("stall", b.layer_stall)):
        fig.add_bar(
            x=layers, y=values * 1e3, name=name, showlegend=False, legendgroup=name,
            marker_color=dict(parts)[name], row=1, col=len(panels),
            hovertemplate=f"layer %{{x}}: {name} %{{y:.4g}} ms<extra></extra>",
        )  # fmt: skip
    mean = float(r["total"].mean()) if r.size else None
    share = float(r["stall"].sum() / r["total"].sum()) if r.size and r["total"].sum() else 0.0
    fig.update_layout(
        **base_layout(
            "TTFT decomposition",
            f"Mean TTFT {ms(mean)} over {r.size} request(s); {share:.0%} of it is stall "
            "(exposed transfer). Other = TTFT − compute − stall (the stream idle).",
            plot_height=max(260, 26 * r.size + 120),
            subplot_titles=True,
        ),
        barmode="stack",
    )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="ms", row=1, col=1)
    fig.update_xaxes(title_text="MoE layer", dtick=1 if run.num_layers <= 64 else None,
                     row=1, col=len(panels))  # fmt: skip
    fig.update_yaxes(title_text="ms", row=1, col=len(panels))
    return fig


def latency_figure(run: RunData) -> go.Figure | None:
    """The distributions of TTFT and TPOT over requests (empirical CDFs, from ``per_request``)
    with the run's p50/p90/p99 marked and its SLO limits drawn; None without requests."""
    table = run.result.get("per_request") or {}
    series = [
        (name, np.sort([v for v in table.get(f"{name}_s", []) if v is not None]))
        for name in ("ttft", "tpot")
    ]
    series = [(name, values) for name, values in series if values.size]
    if not series:
        return None
    slo = run.config.get("slo") or {}
    titles = [f"{n.upper()} over requests" for n, _ in series]
    fig = make_subplots(rows=1, cols=len(series), horizontal_spacing=0.1, subplot_titles=titles)
    for col, (name, values) in enumerate(series, start=1):
        share = np.arange(1, values.size + 1) / values.size
        fig.add_scatter(
            x=values * 1e3, y=share, mode="lines+markers", line_shape="hv", name=name.upper(),
            showlegend=False, row=1, col=col, marker_color=kind_colour("expert"),
            hovertemplate=f"{name.upper()} ≤ %{{x:.4g}} ms: %{{y:.0%}} of requests<extra></extra>",
        )  # fmt: skip
        limit = slo.get(f"{name}_s")
        if limit is not None:
            fig.add_vline(x=limit * 1e3, line_dash="dash", line_color=kind_colour("stall"),
                          annotation_text="SLO", row=1, col=col)  # fmt: skip
        fig.update_xaxes(title_text="ms", row=1, col=col)
        fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=col)
    m = run.metrics

    def tail(name: str) -> str:
        return " / ".join(ms(m.get(f"{name}_p{q}_s")) for q in PERCENTILES)

    marks = [f"p50 / p90 / p99: TTFT over requests {tail('ttft')}; TPOT over decode passes "
             f"{tail('tpot')}; inter-token latency over tokens {tail('itl')}"]  # fmt: skip
    if "slo_attainment" in m:
        met = METRICS["slo_attainment"].format(m["slo_attainment"])
        goodput = METRICS["goodput_rps"].format(m["goodput_rps"])
        marks.append(f"SLO met by {met} of requests, goodput {goodput}")
    fig.update_layout(**base_layout("Latency distributions", "<br>".join(marks), plot_height=260,
                                    subplot_titles=True))  # fmt: skip
    return fig


def _section(cfg: dict[str, Any], name: str) -> str:
    section = cfg.get(name)
    if not isinstance(section, dict):
        return str(section)
    params = ", ".join(f"{k}={v}" for k, v in sorted(section.items()) if k != "kind")
    return f"{section.get('kind')}" + (f" ({params})" if params else "")


def metric_rows(metrics: dict[str, Any]) -> list[list[str]]:
    """The "All metrics" table: name, label and value in its unit, by name."""
    return [[name, METRICS[name].label, METRICS[name].format(value)]
            for name, value in sorted(metrics.items())]  # fmt: skip


def table_rows(name: str, table: dict[str, list[Any]]) -> list[list[str]]:
    """The rows of one of ``result.json``'s tables, every value in its column's unit."""
    columns = TABLES[name].columns
    formats = [columns[c].format for c in table]
    return [[f(v) for f, v in zip(formats, values, strict=True)]
            for values in zip(*table.values(), strict=True)]  # fmt: skip


def run_figures(run: RunData) -> dict[str, go.Figure]:
    """The report's figures by name (the timing ones only for runs with spans)."""
    figures = {"taxonomy": taxonomy_figure(run), "prefetch": prefetch_figure(run)}
    if run.recording is not None:
        figures["stall"] = stall_figure(run)
        figures["ttft"] = ttft_figure(run)
    latency = latency_figure(run) if run.engine != "replay" else None
    if latency is not None:
        figures["latency"] = latency
    return figures


def write_run_report(run: RunData, path: Path) -> dict[str, go.Figure]:
    """Write the one-run report page; returns its figures by name."""
    m, i, cfg = run.metrics, run.inputs, run.config
    figures = run_figures(run)
    cards = [(METRICS[k].label, METRICS[k].format(m[k])) for k in _CARDS if k in m]
    facts: list[list[object]] = [  # (a row: the input's name, its value)
        ["engine", run.engine],
        ["model", f"{i['model']} ({i['num_layers']} layers × {i['num_experts']} experts, "
                  f"top-{i['top_k']}, {format_bytes(i['expert_bytes'])} per expert)"],
        ["hardware", f"{i['hardware']} (lowest grade used: {run.result.get('hardware_grade')})"],
        ["trace", f"{cfg.get('trace')} ({i['trace_tokens']} tokens, {i['passes']} passes, "
                  f"{i['requests']} requests)"],
        ["cache", f"{cfg['cache']['capacity']} = {i['capacity_slots']} slots "
                  f"({format_bytes(i['capacity_bytes'])})"],
    ]  # fmt: skip
    for name in ("eviction", "prefetch", "predictor", "miss", "admission"):
        if name in cfg:
            facts.append([name, _section(cfg, name)])
    facts.append(["seed", cfg.get("seed")])
    links = []
    if run.run_dir is not None:
        for name, what in ((TIMELINE_FILE, "timeline"), (TRACE_FILE, "Perfetto trace"),
                           (CHROME_TRACE_FILE, "Chrome trace"),  # specmd chrome's, an older
                           ("trace.json", "Chrome trace"),  # run folder's, or one older still
                           ("result.json", "result.json"), ("config.yaml", "config")):  # fmt: skip
            if (run.run_dir / name).is_file():
                links.append(f'<a href="{name}">{what}</a>')
    blocks = [
        Block(
            "Summary", html=cards_html(cards) + table_html(["input", "value"], facts, numeric=())
        ),
        Block("Where accesses hit and miss", figures=figures["taxonomy"]),
        Block("Prefetching", figures=figures["prefetch"]),
    ]
    if "stall" in figures:
        blocks += [
            Block("Where the stall comes from", figures=figures["stall"]),
            Block("What TTFT is made of", figures=figures["ttft"]),
        ]
    else:
        note = (
            "This is a replay run (no timing): stall and TTFT need the timing engine "
            "(`specmd run`)."
            if run.engine != "simulate"
            else "This run recorded no spans (timing.record_spans: false): stall and TTFT "
            "breakdowns need them."
        )
        blocks.append(Block("Timing", html=f'<p class="note">{html.escape(note)}</p>'))
    if "latency" in figures:
        blocks.append(Block("Latency distributions", figures=figures["latency"]))
    for title, key, label in (
        ("Resources", "per_resource", "resource"),
        ("GPUs", "per_gpu", "gpu"),
    ):
        table = run.result.get(key) or {}
        if len(table.get(label, [])) > (0 if key == "per_resource" else 1):
            blocks.append(Block(title, html=table_html(list(table), table_rows(key, table))))
    blocks.append(
        Block(
            "All metrics",
            html=table_html(["metric", "label", "value"], metric_rows(m), numeric=(2,)),
        )
    )
    write_page(path, f"specmd report — {run.title}", blocks, subtitle_html=" · ".join(links))
    return figures
