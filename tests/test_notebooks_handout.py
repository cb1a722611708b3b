"""The student notebooks: built reproducibly by otter assign, and grader.check works offline from handout/:
every public check of the three notebooks passes with the solution pasted in and fails on the blank notebook."""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from notebook_tools import NB1, NB2, NB3
from support import HANDOUT

pytestmark = pytest.mark.slow

ANSWER_TAG = "otter_answer_cell"
SKIP_TAG = "skip-grading"
# Prepended to executed copies: any attempt to reach the network fails loudly.
NOTEBOOKS = (NB1, NB2, NB3)
# Notebook 3's skip-grading cells read the training data and train for minutes: its checks run without them
# (for the solution, as the handout's `make checks` runs them).
WITHOUT_SKIPPED = {NB3}
NO_NETWORK = '''import socket
def _refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = socket.socket.connect_ex = _refuse
socket.create_connection = socket.getaddrinfo = _refuse'''


def mine(rel: str) -> bool:
    """Files of the student notebooks and their public tests (the build makes nothing else)."""
    return rel in NOTEBOOKS or rel.startswith(("tests/nb1_", "tests/nb2_", "tests/nb3_"))


@pytest.fixture(scope="module")
def built(otter_build):
    files, staff = otter_build
    return {rel: data for rel, data in files.items() if mine(rel)}, staff


def test_student_build_reproduces_the_committed_handout_byte_for_byte(built):
    """The committed handout was built by an earlier `make handout`: a second build changes no byte."""
    files, _ = built
    for rel, data in files.items():
        assert (HANDOUT / rel).read_bytes() == data, f"handout/{rel} differs from the build: run `make handout`"
    committed_tests = {f"tests/{p.name}" for p in (HANDOUT / "tests").glob("nb[123]_*.py")}
    assert committed_tests == {rel for rel in files if rel.startswith("tests/")}


def test_the_build_leaves_nothing_in_the_temp_folder(built):
    """otter assign writes each notebook's tests into a temporary folder it never removes: the build gives it one of
    its own, removed with the build's (the shared fixture lists what the build left in the temp folder it was given)."""
    _, staff = built
    assert (staff.parent / "left_in_tmp.txt").read_text() == ""


def test_solutions_and_hidden_tests_stay_out_of_the_handout(built):
    files, staff = built
    for name in NOTEBOOKS:
        text = files[name].decode()
        assert "BEGIN SOLUTION" not in text and "# BEGIN PROMPT" not in text
        assert "np.triu(np.full" not in text and "torch.log_softmax(logits" not in text
        assert "ignore_index=PAD" not in text and "bernoulli_(1 - p)" not in text
        assert (staff / name.removesuffix(".ipynb") / name).is_file(), "the solutions notebook goes to the staff output"
    public = [data.decode() for rel, data in files.items() if rel.startswith("tests/")]
    assert public and all("hidden=True" not in t and "hidden=False" in t for t in public)
    staff_tests = [p.read_text() for p in staff.glob("*/tests/nb[123]_*.py")]
    assert any("hidden=True" in t for t in staff_tests), "hidden otter tests exist, for the staff only"
    for t in public:
        # Doctest-format checks compare printed output, so any value a setup line returns fails correct code.
        assert "OK_FORMAT = False" in t, "public tests are exception-based test functions"


def filled_with_solutions(name: str, staff) -> nbformat.NotebookNode:
    """The handout notebook with each answer cell replaced by the staff notebook's solution cell."""
    student = nbformat.read(HANDOUT / name, as_version=4)
    solved = nbformat.read(staff / name.removesuffix(".ipynb") / name, as_version=4)
    assert [c.cell_type for c in student.cells] == [c.cell_type for c in solved.cells]
    for mine, theirs in zip(student.cells, solved.cells):
        if ANSWER_TAG in mine.metadata.get("tags", []):
            mine.source = theirs.source
    return student


