"""Routing traces: the format (numpy arrays), ``.npz`` io, validation, statistics and a seeded
synthetic generator."""

from typing import TYPE_CHECKING, Any

from specmd_sim.traces.io import list_bundled_traces, load_trace, save_trace
from specmd_sim.traces.trace import Trace, make_trace

if TYPE_CHECKING:
    from specmd_sim.traces.synthetic import PRESETS, SyntheticParams
    from specmd_sim.traces.synthetic import generate as generate_trace

__all__ = [
    "PRESETS",
    "SyntheticParams",
    "Trace",
    "generate_trace",
    "list_bundled_traces",
    "load_trace",
    "make_trace",
    "save_trace",
]


def __getattr__(name: str) -> Any:
    """The generator's names, imported on first use (a run of a trace file does not need it)."""
    if name in ("PRESETS", "SyntheticParams", "generate_trace"):
        from specmd_sim.traces import synthetic

        return getattr(synthetic, "generate" if name == "generate_trace" else name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
