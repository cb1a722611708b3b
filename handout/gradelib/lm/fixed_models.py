"""Tiny language models whose logits are a table lookup, so what predict() and generate() return is known exactly:
logits[b, t] = table[key(inp[b, :t+1])] (+ train_offset in training mode), table (K, 30). "prefix_sum" and "position"
catch a predict or generate that drops the prompt or crops the context. child/lm_child.py builds them in torch."""

from __future__ import annotations

import numpy as np

KINDS = ("last", "prefix_sum", "position")


def keys(kind: str, ids: np.ndarray, K: int) -> np.ndarray:
    """(B, T) ids -> (B, T) row of the table each position reads: the last id ("last"), the sum of the ids so far
    ("prefix_sum") or the position ("position"), mod K."""
    ids = np.asarray(ids, dtype=np.int64)
    if kind == "last":
        return ids % K
    if kind == "prefix_sum":
        return np.cumsum(ids, axis=1) % K
    return np.broadcast_to(np.arange(ids.shape[1]) % K, ids.shape)  # "position"
