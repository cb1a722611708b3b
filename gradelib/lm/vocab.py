"""The character vocabulary of the corpus, the fixtures, the model and the grader: ids 0..29 are <eos>, <pad>, A..Z,
apostrophe and space. <eos> (0) starts and ends a sentence; <pad> (1) only fills batches; a generation may use the
other 28 ids and nothing else."""

from __future__ import annotations

import numpy as np

VOCAB: tuple[str, ...] = ("<eos>", "<pad>", *(chr(c) for c in range(ord("A"), ord("Z") + 1)), "'", " ")
VOCAB_SIZE = len(VOCAB)  # 30
EOS = 0
PAD = 1
GENERATABLE = np.arange(2, VOCAB_SIZE)  # the 28 ids a generation may use


def decode(ids) -> str:
    """Readable text: characters as themselves, <eos> as ' | ', <pad> dropped."""
    return "".join(" | " if i == EOS else VOCAB[i] for i in np.asarray(ids).reshape(-1).tolist() if i != PAD)