def run_in_handout_copy(nb: nbformat.NotebookNode, name: str, tmp_path, allow_errors: bool):
    """Execute `nb` as handout/<name> in a copy of the handout folder, with the network blocked."""
    folder = tmp_path / "handout"
    shutil.copytree(HANDOUT / "tests", folder / "tests")
    shutil.copytree(HANDOUT / "gradelib", folder / "gradelib", ignore=shutil.ignore_patterns("__pycache__"))
    if name in WITHOUT_SKIPPED:
        nb.cells = [c for c in nb.cells if SKIP_TAG not in c.metadata.get("tags", [])]
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nbformat.write(nb, folder / name)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(folder)}}).execute()
    assert not (folder / ".OTTER_LOG").exists(), "grader.check left otter's log in the student's folder"
    return nb


def checks_headless(nb: nbformat.NotebookNode, name: str, tmp_path) -> list[str]:
    """What the handout's `make checks nb=<name>` (python -m gradelib.notebook_check) printed for `nb`, run in a copy
    of the handout folder with the network blocked, after checking that it exited 0 and wrote nothing there."""
    import subprocess
    import sys

    folder = tmp_path / "handout"
    shutil.copytree(HANDOUT, folder, ignore=shutil.ignore_patterns("__pycache__"))
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nbformat.write(nb, folder / name)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if "__pycache__" not in p.parts}
    run = subprocess.run(["make", "-s", "checks", f"nb={name}", f"PYTHON={sys.executable}"], cwd=folder,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    after = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, f"make checks changed the folder: {sorted(set(after) ^ set(before))}"
    return run.stdout.splitlines()


def check_outputs(nb) -> dict[str, str]:
    """question -> the text grader.check showed for it."""
    shown = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("grader.check("):
            question = cell.source.split('"')[1]
            texts = [o.get("data", {}).get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result"]
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"grader.check({question!r}) raised {errors[0].ename}: {errors[0].evalue}"
            shown[question] = "".join(texts)
    return shown


def case_results(question: str, text: str) -> dict[int, str]:
    """k -> what grader.check showed as the result of test k of `question` (absent when all passed)."""
    blocks = re.split(rf"^\s*{re.escape(question)} - (\d+) (message|result):", text, flags=re.M)
    return {int(k): body for k, kind, body in zip(blocks[1::3], blocks[2::3], blocks[3::3]) if kind == "result"}


def public_test_counts(name: str) -> dict[str, int]:
    nb = nbformat.read(HANDOUT / name, as_version=4)
    questions = [c.source.split('"')[1] for c in nb.cells if c.source.startswith("grader.check(")]
    counts = {}
    for q in questions:
        text = (HANDOUT / "tests" / f"{q}.py").read_text()
        counts[q] = text.count("@test_case(")
        assert counts[q] > 0, f"tests/{q}.py holds no test function"
    return counts


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_grader_check_passes_every_public_test_offline_with_the_solution_pasted_in(built, name, tmp_path):
    _, staff = built
    if name in WITHOUT_SKIPPED:  # as the handout's `make checks` runs them: no training, nothing written
        said = checks_headless(filled_with_solutions(name, staff), name, tmp_path)
        assert said == [f"{q}: passes" for q in public_test_counts(name)] + ["every check passes"], said
        return
    shown = check_outputs(run_in_handout_copy(filled_with_solutions(name, staff), name, tmp_path, allow_errors=False))
    assert set(shown) == set(public_test_counts(name))
    for question, text in shown.items():
        assert text.strip() == f"{question} results: All test cases passed!", text


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_grader_check_on_the_blank_notebook_fails_each_public_test_by_name(name, tmp_path):
    nb = run_in_handout_copy(nbformat.read(HANDOUT / name, as_version=4), name, tmp_path, allow_errors=True)
    shown = check_outputs(nb)
    for question, n_tests in public_test_counts(name).items():
        text = shown[question]
        assert text.startswith(f"{question} results:") and "All test cases passed" not in text
        for k in range(1, n_tests + 1):
            assert f"{question} - {k} message:" in text, "each public test names what it checks"
        results = case_results(question, text)
        assert sorted(results) == list(range(1, n_tests + 1)), text
        for k, block in results.items():
            assert "Test case failed" in block, f"{question} - {k} passed on the blank notebook"
            # The student reads which TODO stopped the test, not a wrong explanation.
            assert re.search(r"NotImplementedError\(['\"]TODO ", block), f"{question} - {k}:\n{block}"
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                # A demo calls an unfinished function, or uses what an earlier demo failed to define.
                assert out.ename in ("NotImplementedError", "NameError"), f"{out.ename}: {out.evalue}"
                assert SKIP_TAG in cell.metadata.get("tags", []), "only demo cells call unfinished functions"


def test_local_autograder_grades_the_notebooks_on_public_cases(tmp_path):
    """The student's `python autograder.py` runs the same checks: full public marks for the solutions."""
    import subprocess
    import sys

    from support import SOLUTIONS

    folder = tmp_path / "handout"
    shutil.copytree(HANDOUT, folder, ignore=shutil.ignore_patterns("data", "__pycache__"))
    for name in (NB1, NB2):
        shutil.copyfile(SOLUTIONS / name, folder / name)
    run = subprocess.run([sys.executable, "autograder.py", "--only", "losses", "masks"], cwd=folder,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # Each problem's header: its public score, then how many of its lines pass.
    assert any(line.startswith("losses 10.00 / 10.00: ") for line in lines), run.stdout
    assert any(line.startswith("masks 10.00 / 10.00: ") for line in lines), run.stdout
    assert "[hidden]" not in run.stdout


# Wrong solutions of notebook 3, each pasted once into its answer cell: (solution text, wrong text).
NB3_BUGS = (
    (
        "inputs = torch.full((len(pieces), T), PAD, dtype=torch.long)",
        "inputs = torch.full((len(pieces), T), EOS, dtype=torch.long)",
    ),
    ('att = att.masked_fill(~self.causal[:T, :T], float("-inf"))', "att = att"),
    ("weight.new_empty(weight.size(0), 1)", "weight.new_empty(weight.shape)"),
    ('logits[:, [EOS, PAD]] = float("-inf")', "pass"),
)
# (question, test number) -> what its failure must tell the student (the grader's message for the line's
# first failing quantity); every other public test passes.
NB3_FAILS = {
    ("nb3_collate", 1): "'collate_inputs' has wrong values",
    ("nb3_attention", 1): "a position saw later ones",
    ("nb3_model", 1): "a position saw later ones",
    ("nb3_generate", 1): "'greedy_ids' has wrong values",
    ("nb3_generate", 2): "outside the allowed set",
}


def test_notebook_3_checks_fail_wrong_code_with_the_reason(built, tmp_path):
    """Checks that pass on the solution and fail on NotImplementedError must also catch real mistakes, and say which."""
    _, staff = built
    nb = filled_with_solutions(NB3, staff)
    answers = [c for c in nb.cells if ANSWER_TAG in c.metadata.get("tags", [])]
    for right, wrong in NB3_BUGS:
        cells = [c for c in answers if right in c.source]
        assert len(cells) == 1 and cells[0].source.count(right) == 1, right
        cells[0].source = cells[0].source.replace(right, wrong)
    shown = check_outputs(run_in_handout_copy(nb, NB3, tmp_path, allow_errors=False))
    failed = {}
    for question, n_tests in public_test_counts(NB3).items():
        results = case_results(question, shown[question])
        assert set(results) <= set(range(1, n_tests + 1)), shown[question]
        failed |= {(question, k): block for k, block in results.items() if "Test case failed" in block}
    assert set(failed) == set(NB3_FAILS), {q: shown[q] for q, _ in set(failed) ^ set(NB3_FAILS)}
    for case, reason in NB3_FAILS.items():
        assert reason in failed[case] and "NotImplementedError" not in failed[case], failed[case]
