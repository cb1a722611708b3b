"""Tiny language models whose weights are fixed by hand, for testing predict() and generate().

Each model's logits are a table lookup, so what predict and generate must return
is known exactly, whatever the quality of training:

    logits[b, t] = table[key(inp[b, :t+1])] (+ train_offset while in training mode)

    kind "last"        key = inp[b, t]                       the last token alone decides
    kind "prefix_sum"  key = (inp[b, 0] + ... + inp[b, t]) mod K   every earlier token counts
    kind "position"    key = t mod K                         only the length of the input counts

with table (K, 30). "prefix_sum" and "position" catch a predict or generate that
drops the prompt, feeds only the last token or crops the context; a nonzero
train_offset catches one that leaves the model in training mode (as if dropout
were on).

This module is the grader's numpy version (fixtures and parent-side checks). The
sandboxed child builds the same models in torch (child/lm_child.py); the
project tests check that both agree.
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


def logits(kind: str, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The model's evaluation-mode logits for every position: (B, T) -> (B, T, 30) float32."""
    return np.asarray(table, dtype=np.float32)[keys(kind, ids, table.shape[0])]


def next_logits(kind: str, table: np.ndarray):
    """ids (B, T) -> (B, 30) logits of the next token: the interface of the course's metrics.greedy_predict."""
    return lambda ids: logits(kind, table, ids)[:, -1]
