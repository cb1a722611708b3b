"""An instructor's corpus: read it, normalise it to the vocabulary, split it, fit its oracle.

Two input formats, told apart by the first non-empty line:

- transcript rows (11-785 style), one utterance per line between <eos> markers:
      <eos> W H O <space> H A D <eos>
  tokens are separated by single spaces; a space character is the token <space>
  or an empty token (two spaces in a row). Tokens outside the vocabulary are
  dropped and counted.
- plain text: upper-cased; curly quotes and backticks become apostrophes;
  sentences end at . ! ? ; : and at blank lines; hyphens, dashes, tabs and line
  breaks inside a sentence become spaces; every other character outside
  A-Z ' and space (digits, other punctuation, accents) is dropped and counted;
  runs of spaces collapse to one.

Split, in document order: the last sentences are held out for the three fixture
streams (as many as 128 non-overlapping windows each need), then 5% of the rest
(at least 1) for validation, the remainder for training.

Minimum size: the held-out windows need at least 3 x 128 sentences and about
18,000 characters (each window starts at a sentence start: 128 x 50 + 128 x 50 +
128 x 40 characters), and the training part at least MIN_TRAIN_CHARS characters
once cleaned -- about 70 KB of plain English. Below that, `split` raises
CorpusTooSmall with one line saying what the text gave and what it needs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .ngram import NGramModel
from .text import CHAR_TO_ID, stream, windows

ORACLE_ORDER = 6  # n-gram oracle for an instructor's corpus: contexts of up to 5 characters
ORACLE_FILE = "oracle_ngram.npz"
SENTENCE_END = re.compile(r"[.!?;:]+|\n\s*\n")
TO_SPACE = re.compile(r"[\s\-\u2010-\u2015]+")
TO_APOSTROPHE = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})
VALID_FRACTION = 0.05
MIN_TRAIN_CHARS = 50_000  # below this neither the oracle's n-gram nor a reference model has much to learn from


class CorpusTooSmall(ValueError):
    """The corpus cannot fill the fixtures and a training set; the message says how much it gave and needs."""


@dataclass
class Corpus:
    sentences: list[str]
    kind: str  # "plain" or "transcript"
    chars_read: int = 0
    dropped: Counter = field(default_factory=Counter)

    def dropped_summary(self) -> dict:
        return {
            "total": int(sum(self.dropped.values())),
            "most_common": [[c, n] for c, n in self.dropped.most_common(10)],
        }

    def report(self) -> str:
        total = sum(self.dropped.values())
        kept = sum(len(s) for s in self.sentences)
        top = ", ".join(f"{c!r} x{n}" for c, n in self.dropped.most_common(10)) or "nothing"
        return (
            f"corpus ({self.kind}): {len(self.sentences)} sentences, {kept} characters kept of {self.chars_read} read; "
            f"dropped {total} ({total / max(self.chars_read, 1):.2%}): {top}"
        )


def _clean(text: str, dropped: Counter) -> str:
    out = []
    for ch in TO_SPACE.sub(" ", text.upper().translate(TO_APOSTROPHE)):
        if ch in CHAR_TO_ID:
            out.append(ch)
        else:
            dropped[ch] += 1
    return " ".join("".join(out).split())


def _keep(sentence: str) -> bool:
    return any("A" <= ch <= "Z" for ch in sentence)


def load(path: Path | str) -> Corpus:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    dropped: Counter = Counter()
    if first.startswith("<eos>") or first.startswith("<sos>"):
        sentences = []
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            chars = []
            for tok in line.split(" "):
                if tok in ("<eos>", "<sos>"):
                    continue
                if tok in ("", "<space>"):
                    chars.append(" ")
                elif tok.upper() in CHAR_TO_ID:
                    chars.append(tok.upper())
                else:
                    dropped[tok] += 1
            sentence = " ".join("".join(chars).split())
            if _keep(sentence):
                sentences.append(sentence)
        return Corpus(sentences, "transcript", len(text), dropped)
    sentences = [s for s in (_clean(part, dropped) for part in SENTENCE_END.split(text)) if _keep(s)]
    # Sentence-ending punctuation is a boundary, not a dropped character.
    for mark in ".!?;:\n":
        dropped.pop(mark, None)
    return Corpus(sentences, "plain", len(text), dropped)


def split(
    sentences: list[str], rows: int, lengths: tuple[int, int, int]
) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """(train, valid, held-out streams for prediction, prediction_test, generation_test)."""
    held: dict[str, np.ndarray] = {}
    end = len(sentences)
    total = sum(len(s) + 1 for s in sentences)
    need = (f"needs at least {3 * rows} sentences for the held-out windows and {MIN_TRAIN_CHARS:,} characters of "
            f"training text after cleaning (about 70 KB of plain English)")
    for name, length in zip(("generation_test", "prediction_test", "prediction"), lengths[::-1]):
        start = end
        while True:
            start -= 16
            if start < 0:
                raise CorpusTooSmall(
                    f"corpus too small: {len(sentences):,} sentences, {total:,} characters after cleaning, "
                    f"not enough for {rows} windows of {length} characters for {name}; it {need}"
                )
            ids = stream(sentences[start:end])
            try:
                windows(ids, length, rows)
                break
            except ValueError:
                continue
        held[name] = ids
        end = start
    n_valid = max(1, int(VALID_FRACTION * end))
    train_chars = sum(len(s) + 1 for s in sentences[: end - n_valid])
    if train_chars < MIN_TRAIN_CHARS:
        raise CorpusTooSmall(
            f"corpus too small: {len(sentences):,} sentences, {total:,} characters after cleaning, "
            f"leave {train_chars:,} characters for training once the held-out windows are cut; it {need}"
        )
    return sentences[: end - n_valid], sentences[end - n_valid : end], held


def fit_oracle(train: list[str], valid: list[str], lm_dir: Path) -> dict:
    """Fit the n-gram oracle on the training sentences, save it, and describe it for oracle.json."""
    model = NGramModel.fit(train, ORACLE_ORDER)
    model.save(lm_dir / ORACLE_FILE)
    ids = stream(valid)[None, :]
    probs = model.next_id_probs(ids[:, :-1])[0]  # (L - 1, 30)
    nll = float(-np.log(probs[np.arange(ids.shape[1] - 1), ids[0, 1:]]).mean())
    print(f"lm/{ORACLE_FILE}: order-{ORACLE_ORDER} character n-gram oracle, {nll:.4f} nats/char on valid.txt")
    return {"oracle": {"kind": "ngram", "path": ORACLE_FILE, "order": ORACLE_ORDER}, "oracle_valid_nll": nll}
