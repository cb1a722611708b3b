"""The handout: no solution, no hidden case, no oracle, reproducible, and its local autograder works.

`find_leaks` is the leak check; it is run on the committed handout and on
copies with something secret planted in them, to show it would notice. The
oracle (the toy source of the text, its automaton, the code that loads it, and
an instructor's oracle file) is secret too: with it a student could write, or
predict, the source's own text without training a model.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autograder.tools.handout import BEGIN, END, build
from gradelib import rubric

from support import FIXTURES, HANDOUT, REPO, SOLUTIONS, grade_files

pytestmark = pytest.mark.slow

PYTHON = sys.executable
HIDDEN_DIRS = sorted(p for p in FIXTURES.glob("*/hidden") if p.is_dir())
# Build outputs and student work that may sit in a handout folder without being part of it.
NOT_HANDOUT = ("__pycache__", ".ipynb_checkpoints", "experiments", "handin.tar")


# --- what is secret ---------------------------------------------------------------

def solution_regions(lines: list[str]) -> tuple[list[str], list[str]]:
    """(lines inside BEGIN/END SOLUTION regions or marked '# SOLUTION', all other lines)."""
    inside, secret, public = False, [], []
    for line in lines:
        s = line.strip()
        if BEGIN.match(line) or s.startswith("# BEGIN SOLUTION"):
            inside = True
        elif END.match(line) or s == "# END SOLUTION":
            inside = False
        elif inside:
            secret.append(s)
        elif s.endswith("# SOLUTION"):
            secret.append(s[: -len("# SOLUTION")].strip())
        else:
            public.append(s)
    return secret, public


def meaningful(line: str) -> bool:
    """Lines that say something: not blank, not a lone bracket, not a comment."""
    return bool(line) and not line.startswith("#") and bool(re.search(r"[A-Za-z0-9]", line))


def secret_lines(secret: list[str], public: list[str]) -> set[str]:
    """Secret lines that never appear in the public part of the same source."""
    return {s for s in secret if meaningful(s)} - set(public)


def notebook_lines(path: Path, hidden_tests: bool = False) -> tuple[list[str], list[str]]:
    """Code-cell lines of a notebook, split as (secret, public) like solution_regions.

    With otter-assign masters, a raw '# BEGIN SOLUTION' cell opens a solution
    block and hidden test cells carry '# HIDDEN' or 'hidden: true'.
    """
    nb = json.loads(path.read_text())
    secret, public = [], []
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        if cell.get("cell_type") != "code":
            continue
        if hidden_tests and ("# HIDDEN" in src or re.search(r"^hidden:\s*true", src, re.M)):
            secret += [s.strip() for s in src.splitlines()]
            continue
        s, p = solution_regions(src.splitlines())
        secret += s
        public += p
    return secret, public


@functools.cache
def hidden_cases() -> dict[str, dict[str, np.ndarray]]:
    """Every hidden case file's arrays, by file name."""
    cases = {}
    for folder in HIDDEN_DIRS:
        for path in sorted(folder.glob("*.npz")):
            with np.load(path, allow_pickle=False) as data:
                cases[path.name] = {k: data[k] for k in data.files}
    return cases


@functools.cache
def hidden_names() -> tuple[set[str], set[str]]:
    """(hidden case names, text that identifies a hidden case when found in a file).

    Short names such as 'no_padding' may be ordinary words in a notebook, so
    text is searched for the longer case names and the case descriptions,
    which no handout has a reason to contain. File names are checked against
    paths only: grading code may name the hidden file it would read.
    """
    names, marks = set(), set()
    for folder in HIDDEN_DIRS:
        names |= {p.stem for p in folder.glob("*.npz")}
        index = folder / "cases.json"
        if index.exists():
            for case in json.loads(index.read_text()):
                names.add(case["name"])
                if case["name"].count("_") >= 2:
                    marks.add(case["name"])
                if len(case.get("description", "")) > 20:
                    marks.add(case["description"])
    return names, marks


@functools.cache
def secret_arrays() -> tuple[tuple[str, np.ndarray], ...]:
    """('<case file>:<array>', array) for every hidden array worth searching for."""
    return tuple((f"{case}:{key}", arr) for case, data in hidden_cases().items() for key, arr in data.items()
                 if distinctive(arr))


