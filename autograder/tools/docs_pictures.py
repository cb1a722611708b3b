"""`make pictures`: what the manual shows of real runs, made from those runs.

- docs/data/student_run.txt: `python autograder.py` as a student's terminal shows it, run in a copy of the handout
  that holds a complete handin with two slips (one in attention.py's backward, one in notebook 1's loss); the docs
  hook (docs_figures.py) draws it as a picture when the site is built;
- docs/img/class_report.png: the course grader's report.html for a small class graded on attention and notebooks 1
  and 2, as headless Chromium draws it (Debian's chromium, installed when missing and running as root).

    python -m autograder.tools.docs_pictures [--only student|class]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.tools.classgen import ATTACKS, BUGS
from autograder.tools.demo import reference_handin
from gradelib.handin import sources

REPO = Path(__file__).resolve().parents[2]
DATA, IMG = REPO / "docs" / "data", REPO / "docs" / "img"
NB1 = "01_mlm_and_next_token.ipynb"
TEST_CELL = '""" # BEGIN TEST CONFIG'  # otter's test cells in a master notebook
# The slips of the student's run: a backward product without its transpose, and a loss averaged over every
# position, the ignored ones too (tests/test_notebooks_bugs.py's loss_averaged_over_ignored_positions).
ATTENTION_SLIP = BUGS["dLdK_without_transpose"][0]
NB1_SLIP = ("return nll.mean()", "return nll.sum() / len(target_ids)")
CLASS_PROBLEMS = ("attention", "losses", "masks")
STUDENT_WORK = ("__pycache__", ".ipynb_checkpoints", "experiments", "handin.tar")
# Chromium as tests/test_class_grading.py runs it: no GPU, no network of its own, a fresh profile.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def slipped(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"docs_pictures: {old!r} is not in {path.name} exactly once; update the slip")
    path.write_text(text.replace(old, new))


def student_run(work: Path) -> str:
    """The local grader's report for a complete handin with two slips, as the student's terminal shows it."""
    handin = reference_handin(work / "handin")
    slipped(handin / "attention.py", *ATTENTION_SLIP)
    as_a_student_holds_it(handin / NB1, *NB1_SLIP)
    folder = shutil.copytree(REPO / "handout", work / "handout", ignore=shutil.ignore_patterns(*STUDENT_WORK))
    where = sources("20250301-1405", "6")  # a run of notebook 3, its files where training writes them
    for item in handin.iterdir():
        (folder / where.get(item.name, item.name)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item, folder / where.get(item.name, item.name))
    done = subprocess.run([sys.executable, "autograder.py"], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}, timeout=600)
    if done.returncode != 0 or "TOTAL" not in done.stdout:
        raise SystemExit(f"docs_pictures: python autograder.py failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return "$ python autograder.py\n" + done.stdout.replace(str(folder), "~/handout")


def as_a_student_holds_it(notebook: Path, old: str, new: str) -> None:
    """The solved master notebook with the slip, without the otter test cells a student's notebook never has."""
    nb = json.loads(notebook.read_text())
    nb["cells"] = [c for c in nb["cells"] if TEST_CELL not in "".join(c["source"])]
    cells = [c for c in nb["cells"] if old in "".join(c["source"])]
    if len(cells) != 1:
        raise SystemExit(f"docs_pictures: {old!r} is not in one cell of {notebook.name}; update the slip")
    cells[0]["source"] = "".join(cells[0]["source"]).replace(old, new)
    notebook.write_text(json.dumps(nb, indent=1))


def small_class(work: Path) -> list[Path]:
    """Twelve handins: complete ones, four with one slip of attention.py, one with notebook 1's slip, one without
    any notebook, one whose attention.py never ends."""
    subs = []
    for i in range(5):
        subs.append(reference_handin(work / f"student{i + 1:02d}"))
    for i, bug in enumerate(("no_scaling", "dLdK_without_transpose", "softmax_jacobian_diagonal_only",
                             "dLdX_misses_value_path")):
        handin = reference_handin(work / f"student{i + 6:02d}")
        for old, new in BUGS[bug]:
            slipped(handin / "attention.py", old, new)
        subs.append(handin)
    handin = reference_handin(work / "student10")
    as_a_student_holds_it(handin / NB1, *NB1_SLIP)
    subs.append(handin)
    handin = reference_handin(work / "student11")
    for notebook in handin.glob("*.ipynb"):
        notebook.unlink()
    subs.append(handin)
    handin = reference_handin(work / "student12")
    (handin / "attention.py").write_text(ATTACKS["infinite_loop_at_import"])
    subs.append(handin)
    return subs


def chromium() -> str:
    path = shutil.which("chromium")
    if not path and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True)
        path = shutil.which("chromium")
    if not path:
        raise SystemExit("docs_pictures: chromium is missing (as root: apt-get install -y chromium)")
    return path


def class_report(work: Path, dest: Path) -> None:
    """Grade the small class with the course grader, then screenshot report.html in headless Chromium.

    The class is graded on the three problems that run no model (CLASS_PROBLEMS): running each handed-in model
    takes seconds of CPU, and on a busy machine the calls' wall-clock backstop can cut it short."""
    subs = small_class(work / "class")
    out = work / "grades"
    done = subprocess.run([sys.executable, "-m", "autograder", *map(str, subs), "--jobs", "2", "--only",
                           *CLASS_PROBLEMS, "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1800)
    if not (out / "report.html").is_file():
        raise SystemExit(f"docs_pictures: the class was not graded ({done.returncode}):\n{done.stderr[-2000:]}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shot = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={work / 'profile'}",
                           "--window-size=720,966", f"--screenshot={dest}", (out / "report.html").as_uri()],
                          capture_output=True, text=True, timeout=180)
    if not dest.is_file():
        raise SystemExit(f"docs_pictures: chromium wrote no screenshot ({shot.returncode}):\n{shot.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The manual's pictures of real runs.")
    ap.add_argument("--only", choices=["student", "class"])
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="docs-pictures-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandboxed children (other uids) reach their scratch below
        if args.only in (None, "student"):
            DATA.mkdir(parents=True, exist_ok=True)
            text = student_run(work / "student")
            (DATA / "student_run.txt").write_text(re.sub(r"\x1b\[[0-9;]*m", "", text))
            print(f"docs_pictures: {DATA / 'student_run.txt'}")
        if args.only in (None, "class"):
            class_report(work, IMG / "class_report.png")
            print(f"docs_pictures: {IMG / 'class_report.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
