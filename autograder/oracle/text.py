"""Text as ids for the course side (corpus, oracle, reference model, fixtures), over the kit's vocabulary.

The kit (gradelib/lm/vocab.py) only decodes ids; encoding sentences and cutting held-out windows is the course's.
"""

from __future__ import annotations

import numpy as np

from gradelib.lm.vocab import EOS, GENERATABLE, VOCAB

SPACE = VOCAB.index(" ")
N_GENERATABLE = len(GENERATABLE)  # 28
CHAR_TO_ID = {ch: i for i, ch in enumerate(VOCAB) if len(ch) == 1}


def encode(text: str) -> list[int]:
    """Ids of a string over A-Z, apostrophe and space; any other character is an error."""
    try:
        return [CHAR_TO_ID[ch] for ch in text]
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary (A-Z, ' and space)") from None


def stream(sentences: list[str]) -> np.ndarray:
    """The id stream of a list of sentences: <eos> s1 <eos> s2 <eos> ... sN <eos>, int64."""
    ids = [EOS]
    for s in sentences:
        ids += encode(s)
        ids.append(EOS)
    return np.asarray(ids, dtype=np.int64)


def windows(ids: np.ndarray, length: int, n: int) -> np.ndarray:
    """n non-overlapping windows of `length` ids, each starting at an <eos> of the stream. (n, length)"""
    starts, next_free = [], 0
    for e in np.nonzero(ids == EOS)[0].tolist():
        if e >= next_free and e + length <= len(ids):
            starts.append(e)
            next_free = e + length
        if len(starts) == n:
            break
    if len(starts) < n:
        raise ValueError(f"held-out text too short: {len(starts)} windows of {length} ids, need {n}")
    return np.stack([ids[s : s + length] for s in starts]).astype(np.int64)
