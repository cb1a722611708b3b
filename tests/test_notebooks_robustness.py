"""Broken notebooks are graded as far as they can be, explained, and within the time limit."""

from __future__ import annotations

import json
import re
import time

import pytest

from notebook_tools import (
    NB1,
    NB2,
    all_groups,
    edited,
    failing,
    function_cell,
    grade,
    message,
    source,
    student_form,
    with_problem_settings,
)

pytestmark = pytest.mark.slow


def with_cell_after(name: str, after_function: str, code: str) -> str:
    """The master with a new code cell right after the cell that defines `after_function`."""
    nb = student_form(name)
    index = nb["cells"].index(function_cell(nb, after_function))
    nb["cells"].insert(index + 1, {"cell_type": "code", "execution_count": None, "id": "student-cell",
                                   "metadata": {}, "outputs": [], "source": code})
    return json.dumps(nb)


def test_endless_cell_is_stopped_and_the_rest_of_the_notebook_graded(tmp_path):
    problems = with_problem_settings("losses", cell_timeout_s=2)
    nb = with_cell_after(NB1, "softmax", "while True:\n    pass\n")
    result = grade(tmp_path, {NB1: nb}, only=["losses"], problems=problems)
    # Two runs (the public cases, then the hidden ones), each stopping the cell after 2 s of CPU time, or at the
    # wall-clock backstop where a busy machine gave the loop less than that in time (the verdict is the same).
    assert failing(result, "losses") == set()
    stopped = re.compile(r"\(`while True:`\) timed out: stopped after (2 s of CPU time|[\d.]+ s on the wall clock)")
    assert any(stopped.search(n) for n in result.notes), result.notes


def test_endless_function_loses_its_lines_and_the_lines_that_call_it(tmp_path):
    problems = with_problem_settings("losses", call_timeout_s=0.25)
    nb = edited(NB1, "softmax", "e = np.exp(shifted)", "while True:\n        pass")
    start = time.monotonic()
    result = grade(tmp_path, {NB1: nb}, only=["losses"], problems=problems)
    assert time.monotonic() - start < 120  # two runs (public cases, hidden cases); generous: a busy machine is slow
    # scaled_dot_product_attention calls softmax; token_nll and cross_entropy_loss do not.
    assert failing(result, "losses") == {
        (g, v) for g in ("softmax", "attention", "masked_attention") for v in ("public", "hidden")
    }
    assert "`softmax` did not return within 0.25 s of CPU time (an endless loop?)" in message(
        result, "losses", "softmax", "public"
    )


# The first call of softmax in the child waits 0.4 s: longer than its 0.1 s limit on the wall clock,
# but waiting uses no CPU time, as a process does on a busy or throttled machine.
WAIT_ONCE = (
    "e = np.exp(shifted)",
    "import time\n    if not globals().get('waited'):\n        globals()['waited'] = True\n"
    "        time.sleep({seconds})\n    e = np.exp(shifted)",
)


def test_a_call_that_waits_is_not_stopped_at_its_cpu_limit(tmp_path):
    """Limits count CPU time: a slow or crowded machine (here: a call that sleeps) costs the student nothing."""
    problems = with_problem_settings("losses", call_timeout_s=0.1)
    nb = edited(NB1, "softmax", WAIT_ONCE[0], WAIT_ONCE[1].format(seconds=0.4))
    result = grade(tmp_path, {NB1: nb}, only=["losses"], problems=problems)
    assert failing(result, "losses") == set(), [t.output for t in result.tests if not t.passed]


def test_a_call_that_waits_forever_is_stopped_on_the_wall_clock(tmp_path):
    """A call that never computes is stopped at 3 x its limit + 2 s of wall clock, and told so."""
    problems = with_problem_settings("losses", call_timeout_s=0.1)
    nb = edited(NB1, "softmax", WAIT_ONCE[0], WAIT_ONCE[1].format(seconds=1000))
    start = time.monotonic()
    result = grade(tmp_path, {NB1: nb}, only=["losses"], problems=problems)
    assert time.monotonic() - start < 120  # two runs, each with a call that waits (generous: a busy machine is slow)
    text = " ".join(t.output for t in result.tests if not t.passed)
    assert "`softmax` did not return within 2.3 s on the wall clock (it waited rather than computed)" in text, text
    # Only the one call of each run that waited lost its line; the process went on with every other call.
    lost = failing(result, "losses")
    assert len(lost) == 2 and ("softmax", "public") in lost and {v for _, v in lost} == {"public", "hidden"}, lost


