"""A fixed sample of `make mutants`: single-point mutants of the reference attention.py, one for each rubric line
(the one failing the fewest other lines) and the equivalent ones, each graded by the course grader; and single-point
mutants of the notebooks' graded functions, one for each rubric line judged and one equivalent per notebook, graded
three at a time (a handin holding a mutant of each notebook).

What each mutant must lose comes from autograder/tools/mutants.py's oracle (the equations in float64 and torch
autograd, sharing no code with the grader; for the notebooks, mutants_notebooks.py's torch.nn.functional references) and
the rubric file's rule for edge lines: a rubric or comparison change that lets a slip through, or takes points from
correct code, fails here. `make mutants` grades them all.
"""

from __future__ import annotations

import pytest

from autograder.tools import mutants as mm
from autograder.tools import mutants_notebooks as mn
from gradelib import rubric

from support import FIXTURES, SOLUTIONS

pytestmark = pytest.mark.slow

# `python -m autograder.tools.mutants --pick 1` with mutmut 3.8.1 (requirements.txt) and the reference of this
# commit; a changed reference renames them, and the test below says so.
SAMPLE = (
    "_tensor_operators@67#8", "_tensor_operators@69#13", "_tensor_operators@71#25", "_tensor_operators@81#86",
    "_tensor_operators@99#126", "operator_arg_removal@96#109", "_tensor_operators@104#170",
    "_tensor_operators@108#191", "_tensor_operators@77#56", "_tensor_operators@103#164", "_tensor_operators@81#88",
    # equivalent: the mask's device left to its default, and float("-INF")
    "operator_arg_removal@73#40", "operator_arg_removal@73#43", "operator_string@74#55",
)
PROBLEM = rubric.load()["attention"]


@pytest.fixture(scope="module")
def judged() -> dict[str, mm.Mutant]:
    found = {m.name: m for m in mm.mutants((SOLUTIONS / "attention.py").read_text()) if m.name in SAMPLE}
    assert set(found) == set(SAMPLE), f"the reference changed: pick a new sample ({sorted(set(SAMPLE) - set(found))})"
    cases = mm.cases(FIXTURES)
    for m in found.values():
        m.expected = mm.failing_lines(PROBLEM, mm.judge(m.text, cases, PROBLEM.tolerance))
    return found


def test_the_sample_covers_every_rubric_line_and_has_equivalent_mutants(judged):
    covered = {line for m in judged.values() for line, _ in m.expected}
    assert covered == {g.id for g in PROBLEM.groups}
    assert sum(not m.expected for m in judged.values()) == 3


@pytest.mark.parametrize("name", SAMPLE)
def test_each_mutant_loses_exactly_the_oracles_lines(judged, name):
    m = judged[name]
    mm.grade(m, FIXTURES)
    assert mm.verdict(PROBLEM, m) in ("killed", "equivalent"), (m.diff, sorted(m.expected), sorted(m.graded))
    assert m.score == pytest.approx(PROBLEM.points - mm.lost(PROBLEM, m.expected))
    assert m.first_line == mm.first_expected(PROBLEM, m.expected)


# --- the notebooks: autograder/tools/mutants_notebooks.py ------------------------------------------------------------

# `python -m autograder.tools.mutants_notebooks --pick`: for each rubric line judged (notebooks 1 and 2, notebook 3's
# collate_and_loss and causal_attention) the mutant failing it with the fewest other lines, and one equivalent
# mutant per notebook; for notebook 3's model_building, predict_function and generate lines, picked by hand from a
# `make mutants` run (a mutant failing both generate lines, an equivalent one of filter_logits). Notebook 3's seven
# share the handins of notebooks 1 and 2's seven: no grading more.
NOTEBOOK_SAMPLE = (
    "losses:cell10:_tensor_operators@9#9", "losses:cell21:operator_number@11#3",
    "losses:cell34:operator_arg_removal@7#3", "losses:cell44:operator_arg_removal@10#9",
    "losses:cell68:operator_arg_removal@10#3", "losses:cell10:operator_swap_op@9#2",
    "losses:cell21:operator_swap_op@11#2", "masks:cell9:operator_arg_removal@9#6",
    "masks:cell18:operator_swap_op@12#2", "masks:cell28:operator_arg_removal@7#4",
    "masks:cell38:operator_swap_op@7#1", "masks:cell53:operator_arg_removal@9#4",
    "masks:cell9:operator_arg_removal@9#4", "prediction:cell9:operator_swap_op@7#2",
    "prediction:cell30:operator_swap_op@4#1", "prediction:cell9:operator_arg_removal@8#10",
    "prediction:cell40:operator_swap_op@42#71", "prediction:cell50:_tensor_operators@11#2",
    "generation:cell60:operator_string@12#5", "generation:cell60:operator_string@24#97",
)


@pytest.fixture(scope="module")
def notebook_judged() -> dict[str, tuple]:
    found = {}
    for target in mn.TARGETS:
        notebook, problem = SOLUTIONS / target.notebook, mn.problem_of(target)
        mine = [m for m in mn.mutants(target, notebook) if m.name in NOTEBOOK_SAMPLE]
        cases = mn.cases(target, FIXTURES)
        for m in mine:
            m.expected = mm.failing_lines(problem, mn.judge(target, notebook, m, cases))
            found[m.name] = (target, problem, m)
    assert set(found) == set(NOTEBOOK_SAMPLE), (
        f"the solutions changed: pick a new sample ({set(NOTEBOOK_SAMPLE) - set(found)})"
    )
    return found


def test_the_notebook_sample_covers_every_judged_line_and_has_equivalent_mutants(notebook_judged):
    for target in mn.TARGETS:
        problem = mn.problem_of(target)
        mine = [m for t, _, m in notebook_judged.values() if t == target]
        assert {line for m in mine for line, _ in m.expected} == {g.id for g in problem.groups}, target.problem
        assert sum(not m.expected for m in mine) == 1, target.problem


def test_the_oracle_finds_the_solutions_right_everywhere():
    """No mutant: every quantity right on every case (else each verdict above would be the oracle's mistake)."""
    for target in mn.TARGETS:
        judged = mn.judge(target, SOLUTIONS / target.notebook, None, mn.cases(target, FIXTURES))
        assert judged and not [(c["inputs"].keys(), c["fails"]) for c in judged if any(c["fails"].values())]


def _batches() -> list[list[str]]:
    """The sample in handins of one mutant per notebook: one grading each."""
    per = [(t, None, [n for n in NOTEBOOK_SAMPLE if n.startswith(f"{t.problem}:")]) for t in mn.TARGETS]
    return [[name for _, _, name in batch] for batch in mn.handins(per)]


@pytest.mark.parametrize("batch", _batches(), ids=lambda names: names[0].split(":", 1)[1])
def test_each_notebook_mutant_loses_exactly_the_oracles_lines(notebook_judged, batch):
    graded = [notebook_judged[name] for name in batch]
    mn.grade(graded, SOLUTIONS, FIXTURES)
    for _, problem, m in graded:
        assert mm.verdict(problem, m) in ("killed", "equivalent"), (
            m.name,
            m.diff,
            sorted(m.expected),
            sorted(m.graded),
        )
        assert m.score == pytest.approx(problem.points - mm.lost(problem, m.expected)), m.name
        assert m.first_line == mm.first_expected(problem, m.expected), m.name
