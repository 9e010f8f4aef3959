"""Load and list runtime profiles: by bundled id (``hf-eager``) or by a YAML file path."""

from __future__ import annotations

from pathlib import Path

from specmd_sim._data import data_dir
from specmd_sim.hardware.loader import load_bundled
from specmd_sim.runtime.schema import RuntimeProfile

DEFAULT_RUNTIME = "fused-kernels"


def runtime_dir() -> Path:
    return data_dir("runtime_profiles")


def list_runtimes() -> list[str]:
    """Ids of the bundled runtimes, sorted."""
    return sorted(p.stem for p in runtime_dir().glob("*.yaml"))


def load_runtime(ref: str | Path) -> RuntimeProfile:
    """Load a runtime by bundled id or by path to a YAML file; validate it."""
    return load_bundled(ref, runtime_dir(), list_runtimes(), RuntimeProfile, "runtime profile")
