"""Winnowing (MOSS's algorithm, via copydetect): a file's fingerprints, and how much of one file is found in another.

Each file is fingerprinted once with copydetect.CodeFingerprint: tokenized by
pygments, names and strings reduced to one letter each (so renaming variables
changes nothing), hashed in k-grams and winnowed; every k-gram of the
handout's own code is given as boilerplate and never counts. compare() and
score_rows() compute what copydetect.compare_files() does, without its Python
loop over shared hashes (tests check they agree).
"""

from __future__ import annotations

import bisect
import io

import numpy as np
from copydetect import CodeFingerprint
from copydetect.utils import get_copied_slices

from .compared_code import Source

# Lengths in characters of the *filtered* code, where every name is one letter
# and spaces are gone, so `self.Q = X @ self.W_q` is the 9 characters V.V=V@V.V.
# A match shorter than NOISE_T never counts (a couple of statements any two
# solutions share); one at least GUARANTEE_T long is always found.
NOISE_T = 25
GUARANTEE_T = 30
WINDOW = GUARANTEE_T - NOISE_T + 1


def fingerprint(text: str, label: str, boilerplate: np.ndarray, win_size: int = WINDOW) -> CodeFingerprint:
    return CodeFingerprint(label, NOISE_T, win_size, boilerplate=boilerplate, language="python", fp=io.StringIO(text))


def boilerplate_hashes(sources: list[Source]) -> np.ndarray:
    # Window 1 keeps every k-gram of the given code, as copydetect does for its boilerplate.
    hashes = [h for s in sources for h in fingerprint(s.text, "handout", np.array([]), win_size=1).hashes]
    return np.unique(np.array(hashes, dtype=np.int64))


class Prints:
    """A file's winnowed fingerprints, as flat arrays so a pair is compared without a Python loop per hash."""

    def __init__(self, fp: CodeFingerprint):
        self.fp = fp
        keys = list(fp.hash_idx)
        self.keys = np.sort(np.array(keys, dtype=np.int64))
        self.pos_hash = np.repeat(np.array(keys, dtype=np.int64), [len(fp.hash_idx[h]) for h in keys])
        self.pos = np.array([i for h in keys for i in fp.hash_idx[h]], dtype=np.int64)
        by_pos = np.argsort(self.pos, kind="stable")
        self.sorted_pos, self.sorted_hash = self.pos[by_pos], self.pos_hash[by_pos]

    def matched(self, other: Prints) -> np.ndarray:
        """Positions of this file's fingerprints that the other file has too."""
        if len(other.keys) == 0 or len(self.pos) == 0:
            return self.pos[:0]
        at = np.minimum(np.searchsorted(other.keys, self.pos_hash), len(other.keys) - 1)
        return self.pos[other.keys[at] == self.pos_hash]


def compare(a: Prints, b: Prints) -> tuple[float, float, np.ndarray | None, np.ndarray | None]:
    """copydetect.compare_files(a.fp, b.fp) without its loop over shared hashes (tests check it agrees).

    Returns the two similarities and, when any code matched, the copied slices
    of each file in its filtered code (raw_slices() maps them to the raw text).
    """
    idx_a, idx_b = a.matched(b), b.matched(a)
    if len(idx_a) == 0:
        return 0.0, 0.0, None, None
    k = a.fp.k
    sa, sb = get_copied_slices(idx_a, k), get_copied_slices(idx_b, k)
    sim_a = float(np.sum(sa[1] - sa[0]) / a.fp.token_coverage) if len(a.fp.filtered_code) else 0.0
    sim_b = float(np.sum(sb[1] - sb[0]) / b.fp.token_coverage) if len(b.fp.filtered_code) else 0.0
    return sim_a, sim_b, sa, sb


def score_rows(column: list[Prints | None], rows: list[int]) -> np.ndarray:
    """S[r, b]: the share of file rows[r]'s fingerprinted code found in file b, for every b.

    The similarity compare_files() gives, for one file against the whole class
    at once: a pair's matched code is the union of the k-grams at the matched
    fingerprint positions (what get_copied_slices measures), so with the
    positions sorted, each matched one adds min(k, distance to the next matched
    one). Tests check it equals compare_files() pair by pair.
    """
    n = len(column)
    present = [f for f in range(n) if column[f] is not None]
    all_h = np.concatenate([column[f].keys for f in present] or [np.zeros(0, np.int64)])
    all_o = np.concatenate([np.full(len(column[f].keys), f) for f in present] or [np.zeros(0, np.int64)])
    order = np.argsort(all_h, kind="stable")
    table_h, table_o = all_h[order], all_o[order]
    big = np.iinfo(np.int64).max // 2
    out = np.zeros((len(rows), n))
    for r, a in enumerate(rows):
        pa = column[a]
        if pa is None or len(pa.sorted_pos) == 0 or not len(pa.fp.filtered_code):
            continue
        h, pos = pa.sorted_hash, pa.sorted_pos
        lo, hi = np.searchsorted(table_h, h, "left"), np.searchsorted(table_h, h, "right")
        count = hi - lo
        which = np.repeat(np.arange(len(h)), count)
        at = np.arange(count.sum()) + np.repeat(lo - (np.cumsum(count) - count), count)
        hit = np.zeros((len(h), n), dtype=bool)
        hit[which, table_o[at]] = True
        hit[:, a] = False
        at_pos = np.where(hit, pos[:, None], big)
        following = np.minimum.accumulate(at_pos[::-1], axis=0)[::-1]
        following = np.vstack([following[1:], np.full((1, n), big)])
        covered = np.where(hit, np.minimum(pa.fp.k, following - pos[:, None]), 0).sum(axis=0)
        out[r] = covered / pa.fp.token_coverage
    return out


def raw_slices(fp: CodeFingerprint, slices: np.ndarray) -> np.ndarray:
    """Slices of the filtered code moved onto the raw text, as compare_files does."""
    if len(fp.offsets) == 0:
        return slices
    off = fp.offsets
    return slices + off[:, 1][np.clip(np.searchsorted(off[:, 0], slices), 0, off.shape[0] - 1)]


def line_ranges(source: Source, slices: np.ndarray) -> list[tuple[int, int]]:
    """1-based inclusive line ranges covered by character slices, merged where they touch."""
    newlines = source.newlines
    ranges: list[tuple[int, int]] = []
    for start, end in sorted(zip(slices[0].tolist(), slices[1].tolist())):
        first = bisect.bisect_right(newlines, start) + 1
        last = bisect.bisect_right(newlines, max(start, end - 1)) + 1
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(last, ranges[-1][1]))
        else:
            ranges.append((first, last))
    return ranges
