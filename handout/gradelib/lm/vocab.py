"""The character vocabulary: ids 0..29 are <eos> (starts and ends a sentence), <pad> (only fills batches), A..Z,
apostrophe and space; a generation may use the 28 characters and nothing else."""

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