def test_exception_swallowing_loop_ends_at_the_process_timeout_with_an_explanation(tmp_path):
    code = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n        pass\n"
    problems = with_problem_settings("losses", cell_timeout_s=1)
    start = time.monotonic()
    result = grade(
        tmp_path, {NB1: with_cell_after(NB1, "softmax", code)}, only=["losses"], problems=problems, timeout_s=6
    )
    assert time.monotonic() - start < 120  # the public run's 6 s, the hidden run's, start-up (generous: load)
    assert result.score == 0.0
    assert "no result: the notebook's process" in message(result, "losses", "softmax", "hidden")
    assert "6 s time limit" in message(result, "losses", "softmax", "public")
    # The hidden run's end by kind alone: a figure it could choose is not said (CourseSide.run_sets, Limits.hidden).
    assert "the notebook's process ran out of time" in message(result, "losses", "softmax", "hidden")
    assert any("before it finished running the cells" in n for n in result.notes), result.notes


def test_syntax_error_costs_only_the_function_in_that_cell(tmp_path):
    nb = edited(NB1, "causal_mask", "return np.triu(", "return np.triu((")
    result = grade(tmp_path, {NB1: nb}, only=["losses"])
    assert failing(result, "losses") == {("causal_mask", "public"), ("causal_mask", "hidden")}
    text = message(result, "losses", "causal_mask", "public")
    assert "`causal_mask` is not defined after running the notebook" in text and "syntax error" in text
    assert any("syntax error" in n for n in result.notes)


def test_deleted_cell_costs_its_function_and_the_functions_that_use_it(tmp_path):
    nb = student_form(NB1)
    nb["cells"].remove(function_cell(nb, "token_nll"))
    result = grade(tmp_path, {NB1: json.dumps(nb)}, only=["losses"])
    # cross_entropy_loss calls token_nll.
    assert failing(result, "losses") == {
        (g, v) for g in ("token_nll", "cross_entropy_loss") for v in ("public", "hidden")
    }
    assert "no code cell defines it" in message(result, "losses", "token_nll", "hidden")
    assert "NameError" in message(result, "losses", "cross_entropy_loss", "hidden")


def test_deleted_import_cell_is_explained_by_the_name_error(tmp_path):
    nb = student_form(NB2)
    nb["cells"] = [c for c in nb["cells"] if not source(c).startswith("import math")]
    result = grade(tmp_path, {NB2: json.dumps(nb)}, only=["masks"])
    # Every function but padding_mask (a plain comparison) reaches for torch or math.
    assert failing(result, "masks") == all_groups("masks") - {("padding_mask", "public"), ("padding_mask", "hidden")}
    assert "NameError: name 'torch' is not defined" in message(result, "masks", "uniform_attention", "public")


def test_file_that_is_not_a_notebook_scores_zero_saying_so(tmp_path):
    result = grade(tmp_path, {NB2: "print('hello')\n"}, only=["masks"])
    assert result.score == 0.0
    assert all("could not be read as a notebook" in t.output for t in result.tests)


def test_ellipsis_placeholder_reads_as_not_attempted(tmp_path):
    nb = edited(NB1, "predicted_ids", "return np.argmax(logits, axis=-1)", "...")
    result = grade(tmp_path, {NB1: nb}, only=["losses"])
    assert failing(result, "losses") == {("predicted_ids", "public"), ("predicted_ids", "hidden")}
    assert "not attempted: `predicted_ids` still has a `...` placeholder and returned None" in message(
        result, "losses", "predicted_ids", "public")


def test_check_call_inside_a_student_cell_does_not_break_the_cell(tmp_path):
    nb = edited(NB1, "causal_mask", '""" # END PROMPT', '""" # END PROMPT\ngrader.check("nb1_causal_mask")')
    result = grade(tmp_path, {NB1: nb}, only=["losses"])
    assert failing(result, "losses") == set()
    assert not result.notes, result.notes


