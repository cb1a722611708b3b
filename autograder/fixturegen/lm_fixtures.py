"""Generate the language-model data: training text, validation text and the .npz fixtures.

Default: the toy-English source (autograder/oracle/source.py) writes everything, and
the source itself is the scoring oracle. With --corpus PATH an instructor's text
is used instead (plain text, or 11-785-style transcript rows `<eos> W H O ... <eos>`);
then a character n-gram model fitted to its training part is the oracle until a
reference-model checkpoint replaces it (see autograder/oracle/oracles.py).

Output under <out>/lm/:
  train.txt, valid.txt     one sentence per line (A-Z, apostrophe, single spaces)
  prediction.npz           inp (128, 30), out (128, 20) int64   validation, public
  prediction_test.npz      inp (128, 30) int64                  public inputs
  hidden/prediction_test_out.npz   out (128, 20) int64          targets, grader only
  generation_test.npz      inp (128, 40) int64
  oracle.json              which oracle scores generations, and corpus statistics

Every fixture row is a window of a held-out id stream <eos> s1 <eos> s2 <eos> ...
that starts at an <eos>, i.e. at a sentence start, so the oracle's starting state
is known exactly; windows cross sentence boundaries (targets may be <eos>).

    python -m autograder.fixturegen [--out fixtures] [--corpus PATH]
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from autograder.fixturegen import npzio
from autograder.oracle.source import ToySource
from gradelib.lm.vocab import stream, windows

SOURCE_SEED = 0  # Zipf ranks of the words
# The hidden prediction targets come from a 96-bit seed drawn once from os.urandom and kept out of
# the handout (which holds the source's code): with a small seed a student could find it by trying
# seeds until the public prediction_test inputs appear, and read off the targets.
SEEDS = {"train": 1, "valid": 2, "prediction": 3, "prediction_test": 56008886218775764195894794573, "generation_test": 5}
N_TRAIN = 50_000  # sentences: about 1.8 MB, learnable by a small model on 2 CPU cores in minutes
N_VALID = 2_000
N_ROWS = 128
PROMPT, TARGET, GEN_PROMPT = 30, 20, 40


def toy_sentences(source: ToySource, split: str, n: int) -> list[str]:
    return source.sample_sentences(n, np.random.default_rng(SEEDS[split]))


def write(out: Path, corpus: Path | None = None) -> list[Path]:
    lm = out / "lm"
    (lm / "hidden").mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    info: dict = {}
    stale = lm / "oracle_ngram.npz"  # the oracle of an earlier instructor's corpus
    if corpus is None and stale.exists():
        stale.unlink()
    if corpus is None:
        source = ToySource(SOURCE_SEED)
        train, valid = toy_sentences(source, "train", N_TRAIN), toy_sentences(source, "valid", N_VALID)
        held = {k: stream(toy_sentences(source, k, 3 * N_ROWS)) for k in ("prediction", "prediction_test", "generation_test")}
        auto = source.automaton
        info = {
            "oracle": {"kind": "toy_source", "seed": SOURCE_SEED},
            "entropy_rate_nats_per_char": auto.entropy_rate(),
            "mean_sentence_chars_with_eos": auto.mean_sentence_length(),
            "automaton_states": auto.n_states,
            "words": len(source.vocabulary()),
        }
    else:
        from autograder.oracle import corpus as corpus_mod  # only instructors' corpora need it

        loaded = corpus_mod.load(corpus)
        print(loaded.report())
        train, valid, held = corpus_mod.split(loaded.sentences, N_ROWS, (PROMPT + TARGET, PROMPT + TARGET, GEN_PROMPT))
        info = corpus_mod.fit_oracle(train, valid, lm)
        info["corpus"] = {"path": corpus.name, "kind": loaded.kind, "dropped": loaded.dropped_summary()}
    for name, lines in (("train.txt", train), ("valid.txt", valid)):
        path = lm / name
        path.write_text("".join(s + "\n" for s in lines), encoding="ascii")
        written.append(path)
        print(f"lm/{name}: {len(lines)} sentences, {path.stat().st_size / 1e6:.2f} MB")
    pred = windows(held["prediction"], PROMPT + TARGET, N_ROWS)
    test = windows(held["prediction_test"], PROMPT + TARGET, N_ROWS)
    gen = windows(held["generation_test"], GEN_PROMPT, N_ROWS)
    arrays = {
        "prediction.npz": {"inp": pred[:, :PROMPT], "out": pred[:, PROMPT:]},
        "prediction_test.npz": {"inp": test[:, :PROMPT]},
        "hidden/prediction_test_out.npz": {"out": test[:, PROMPT:]},
        "generation_test.npz": {"inp": gen},
    }
    for name, data in arrays.items():
        npzio.save(lm / name, data)
        written.append(lm / name)
        shapes = ", ".join(f"{k} {v.shape} {v.dtype}" for k, v in data.items())
        print(f"lm/{name}: {shapes}")
    info["fixtures"] = {"rows": N_ROWS, "prompt": PROMPT, "target": TARGET, "generation_prompt": GEN_PROMPT}
    (lm / "oracle.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    written.append(lm / "oracle.json")
    if "entropy_rate_nats_per_char" in info:
        print(
            f"lm: toy source, {info['words']} words, {info['automaton_states']} automaton states, "
            f"entropy rate {info['entropy_rate_nats_per_char']:.6f} nats/char "
            f"(perplexity {np.exp(info['entropy_rate_nats_per_char']):.4f}), "
            f"{info['mean_sentence_chars_with_eos']:.2f} chars per sentence with <eos>"
        )
    return written
