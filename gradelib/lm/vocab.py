"""The character vocabulary shared by the corpus, the fixtures, the model and the grader.

    ids 0..29: ["<eos>", "<pad>", "A".."Z", "'", " "]

<eos> (0) marks both the start and the end of a sentence; <pad> (1) only fills
batches. The other 28 ids are the generatable characters: a generation may use
them and nothing else.
"""

from __future__ import annotations

import numpy as np

VOCAB: tuple[str, ...] = ("<eos>", "<pad>", *(chr(c) for c in range(ord("A"), ord("Z") + 1)), "'", " ")
VOCAB_SIZE = len(VOCAB)  # 30
EOS = 0
PAD = 1
SPACE = VOCAB.index(" ")
APOSTROPHE = VOCAB.index("'")
GENERATABLE = np.arange(2, VOCAB_SIZE)  # the 28 ids a generation may use
N_GENERATABLE = len(GENERATABLE)
CHAR_TO_ID = {ch: i for i, ch in enumerate(VOCAB) if len(ch) == 1}


def encode(text: str) -> list[int]:
    """Ids of a string over A-Z, apostrophe and space; any other character is an error."""
    try:
        return [CHAR_TO_ID[ch] for ch in text]
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary (A-Z, ' and space)") from None


def decode(ids) -> str:
    """Readable text: characters as themselves, <eos> as ' | ', <pad> dropped."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if i == EOS:
            out.append(" | ")
        elif i != PAD:
            out.append(VOCAB[i])
    return "".join(out)


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