def distinctive(arr: np.ndarray) -> bool:
    """Large and varied enough that finding it elsewhere is no coincidence."""
    if arr.dtype.kind == "f":
        return arr.size >= 8 and np.unique(arr).size >= 4
    return arr.dtype.kind in "iu" and arr.size >= 32 and np.unique(arr).size >= 8


NUMBER = re.compile(rb"-?\d+\.\d{4,}(?:[eE][-+]?\d+)?")


def text_numbers(blob: bytes) -> np.ndarray:
    """Every decimal number with at least 4 decimals written in `blob`, sorted."""
    return np.unique(np.array([float(m) for m in NUMBER.findall(blob)], dtype=np.float64))


def written_as_text(arr: np.ndarray, numbers: np.ndarray, needed: int = 4) -> bool:
    """Whether `needed` values of `arr` appear among `numbers` (to 5 significant digits)."""
    if numbers.size == 0:
        return False
    values = np.unique(arr.astype(np.float64).ravel())
    idx = np.clip(np.searchsorted(numbers, values), 1, numbers.size - 1)
    nearest = np.minimum(np.abs(numbers[idx] - values), np.abs(numbers[idx - 1] - values))
    return int((nearest <= 1e-5 * np.abs(values)).sum()) >= needed


# Nothing under autograder/ ships: the oracle (source, automaton, n-grams, the code that
# loads it), the reference model (notebook 3's solution), the batch grader, the generators.
STAFF = REPO / "autograder"
# Lines this short say too little to tell one file from another.
MIN_LINE = 20
# A handout file holding this many distinctive lines of one staff module holds that module.
SHARED_LINES = 5


