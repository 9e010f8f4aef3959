"""A simulation result compared whole: every field as bytes or canonical JSON."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

TABLES = ("metrics", "per_layer", "per_request", "per_pass", "per_gpu", "per_resource", "lanes",
          "hardware_grade")  # fmt: skip


def result_fields(result: Any) -> dict[str, Any]:
    """Every field of a result (not the config it echoes), as bytes or canonical JSON."""
    out: dict[str, Any] = {
        name: json.dumps(getattr(result, name), sort_keys=True,
                         default=lambda o: np.asarray(o).tolist())
        for name in TABLES
    }  # fmt: skip
    out["spans"] = None if result.spans is None else result.spans.tobytes()
    out["counters"] = {k: v.tobytes() for k, v in result.counters.items()}
    return out
