"""Hidden cases that rotate per term: `python -m autograder.fixturegen --seed N`.

A case's own seed (the row of its CASES table) is mixed with the term's seed N, so
each term's hidden cases hold new random values with the same shapes, dtypes and
edge cases (large scores, T = 1, fully masked rows...). Public cases keep their
seed unless --public-too, so the handout's public cases stay as students have them.
Without --seed every case keeps its own seed: the fixtures are the committed ones.
"""

from __future__ import annotations

import numpy as np


def rotated(case_seed: int, visibility: str, term_seed: int | None, public_too: bool = False) -> int:
    """The seed a case is generated with this term."""
    if term_seed is None or (visibility == "public" and not public_too):
        return case_seed
    return int(np.random.SeedSequence([case_seed, term_seed, 0x7E12]).generate_state(1, np.uint32)[0])
