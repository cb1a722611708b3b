"""The notebooks' grader.check cells and `python autograder.py` agree: one source for both.

Every public otter test calls gradelib.notebook_check.check on one rubric line, so
each planted bug must fail exactly the otter tests whose public line the local
grader fails. The checks run in-process through otter's own client (the handout's
init cell), on a copy of the handout; notebook 3's training cells never run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from test_notebooks_bugs import BUGS

from gradelib.grade import grade_submission
from gradelib.problems.handin_runs import OTTER_CELL
from gradelib.runner.limits import Limits

from notebook_tools import NB1, NB2, NB3, PROBLEM_OF, edited, load, source
from support import HANDOUT

pytestmark = pytest.mark.slow

SKIP_TAG = "skip-grading"
LINE_CALL = re.compile(r"check\(['\"](\w+)['\"], ['\"](\w+)['\"]")
NB3_PROBLEMS = ("prediction", "generation")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A copy of the handout without the training data, as a student's folder."""
    dest = tmp_path_factory.mktemp("student") / "handout"
    shutil.copytree(HANDOUT, dest, ignore=shutil.ignore_patterns("data", "experiments", "__pycache__"))
    return dest


def namespace(nb: dict) -> dict:
    """Run a notebook's code cells as the kernel would before the checks: no skip-grading cells (training,
    plots), no otter cells, no test definitions of the masters."""
    ns: dict = {"__name__": "__main__"}
    for cell in nb["cells"]:
        text = source(cell)
        if cell["cell_type"] != "code" or SKIP_TAG in cell["metadata"].get("tags", []):
            continue
        if re.search(OTTER_CELL, text, re.MULTILINE) or "BEGIN TEST CONFIG" in text:
            continue
        exec(compile(text, "<cell>", "exec"), ns)
    return ns


def questions(name: str) -> list[str]:
    nb = json.loads((HANDOUT / name).read_text())
    return [source(c).split('"')[1] for c in nb["cells"] if source(c).startswith("grader.check(")]


def lines_of(question: str) -> list[tuple[str, str]]:
    """(problem, line) of each public test of `question`, in otter's order."""
    return LINE_CALL.findall((HANDOUT / "tests" / f"{question}.py").read_text())


def run_checks(folder: Path, name: str, ns: dict) -> dict[str, list[tuple[bool, str]]]:
    """question -> [(passed, otter's message)] for each of its tests, through the handout's otter client."""
    from gradelib.notebook_check import Notebook

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        grader = Notebook(name)
        out = {}
        for q in questions(name):
            result = grader.check(q, global_env=ns)
            out[q] = [(r.passed, r.message) for r in result.test_case_results]
        return out
    finally:
        os.chdir(cwd)


def line_verdicts(checks: dict[str, list[tuple[bool, str]]]) -> dict[tuple[str, str], bool]:
    """(problem, line) -> whether every otter test built from it passed."""
    verdict: dict[tuple[str, str], bool] = {}
    for q, results in checks.items():
        lines = lines_of(q)
        assert len(lines) == len(results), q
        for line, (passed, _) in zip(lines, results):
            verdict[line] = verdict.get(line, True) and passed
    return verdict


def local_public_lines(tmp_path: Path, name: str, text: str, problems: list[str]) -> dict[tuple[str, str], bool]:
    """(problem, line) -> passed, as `python autograder.py --only <problems>` grades the notebook (public cases)."""
    sub = tmp_path / "handin"
    sub.mkdir(exist_ok=True)
    (sub / name).write_text(text)
    result = grade_submission(sub, case_root=HANDOUT / "tests", visibilities=("public",), only=problems,
                              limits=Limits(timeout_s=60))
    from gradelib.rubric import load as load_rubric

    rubric = load_rubric()
    by_name = {f"{p}: {g.title} [public]": (p, g.id) for p in problems for g in rubric[p].groups}
    return {by_name[t.name]: t.passed for t in result.tests if t.name in by_name}


# The textbook shortcut: finite on small logits, log(0) = -inf when a target is far below the best logit. Only the
# cases with huge logits show it, so the stability line alone pays for it.
LOG_OF_SOFTMAX = pytest.param(
    NB1, "token_nll", "return -log_probs[np.arange(len(target_ids)), target_ids]",
    "return -np.log(softmax(logits))[np.arange(len(target_ids)), target_ids]",
    {("numerical_stability", "public"), ("numerical_stability", "hidden")},
    "inf", id="token_nll_as_log_of_softmax")


