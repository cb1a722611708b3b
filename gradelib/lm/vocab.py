"""The character vocabulary shared by the corpus, the fixtures, the model and the grader.

    ids 0..29: ["<eos>", "<pad>", "A".."Z", "'", " "]

<eos> (0) marks both the start and the end of a sentence; <pad> (1) only fills batches. The other 28 ids are the
generatable characters: a generation may use them and nothing else.
"""

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