def code_lines(path: Path) -> set[str]:
    """Stripped lines of a text file, or of a notebook's code cells."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
        except (ValueError, AttributeError):
            cells = []
        text = "\n".join("".join(c.get("source", "")) for c in cells if isinstance(c, dict))
    return {line.strip() for line in text.splitlines()}


@functools.cache
def public_lines() -> frozenset[str]:
    """Lines students may see: gradelib/ and the public parts of every authored handout file."""
    lines = set()
    for path in (REPO / "gradelib").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            lines |= code_lines(path)
    for path in SOLUTIONS.iterdir():
        if path.suffix == ".ipynb":
            lines |= set(notebook_lines(path)[1])
        elif path.is_file():
            lines |= set(solution_regions(path.read_text().splitlines())[1])
    return frozenset(lines)


@functools.cache
def staff_lines() -> dict[str, frozenset[str]]:
    """autograder/<module> -> its distinctive lines (long, meaningful, in no public file)."""
    out = {}
    for path in sorted(STAFF.rglob("*.py")):
        lines = {s for s in code_lines(path) if len(s) >= MIN_LINE and meaningful(s)} - public_lines()
        if lines:
            out[str(path.relative_to(REPO))] = frozenset(lines)
    return out


@functools.cache
def oracle_marks() -> dict[str, str]:
    """Text that gives the source away -> what it is: oracle.json's description, and the
    start of each of the source's word lists written as a Python literal ('"DOG", "DOGS"'):
    the corpus spells the words, never as literals."""
    marks = {'"toy_source"': "the oracle's description (oracle.json)"}
    for node in ast.parse((STAFF / "oracle" / "source.py").read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        name = getattr(node.targets[0], "id", "?")
        for seq in ast.walk(node.value):
            words = [
                e.value for e in getattr(seq, "elts", []) if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            if isinstance(seq, (ast.List, ast.Tuple)) and len(words) == len(seq.elts) >= 2:
                for q in ('"', "'"):
                    marks[f"{q}{words[0]}{q}, {q}{words[1]}{q}"] = f"the source's word list {name}"
    return marks


def staff_leaks(root: Path, files: list[Path]) -> list[str]:
    leaks = []
    for path in files:
        rel = path.relative_to(root)
        if path.name.startswith("oracle"):
            leaks.append(f"{rel}: the oracle's file itself")
        shown = code_lines(path)
        for module, lines in staff_lines().items():
            shared = len(lines & shown)
            if shared >= min(SHARED_LINES, len(lines)):
                leaks.append(f"{rel}: holds the code of {module} ({shared} of its {len(lines)} distinctive lines)")
        # Notebooks are JSON: their code's quotes are escaped.
        text = path.read_bytes().decode("utf-8", errors="replace").replace('\\"', '"')
        leaks += [f"{rel}: holds {what} ({mark!r})" for mark, what in oracle_marks().items() if mark in text]
    return leaks


# --- the leak check -------------------------------------------------------------------

def handout_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and not any(part in NOT_HANDOUT for part in p.relative_to(root).parts)
    )


def read_arrays(path: Path) -> list[np.ndarray]:
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return [data[k] for k in data.files]
        if path.suffix == ".npy":
            return [np.load(path, allow_pickle=False)]
    except (OSError, ValueError):
        pass
    return []


def notebook_leaks(root: Path, files: list[Path]) -> list[str]:
    """The student notebooks that are a solution notebook, or hold its solution or hidden-test lines or otter's
    markers."""
    leaks = []
    for master in sorted(SOLUTIONS.glob("*.ipynb")):
        student = root / master.name
        if not student.exists():
            continue
        if student.read_bytes() == master.read_bytes():
            leaks.append(f"{master.name} is the solution notebook itself")
            continue
        shown = set(notebook_lines(student)[1]) | set(notebook_lines(student)[0])
        hidden = secret_lines(*notebook_lines(master, hidden_tests=True))
        leaks += [f"{master.name} holds solution or hidden-test line {s!r}" for s in sorted(hidden & shown)]
    markers = ("# BEGIN SOLUTION", "# END SOLUTION", "# HIDDEN", "# BEGIN QUESTION")
    for path in (p for p in files if p.suffix == ".ipynb"):
        text = path.read_text(errors="replace")
        leaks += [f"{path.relative_to(root)} holds the otter marker {m!r}" for m in markers if m in text]
    return leaks


def find_leaks(root: Path) -> list[str]:
    """Everything in the handout at `root` that gives away a solution or a hidden case."""
    leaks = []
    files = handout_files(root)

    secret, public = solution_regions((SOLUTIONS / "attention.py").read_text().splitlines())
    stub = root / "attention.py"
    if stub.exists():
        shown = {s.strip() for s in stub.read_text().splitlines()}
        leaks += [f"attention.py holds solution line {s!r}" for s in sorted(secret_lines(secret, public) & shown)]
    leaks += notebook_leaks(root, files)
    leaks += staff_leaks(root, files)

    names, marks = hidden_names()
    blobs = {p: p.read_bytes() for p in files}
    for path, blob in blobs.items():
        rel = str(path.relative_to(root))
        leaks += [f"{rel}: its path names hidden case {n!r}" for n in sorted(names)
                  if any(part.split(".")[0] == n for part in path.relative_to(root).parts)]
        text = blob.decode("utf-8", errors="replace")
        numbers = text_numbers(blob)
        leaks += [f"{rel}: mentions hidden case {m!r}" for m in sorted(marks)
                  if m in text and re.search(rf"(?<![\w.]){re.escape(m)}(?![\w])", text)]
        arrays = read_arrays(path)
        for label, arr in secret_arrays():
            if arr.tobytes() in blob:
                leaks.append(f"{rel}: holds the bytes of {label}")
            elif arr.dtype.kind == "f" and written_as_text(arr, numbers):
                leaks.append(f"{rel}: holds the values of {label} as text")
            elif any(a.size == arr.size and a.dtype.kind in "fiu"
                     and np.allclose(a.astype(np.float64).ravel(), arr.astype(np.float64).ravel(), rtol=1e-5, atol=0)
                     for a in arrays):
                leaks.append(f"{rel}: holds the values of {label}")
    return leaks


def copy_handout(dest: Path) -> Path:
    shutil.copytree(HANDOUT, dest, ignore=shutil.ignore_patterns(*NOT_HANDOUT))
    return dest


def test_handout_contains_no_solution_and_no_hidden_case():
    assert HIDDEN_DIRS, "no hidden case folders under fixtures/"
    assert find_leaks(HANDOUT) == []


def test_solution_regions_are_found_in_the_reference():
    """The leak check would be empty if it found no solution lines to look for."""
    secret, public = solution_regions((SOLUTIONS / "attention.py").read_text().splitlines())
    lines = secret_lines(secret, public)
    assert "self.A_sig = weights / weights.sum(dim=-1, keepdim=True)  # (B, T, T)" in lines
    assert len(lines) >= 20


def planted_case_file(root: Path) -> str:
    shutil.copyfile(
        FIXTURES / "attention" / "hidden" / "dk_ne_dv.npz", root / "tests" / "attention" / "public" / "dk_ne_dv.npz"
    )
    return "dk_ne_dv"


def planted_renamed_file(root: Path) -> str:
    shutil.copyfile(FIXTURES / "attention" / "hidden" / "wide_float32.npz", root / "tests" / "extra.npz")
    return "holds the bytes of wide_float32.npz"


def planted_recast_values(root: Path) -> str:
    with np.load(FIXTURES / "attention" / "hidden" / "narrow_input.npz") as data:
        np.save(root / "cache.npy", data["expected_dLdX"].astype(np.float32))
    return "holds the values of narrow_input.npz:expected_dLdX"


def planted_text_values(root: Path) -> str:
    with np.load(FIXTURES / "attention" / "hidden" / "large_scores_float64.npz") as data:
        values = data["expected_X_new"]
    (root / "gradelib" / "table.py").write_text(f"VALUES = {np.array2string(values.ravel()[:12], separator=', ')}\n")
    return "holds the values of large_scores_float64.npz:expected_X_new as text"


def planted_solution_line(root: Path) -> str:
    stub = root / "attention.py"
    stub.write_text(stub.read_text() + "        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q  # (B, T, Dk)\n")
    return "solution line 'self.dLdK = dLdA_w.transpose(1, 2) @ self.Q  # (B, T, Dk)'"


def planted_case_index(root: Path) -> str:
    shutil.copyfile(FIXTURES / "attention" / "hidden" / "cases.json", root / "tests" / "notes.json")
    return "mentions hidden case 'single_step_batched_float32'"


def first_master() -> Path:
    masters = sorted(SOLUTIONS.glob("*.ipynb"))
    if not masters:
        pytest.skip("no solution notebooks in solutions/")
    return masters[0]


def planted_solution_notebook(root: Path) -> str:
    master = first_master()
    shutil.copyfile(master, root / master.name)
    return f"{master.name} is the solution notebook itself"


def planted_notebook_solution_line(root: Path) -> str:
    master = first_master()
    line = sorted(secret_lines(*notebook_lines(master, hidden_tests=True)))[0]
    student = root / master.name
    nb = json.loads(student.read_text()) if student.exists() else {"cells": [], "metadata": {}, "nbformat": 4,
                                                                   "nbformat_minor": 5}
    nb["cells"].append({"cell_type": "code", "source": f"{line}\n", "metadata": {}, "outputs": [],
                        "execution_count": None})
    student.write_text(json.dumps(nb))
    return f"{master.name} holds solution or hidden-test line {line!r}"


def planted_source_module(root: Path) -> str:
    shutil.copyfile(STAFF / "oracle" / "source.py", root / "gradelib" / "lm" / "source.py")
    return "gradelib/lm/source.py: holds the code of autograder/oracle/source.py"


def planted_renamed_automaton(root: Path) -> str:
    shutil.copyfile(STAFF / "oracle" / "automaton.py", root / "gradelib" / "lm" / "tables.py")
    return "gradelib/lm/tables.py: holds the code of autograder/oracle/automaton.py"


def planted_oracle_loader(root: Path) -> str:
    shutil.copyfile(STAFF / "oracle" / "oracles.py", root / "gradelib" / "lm" / "scoring_helpers.py")
    return "gradelib/lm/scoring_helpers.py: holds the code of autograder/oracle/oracles.py"


def planted_reference_model(root: Path) -> str:
    shutil.copyfile(STAFF / "reference" / "model.py", root / "gradelib" / "lm" / "model.py")
    return "gradelib/lm/model.py: holds the code of autograder/reference/model.py"


def planted_word_list_in_notebook(root: Path) -> str:
    source = (STAFF / "oracle" / "source.py").read_text()
    start = source.index("ADJECTIVES = [")
    words = source[start : source.index("]", start) + 1]
    student = root / "03_language_model.ipynb"
    nb = json.loads(student.read_text())
    nb["cells"].append(
        {"cell_type": "code", "source": f"{words}\n", "metadata": {}, "outputs": [], "execution_count": None}
    )
    student.write_text(json.dumps(nb))
    return "03_language_model.ipynb: holds the source's word list ADJECTIVES"


def planted_oracle_json(root: Path) -> str:
    shutil.copyfile(FIXTURES / "lm" / "oracle.json", root / "tests" / "lm" / "oracle.json")
    return "tests/lm/oracle.json: the oracle's file itself"


@pytest.mark.parametrize("plant", [planted_case_file, planted_renamed_file, planted_recast_values,
                                   planted_text_values, planted_solution_line, planted_case_index,
                                   planted_solution_notebook, planted_notebook_solution_line,
                                   planted_source_module, planted_renamed_automaton,
                                   planted_oracle_loader, planted_reference_model,
                                   planted_word_list_in_notebook, planted_oracle_json],
                         ids=lambda f: f.__name__)
def test_leak_check_catches_a_planted_secret(tmp_path, plant):
    root = copy_handout(tmp_path / "handout")
    expected = plant(root)
    leaks = find_leaks(root)
    assert any(expected in leak for leak in leaks), leaks


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in handout_files(root)}


def ignored_by_git(paths: list[str]) -> set[str]:
    """Paths (relative to handout/) that .gitignore keeps out of the committed handout."""
    if not paths or shutil.which("git") is None or not (REPO / ".git").exists():
        return set()
    proc = subprocess.run(["git", "check-ignore", "--stdin"], input="\n".join(f"handout/{p}" for p in paths),
                          capture_output=True, text=True, cwd=REPO)
    return {line.removeprefix("handout/") for line in proc.stdout.splitlines()}


def test_handout_build_matches_the_committed_handout_byte_for_byte(tmp_path, otter_build):
    """The committed handout came from an earlier `make handout`: building again changes no byte."""
    build(tmp_path / "one", notebook_files=otter_build[0])
    one = tree_bytes(tmp_path / "one")
    committed = tree_bytes(HANDOUT)
    for rel in ignored_by_git(list(committed)):
        committed.pop(rel)
    stale = sorted(set(one) ^ set(committed)) + sorted(r for r in set(one) & set(committed) if one[r] != committed[r])
    assert stale == [], f"handout/ differs from what `make handout` builds (run it and commit): {stale}"


def test_stub_scores_zero_with_messages_naming_the_todo(tmp_path):
    result = grade_files(tmp_path, {"attention.py": (HANDOUT / "attention.py").read_text()}, only=["attention"])
    assert result.score == 0.0 and result.max_score > 0
    for t in result.tests:
        stage = "backward" if ": backward:" in t.name else "forward"
        assert f"{stage} raised NotImplementedError: TODO 1.1 {stage}" in t.output, t.output


# --- the local runner -------------------------------------------------------------------

# A problem's header in the report: its score, then how many of its lines pass (passing lines are folded).
ROW = re.compile(r"^(?P<problem>[a-z_]+) (?P<got>[\d.]+) / (?P<max>[\d.]+): (?:all \d+|\d+ of \d+) lines pass$")


def run_local(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = subprocess.run([PYTHON, "autograder.py", *args], cwd=folder, capture_output=True, text=True, timeout=300)
    rows = [m.groupdict() for m in map(ROW.match, proc.stdout.splitlines()) if m]
    return proc, rows


@pytest.fixture(scope="module")
def local_handout(tmp_path_factory) -> Path:
    return copy_handout(tmp_path_factory.mktemp("local") / "handout")


def test_local_autograder_on_the_blank_handout_exits_0_with_public_tests_only(local_handout):
    proc, rows = run_local(local_handout)
    assert proc.returncode == 0, proc.stderr
    assert rows, proc.stdout
    assert "[hidden]" not in proc.stdout
    attention = [r for r in rows if r["problem"] == "attention"]
    assert attention and all(float(r["got"]) == 0.0 for r in attention)
    assert "TODO 1.1 forward" in proc.stdout and "TODO 1.1 backward" in proc.stdout
    # Every function is still a TODO: one short list per problem says so, not a block of cases and hints per line.
    said = proc.stdout[proc.stdout.index("\nlosses "):]
    assert "  not attempted yet (the handout's TODO still raises NotImplementedError), so every case failed:" in said
    assert "Hint:" not in said, said
    # softmax's own line, and the stability line, whose first quantity on the huge logits is softmax's.
    assert "      `softmax`: 2 lines, 2.00 points" in said.splitlines(), said
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100, proc.stdout
    # No run trained yet: the run's files are "not there yet", not "missing from the handin".
    assert "The handin lacks" not in proc.stdout and "missing from the handin" not in proc.stdout, proc.stdout
    assert "predictions.npy is not there yet: notebook 3 has no trained run" in proc.stdout


def test_local_autograder_gives_the_reference_full_public_marks(local_handout, tmp_path):
    folder = shutil.copytree(local_handout, tmp_path / "solved")
    shutil.copyfile(SOLUTIONS / "attention.py", folder / "attention.py")
    proc, rows = run_local(folder, "--only", "attention")
    assert proc.returncode == 0, proc.stderr
    assert rows and {r["problem"] for r in rows} == {"attention"}
    assert "No trained run" not in proc.stdout  # notebook 3's run is not what --only attention grades
    assert all(r["got"] == r["max"] for r in rows), proc.stdout
    # The public share of each line, edge lines included, as the rubric states it.
    assert sum(float(r["max"]) for r in rows) == pytest.approx(rubric.load()["attention"].max_points(("public",)))
    assert "[hidden]" not in proc.stdout


def report_of(folder: Path) -> list[str]:
    proc, _ = run_local(folder)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, [line for line in lines if len(line) > 100]
    return lines


def test_the_report_folds_passing_lines_keeps_to_100_columns_and_leads_with_each_cause(local_handout, tmp_path):
    """The reference: one line per problem. A broken handin (sqrt(Dv) for sqrt(Dk), a padding mask built from
    the lengths, no trained run): each failed line, its first case and cause in the 3 lines after it, within the
    first 30 lines, the passing lines of its problem folded into one line. (The blank handout: above.)"""
    problems = rubric.load()
    solved = shutil.copytree(local_handout, tmp_path / "solved")
    for name in (
        "attention.py",
        "01_mlm_and_next_token.ipynb",
        "02_attention_and_masks.ipynb",
        "03_language_model.ipynb",
    ):
        shutil.copyfile(SOLUTIONS / name, solved / name)
    run = solved / "experiments" / "20260101-120000"
    run.mkdir(parents=True)
    for src, name in (("reference_model.pt", "model_3.pt"), ("reference_predictions.npy", "predictions_test_3.npy"),
                      ("reference_generated.npy", "generated_3.npy")):
        shutil.copyfile(FIXTURES / "lm" / src, run / name)
    lines = report_of(solved)
    for pid, problem in problems.items():
        public = problem.max_points(("public",))
        count = sum(len(g.visibilities) > 1 or "public" in g.visibilities for g in problem.groups)
        assert f"{pid} {public:.2f} / {public:.2f}: all {count} lines pass" in lines, lines
    assert not any(line.startswith(("  FAIL", "  PASS")) for line in lines), lines

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("Makefile", "autograder.py", "gradelib", "tests", "data", "03_language_model.ipynb"):
        (shutil.copytree if (local_handout / name).is_dir() else shutil.copyfile)(local_handout / name, broken / name)
    (broken / "attention.py").write_text((SOLUTIONS / "attention.py").read_text().replace(
        "d_k = self.W_k.shape[1]", "d_k = self.W_v.shape[1]"))
    shutil.copyfile(SOLUTIONS / "01_mlm_and_next_token.ipynb", broken / "01_mlm_and_next_token.ipynb")
    nb2 = (SOLUTIONS / "02_attention_and_masks.ipynb").read_text()
    old = "    return tokens != pad_id  "
    assert nb2.count(old) == 1
    (broken / "02_attention_and_masks.ipynb").write_text(
        nb2.replace(
            old, "    return torch.arange(tokens.shape[1])[None, :] < (tokens != pad_id).sum(dim=-1)[:, None]  "
        )
    )
    lines = report_of(broken)
    fails = [i for i, line in enumerate(lines) if line.startswith("  FAIL ")]
    causes = {"edge case Dk != Dv": "case 'narrow_keys'", "padding_mask": "case 'left_padded_words'",
              "combined_mask": "case 'left_padded_words'"}
    for title, case in causes.items():
        at = next(i for i in fails if title in lines[i])
        assert at < 30 and case in " ".join(lines[at + 1:at + 4]), lines
    attention = problems["attention"]
    lost = next(g for g in attention.groups if g.id == "key_value_widths")
    count = sum(len(g.visibilities) > 1 or "public" in g.visibilities for g in attention.groups)
    public = attention.max_points(("public",))
    assert (f"attention {public - attention.share(lost, 'public'):.2f} / {public:.2f}: {count - 1} of {count} "
            "lines pass") in lines, lines
    assert f"  the other {count - 1} lines pass ({public - attention.share(lost, 'public'):.2f} points)" in lines


def test_local_autograder_names_a_syntax_error_not_a_missing_file(local_handout, tmp_path):
    """A file `make handin` would refuse is still graded locally, so its lines give the reason and line."""
    folder = shutil.copytree(local_handout, tmp_path / "broken")
    lines = SOLUTIONS.joinpath("attention.py").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "self.Q = X @ self.W_q" in text)
    lines[line - 1] = "        self.Q = X @ self.W_q  ("
    (folder / "attention.py").write_text("\n".join(lines) + "\n")
    proc, rows = run_local(folder, "--only", "attention")
    assert proc.returncode == 0, proc.stderr
    assert rows and all(float(r["got"]) == 0.0 for r in rows)
    assert f"attention.py does not parse: line {line}: '(' was never closed" in proc.stdout, proc.stdout
    assert f"note: make handin would refuse attention.py (from attention.py) does not parse: line {line}" in proc.stdout
    assert "missing" not in proc.stdout and "lacks attention.py" not in proc.stdout, proc.stdout


def test_local_autograder_refuses_an_unknown_problem(local_handout):
    proc, _ = run_local(local_handout, "--only", "no_such_problem")
    assert proc.returncode != 0
    assert "no_such_problem" in proc.stderr


def test_rebuilding_the_handout_keeps_a_students_work(tmp_path, otter_build):
    out = tmp_path / "handout"
    build(out, notebook_files=otter_build[0])
    (out / "experiments" / "run1").mkdir(parents=True)
    (out / "experiments" / "run1" / "model_3.pt").write_bytes(b"weights")
    (out / "handin.tar").write_bytes(b"tar")
    (out / "stray.txt").write_text("not the build's")
    build(out, notebook_files=otter_build[0])
    assert (out / "experiments" / "run1" / "model_3.pt").read_bytes() == b"weights"
    assert (out / "handin.tar").read_bytes() == b"tar"
    assert not (out / "stray.txt").exists()


# Paths and commands only the course staff have: a shipped file that names one sends a student looking
# for something that is not there.
STAFF_ONLY = re.compile(
    r"autograder/|autograder\.(?:batch|oracle|reference|fixturegen|build|platforms)\b|\bfixtures/|\bsolutions/"
    r"|DESIGN\.md|\bfixturegen\b|make (?:fixtures|reference-model|course|demo|bench|gradescope|autolab|notebooks)\b"
    r"|python -m autograder\b|\.\./shared"
)


def staff_mentions(root: Path) -> list[str]:
    found = []
    for path in handout_files(root):
        if path.suffix in (".npz", ".npy", ".pt") or path.parts[-3:-1] == ("data", "lm"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in STAFF_ONLY.finditer(line):
                found.append(f"{path.relative_to(root)}:{number}: {m.group(0)!r}")
    return found


def test_shipped_files_name_no_staff_only_path_or_command(tmp_path):
    assert staff_mentions(HANDOUT) == []
    root = copy_handout(tmp_path / "handout")
    (root / "gradelib" / "notes.py").write_text("# regenerate with `make fixtures` (see autograder/tools/handout.py)\n")
    assert len(staff_mentions(root)) == 2  # the check would notice
