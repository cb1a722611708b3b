"""`make demo`: grade the reference solution and the blank handout on hidden cases.

Assembles two handins under build/demo/ -- the reference (solutions) and the
untouched handout (the blank stubs) -- grades both with the instructor CLI,
and prints both score tables: full marks against zero. It refuses, naming the command
to run, when the reference model or the rubric's thresholds were measured on another
corpus than the fixtures' (after `make fixtures CORPUS=...` without `make course`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from autograder.batch.cli import main as grade_main
from gradelib.handin_contract import HANDIN_FILES

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build" / "demo"


def reference_handin(dest: Path) -> Path:
    """The handin a perfect student would submit, from solutions/."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "solutions" / "attention.py", dest / "attention.py")
    # The otter masters are the notebooks in solved form (otter's markers are raw cells, its tests plain asserts).
    for name in ("01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb", "03_language_model.ipynb"):
        shutil.copyfile(REPO / "solutions" / name, dest / name)
    # What notebook 3 writes for the reference model (`make reference-model`), so no training is needed here.
    lm = REPO / "fixtures" / "lm"
    for src, name in (
        ("reference_predictions.npy", "predictions.npy"),
        ("reference_generated.npy", "generated.npy"),
        ("reference_generated.txt", "generated.txt"),
        ("reference_model.pt", "model.pt"),
    ):
        shutil.copyfile(lm / src, dest / name)
    return dest


def blank_handin(dest: Path) -> Path:
    """The handout as students receive it."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in HANDIN_FILES:
        if (REPO / "handout" / name).is_file():
            shutil.copyfile(REPO / "handout" / name, dest / name)
    return dest


def main() -> None:
    from autograder.reference.provenance import refusal

    why = refusal(REPO / "fixtures" / "lm", reference=True)
    if why:
        sys.exit(f"demo: not grading: {why}.")
    if OUT.exists():
        shutil.rmtree(OUT)
    subs = OUT / "submissions"
    for label, make in (("reference", reference_handin), ("blank_handout", blank_handin)):
        path = make(subs / label)
        print(f"\n=== {label}: {path.relative_to(REPO)} ===", flush=True)
        grade_main([str(path), "--out", str(OUT / "grades"), "--force"])


if __name__ == "__main__":
    main()
