"""The teacher-forced prediction NLL, the figure notebook 3 prints each epoch and the prediction line grades.

    NLL = mean over b, t of -log_softmax(logits[b, t])[target[b, t]]

The oracle's scores of generated text and the Bayes-optimal figures are the course grader's:
the handout ships no oracle.
"""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Stable log-softmax over the last axis, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def prediction_token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log_softmax(logits)[target] per step. logits (B, T, 30), targets (B, T) -> (B, T)."""
    lp = log_softmax(logits)
    return -np.take_along_axis(lp, np.asarray(targets, dtype=np.int64)[..., None], axis=-1)[..., 0]


def prediction_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    return float(prediction_token_nll(logits, targets).mean())
