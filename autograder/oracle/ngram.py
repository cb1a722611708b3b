"""Character n-gram language models: the bigram baseline, and the oracle for an instructor's corpus.

p(c | h) for a context h of the last n-1 ids is Witten-Bell interpolated:

    p(c | h) = (N(h, c) + U(h) * p(c | h')) / (N(h) + U(h))

with N counts in the training stream, U(h) the number of distinct ids seen after
h, and h' the context one id shorter; below the unigram (empty context) lies the
uniform distribution over the 29 ids a text can contain (<eos> and 28 characters). A context that reaches back
over the start of a row is read as if preceded by <eos>, the start of a sentence.

Saved as .npz: `order`, and per context length k = 0..n-1 the sorted base-30
codes of the contexts `keys_k` (M,) and their counts in compressed rows: the
ids seen after context i are `ids_k[offsets_k[i]:offsets_k[i+1]]` with counts
`counts_k[...]` (only non-zero counts are stored).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gradelib.lm.vocab import EOS, PAD, VOCAB_SIZE

from . import npzio
from .text import stream


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

    def __init__(self, order: int, tables: list[dict[str, np.ndarray]]):
        if order < 1 or len(tables) != order:
            raise ValueError(f"an order-{order} model needs {order} count tables")
        self.order = order
        self.tables = tables  # per context length: keys (M,), offsets (M+1,), ids (nnz,), counts (nnz,)

    @classmethod
    def fit(cls, sentences: list[str], order: int) -> "NGramModel":
        ids = stream(sentences)[None, :]  # (1, L)
        nxt = ids[0, 1:]
        tables = []
        for k in range(order):
            code = _codes(ids[:, :-1], k)[0] if k else np.zeros(len(nxt), dtype=np.int64)
            pair, counts = np.unique(code * VOCAB_SIZE + nxt, return_counts=True)  # sorted by (context, id)
            ctx = pair // VOCAB_SIZE
            keys, first = np.unique(ctx, return_index=True)
            tables.append({
                "keys": keys,
                "offsets": np.append(first, len(pair)).astype(np.int64),
                "ids": (pair % VOCAB_SIZE).astype(np.int64),
                "counts": counts.astype(np.int64),
            })
        return cls(order, tables)

    def save(self, path: Path | str) -> None:
        arrays = {"order": np.array(self.order)}
        for k, table in enumerate(self.tables):
            arrays.update({f"{name}_{k}": value for name, value in table.items()})
        npzio.save(path, arrays)

    @classmethod
    def load(cls, path: Path | str) -> "NGramModel":
        with np.load(path, allow_pickle=False) as data:
            order = int(data["order"])
            names = ("keys", "offsets", "ids", "counts")
            return cls(order, [{n: data[f"{n}_{k}"] for n in names} for k in range(order)])

    def _counts(self, k: int, code: np.ndarray) -> np.ndarray:
        """Dense counts (..., 30) of what followed each context code (zeros for unseen contexts)."""
        table = self.tables[k]
        flat = code.reshape(-1)
        pos = np.clip(np.searchsorted(table["keys"], flat), 0, len(table["keys"]) - 1)
        found = table["keys"][pos] == flat
        rows = np.nonzero(found)[0]
        lo, hi = table["offsets"][pos[rows]], table["offsets"][pos[rows] + 1]
        n = hi - lo
        entry = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)
        out = np.zeros((len(flat), VOCAB_SIZE))
        out[np.repeat(rows, n), table["ids"][entry]] = table["counts"][entry]
        return out.reshape(code.shape + (VOCAB_SIZE,))

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        """P(next id | ids[:, :t+1]) for every t. ids (B, T) -> (B, T, 30) float64."""
        ids = np.asarray(ids, dtype=np.int64)
        probs = np.full(ids.shape + (VOCAB_SIZE,), 1.0 / (VOCAB_SIZE - 1))  # uniform base
        probs[..., PAD] = 0.0
        for k in range(self.order):
            c = self._counts(k, _codes(ids, k) if k else np.zeros(ids.shape, dtype=np.int64))  # (B, T, 30)
            n = c.sum(-1, keepdims=True)
            u = (c > 0).sum(-1, keepdims=True)
            mixed = (c + u * probs) / np.maximum(n + u, 1)
            probs = np.where(n > 0, mixed, probs)
        return probs
