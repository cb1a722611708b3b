"""Build handout/ from solutions/ and the public fixtures (`make handout`).

- solutions/attention.py -> handout/attention.py with every region between
  `# BEGIN SOLUTION task="..."` and `# END SOLUTION` replaced by
  `raise NotImplementedError("TODO <task>")`.
- solutions/0*.ipynb (otter-assign masters) -> the student notebooks and their
  public otter tests (handout/tests/<question>.py), see build/notebooks.py.
- gradelib/, whole -> handout/gradelib/; solutions/handout_autograder.py (the
  local runner) -> handout/autograder.py; public cases -> handout/tests/.
- Hidden cases never leave fixtures/; tests/test_handout.py checks that.
- Corpus facts (handout_facts.py): `{{name}}` placeholders in the handout README and in notebook 3's
  markdown (the corpus, its size, the oracle, the reference run's figures and time)
  are filled from fixtures/lm/ (oracle.json, train.txt, reference_model.json), so
  the handout states the facts of the corpus it ships; a reference model trained
  on another corpus is refused with the command to run.

The build is deterministic: the same inputs give the same bytes, and files
the build did not write are removed, so handout/ is exactly this output --
except a student's own work there (experiments/, handin.tar), which is kept.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from autograder.tools import notebooks
from autograder.tools.handout_facts import MarkerError, corpus_facts, default_runs, fill_facts

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
FIXTURES = REPO / "fixtures"
# gradelib/ ships whole; nothing under autograder/ ever does (the oracle that scores
# generations, the reference model, fixture generators, the batch grader). With the oracle a
# student could write the source's own text without training.
GRADELIB = REPO / "gradelib"
# Language-model fixtures the local grader reads (the prediction targets stay hidden).
LM_PUBLIC_FILES = ("prediction.npz", "prediction_test.npz", "generation_test.npz")
# What notebook 3 trains and evaluates on, in handout/data/lm/ (prediction.npz is the validation set).
LM_DATA_FILES = ("train.txt", "valid.txt", "prediction.npz", "prediction_test.npz", "generation_test.npz")

BEGIN = re.compile(r'^(?P<indent>\s*)# BEGIN SOLUTION(?: task="(?P<task>[^"]*)")?\s*$')
END = re.compile(r"^\s*# END SOLUTION\s*$")


def strip_solutions(source: str, filename: str) -> str:
    """Replace each marked solution region with a NotImplementedError naming its task."""
    out: list[str] = []
    inside: re.Match | None = None
    for lineno, line in enumerate(source.splitlines(keepends=True), 1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if inside:
                raise MarkerError(f"{filename}:{lineno}: BEGIN SOLUTION inside another region")
            inside = begin
            task = begin.group("task") or "complete this part"
            indent = begin.group("indent")
            out.append(f"{indent}# TODO {task}\n")
            out.append(f'{indent}raise NotImplementedError("TODO {task}")\n')
        elif end:
            if not inside:
                raise MarkerError(f"{filename}:{lineno}: END SOLUTION without BEGIN")
            inside = None
        elif not inside:
            out.append(line)
    if inside:
        raise MarkerError(f"{filename}: BEGIN SOLUTION never closed")
    return "".join(out)


def gradelib_files() -> list[Path]:
    """Every source file of gradelib/, in a fixed order (caches left out)."""
    return sorted(p for p in GRADELIB.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


# Student work that may sit in a handout folder: a rebuild never deletes it.
STUDENT_WORK = ("experiments", "handin.tar")


def clear(out: Path) -> None:
    """An empty handout folder `out` but for the student work in it."""
    out.mkdir(parents=True, exist_ok=True)
    for entry in out.iterdir():
        if entry.name in STUDENT_WORK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def build(out: Path, notebook_files: dict[str, bytes] | None = None) -> list[Path]:
    """Write the handout into `out`; `notebook_files` reuses an earlier run of otter assign."""
    clear(out)
    written: list[Path] = []
    facts = corpus_facts()

    def put(rel: str, data: bytes | str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
        written.append(path)

    put("attention.py", strip_solutions((SOLUTIONS / "attention.py").read_text(), "attention.py"))
    put("README.md", fill_facts((SOLUTIONS / "HANDOUT_README.md").read_text(), facts, "HANDOUT_README.md"))
    put("Makefile", (SOLUTIONS / "handout_Makefile").read_text())
    put("autograder.py", (SOLUTIONS / "handout_autograder.py").read_text())
    for src in gradelib_files():
        put(f"gradelib/{src.relative_to(GRADELIB).as_posix()}", src.read_bytes())
    for src in sorted((FIXTURES / "attention" / "public").iterdir()):
        put(f"tests/attention/public/{src.name}", src.read_bytes())
    for name in LM_PUBLIC_FILES:
        put(f"tests/lm/{name}", (FIXTURES / "lm" / name).read_bytes())
    # Student notebooks and their public otter tests (handout/tests/<question>.py).
    for rel, data in sorted((notebook_files if notebook_files is not None else notebooks.build()).items()):
        put(rel, data)  # corpus facts already filled by notebooks.build
    for src in sorted((FIXTURES / "notebooks" / "public").iterdir()):
        put(f"tests/notebooks/public/{src.name}", src.read_bytes())
    for src in sorted((FIXTURES / "lm_functions" / "public").iterdir()):
        put(f"tests/lm_functions/public/{src.name}", src.read_bytes())
    for name in LM_DATA_FILES:
        put(f"data/lm/{name}", (FIXTURES / "lm" / name).read_bytes())
    if default_runs():  # measured runs of notebook 3's default settings on this corpus: the notebook shows them
        put("data/lm/default_runs.json", (FIXTURES / "lm" / "default_runs.json").read_bytes())
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description="Generate handout/ from solutions/ and public fixtures.")
    ap.add_argument("--out", type=Path, default=REPO / "handout")
    args = ap.parse_args()
    from autograder.reference.provenance import StaleCalibration

    try:
        written = build(args.out)
    except StaleCalibration as exc:
        sys.exit(f"handout not built: {exc}")
    size = sum(p.stat().st_size for p in written)
    print(f"handout: wrote {len(written)} files ({size / 1024:.0f} KiB) to {args.out}")


if __name__ == "__main__":
    main()
