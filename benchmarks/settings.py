"""The settings every benchmark states instead of taking the simulator's defaults, which may
change between versions (the defaults became whole-prompt prefill and a predictor that learns
online): prefill token by token and the noisy oracle (accuracy 0.9) predicting, what the
benchmarks' recorded figures were measured with."""

from __future__ import annotations

from typing import Any

STATED: dict[str, Any] = {
    "workload": {"prefill_chunk_tokens": 1},
    "predictor": {"kind": "noisy-oracle", "accuracy": 0.9},
}
# the same, as ``specmd run`` / ``replay`` options (the predictor's kind before its parameters)
STATED_SET = [
    arg
    for section, fields in STATED.items()
    for name, value in fields.items()
    for arg in ("--set", f"{section}.{name}={value}")
]


def stated(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the stated settings where it names none of its own (key by key in the
    workload)."""
    workload = {**STATED["workload"], **config.get("workload", {})}
    return {"predictor": STATED["predictor"], **config, "workload": workload}
