"""Which corpus a reference model and a set of thresholds were measured on, and the check before grading.

The corpus hash is the sha256 of the language-model fixtures a student trains and is
graded on (fixtures/lm/: train.txt, valid.txt and the public .npz inputs), so it
changes whenever `make fixtures` or `make course` builds them from other text. The
reference model records it in reference_model.json, the thresholds in rubric.toml's
[calibration] table. The grader (batch, demo, calibrate) compares both with the
fixtures and refuses, with one line naming the command to run, when they differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autograder.grading import rubric_check as rubric_mod

HASHED_FILES = ("train.txt", "valid.txt", "prediction.npz", "prediction_test.npz", "generation_test.npz")
REFERENCE_JSON = "reference_model.json"


class StaleCalibration(RuntimeError):
    """A reference model or thresholds measured on another corpus than the fixtures'; the message says what to run."""


def corpus_hash(lm_dir: Path) -> str:
    """sha256 (hex) of the corpus files under lm_dir, in a fixed order, each preceded by its name."""
    h = hashlib.sha256()
    for name in HASHED_FILES:
        path = Path(lm_dir) / name
        if not path.is_file():
            raise StaleCalibration(
                f"{path} is missing: build the fixtures first (make fixtures, or make course CORPUS=path)"
            )
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def corpus_label(lm_dir: Path) -> str:
    """What the fixtures were built from, in words: "toy English (source seed 0)" or the corpus file's name."""
    info = json.loads((Path(lm_dir) / "oracle.json").read_text())
    if "corpus" in info:
        return f"{info['corpus']['path']} ({info['corpus']['kind']} text)"
    return f"toy English (source seed {info['oracle'].get('seed', 0)})"


def reference_hash(lm_dir: Path) -> str | None:
    """The corpus hash recorded by the reference model's training, or None when it recorded none."""
    path = Path(lm_dir) / REFERENCE_JSON
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("inputs", {}).get("corpus_sha256")


def threshold_hash(rubric: rubric_mod.Rubric | Path | None = None) -> str | None:
    """The corpus hash of `rubric`'s [calibration] (a Rubric already read, or the path of one; None: the kit's)."""
    return rubric_mod.rubric_of(rubric).calibration.get("corpus_sha256")


def _short(h: str | None) -> str:
    return h[:12] if h else "none recorded"


def _same_corpus(lm_dir: Path, got: str | None, what: str, remedy: str) -> None:
    """Raise StaleCalibration, saying `what` was measured elsewhere and the `remedy`, unless `got` is lm_dir's corpus
    hash."""
    want = corpus_hash(lm_dir)
    if got != want:
        raise StaleCalibration(f"{what} (corpus hash {_short(got)}) than the fixtures' ({_short(want)}, "
                               f"{corpus_label(lm_dir)}): run {remedy}")


def check_reference(lm_dir: Path) -> None:
    """Raise StaleCalibration unless the reference model was trained on these fixtures."""
    _same_corpus(lm_dir, reference_hash(lm_dir), f"the reference model in {lm_dir} was trained on another corpus",
                 "`make course CORPUS=<your text>` (or `make reference-model` for the default corpus) to retrain it")


def check_thresholds(lm_dir: Path, rubric: rubric_mod.Rubric | Path | None = None) -> None:
    """Raise StaleCalibration unless the thresholds of `rubric` (read, or its path) were set on these fixtures."""
    rubric = rubric_mod.rubric_of(rubric)
    name = rubric.path.name
    _same_corpus(
        lm_dir,
        threshold_hash(rubric),
        f"the language-model thresholds in {name} were set for another corpus",
        "`make course CORPUS=<your text>` (with no CORPUS for the default corpus) to measure and set them",
    )


def refusal(lm_dir: Path, rubric: rubric_mod.Rubric | Path | None = None, reference: bool = False) -> str | None:
    """Why grading on lm_dir must not go on (thresholds, and with reference=True the reference model,
    measured on another corpus), in one line; None when all is consistent."""
    try:
        check_thresholds(lm_dir, rubric)
        if reference:
            check_reference(lm_dir)
    except StaleCalibration as exc:
        return str(exc)
    return None
