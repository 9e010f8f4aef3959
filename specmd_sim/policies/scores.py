"""Predictor scores as probabilities, for policies that need a scale (thresholds, mass).

Predictors return scores where higher means more likely. ``as_probabilities`` maps them to a
distribution over the layer's experts: a softmax if any score is negative (they are logits),
otherwise the scores divided by their sum; NaN scores get probability 0; all-zero scores give
the uniform distribution.
"""

from __future__ import annotations

import numpy as np


def as_probabilities(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, np.float64)
    valid = ~np.isnan(s)
    if not valid.any():
        return np.full(s.size, 1.0 / s.size)
    if (s[valid] < 0).any():
        out = np.where(valid, np.exp(np.where(valid, s, 0.0) - s[valid].max()), 0.0)
    else:
        out = np.where(valid, s, 0.0)
    total = out.sum()
    return out / total if total > 0 else np.where(valid, 1.0 / valid.sum(), 0.0)
