"""attention.py as students write it: correct code keeps every point, one slip costs its own lines, messages name it.

The variants in tests/attention_variants/ are small files written for this project
with the patterns found in real students' work: a helper class with a hand-written
`backward` held on self (not autograd), a scale made as a float32 tensor inside a
float64 computation, a float32-only helper given float64 input, and A_w stored
masked. What each must score is decided here without the grader: each variant is
run in this process on the case inputs and judged against torch autograd in
float64 (`make mutants`' oracle, sharing no code with the grader or the stored expected values),
with the rubric's tolerance, and the README's rule for edge lines.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from autograder.tools import mutants
from gradelib import rubric
from gradelib.problems.autograd_source import autograd_uses

from support import FIXTURES, SOLUTIONS, grade_files

pytestmark = pytest.mark.slow

VARIANTS = Path(__file__).resolve().parent / "attention_variants"
PROBLEM = rubric.load()["attention"]


def source(name: str) -> str:
    return (VARIANTS / f"{name}.py").read_text()


def attention_class(text: str, name: str):
    """The variant's Attention, run here (not graded): the oracle judges what it computes."""
    module = types.ModuleType(f"variant_{name}")
    exec(compile(text, f"<variant {name}>", "exec"), module.__dict__)
    return module.Attention


def judge(Attention) -> list[dict]:
    """Per case, quantity -> how it fails by the oracle (torch autograd in float64, autograder/tools/mutants.py's,
    which shares no code with the grader) and the rubric's tolerance: '' (right), 'raise' (not produced), 'nan',
    'non-finite' (inf) or 'wrong' (finite but wrong, or of the wrong shape or dtype)."""
    return mutants.judge_class(Attention, mutants.cases(FIXTURES), PROBLEM.tolerance)


def failing_lines(judged: list[dict]) -> set[tuple[str, str]]:
    """The README's rule for the lines a variant loses (mutants.failing_lines)."""
    return mutants.failing_lines(PROBLEM, judged)


def points_without(failing: set[tuple[str, str]]) -> float:
    return sum(PROBLEM.share(g, v) for g in PROBLEM.groups for v in g.visibilities if (g.id, v) not in failing)


def edited(old: str, new: str, text: str | None = None) -> str:
    """The reference attention.py (or `text`) with one edit, asserted to apply once."""
    text = (SOLUTIONS / "attention.py").read_text() if text is None else text
    assert text.count(old) == 1, old
    return text.replace(old, new)


def outputs(result) -> dict[tuple[str, str], str]:
    return {(t.line, t.visibility): t.output for t in result.tests}


def graded(tmp_path, text: str):
    result = grade_files(tmp_path, {"attention.py": text}, only=["attention"])
    return result, {(t.line, t.visibility) for t in result.tests if not t.passed}


