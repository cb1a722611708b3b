"""A fixed sample of `make mutants`: single-point mutants of the reference attention.py, two for each rubric line
(those failing the fewest other lines) and the equivalent ones, each graded by the course grader.

What each mutant must lose comes from autograder/build/mutants.py's oracle (the equations in float64 and torch
autograd, sharing no code with the grader) and the rubric file's rule for edge lines: a rubric or comparison
change that lets a slip through, or takes points from correct code, fails here. `make mutants` grades them all.
"""

from __future__ import annotations

import pytest

from autograder.build import mutants as mm
from gradelib import rubric

from support import FIXTURES, SOLUTIONS

# `python -m autograder.build.mutants --pick 2` with mutmut 3.8.1 (requirements.txt) and the reference of this
# commit; a changed reference renames them, and the test below says so.
SAMPLE = (
    "_tensor_operators@65#2", "operator_assignment@65#3", "_tensor_operators@69#13", "_tensor_operators@69#18",
    "operator_number@73#44", "operator_swap_op@74#51", "_tensor_operators@81#86", "operator_assignment@81#87",
    "_tensor_operators@99#126", "operator_assignment@99#127", "operator_arg_removal@96#109",
    "_tensor_operators@96#113", "_tensor_operators@104#170", "operator_assignment@104#171",
    "_tensor_operators@108#191", "operator_assignment@108#192", "_tensor_operators@77#56",
    "operator_swap_op@77#58", "_tensor_operators@103#164", "_tensor_operators@100#150",
    "_tensor_operators@71#25", "operator_assignment@71#26",
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
