"""Tiny language models whose logits are a table lookup, so what predict() and generate() return is known exactly.

    logits[b, t] = table[key(inp[b, :t+1])] (+ train_offset while in training mode), table (K, 30)

    kind "last"        key = inp[b, t]                           the last token alone decides
    kind "prefix_sum"  key = (inp[b, 0] + ... + inp[b, t]) mod K   every earlier token counts
    kind "position"    key = t mod K                             only the length of the input counts

"prefix_sum" and "position" catch a predict or generate that drops the prompt, feeds only the last token or crops the
context; a nonzero train_offset catches one that leaves the model in training mode. The child builds the same models
in torch (child/lm_child.py); the course's fixtures compute their logits (autograder/fixturegen/lm_function_cases.py).
"""

from __future__ import annotations

import numpy as np

KINDS = ("last", "prefix_sum", "position")


def keys(kind: str, ids: np.ndarray, K: int) -> np.ndarray:
    """(B, T) ids -> (B, T) row of the table each position reads."""
    ids = np.asarray(ids, dtype=np.int64)
    if kind == "last":
        return ids % K
    if kind == "prefix_sum":
        return np.cumsum(ids, axis=1) % K
    if kind == "position":
        return np.broadcast_to(np.arange(ids.shape[1]) % K, ids.shape)
    raise ValueError(f"unknown fixed model kind {kind!r}; one of {KINDS}")