@pytest.mark.parametrize("notebook,function,old,new,expected,hint", [*BUGS, LOG_OF_SOFTMAX])
def test_planted_bug_fails_the_same_lines_in_grader_check_and_the_local_grader(
        tmp_path, folder, notebook, function, old, new, expected, hint):
    text = edited(notebook, function, old, new)
    problem = PROBLEM_OF[notebook]
    checks = run_checks(folder, notebook, namespace(json.loads(text)))
    otter = {line: ok for line, ok in line_verdicts(checks).items() if line[0] == problem}
    local = local_public_lines(tmp_path, notebook, text, [problem])
    assert otter == local, {line: (otter.get(line), local.get(line)) for line in set(otter) | set(local)}
    # The bug is seen by both, on the lines it breaks on the public cases (hand-written in BUGS).
    assert {line for (problem_id, line), ok in local.items() if not ok} == {g for g, v in expected if v == "public"}
    # ... and grader.check shows the grader's message (the hint of BUGS' first line), in each check that fails it
    # (a line split between questions, as numerical_stability is, fails only where a function passed shows the bug).
    first = sorted(expected)[0][0]
    shown = [m for q, results in checks.items() for line, (ok, m) in zip(lines_of(q), results)
             if line == (problem, first) and not ok]
    assert shown and all(hint in m for m in shown), shown


def test_a_name_only_a_skip_grading_cell_binds_fails_the_check_as_it_fails_the_grader(tmp_path, folder):
    """The kernel ran the skip-grading cell, the grader does not: a graded function (through a helper of the
    notebook's here) that uses its NEG_INF passes nothing in grader.check either, with the grader's reason."""
    nb = json.loads(edited(NB2, "attention", 'scores = scores.masked_fill(~mask, float("-inf"))',
                           "scores = scores.masked_fill(~mask, blocked())"))
    at = next(i for i, c in enumerate(nb["cells"]) if "def attention(" in source(c))
    nb["cells"].insert(at, {"cell_type": "code", "execution_count": 3, "id": "plotsetup", "outputs": [],
                            "metadata": {"tags": [SKIP_TAG]}, "source": 'NEG_INF = float("-inf")  # for the plots\n'})
    nb["cells"].insert(at, {"cell_type": "code", "execution_count": 2, "id": "helper", "outputs": [], "metadata": {},
                            "source": "def blocked():\n    return NEG_INF\n"})
    text = json.dumps(nb)
    student = shutil.copytree(folder, tmp_path / "student")
    (student / NB2).write_text(text)  # saved, as the grader will read it
    kernel = namespace(nb)
    exec('NEG_INF = float("-inf")', kernel)  # ... and run, as the student's kernel did
    checks = run_checks(student, NB2, kernel)
    otter = {line: ok for line, ok in line_verdicts(checks).items() if line[0] == "masks"}
    local = local_public_lines(tmp_path, NB2, text, ["masks"])
    assert otter == local, {line: (otter.get(line), local.get(line)) for line in set(otter) | set(local)}
    assert not otter[("masks", "masked_attention")] and otter[("masks", "attention")], otter  # unmasked: never uses it
    assert kernel["NEG_INF"] == float("-inf")  # put back in the kernel once the check ran
    shown = [
        m
        for q, results in checks.items()
        for line, (_, m) in zip(lines_of(q), results)
        if line[1] == "masked_attention"
    ]
    assert shown and all(
        '`NEG_INF` is defined in cell [3] (`NEG_INF = float("-inf")  # for the plots`), a cell tagged '
        "skip-grading, which the grader does not run" in m
        for m in shown
    ), shown


def test_notebook_3s_checks_refuse_a_builtin_attention_as_the_local_grader_does(tmp_path, folder):
    """The notebook forbids F.scaled_dot_product_attention; one imported under another name is refused all
    the same, by grader.check("nb3_attention") and ("nb3_model") and by the local grader, with one message."""
    text = edited(NB3, "CausalSelfAttention",
                  ("        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)", "        y = att @ v  "),
                  ("        from torch.nn.functional import scaled_dot_product_attention as mix\n"
                   "        y = mix(q, k, v, is_causal=True)\n        att = None", "        y = y"))
    checks = run_checks(folder, NB3, namespace(json.loads(text)))
    otter = line_verdicts(checks)
    # The lines a check exists for (the array lines need a trained run, which no check has).
    local = {
        line: ok for line, ok in local_public_lines(tmp_path, NB3, text, list(NB3_PROBLEMS)).items() if line in otter
    }
    assert otter == local, {line: (otter.get(line), local.get(line)) for line in set(otter) | set(local)}
    assert {line for line, ok in local.items() if not ok} == {
        ("prediction", "causal_attention"),
        ("prediction", "model_building"),
    }
    shown = [m for q, results in checks.items() for line, (_, m) in zip(lines_of(q), results)
             if line == ("prediction", "causal_attention")]
    assert shown and all("F.scaled_dot_product_attention is not allowed in notebook 3" in m for m in shown), shown


