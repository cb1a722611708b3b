"""Result formats: Gradescope's results.json, Autolab's last line, and results even after a crash."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gradelib import rubric
from gradelib.problems import GRADERS

from support import REPO, SOLUTIONS

CLI = REPO / "autograder" / "autograder.py"
TEST_KEYS = {"name", "score", "max_score", "status", "visibility", "output"}
GRADESCOPE_VISIBILITY = {"public": "visible", "hidden": "after_published"}

# Correct except dLdX, which drops its V path: both passed and failed tests.
PARTLY_RIGHT = (SOLUTIONS / "attention.py").read_text().replace(" + self.dLdV @ self.W_v.T", "")
# The child dies of a segmentation fault while importing the submission.
SEGFAULT = "import faulthandler\nfaulthandler._sigsegv()\n"


def grade_cli(tmp_path, name: str, source: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    folder = tmp_path / "submissions" / name
    folder.mkdir(parents=True)
    (folder / "attention.py").write_text(source)
    out = tmp_path / "grades"
    proc = subprocess.run([sys.executable, str(CLI), str(folder), "--out", str(out), "--timeout", "30", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / name / "results.json").read_text())


@pytest.fixture(scope="module")
def partly_right(tmp_path_factory):
    assert PARTLY_RIGHT != (SOLUTIONS / "attention.py").read_text()
    return grade_cli(tmp_path_factory.mktemp("results"), "partly_right", PARTLY_RIGHT)


def test_results_json_follows_the_gradescope_schema(partly_right):
    _, data = partly_right
    assert isinstance(data["score"], float)
    assert data["tests"], data
    for t in data["tests"]:
        assert TEST_KEYS <= set(t), t
        assert isinstance(t["name"], str) and isinstance(t["output"], str)
        assert isinstance(t["score"], (int, float)) and isinstance(t["max_score"], (int, float))
        assert 0 <= t["score"] <= t["max_score"]
        assert t["status"] == ("passed" if t["score"] == t["max_score"] else "failed")
        assert t["visibility"] in ("visible", "after_published")
        if t["visibility"] == "after_published":
            assert t["name"].endswith("[hidden]")
        else:
            assert t["name"].endswith("[public]")
    assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"]))
    statuses = {t["status"] for t in data["tests"] if "attention" in t["name"]}
    assert statuses == {"passed", "failed"}


def test_every_rubric_line_is_one_test_per_visibility(partly_right):
    _, data = partly_right
    names = {t["name"] for t in data["tests"]}
    problems = rubric.load()
    expected = {f"{pid}: {g.title} [{v}]" for pid, p in problems.items() if pid in GRADERS
                for g in p.groups for v in g.visibilities}
    assert names == expected
    # Each test carries its rubric line id, so reports need not parse display names.
    ids = {(t["tags"][0], t["extra_data"]["line"], t["name"].rsplit("[", 1)[1].rstrip("]")) for t in data["tests"]}
    assert ids == {
        (pid, g.id, v) for pid, p in problems.items() if pid in GRADERS for g in p.groups for v in g.visibilities
    }
    for t in data["tests"]:
        vis = "hidden" if t["name"].endswith("[hidden]") else "public"
        assert t["visibility"] == GRADESCOPE_VISIBILITY[vis]


def test_autolab_line_is_the_last_stdout_line_and_agrees_with_results_json(partly_right):
    proc, data = partly_right
    last = proc.stdout.rstrip("\n").splitlines()[-1]
    scores = json.loads(last)["scores"]
    assert set(scores) == set(GRADERS)
    by_problem = {pid: 0.0 for pid in scores}
    for t in data["tests"]:
        by_problem[t["name"].split(":")[0]] += t["score"]
    assert scores == pytest.approx(by_problem)
    attention = rubric.load()["attention"]
    dldx = next(g.points for g in attention.groups if g.id == "backward_input")
    assert scores["attention"] == pytest.approx(attention.points - dldx)  # dLdX's line, both halves


def test_a_crashing_submission_still_gets_results_json(tmp_path):
    proc, data = grade_cli(tmp_path, "segfault", SEGFAULT, "--only", "attention")
    assert data["score"] == 0.0
    assert data["tests"] and all(t["status"] == "failed" for t in data["tests"])
    public = [t for t in data["tests"] if t["name"].endswith("[public]")]
    hidden = [t for t in data["tests"] if t["name"].endswith("[hidden]")]
    # A real crash (faulthandler's own segfault, no ctypes): every line, backward included, says how the run ended.
    assert public and all("killed by SIGSEGV" in t["output"] for t in public), public[0]["output"]
    # A run that had the hidden cases at hand is said by kind alone: no signal, no exit code.
    assert hidden and all("SIGSEGV" not in t["output"] and "ended early" in t["output"] for t in hidden), \
        hidden[0]["output"]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"scores": {"attention": 0.0}}


def test_integrity_flags_reach_the_class_report_escaped(tmp_path):
    from autograder.batch.records import read_row
    from autograder.batch.regrade import write_merged
    from autograder.batch.report import render_report
    from autograder.grading.course_result import CourseResult, CourseTest

    result = CourseResult("mallory", problems=("generation",), max_points={"generation": 2.0})
    result.tests.append(
        CourseTest("generation", "generation: format [public]", 2.0, 2.0, "public", "ok", line="format")
    )
    result.flags["generated_does_not_match_model"] = "generated.npy is not what model.pt generates <b>bold</b>"
    write_merged(result, tmp_path / "mallory", {}, ["generation"], merge_old=False)
    row = read_row(tmp_path / "mallory" / "results.json", "mallory")
    assert row.flags == result.flags
    html = render_report([row], ["generation"], "report")
    assert "Integrity flags (1)" in html and "generated_does_not_match_model" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html


def test_lines_lost_only_to_todo_code_are_listed_once_at_the_end(tmp_path):
    """A backward still raising the handout's NotImplementedError: its lines (public and hidden) are named
    in one short entry with the file, line and TODO; the forward lines beside them keep their points."""
    from support import grade_files

    lines = SOLUTIONS.joinpath("attention.py").read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if text.strip().startswith("def backward("))
    at = next(
        i for i in range(start, len(lines)) if lines[i].strip() == "d_k = self.W_k.shape[1]"
    )  # the body's first line
    lines.insert(at, '        raise NotImplementedError("TODO 1.1 backward: later")')
    result = grade_files(tmp_path, {"attention.py": "\n".join(lines) + "\n"}, only=["attention"])
    backward = [t for t in result.tests if "backward" in t.name]
    assert backward and all(t.score == 0 for t in backward)
    # Everything else passes, the edge lines included: backward fails on their cases as on the ordinary ones.
    assert all(t.passed for t in result.tests if "backward" not in t.name)
    said = result.table()
    assert "FAIL" not in said, said
    points = sum(t.max_score for t in backward)
    entry = (f"      backward (attention.py, line {at + 1}: TODO 1.1 backward: later): "
             f"{len(backward)} lines, {points:.2f} points")
    assert "  not attempted yet (the handout's TODO still raises NotImplementedError), so every case failed:" in said
    assert entry in said.splitlines(), said


def test_a_line_with_any_other_failure_keeps_its_details():
    from gradelib.results import not_attempted, why_lost

    todo = "case 'a' (T=1): 'x' was not produced (not attempted: `softmax` raises NotImplementedError('TODO')). Hint: h"
    assert not_attempted(f"failed on 2 of 2 public cases:\n{todo}\nthe same failure on 'b'") == "softmax"
    assert (
        not_attempted(
            f"failed on 3 of 3 public cases:\n{todo}\nthe same failure on 'b'\nanother failure on 'c': 'x' is NaN"
        )
        == ""
    )
    assert not_attempted("nb1.ipynb is missing from the handin") == ""
    assert (
        not_attempted(
            "not checked on 2 of 3 public cases: forward raised NotImplementedError: TODO 1.1 forward "
            "(in attention.py, line 65) (see the forward lines)"
        )
        == "forward (attention.py, line 65: TODO 1.1 forward)"
    )
    public = f"failed on 3 of 3 public cases:\n{todo}\nanother failure on 'c': 'x' is NaN"
    mixed = why_lost(
        [
            ("losses: softmax [public]", public, 1.5),
            ("losses: softmax [hidden]", f"failed on 2 of 2 hidden cases:\n{todo}\nthe same failure on 'b'", 1.5),
        ]
    )
    assert mixed == [
        "- losses: softmax [public]:",
        "    failed on 3 of 3 public cases:",
        f"    {todo}",
        "    another failure on 'c': 'x' is NaN",
        "- not attempted yet (the handout's TODO still raises NotImplementedError), so every case failed:",
        "    `softmax`: 1 line, 1.50 points",
    ]


@pytest.mark.parametrize("hi, width", [(24.0, 320), (26.0, 320), (120.0, 640), (1.28, 640), (7.0, 200)])
def test_chart_labels_never_overlap_or_leave_the_chart(hi, width):
    """Bin-edge labels are thinned until no two overlap (at the report's own estimate of a character's
    width, checked against the longest label), the last edge is always labelled, and a threshold's label
    near the right edge is drawn left of its line so it stays inside the chart."""
    import re

    from autograder.batch.report import CHAR_PX, histogram_svg

    svg = histogram_svg([0.0, hi / 3, hi], 0.0, hi, "t", "t", "points", [(hi * 0.97, "no credit 1.25")], width=width)
    ticks = [(float(x), label) for x, label in re.findall(r'<text class="tick" x="([\d.]+)"[^>]*>([^<]+)</text>', svg)]
    assert ticks[0][1] == "0" and ticks[-1][1] == f"{hi:.3g}", ticks
    for (x1, a), (x2, b) in zip(ticks, ticks[1:]):
        assert x2 - x1 >= (len(a) + len(b)) / 2 * CHAR_PX, (a, b, x2 - x1)
    mark = re.search(r'<text x="([\d.]+)"[^>]*fill="#c00"([^>]*)>no credit', svg)
    assert mark and 'text-anchor="end"' in mark.group(2) and float(mark.group(1)) <= width, svg


def test_a_failure_shows_its_first_case_in_full_counts_the_others_and_says_a_hint_once():
    from gradelib.compare import Check
    from gradelib.results import why_lost
    from gradelib.scoring import CaseOutcome, _failure_text

    def failed(name: str, message: str, stage: str = "values"):
        return CaseOutcome(name, "public", f"{name} sizes"), Check("x", False, stage, message)

    same = [
        failed("a", "'x' is off by 1 at index (0, 1). Hint: add one."),
        failed("b", "'x' is off by 2 at index (1, 1). Hint: add one."),
        failed("c", "'x' is off by 3. Hint: add one."),
        failed("d", "'x' is NaN. Hint: h."),
        failed("e", "'x' is inf. Hint: h."),
        failed("f", "'x' is None."),
    ]
    assert _failure_text(same, 7, "public").splitlines() == [
        "failed on 6 of 7 public cases:", "case 'a' (a sizes): 'x' is off by 1 at index (0, 1). Hint: add one.",
        "the same failure on 'b'", "another failure on 'c': 'x' is off by 3.", "another failure on 'd': 'x' is NaN.",
        "and other failures on 'e', 'f'"]
    cannot = [
        failed(n, "not checked: forward raised ValueError: bad (see the forward lines)", "unchecked") for n in "ab"
    ]
    assert _failure_text(cannot, 3, "public") == (
        "not checked on 2 of 3 public cases: forward raised ValueError: bad (see the forward lines)")
    withheld = "Backward points withheld: attention.py used torch.autograd.grad while running."
    assert why_lost([("backward: dLdV", withheld, 1.5), ("backward: dLdX", withheld, 2.0)]) == [
        "- backward: dLdV:", f"    {withheld}", "- backward: dLdX: the same as the line above."]
    # A hint said for one line is not repeated for the next; the same failure on the other case set is said once.
    public = "failed on 1 of 2 public cases:\ncase 'a' (a sizes): 'x' is off by 1. Hint: add one."
    hidden = (
        "failed on 2 of 5 hidden cases:\ncase 'h' (h sizes): 'x' is off by 7. Hint: add one.\nthe same failure on 'i'"
    )
    other = "failed on 1 of 2 public cases:\ncase 'a' (a sizes): 'y' is off by 1. Hint: add one."
    assert why_lost(
        [("p: x [public]", public, 1.0), ("p: x [hidden]", hidden, 1.0), ("p: y [public]", other, 1.0)]
    ) == [
        "- p: x [public]:",
        "    failed on 1 of 2 public cases:",
        "    case 'a' (a sizes): 'x' is off by 1. Hint: add one.",
        "- p: x [hidden]: the same failure as the line above (failed on 2 of 5 hidden cases).",
        "- p: y [public]:",
        "    failed on 1 of 2 public cases:",
        "    case 'a' (a sizes): 'y' is off by 1. Hint: as above.",
    ]


@pytest.mark.parametrize("shown", ["after_published", "after_due_date", "visible", "hidden"])
def test_what_students_see_of_the_hidden_tests_is_the_rubrics_setting(tmp_path, shown):
    """hidden_tests of a problem sets the Gradescope visibility of its hidden tests; public ones stay visible."""
    from autograder.batch.results_json import gradescope_test
    from autograder.grading import rubric_check
    from autograder.grading.course_result import CourseResult
    from gradelib.scoring import all_zero

    text = rubric.RUBRIC_PATH.read_text()
    path = tmp_path / "rubric.toml"
    path.write_text(text.replace('hidden_tests = "after_published"', f'hidden_tests = "{shown}"'))
    problem = rubric_check.load(path)["attention"]
    assert problem.hidden_tests == shown
    result = CourseResult("s", all_zero(problem, ("public", "hidden"), "not graded")).recorded({"attention": problem})
    tests = [gradescope_test(t, "1.1") for t in result.tests]
    assert {t["visibility"] for t in tests if t["name"].endswith("[hidden]")} == {shown}
    assert {t["visibility"] for t in tests if t["name"].endswith("[public]")} == {"visible"}


def test_the_class_grader_writes_the_rubrics_visibility_into_results_json(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text(
        rubric.RUBRIC_PATH.read_text().replace('hidden_tests = "after_published"', 'hidden_tests = "after_due_date"')
    )
    _, data = grade_cli(tmp_path, "reference", (SOLUTIONS / "attention.py").read_text(), "--only", "attention",
                        "--rubric", str(path))
    shown = {t["name"].rsplit("[", 1)[1].rstrip("]"): t["visibility"] for t in data["tests"]}
    assert shown == {"public": "visible", "hidden": "after_due_date"}


def test_a_hidden_tests_visibility_survives_a_regrade_of_another_problem():
    """A rerun that regrades one problem writes the others' tests back as read from results.json: their
    visibility (the rubric's hidden_tests) is kept, not reset to after_published."""
    from autograder.batch.results_json import from_json, gradescope_test

    data = {"tests": [{"name": f"attention: l [{v}]", "score": 1.0, "max_score": 1.0, "output": "",
                       "visibility": shown, "tags": ["attention"]}
                      for v, shown in (("public", "visible"), ("hidden", "after_due_date"), ("hidden", "hidden"))]}
    back = from_json(data, "alice", ["attention"])
    assert [gradescope_test(t, "1.1")["visibility"] for t in back.tests] == ["visible", "after_due_date", "hidden"]
    assert [t.visibility for t in back.tests] == ["public", "hidden", "hidden"]


def test_the_table_puts_root_causes_first_quotes_an_error_once_and_keeps_to_100_columns():
    """A knock-on line (its value follows from another's) and a measured-output line (notebook 3's NLL) come after
    the line they follow from; an exception raised at one place is quoted once; no line is over 100 columns."""
    from autograder.grading.course_result import CourseTest
    from gradelib.results import SubmissionResult, TestResult

    error = "forward raised RuntimeError: expected scalar type Double but found Float (in attention.py, line 32: " \
            "return self.A_sig @ self.V)"
    knock = ("failed on 1 of 1 public cases:\ncase 'a' (B=1): 'X_new' is wrong, which probably follows from the "
             "'A_sig' failure (it is computed from 'A_sig'). Hint: fix 'A_sig' first.")
    root = f"failed on 1 of 1 public cases:\ncase 'a' (B=1): 'A_sig' was not produced ({error}). " + "x" * 120
    again = f"failed on 1 of 1 hidden cases:\ncase 'b' (B=2): 'V' was not produced ({error})."
    result = SubmissionResult("s", problems=("attention", "prediction"), max_points={"attention": 6, "prediction": 14})
    result.tests = [
        TestResult("attention", "attention: forward: context X_new [public]", 0, 1.5, "public", knock, line="out"),
        TestResult("attention", "attention: forward: causal softmax A_sig [public]", 0, 2, "public", root, line="s"),
        TestResult("attention", "attention: forward: projections [hidden]", 0, 2.5, "hidden", again, line="p"),
        CourseTest("prediction", "prediction: nll [hidden]", 0, 12, "hidden", "too high", line="nll",
                   figures={"prediction_nll": 3.2}),
        TestResult("prediction", "prediction: predictions.npy: (128, 20, 30) finite float logits [public]", 0, 2,
                   "public", "predictions.npy has NaN entries", line="format"),
        TestResult("prediction", "prediction: causal_attention [public]", 0, 2, "public", "leaks", line="att"),
    ]
    said = result.table()
    heads = [ln for ln in said.splitlines() if ln.startswith(("  FAIL ", "attention", "prediction"))]
    assert [h.split(" [")[0] for h in heads] == [
        "attention 0.00 / 6.00: 0 of 3 lines pass", "  FAIL 0.00 / 2.00 forward: causal softmax A_sig",
        "  FAIL 0.00 / 2.50 forward: projections", "  FAIL 0.00 / 1.50 forward: context X_new",
        "prediction 0.00 / 14.00: 0 of 3 lines pass", "  FAIL 0.00 / 2.00 causal_attention",
        "  FAIL 0.00 / 12.00 nll", "  FAIL 0.00 / 2.00 predictions.npy: (128, 20, 30) finite float logits"], said
    assert " ".join(said.split()).count("expected scalar type") == 1, said
    assert "raised the RuntimeError quoted above (in attention.py, line 32)" in " ".join(said.split()), said
    assert max(len(ln) for ln in said.splitlines()) <= 100, said


def test_feedback_folds_hidden_failures_whose_public_line_failed_and_names_the_others():
    """feedback.txt (hidden messages not shown): a hidden line failing with its public twin is counted in one line,
    one whose public twin passed (a slip only hidden cases show) is named; passing lines are folded."""
    from autograder.batch.feedback import text as feedback
    from autograder.grading.course_result import CourseResult, CourseTest

    def test(line: str, vis: str, score: float) -> CourseTest:
        said = "" if score else f"failed on 1 of 1 {vis} cases:\ncase 'x' (B=1): 'y' is wrong."
        return CourseTest("p", f"p: {line} [{vis}]", score, 1.0, vis, said, line=line)

    result = CourseResult("s", problems=("p", "q"), max_points={"p": 6.0, "q": 1.0})
    result.tests = [test("a", "public", 0), test("a", "hidden", 0), test("b", "public", 1), test("b", "hidden", 0),
                    test("c", "public", 1), test("c", "hidden", 1),
                    CourseTest("q", "q: d [public]", 1.0, 1.0, "public", "", line="d")]
    assert feedback(result).splitlines()[1:] == [
        "p 3.00 / 6.00: 3 of 6 lines pass",
        "  FAIL 0.00 / 1.00 a [public]:", "      failed on 1 of 1 public cases:", "      case 'x' (B=1): 'y' is wrong.",
        "  FAIL 0.00 / 1.00 b [hidden] (its message names hidden cases: not shown here)",
        "  the same line fails on the hidden cases too (0.00 / 1.00)",
        "  the other 3 lines pass (3.00 points)",
        "q 1.00 / 1.00: its one line passes",
        "TOTAL 4.00 / 7.00",
        "The messages of the 2 failed hidden tests are not shown here (they name hidden cases); the course",
        "    staff publish them with the grades."]


def test_one_passing_line_is_said_in_the_singular():
    """'the other line passes', not 'the other 1 line pass'; a problem of one line: 'its one line passes'."""
    from gradelib.results import SubmissionResult, TestResult

    tests = [TestResult("p", "p: a [public]", 0.0, 1.0, "public", "failed on 1 of 1 public cases:\ncase 'x': no.",
                        line="a"), TestResult("p", "p: b [public]", 1.0, 1.0, "public", "", line="b"),
             TestResult("q", "q: c [public]", 1.0, 1.0, "public", "", line="c")]
    table = SubmissionResult("s", tests=tests, problems=("p", "q"), max_points={"p": 2.0, "q": 1.0}).table()
    assert "  the other line passes (1.00 points)" in table.splitlines(), table
    assert "q 1.00 / 1.00: its one line passes" in table.splitlines(), table
