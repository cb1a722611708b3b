"""Build handout/ from solutions/ and the public fixtures (`make handout`).

- solutions/attention.py -> handout/attention.py with every region between
  `# BEGIN SOLUTION task="..."` and `# END SOLUTION` replaced by
  `raise NotImplementedError("TODO <task>")`.
- solutions/0*.ipynb (otter-assign masters) -> the student notebooks and their
  public otter tests (handout/tests/<question>.py), see build/notebooks.py.
- gradelib/, whole -> handout/gradelib/; solutions/handout_autograder.py (the
  local runner) -> handout/autograder.py; public cases -> handout/tests/.
- Hidden cases never leave fixtures/; tests/test_handout.py checks that.
- Corpus facts: `{{name}}` placeholders in the handout README and in notebook 3's
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
import json
import re
import shutil
import sys
from pathlib import Path

from autograder.build import notebooks

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


class MarkerError(ValueError):
    pass


PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
ORACLE_PHRASES = {
    "toy_source": "the exact probability model the corpus was drawn from",
    "ngram": "a character n-gram model of the whole corpus",
    "model": "a larger language model trained on the corpus",
}
TOY_PARAGRAPH = ("The text is toy English written by a probabilistic grammar (words in classes, subject–verb agreement, "
                 "sentence ends). It was made for this course, so the grader knows the true probability of every next "
                 "character.")


def _chars(n: int) -> str:
    return f"{n / 1e6:.1f} million" if n >= 1_000_000 else f"{n:,}"


def corpus_facts(fixtures: Path = FIXTURES) -> dict[str, str]:
    """The corpus facts the handout states, from the fixtures (and the grader's constants): placeholder name -> text."""
    from autograder.reference.provenance import check_reference
    from gradelib.problems.lm_model import GENERATE_CHECK_ROWS, PREDICT_CHECK_ROWS

    lm = fixtures / "lm"
    check_reference(lm)  # a reference of another corpus would state stale figures
    info = json.loads((lm / "oracle.json").read_text())
    ref = json.loads((lm / "reference_model.json").read_text())
    train_chars = len((lm / "train.txt").read_text())
    kind = info["oracle"]["kind"]
    if "corpus" in info:
        c = info["corpus"]
        name = c["path"]
        kept = c.get("chars_kept", train_chars)
        paragraph = (f"The text comes from {name}: {c.get('sentences', 0):,} sentences ({_chars(kept)} characters once "
                     "upper-cased and reduced to A-Z, apostrophe and space). Nobody knows the true probability of its "
                     f"next characters, so the grader scores generated text with {ORACLE_PHRASES[kind]}.")
    else:
        name = "toy English made for this course"
        paragraph = TOY_PARAGRAPH if kind == "toy_source" else (
            TOY_PARAGRAPH.rsplit(" It was made", 1)[0] + f" The grader scores generated text with {ORACLE_PHRASES[kind]}.")
    epochs = ref["epochs"]
    final = ref.get("float16_checkpoint", epochs[-1])
    # Times on 2 free cores: the training's process CPU seconds over its 2 threads (the wall time
    # of a run on a shared machine includes waiting for cores).
    per_epoch = ref.get("train_cpu_s", 2 * ref["train_s"]) / 2 / max(1, len(epochs))
    passing = [r["epoch"] for r in epochs if r.get("passes_full_credit")]
    if not passing:
        full = f"did not earn full credit on both within its {len(epochs)} epochs"
    else:
        first = passing[0]
        steady = passing == list(range(first, len(epochs) + 1))
        full = (f"earned full credit on both {'from' if steady else 'first at'} epoch {first}{' on' if steady else ''} "
                f"(after about {max(1, round(first * per_epoch / 60))} minutes)")
    return {
        "corpus_name": name,
        "corpus_paragraph": paragraph,
        "oracle_phrase": ORACLE_PHRASES[kind],
        "train_chars": _chars(train_chars),
        "reference_parameters": f"{ref['parameters']:,}",
        "reference_epochs": str(len(epochs)),
        "train_minutes": str(max(1, round(per_epoch * len(epochs) / 60))),
        "epoch_s": str(round(per_epoch)),
        "reference_val_nll": f"{final['val_prediction_nll']:.2f}",
        "reference_generation_perplexity": f"{final['generation_perplexity']:.1f}",
        "full_credit_phrase": full,
        "check_rows": str(min(PREDICT_CHECK_ROWS, GENERATE_CHECK_ROWS)),
    }


def fill_facts(text: str, facts: dict[str, str], where: str, json_string: bool = False) -> str:
    """Replace every {{name}} in text; an unknown name is an error naming the file."""
    unknown = sorted({m for m in PLACEHOLDER.findall(text) if m not in facts})
    if unknown:
        raise MarkerError(f"{where}: unknown placeholder(s) {unknown}; known: {sorted(facts)}")
    # Inside a notebook's JSON a value must be a valid string body.
    return PLACEHOLDER.sub(lambda m: json.dumps(facts[m.group(1)], ensure_ascii=False)[1:-1] if json_string
                           else facts[m.group(1)], text)


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


def build(out: Path, notebook_files: dict[str, bytes] | None = None) -> list[Path]:
    """Write the handout into `out`; `notebook_files` reuses an earlier run of otter assign."""
    out.mkdir(parents=True, exist_ok=True)
    for entry in out.iterdir():
        if entry.name in STUDENT_WORK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
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