def test_a_helper_in_a_skip_grading_cell_is_explained_by_the_rule(tmp_path):
    nb = json.loads(edited(NB1, "token_nll", "    target_ids = np.asarray(target_ids)\n",
                           "    target_ids = np.asarray(target_ids) + OFFSET\n"))
    index = nb["cells"].index(function_cell(nb, "token_nll"))
    nb["cells"].insert(index, {"cell_type": "code", "execution_count": 7, "id": "demo-cell", "outputs": [],
                               "metadata": {"tags": ["skip-grading"]}, "source": "OFFSET = 0  # a demo constant\n"})
    result = grade(tmp_path, {NB1: json.dumps(nb)}, only=["losses"])
    text = message(result, "losses", "token_nll", "public")
    assert "NameError" in text and "`OFFSET` is defined in cell [7] (`OFFSET = 0  # a demo constant`)" in text, text
    assert "tagged skip-grading, which the grader does not run" in text


def test_a_graded_cell_that_plots_is_told_pyplot_is_imported_in_a_skip_grading_cell(tmp_path):
    # Notebook 2 imports pyplot beside its figures, in a cell the grader skips; a plot added to a graded
    # cell raises NameError there (the functions it follows keep their points), and the note says why.
    nb = with_cell_after(NB2, "causal_mask", "plt.imshow(causal_mask(4))\n")
    result = grade(tmp_path, {NB2: nb}, only=["masks"])
    assert failing(result, "masks") == set()
    said = "\n".join(result.notes)
    assert "(`plt.imshow(causal_mask(4))`) raised: NameError" in said, said
    assert "`plt` is defined in cell" in said and "(`# For the figures below." in said, said
    assert "a cell tagged skip-grading, which the grader does not run: this cell must not use anything" in said, said


def test_cells_are_named_as_jupyter_shows_them(tmp_path):
    nb = json.loads(with_cell_after(NB1, "softmax", "raise ValueError('boom')\n"))
    cell = next(c for c in nb["cells"] if c.get("id") == "student-cell")
    cell["execution_count"] = 12
    result = grade(tmp_path, {NB1: json.dumps(nb)}, only=["losses"])
    assert any("cell [12] (`raise ValueError('boom')`) raised: ValueError: boom" in n for n in result.notes), (
        result.notes
    )


def test_the_template_imports_matplotlib_only_for_a_notebook_whose_graded_cells_name_it(tmp_path):
    """A speed choice (grade.runs_matplotlib), never a grading one: notebooks 2 and 3 import pyplot in
    skip-grading cells only (beside their figures); a graded cell that names it, or a notebook that
    cannot be read, counts as yes."""
    from gradelib.grade import runs_matplotlib

    from support import SOLUTIONS

    nb3, nb2 = SOLUTIONS / "03_language_model.ipynb", SOLUTIONS / NB2
    assert "import matplotlib.pyplot" in nb3.read_text() and "import matplotlib.pyplot" in nb2.read_text()
    assert runs_matplotlib([nb3, nb2]) is False
    plotted = json.loads(nb2.read_text())
    plotted["cells"].append({"cell_type": "code", "metadata": {}, "source": ["import matplotlib\n"]})
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    for name, text in (("plotted.ipynb", json.dumps(plotted)), ("nested.ipynb", "[" * 100_000 + "]" * 100_000)):
        (tmp_path / name).write_text(text)
    assert runs_matplotlib([tmp_path / "plotted.ipynb"]) is True
    assert runs_matplotlib([broken]) is True and runs_matplotlib([tmp_path / "nested.ipynb"]) is True


def test_calls_that_wait_forever_never_run_the_process_past_its_time_limit(tmp_path):
    """Each call may wait on the wall clock for at most a quarter of the time the process has left, so a
    function that sleeps in every call loses its own lines only: every other function is still called."""
    nb = edited(NB1, "predicted_ids", "return np.argmax(", "import time\n    time.sleep(1000)\n    return np.argmax(")
    start = time.monotonic()
    result = grade(tmp_path, {NB1: nb}, only=["losses"], timeout_s=12)
    assert time.monotonic() - start < 120  # not the 1,000 s sleeps (generous: a busy machine is slow)
    assert failing(result, "losses") == {("predicted_ids", "public"), ("predicted_ids", "hidden")}, [
        t.output[:300] for t in result.tests if not t.passed]
    assert "on the wall clock (it waited rather than computed)" in message(result, "losses", "predicted_ids", "hidden")