@pytest.mark.parametrize("held", ["on self", "in a local variable"])
def test_a_helper_class_with_its_own_backward_keeps_every_point(tmp_path, held):
    """self.softmax.backward(...) calls the file's own method, and so does sm.backward(...) after
    `sm = self.softmax` (once 17 / 30: the static check took it for autograd): correct code scores 30 / 30, and
    the static check finds nothing (it still finds autograd's backward on a tensor held the same way)."""
    text = source("helper_class_backward")
    if held == "in a local variable":
        text = text.replace(
            "        dLdA_w = self.softmax.backward(", "        sm = self.softmax\n        dLdA_w = sm.backward("
        )
    assert "softmax.backward(" in text or "sm.backward(" in text
    assert autograd_uses(text) == []
    assert failing_lines(judge(attention_class(text, "helper"))) == set()  # right by the oracle on every case
    result, failing = graded(tmp_path, text)
    assert failing == set(), [t.output for t in result.tests if not t.passed]
    assert result.score == pytest.approx(PROBLEM.points)
    tensor_held = text.replace("self.softmax = CausalSoftmax()", "self.softmax = torch.zeros(1)")
    at, call = next((n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ".backward(dLdXnew @" in ln)
    assert autograd_uses(tensor_held) == [f"line {at}: {call}"]


def test_a_helper_class_with_one_real_bug_loses_that_bugs_line_only(tmp_path):
    """The same file averaging the weight gradients over the batch: only the weight-gradient lines are lost,
    with their cause, and no line speaks of automatic differentiation."""
    text = source("helper_class_backward").replace(".sum(dim=0)", ".mean(dim=0)")
    expected = failing_lines(judge(attention_class(text, "averaged")))
    assert expected == {("backward_weights", "public"), ("backward_weights", "hidden")}  # B = 1 alone hides it
    result, failing = graded(tmp_path, text)
    assert failing == expected
    assert result.score == pytest.approx(points_without(expected))
    for t in result.tests:
        assert "automatic differentiation" not in t.output, t.output
        if not t.passed:
            assert "the weight gradient must be summed over the batch, not averaged" in t.output, t.output


def test_a_float32_scale_in_a_float64_computation_is_named_with_numbers_that_differ(tmp_path):
    """torch.tensor(Dk).float().sqrt(): float64 results right to float32 precision only. The lines the oracle
    finds wrong are lost, each message says first that a float32 value entered the float64 computation, and the
    numbers it shows differ in print."""
    text = source("float32_scale")
    expected = failing_lines(judge(attention_class(text, "f32scale")))
    assert expected  # the oracle finds float64 cases where float32 precision is not enough
    result, failing = graded(tmp_path, text)
    assert failing == expected
    assert result.score == pytest.approx(points_without(expected))
    for t in result.tests:
        if t.passed:
            continue
        case = next(ln for ln in t.output.splitlines() if ln.startswith("case "))
        assert "float64" in case and "right to float32 precision only on this float64 case" in case, t.output
        assert "Hint: a float32 value entered this float64 computation" in case, t.output
        got, want = re.search(r"got (\S+), expected (\S+) \(rtol", case).groups()
        assert got != want, case


def test_a_float32_only_helper_says_forward_raised_on_the_backward_lines_once(tmp_path):
    """A float32 helper given float64 input: forward raises on the float64 cases. The forward lines say so; each
    backward line says once that it could not be checked because forward raised, never a cause of its own."""
    text = source("float32_helper")
    assert autograd_uses(text) == []  # q_proj.backward(...) and friends are the file's own
    expected = failing_lines(judge(attention_class(text, "f32helper")))
    # Every set has a float64 ordinary case, so no ordinary line passes. An edge's float64 case raises as the
    # ordinary float64 cases do (charged there); every edge has a float32 case in each set, where this code is
    # verified, right throughout: the edge lines keep their points.
    ordinary = {g.id for g in PROBLEM.groups if not g.edge}
    all_cases = mutants.cases(FIXTURES)
    assert all({"float32", "float64"} <= {c["dtype"] for c in all_cases if c["vis"] == v and c["edge"] == g.edge}
               or v == "public" for g in PROBLEM.groups if g.edge for v in g.visibilities)
    assert expected == {(g, v) for g in ordinary for v in ("public", "hidden")}
    result, failing = graded(tmp_path, text)
    assert failing == expected
    assert result.score == pytest.approx(points_without(expected))
    for t in result.tests:
        assert "automatic differentiation" not in t.output, t.output
        if not t.passed and t.line.startswith("backward"):
            assert t.output.startswith("not checked on 2 of 3 "), t.output
            assert "forward raised RuntimeError" in t.output and "(see the forward lines)" in t.output, t.output
            assert len(t.output.splitlines()) == 1, t.output
        elif not t.passed:
            assert "forward raised RuntimeError" in t.output, t.output


def test_a_masked_a_w_costs_the_raw_scores_line_alone(tmp_path):
    text = source("masked_A_w_stored")
    expected = failing_lines(judge(attention_class(text, "masked")))
    assert expected == {("forward_scores", "public"), ("forward_scores", "hidden")}
    result, failing = graded(tmp_path, text)
    assert failing == expected
    assert result.score == pytest.approx(points_without(expected))
    for t in result.tests:
        if not t.passed:
            assert "'A_w' has" in t.output and "inf entries" in t.output and "do not scale or mask it" in t.output


def test_a_scaled_and_masked_a_w_costs_the_raw_scores_line_alone_and_keeps_t_1(tmp_path):
    """A_w stored as Q K^T / sqrt(Dk) with -inf where masked: the A_w lines charge it. At T = 1 nothing is masked
    and the same A_w is finite, 1/sqrt(Dk) times the raw scores: the same slip in another form, not charged again
    on the T = 1 line, which says why it passes."""
    text = source("scaled_masked_A_w_stored")
    expected = failing_lines(judge(attention_class(text, "scaled_masked")))
    assert expected == {("forward_scores", "public"), ("forward_scores", "hidden")}
    result, failing = graded(tmp_path, text)
    assert failing == expected, outputs(result)
    assert result.score == pytest.approx(points_without(expected))
    for vis in ("public", "hidden"):
        said = outputs(result)["single_position", vis]
        assert said.startswith("passed on all") and "('A_w': graded by their own lines, not again here)" in said, said


def test_a_slip_made_at_t_1_alone_is_not_forgiven_as_the_same_slip(tmp_path):
    """A_w halved only where T = 1, right on every other case: the T = 1 line's forgiveness needs the same slip on the
    ordinary cases, and there is none, so that line is lost in both sets (float32's looser factor digits included)."""
    old = "        self.A_w = self.Q @ self.K.transpose(1, 2)  # (B, T, T)\n"
    text = edited(old, old + "        if self.A_w.shape[1] == 1:\n            self.A_w = self.A_w * 0.5\n")
    result, failing = graded(tmp_path, text)
    assert failing == {("single_position", "public"), ("single_position", "hidden")}, outputs(result)
    assert result.score == pytest.approx(points_without(failing))


def test_a_float32_softmax_that_raises_on_float64_loses_both_stability_lines(tmp_path):
    """No max subtraction, and a row sum made with a float32 column of ones: every float64 case raises the same
    dtype error, the large-scores float64 case too (forgiven: charged on the ordinary lines), and the float32
    large-scores case of each set gives NaN, which is the stability line's own failure: both its points are lost."""
    text = source("float32_softmax_raises")
    result, expected = pinned(tmp_path, text, "f32raises")
    assert {("numerical_stability", "public"), ("numerical_stability", "hidden")} <= expected
    assert ("single_position", "hidden") not in expected and ("key_value_widths", "hidden") not in expected
    for vis in ("public", "hidden"):
        said = outputs(result)["numerical_stability", vis]
        assert "NaN entries" in said and "exp() overflowed" in said, said


def test_one_bug_reads_in_one_screen(tmp_path):
    """The report of a missing causal mask, which breaks the softmax and everything after it: per line the first
    failing case in full, the others counted, the other case set's same failure said in one line, hints once."""
    text = source("helper_class_backward").replace("        scores = scores.masked_fill(future, float(\"-inf\"))\n", "")
    assert text != source("helper_class_backward")
    result, failing = graded(tmp_path, text)
    assert failing == failing_lines(judge(attention_class(text, "unmasked")))
    table = result.table()
    passing = sum(t.passed for t in result.tests)
    assert (f"attention {result.score:.2f} / {PROBLEM.points:.2f}: {passing} of {len(result.tests)} lines pass"
            in table.splitlines()), table
    report = table.split(" lines pass\n", 1)[1].split("\nTOTAL ")[0].strip()
    lines = report.splitlines()
    assert max(len(ln) for ln in table.splitlines()) <= 100, table
    # The first failed line, its first case and its cause, first.
    softmax = next(g for g in PROBLEM.groups if g.id == "forward_softmax")
    assert lines[0] == f"FAIL 0.00 / {PROBLEM.share(softmax, 'public'):.2f} forward: causal softmax A_sig [public]:", (
        report
    )
    assert "nonzero above the diagonal" in " ".join(" ".join(lines[1:6]).split()), report
    assert len(lines) <= 60 and len(report) <= 4500, report  # 12 lines lost (6 rubric lines x 2 sets)
    words = " ".join(report.split())  # wrapped at 100 columns: phrases may run over two lines
    assert words.count("nonzero above the diagonal") == 1, report  # the cause, said once
    assert words.count("the same failure as the line above") == 6, report


def pinned(tmp_path, text: str, name: str):
    """Grade once; the lines lost are the oracle's, and the score is what the rubric gives the others."""
    expected = failing_lines(judge(attention_class(text, name)))
    result, failing = graded(tmp_path, text)
    assert failing == expected, outputs(result)
    assert result.score == pytest.approx(points_without(expected))
    return result, expected


def test_a_float32_softmax_helper_without_max_subtraction_loses_the_stability_line(tmp_path):
    """The course helper: NaN on the public float32 large-scores case is the stability line's own failure (a
    float64 crash elsewhere does not forgive it); the crash gets the dtype-clash hint, and is quoted once per
    line of code that raised."""
    result, expected = pinned(tmp_path, source("float32_softmax_helper"), "f32softmax")
    assert ("numerical_stability", "public") in expected and ("single_position", "hidden") not in expected
    said = outputs(result)
    for vis in ("public", "hidden"):  # in float64 the NaN comes with float32 values: the dtype does not hide it
        assert "NaN entries" in said["numerical_stability", vis] and "exp() overflowed" in said[
            "numerical_stability", vis], said["numerical_stability", vis]
    report = result.table()
    words = " ".join(report.split())  # wrapped at 100 columns: phrases may run over two lines
    assert words.count("a float32 tensor made inside your code met float64 input: build tensors with "
                       "dtype=X.dtype") == 1, report
    assert words.count("(in attention.py, line 32: ") == 1, report


def test_a_float32_constant_is_named_even_where_an_edge_case_also_fails(tmp_path):
    """The float32 scale with no max subtraction: the large-scores cases give NaN, and the float64 lines still
    say first that a float32 value entered the computation."""
    text = source("float32_scale").replace("torch.exp(scores - scores.max(dim=-1, keepdim=True).values)",
                                            "torch.exp(scores)")
    assert text != source("float32_scale")
    result, expected = pinned(tmp_path, text, "f32scale_naive")
    assert {("numerical_stability", "public"), ("numerical_stability", "hidden")} <= expected
    ordinary = [t.output for t in result.tests if not t.passed and not t.line.startswith(("numerical", "single",
                                                                                         "key_value"))]
    assert ordinary and all("right to float32 precision only on this float64 case" in o for o in ordinary)


def test_weights_plus_rowsum_is_a_normalisation_not_a_mask(tmp_path):
    result, expected = pinned(tmp_path, edited("weights / weights.sum(", "weights + weights.sum("), "plus")
    assert ("forward_softmax", "public") in expected
    said = outputs(result)["forward_softmax", "public"]
    assert "entries outside [0, 1]" in said and "above the diagonal" not in said, said


def test_a_mask_on_the_wrong_side_of_the_diagonal_is_named(tmp_path):
    text = edited("torch.triu(torch.ones(T, T, dtype=torch.bool, device=X.device), diagonal=1)",
                  "torch.tril(torch.ones(T, T, dtype=torch.bool, device=X.device), diagonal=-1)")
    result, expected = pinned(tmp_path, text, "wrongside")
    assert ("forward_softmax", "public") in expected
    assert "the mask is on the wrong side of the diagonal" in outputs(result)["forward_softmax", "public"]


def test_a_crash_on_forwards_last_line_costs_the_forward_output_alone(tmp_path):
    """Forward stored Q, K, V, A_sig before raising: backward is judged, and every gradient is right."""
    result, expected = pinned(tmp_path, edited("        return X_new\n",
                                               "        return torch.matmul(self.A_sig, self.V, dim=-1)\n"), "last")
    assert expected == {("forward_output", "public"), ("forward_output", "hidden")}
    assert result.score == pytest.approx(PROBLEM.points - sum(g.points for g in PROBLEM.groups
                                                              if g.id == "forward_output"))
    assert "TypeError" in outputs(result)["forward_output", "public"]


def test_a_crash_inside_one_backward_quantity_is_said_on_its_line(tmp_path):
    """dLdWk's line raises: the weight line quotes the error on 'dLdWk', the quantities after it point there."""
    text = edited("(X_t @ self.dLdK).sum(dim=0)", "(X_t @ self.dLdK.transpose(1, 2)).sum(dim=0)")
    result, expected = pinned(tmp_path, text, "dLdWk")
    said = outputs(result)
    first = next(ln for ln in said["backward_weights", "public"].splitlines() if ln.startswith("case "))
    assert "'dLdWk' was not produced (backward raised RuntimeError" in first, first
    assert "it raised while computing 'dLdWk' (see that line)" in said["backward_input", "public"]