@pytest.mark.parametrize("name", [NB1, NB2, NB3])
def test_every_check_passes_on_the_solution_and_fails_naming_the_todo_on_the_blank_handout(folder, name):
    solved = run_checks(folder, name, namespace(load(name)))
    assert solved and all(ok for results in solved.values() for ok, _ in results), {
        q: [m for ok, m in r if not ok] for q, r in solved.items()}
    blank = run_checks(folder, name, namespace(json.loads((HANDOUT / name).read_text())))
    assert set(blank) == set(solved)
    for q, results in blank.items():
        assert results, q
        for ok, message in results:
            assert not ok, f"{q} passed on the blank handout"
            assert "not attempted" in message and re.search(r"NotImplementedError\(['\"]TODO ", message), message
    # Every rubric line with quantities of the notebook's problems is checked by some public test.
    from gradelib.rubric import load as load_rubric

    problems = NB3_PROBLEMS if name == NB3 else (PROBLEM_OF[name],)
    wanted = {(p, g.id) for p in problems for g in load_rubric()[p].groups if g.quantities}
    assert {line for q in solved for line in lines_of(q)} == wanted
    assert not (folder / ".OTTER_LOG").exists(), "grader.check wrote otter's log into the student's folder"


def test_no_otter_log_in_the_handout_or_after_checks(folder):
    assert not (HANDOUT / ".OTTER_LOG").exists()
    from gradelib.notebook_check import Notebook

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        grader = Notebook(NB1)
        grader.check("nb1_softmax", global_env=namespace(load(NB1)))
    finally:
        os.chdir(cwd)
    assert not list(folder.rglob(".OTTER_LOG"))
    # Otter's own client, as a contrast, writes one: the test above can fail.
    import otter

    os.chdir(folder)
    try:
        otter.Notebook(NB1)
        assert (folder / ".OTTER_LOG").exists()
    finally:
        (folder / ".OTTER_LOG").unlink(missing_ok=True)
        os.chdir(cwd)


def test_grader_check_in_a_plain_python_script(folder):
    """Outside a notebook kernel grader.check reads the calling script's top-level names: a function defined there
    is checked as in the notebook; one defined inside a function is said to be missing, with what to do."""
    import subprocess
    import sys

    head = (
        "import numpy as np\nfrom gradelib.notebook_check import Notebook\n"
        "grader = Notebook('01_mlm_and_next_token.ipynb')\n"
    )
    body = (
        "def softmax(z):\n    e = np.exp(z - z.max(axis=-1, keepdims=True))\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n"
    )
    scripts = {"top_level": head + body + "print(grader.check('nb1_softmax'))\n",
               "inside_a_function": head + "def main():\n" + "".join(f"    {ln}\n" for ln in body.splitlines())
               + "    print(grader.check('nb1_softmax'))\n\nmain()\n"}
    said = {}
    for name, text in scripts.items():
        (folder / f"{name}.py").write_text(text)
        proc = subprocess.run([sys.executable, f"{name}.py"], cwd=folder, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said[name] = proc.stdout
    assert "All test cases passed!" in said["top_level"], said["top_level"]
    out = said["inside_a_function"]
    assert "KeyError" not in out and "`softmax` is not defined where grader.check looked" in out, out
    assert "define it at the top level" in out, out


def test_a_check_message_ending_in_a_case_name_keeps_its_closing_quote(monkeypatch):
    """otter shows a failed check as str(exception).strip("'") (otter/test_files/exception_test.py): the grader's
    message, whose last line may be "the same failure on 'padded_words'", must reach the student whole."""
    from gradelib import notebook_check
    from gradelib.results import TestResult

    said = "failed on 2 of 2 public cases:\ncase 'small_batch' (...): wrong.\nthe same failure on 'padded_words'"
    failed = TestResult("masks", "masks: padding_mask [public]", 0.0, 2.0, "public", said)
    monkeypatch.setattr(notebook_check, "grade_line", lambda *_a, **_k: failed)
    with pytest.raises(AssertionError) as caught:
        notebook_check.check("masks", "padding_mask", padding_mask=lambda *a: None)
    shown = str(caught.value).strip("'").strip()  # what otter prints, then strips the whitespace around it
    assert shown.endswith("the same failure on 'padded_words'"), shown
