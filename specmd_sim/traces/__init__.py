"""Routing traces: the format (numpy arrays), ``.npz`` io, validation, statistics and a seeded
synthetic generator."""

from specmd_sim.traces.io import list_bundled_traces, load_trace, save_trace
from specmd_sim.traces.synthetic import PRESETS, SyntheticParams
from specmd_sim.traces.synthetic import generate as generate_trace
from specmd_sim.traces.trace import Trace, make_trace

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
