"""The teacher-forced prediction NLL, the figure notebook 3 prints each epoch and the prediction line grades."""

from __future__ import annotations

import numpy as np


def prediction_token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log_softmax(logits)[target] per step, in float64 (stable): logits (B, T, 30), targets (B, T) -> (B, T)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    log_probs = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probs, np.asarray(targets, dtype=np.int64)[..., None], axis=-1)[..., 0]


def prediction_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    """NLL = mean over b, t of -log_softmax(logits[b, t])[target[b, t]]: logits (B, T, 30), targets (B, T)."""
    return float(prediction_token_nll(logits, targets).mean())
