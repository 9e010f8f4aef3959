"""The configs the real executor is calibrated and validated on.

A work folder holds the scaled model (``model.yaml``), the routing traces (synthetic, from the
OLMoE preset's statistics with the model's shape, or a given trace) and the calibrated profiles
(``hardware.yaml``, ``runtime.yaml``). The calibration configs (dry runs that measure the
executor's own cost) use other traces and a policy setup outside the validation matrix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specmd_sim.atomic import write_text
from specmd_sim.config import SimConfig, build_config
from specmd_sim.models import ModelSpec
from specmd_sim.traces.io import save_trace
from specmd_sim.traces.synthetic import PRESETS, generate


def write_model(model: ModelSpec, folder: Path) -> Path:
    path = folder / "model.yaml"
    return write_text(path, yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False))


def synthetic_trace(model: ModelSpec, folder: Path, name: str, seed: int, **shape: int) -> Path:
    """A trace with the OLMoE preset's routing statistics and ``model``'s shape."""
    params = PRESETS["olmoe"].model_copy(update={"model": base_model(model), **shape})
    return save_trace(generate(params, seed), folder / f"{name}.npz")


def base_model(model: ModelSpec) -> str:
    """The catalog model a scaled model (``<id>-div<scale>``) was made from."""
    return model.id.split("-div")[0]


def calibration_configs(model: ModelSpec, seed: int, folder: Path) -> list[SimConfig]:
    """Two dry-run configs (LRU, no prefetch, 10% cache) that separate the executor's cost
    per layer from its cost per access: token-serial decode, and prefill in chunks of 16; their
    files go into ``folder``."""
    model_path = write_model(model, folder)
    decode = synthetic_trace(model, folder, "cal-decode", seed + 100, num_requests=1,
                             prompt_tokens=4, decode_tokens=28)  # fmt: skip
    prefill = synthetic_trace(model, folder, "cal-prefill", seed + 101, num_requests=2,
                              prompt_tokens=48, decode_tokens=2)  # fmt: skip
    common: dict[str, Any] = {
        "model": str(model_path), "hardware": "h100-pcie", "runtime": "roofline",
        "cache": {"capacity": "10%"}, "eviction": {"kind": "lru"}, "prefetch": {"kind": "none"},
        "timing": {"record_spans": False}, "seed": seed,
    }  # fmt: skip
    return [
        build_config({**common, "trace": str(decode)}, source="calibration (decode)"),
        build_config(
            {**common, "trace": str(prefill), "workload": {"prefill_chunk_tokens": 16}},
            source="calibration (chunked prefill)",
        ),
    ]
