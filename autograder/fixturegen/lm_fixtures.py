"""Generate the language-model data: training text, validation text and the .npz fixtures.

Default: the toy-English source (autograder/oracle/source.py) writes everything, and
the source itself is the scoring oracle. With --corpus PATH an instructor's text
is used instead (plain text, or 11-785-style transcript rows `<eos> W H O ... <eos>`);
then a character n-gram model fitted to its training part is the oracle. --oracle
model:PATH makes a CausalLanguageModel checkpoint the oracle instead (any corpus):
it is copied to lm/oracle_model.pt and named in oracle.json. oracle.json is
rewritten by every build, so the choice is made on the command line, each time.

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

    python -m autograder.fixturegen [--out fixtures] [--corpus PATH] [--oracle ngram|model:PATH]
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from autograder.oracle import npzio
from autograder.oracle.source import ToySource
from autograder.oracle.text import stream, windows

SOURCE_SEED = 0  # Zipf ranks of the words
# The hidden prediction targets come from a 96-bit seed drawn once from os.urandom and kept out of
# the handout (which holds the source's code): with a small seed a student could find it by trying
# seeds until the public prediction_test inputs appear, and read off the targets.
SEEDS = {
    "train": 1,
    "valid": 2,
    "prediction": 3,
    "prediction_test": 56008886218775764195894794573,
    "generation_test": 5,
}
N_TRAIN = 50_000  # sentences: about 1.8 MB, learnable by a small model on 2 CPU cores in minutes
N_VALID = 2_000
N_ROWS = 128
PROMPT, TARGET, GEN_PROMPT = 30, 20, 40


def toy_sentences(source: ToySource, split: str, n: int) -> list[str]:
    return source.sample_sentences(n, np.random.default_rng(SEEDS[split]))


MODEL_ORACLE_FILE = "oracle_model.pt"


class OracleChoiceError(ValueError):
    """--oracle names something that cannot be used; the message says what was expected."""


def parse_oracle(choice: str | None) -> Path | None:
    """--oracle: None / "default" / "ngram" -> None (the corpus' default oracle); "model:PATH" -> PATH."""
    if choice in (None, "", "default", "ngram"):
        return None
    kind, _, path = choice.partition(":")
    if kind != "model" or not path:
        raise OracleChoiceError(f"--oracle {choice!r}: expected 'ngram' (the default for your own corpus) or "
                                "'model:PATH' with PATH a reference-model checkpoint (.pt)")
    if not Path(path).is_file():
        raise OracleChoiceError(
            f"--oracle {choice!r}: {path} is not a file; expected a reference-model checkpoint (.pt)"
        )
    return Path(path)


def _use_model_oracle(checkpoint: Path, lm: Path, info: dict) -> None:
    from autograder.oracle.oracles import load_model

    try:
        model = load_model(checkpoint)
    except Exception as exc:  # any reason torch gives: say which file and why, in one line
        raise OracleChoiceError(f"--oracle model:{checkpoint}: not a usable CausalLanguageModel checkpoint "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    shutil.copyfile(checkpoint, lm / MODEL_ORACLE_FILE)
    info["oracle"] = {"kind": "model", "path": MODEL_ORACLE_FILE, "from": checkpoint.name,
                      "parameters": sum(p.numel() for p in model.parameters())}
    print(
        f"lm/{MODEL_ORACLE_FILE}: the oracle is the checkpoint {checkpoint} "
        f"({info['oracle']['parameters']:,} parameters)"
    )


def _clear_earlier(lm: Path, corpus: Path | None, checkpoint) -> None:
    """Remove the oracle file of an earlier build that this one does not use; say when it named a checkpoint."""
    earlier = lm / "oracle.json"
    if (
        checkpoint is None
        and earlier.is_file()
        and json.loads(earlier.read_text()).get("oracle", {}).get("kind") == "model"
    ):
        print("note: the earlier oracle.json named a checkpoint oracle; this build uses the corpus' default oracle "
              "(pass --oracle model:PATH to keep a checkpoint)")
    for stale, used in (
        ("oracle_ngram.npz", corpus is not None and checkpoint is None),
        (MODEL_ORACLE_FILE, checkpoint is not None),
    ):
        if not used and (lm / stale).exists():  # the oracle of an earlier build
            (lm / stale).unlink()


def _toy_sentences() -> tuple[list[str], list[str], dict, dict]:
    """(training sentences, validation sentences, held-out streams, oracle.json's facts) of the toy source."""
    source = ToySource(SOURCE_SEED)
    train, valid = toy_sentences(source, "train", N_TRAIN), toy_sentences(source, "valid", N_VALID)
    held = {
        k: stream(toy_sentences(source, k, 3 * N_ROWS))
        for k in ("prediction", "prediction_test", "generation_test")
    }
    auto = source.automaton
    info = {
        "oracle": {"kind": "toy_source", "seed": SOURCE_SEED},
        # 12 significant digits: the last bits of these linear-algebra results depend on how many
        # threads the BLAS library uses, and the file must be the same bytes on every machine.
        "entropy_rate_nats_per_char": float(f"{auto.entropy_rate():.12g}"),
        "mean_sentence_chars_with_eos": float(f"{auto.mean_sentence_length():.12g}"),
        "automaton_states": auto.n_states,
        "words": len(source.vocabulary()),
    }
    return train, valid, held, info


def _corpus_sentences(corpus: Path, lm: Path, checkpoint) -> tuple[list[str], list[str], dict, dict]:
    """`_toy_sentences` of an instructor's corpus: its n-gram oracle fitted (unless a checkpoint is the oracle)."""
    from autograder.oracle import corpus as corpus_mod  # only instructors' corpora need it

    loaded = corpus_mod.load(corpus)
    print(loaded.report())
    train, valid, held = corpus_mod.split(loaded.sentences, N_ROWS, (PROMPT + TARGET, PROMPT + TARGET, GEN_PROMPT))
    info = corpus_mod.fit_oracle(train, valid, lm) if checkpoint is None else {}
    info["corpus"] = {"path": corpus.name, "kind": loaded.kind, "chars_read": loaded.chars_read,
                      "chars_kept": sum(len(s) for s in loaded.sentences), "sentences": len(loaded.sentences),
                      "dropped": loaded.dropped_summary()}
    return train, valid, held, info


def _write_windows(lm: Path, held: dict) -> list[Path]:
    """The prediction and generation arrays, cut from the held-out streams; the files written."""
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
        shapes = ", ".join(f"{k} {v.shape} {v.dtype}" for k, v in data.items())
        print(f"lm/{name}: {shapes}")
    return [lm / name for name in arrays]


def write(out: Path, corpus: Path | None = None, oracle: str | None = None) -> list[Path]:
    lm = out / "lm"
    (lm / "hidden").mkdir(parents=True, exist_ok=True)
    checkpoint = parse_oracle(oracle)
    written: list[Path] = []
    _clear_earlier(lm, corpus, checkpoint)
    train, valid, held, info = _toy_sentences() if corpus is None else _corpus_sentences(corpus, lm, checkpoint)
    if checkpoint is not None:
        _use_model_oracle(checkpoint, lm, info)
    for name, lines in (("train.txt", train), ("valid.txt", valid)):
        path = lm / name
        path.write_text("".join(s + "\n" for s in lines), encoding="ascii")
        written.append(path)
        print(f"lm/{name}: {len(lines)} sentences, {path.stat().st_size / 1e6:.2f} MB")
    written += _write_windows(lm, held)
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
