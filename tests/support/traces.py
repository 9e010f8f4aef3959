"""Random routing traces for tests."""

from __future__ import annotations

import numpy as np


def random_trace_ids(
    rng: np.random.Generator, tokens: int, layers: int, experts: int, k: int
) -> np.ndarray:
    """Distinct top-k ids per token and layer, skewed towards low ids."""
    weights = 1.0 / np.arange(1, experts + 1) ** 0.8
    weights /= weights.sum()
    out = np.empty((tokens, layers, k), np.int16)
    for t in range(tokens):
        for layer in range(layers):
            out[t, layer] = rng.choice(experts, size=k, replace=False, p=weights)
    return out
