"""Character n-gram language models: the bigram baseline, and the oracle for an instructor's corpus.

p(c | h) for a context h of the last n-1 ids is Witten-Bell interpolated:

    p(c | h) = (N(h, c) + U(h) * p(c | h')) / (N(h) + U(h))

with N counts in the training stream, U(h) the number of distinct ids seen after
h, and h' the context one id shorter; below the unigram (empty context) lies the
uniform distribution over the 29 ids a text can contain (<eos> and 28 characters). A context that reaches back
over the start of a row is read as if preceded by <eos>, the start of a sentence.

Saved as .npz: `order`, and per context length k = 0..n-1 `keys_k` (sorted
base-30 codes of the contexts) and `counts_k` (contexts x 30).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import npzio
from .vocab import EOS, PAD, VOCAB_SIZE, stream


def _codes(ids: np.ndarray, k: int) -> np.ndarray:
    """Base-30 code of the k ids ending at each position of a (B, T) array, <eos>-padded on the left. (B, T)"""
    B, T = ids.shape
    padded = np.concatenate([np.full((B, k), EOS, dtype=np.int64), ids.astype(np.int64)], axis=1)
    code = np.zeros((B, T), dtype=np.int64)
    for j in range(k):
        code = code * VOCAB_SIZE + padded[:, 1 + j : 1 + j + T]
    return code


class NGramModel:
    """Witten-Bell interpolated character n-gram model (order 2 is the bigram baseline)."""

    def __init__(self, order: int, keys: list[np.ndarray], counts: list[np.ndarray]):
        if order < 1 or len(keys) != order or len(counts) != order:
            raise ValueError(f"an order-{order} model needs {order} key and count tables")
        self.order = order
        self.keys = keys
        self.counts = counts

    @classmethod
    def fit(cls, sentences: list[str], order: int) -> "NGramModel":
        ids = stream(sentences)[None, :]  # (1, L)
        nxt = ids[:, 1:]
        keys, counts = [], []
        for k in range(order):
            code = _codes(ids[:, :-1], k)[0] if k else np.zeros(nxt.shape[1], dtype=np.int64)
            uniq, inv = np.unique(code, return_inverse=True)
            table = np.zeros((len(uniq), VOCAB_SIZE), dtype=np.int64)
            np.add.at(table, (inv, nxt[0]), 1)
            keys.append(uniq)
            counts.append(table)
        return cls(order, keys, counts)

    def save(self, path: Path | str) -> None:
        arrays = {"order": np.array(self.order)}
        for k in range(self.order):
            arrays[f"keys_{k}"] = self.keys[k]
            arrays[f"counts_{k}"] = self.counts[k]
        npzio.save(path, arrays)

    @classmethod
    def load(cls, path: Path | str) -> "NGramModel":
        with np.load(path, allow_pickle=False) as data:
            order = int(data["order"])
            return cls(order, [data[f"keys_{k}"] for k in range(order)], [data[f"counts_{k}"] for k in range(order)])

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        """P(next id | ids[:, :t+1]) for every t. ids (B, T) -> (B, T, 30) float64."""
        ids = np.asarray(ids, dtype=np.int64)
        probs = np.full(ids.shape + (VOCAB_SIZE,), 1.0 / (VOCAB_SIZE - 1))  # uniform base
        probs[..., PAD] = 0.0
        for k in range(self.order):
            code = _codes(ids, k) if k else np.zeros(ids.shape, dtype=np.int64)
            pos = np.clip(np.searchsorted(self.keys[k], code), 0, len(self.keys[k]) - 1)
            found = self.keys[k][pos] == code
            c = np.where(found[..., None], self.counts[k][pos], 0).astype(np.float64)  # (B, T, 30)
            n = c.sum(-1, keepdims=True)
            u = (c > 0).sum(-1, keepdims=True)
            mixed = (c + u * probs) / np.maximum(n + u, 1)
            probs = np.where(n > 0, mixed, probs)
        return probs
