"""Colours, labels and number formats shared by every figure, so that a kind or an access class
looks the same in the timeline, the per-layer view and the reports.

Kinds and classes not listed here (a kind a later engine records) get a colour from
:data:`SPARE_COLOURS` by position and a label made from their name.
"""

from __future__ import annotations

import re

from specmd_sim.cache.states import AccessClass
from specmd_sim.timeline import KINDS
from specmd_sim.units import format_seconds

KIND_COLOURS = {
    "attention": "#4C78A8",
    "expert": "#54A24B",
    "cpu_expert": "#9D755D",
    "lm_head": "#B279A2",
    "stall": "#E45756",
    "demand_fetch": "#F58518",
    "prefetch": "#72B7B2",
    "promoted_prefetch": "#2F7F7A",
    "streamed": "#C4561A",
    "write_back": "#D4A6C8",
    "nvme_read": "#8F6D31",
    "copy_issue": "#79706E",
}
KIND_LABELS = {
    "attention": "attention",
    "expert": "expert compute",
    "cpu_expert": "CPU expert",
    "lm_head": "LM head",
    "stall": "stall",
    "demand_fetch": "demand fetch",
    "prefetch": "prefetch",
    "promoted_prefetch": "prefetch needed early (late hit)",
    "streamed": "streamed past the cache",
    "write_back": "write-back",
    "nvme_read": "NVMe read into DRAM",
    "copy_issue": "issuing copies (host)",
}
SPARE_COLOURS = ("#EECA3B", "#FF9DA6", "#BAB0AC", "#439894", "#D67195", "#8F6D31")

CLASS_LABELS = {
    AccessClass.HIT: "hit",
    AccessClass.LATE_HIT: "late hit",
    AccessClass.COMPULSORY: "compulsory miss",
    AccessClass.CAPACITY: "capacity miss",
    AccessClass.COLLISION: "collision miss",
}
CLASS_COLOURS = {
    AccessClass.HIT: "#54A24B",
    AccessClass.LATE_HIT: "#EECA3B",
    AccessClass.COMPULSORY: "#9D755D",
    AccessClass.CAPACITY: "#F58518",
    AccessClass.COLLISION: "#E45756",
}
PHASE_COLOURS = {"prefill": "#F2CF9B", "decode": "#C9D6E8"}
FONT = "Inter, 'Segoe UI', Helvetica, Arial, sans-serif"


def kind_colour(kind: str) -> str:
    if kind in KIND_COLOURS:
        return KIND_COLOURS[kind]
    return SPARE_COLOURS[KINDS.index(kind) % len(SPARE_COLOURS)] if kind in KINDS else "#888888"


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def class_label(klass: int, transfer: bool = False) -> str:
    """Label of an access class; -1 is "" (no access), or for a transfer "unused by its target
    layer" (a prefetch whose layer did not run that expert)."""
    if klass < 0:
        return "unused by its target layer" if transfer else ""
    return CLASS_LABELS[AccessClass(klass)]


def ms(seconds: float | None) -> str:
    """A duration with an SI prefix and 4 significant digits (``'511 ms'``, ``'14.78 s'``);
    ``'–'`` for None."""
    return "–" if seconds is None else format_seconds(seconds)


_UI_HINT = '<span style="font-style:italic">{}</span>'
_UI_HINT_RE = re.compile(r'(<br>| )?<span style="font-style:italic">.*?</span>')


def ui_hint(text: str) -> str:
    """Text on how to use the interactive page (drag to zoom, click, the menu): italic on the
    page, and left out of exported images, where there is nothing to drag or click."""
    return _UI_HINT.format(text)


def without_ui_hints(text: str) -> str:
    """``text`` without its :func:`ui_hint` parts (and the line break or space before each)."""
    return _UI_HINT_RE.sub("", text)


def base_layout(
    title: str,
    subtitle: str = "",
    plot_height: int = 400,
    subplot_titles: bool = False,
    legend: str = "top",
) -> dict:
    """Layout settings every figure shares: the title and subtitle (lines joined by ``<br>``)
    at the top left, ``plot_height`` pixels of plot area, and the legend either in its own
    row right above the plot (``"top"``, above the subplot titles where there are some: for a
    few short entries) or in a column right of the plot (``"right"``: any number of entries,
    never over the title)."""
    lines = subtitle.count("<br>") + 1 if subtitle else 0
    titles = 24 if subplot_titles else 0
    top = 48 + 17 * lines + (30 if legend == "top" else 0) + titles
    place = (
        {"orientation": "h", "yanchor": "bottom", "y": 1.0 + titles / plot_height, "x": 0.0,
         "xanchor": "left"}
        if legend == "top"
        else {"orientation": "v", "yanchor": "top", "y": 1.0, "x": 1.02, "xanchor": "left"}
    )  # fmt: skip
    return {
        "title": {
            "text": title,
            "subtitle": {"text": subtitle, "font": {"size": 12, "color": "#555555"}},
            "x": 0.005,
            "xanchor": "left",
            "xref": "container",
            "y": 1,
            "yanchor": "top",
            "yref": "container",
            "pad": {"t": 12},
        },
        "template": "plotly_white",
        "font": {"family": FONT, "size": 12},
        "height": plot_height + top + 60,
        "margin": {"l": 120, "r": 30, "t": top, "b": 60},
        "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"},
        "legend": {**place, "yref": "paper", "font": {"size": 11}},
    }
