"""Typical student bugs in attention.py each lose exactly the points they should.

Every bug is a precise textual edit of solutions/attention.py (the edit is
asserted to apply) or a small hand-written class. Next to it is the set of
(rubric line, visibility) tests it must fail, worked out by hand from the
maths and from which cases are public or hidden:

- ordinary cases, all with T > 1, Dk == Dv and unit-scale scores: public
  single_batch (B=1, D != Dk), batched (B=3), batched_float32; hidden
  long_sequence (B=4), wide_float32, narrow_input (D < Dk);
- edge cases, each graded by its own line alone: large scores
  (large_scores_float32 public, large_scores_float64 hidden: numerical_stability),
  T = 1 (one_position public; single_step, single_step_batched_float32 hidden: single_position) and
  Dk != Dv (narrow_keys public; dk_ne_dv, dk_ne_dv_float32 hidden: key_value_widths).

An ordinary line fails on a visibility when any ordinary case of that
visibility fails one of its quantities. Once an ordinary line of its quantities
passes, an edge line fails only for what fails on its edge and on no ordinary
case of the set (a bug the ordinary cases show is charged to their lines);
until then, for anything wrong on its edge cases.
"""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gradelib import rubric

from support import SOLUTIONS, grade_files

pytestmark = pytest.mark.slow

REFERENCE = (SOLUTIONS / "attention.py").read_text()

PROBLEM = rubric.load()["attention"]
GROUPS = {g.id: g for g in PROBLEM.groups}
BOTH = ("public", "hidden")

FORWARD_DOWNSTREAM = ("forward_softmax", "forward_output", "backward_values", "backward_queries_keys",
                      "backward_weights", "backward_input")
SCORE_GRADIENT_DOWNSTREAM = ("backward_queries_keys", "backward_weights", "backward_input")


def lines_of(groups: tuple[str, ...], visibilities: tuple[str, ...] = BOTH) -> set[tuple[str, str]]:
    return {(g, v) for g in groups for v in visibilities}


def edit(source: str, replacements: list[tuple[str, str, int]]) -> str:
    """Apply (old, new, count) edits; each `old` must occur exactly `count` times."""
    for old, new, count in replacements:
        found = source.count(old)
        assert found == count, f"expected {count} occurrence(s) of {old!r} in the reference, found {found}"
        source = source.replace(old, new)
    return source


def line_of(result_test) -> tuple[str, str]:
    """(rubric line id, visibility) of a graded test."""
    assert result_test.line in {g.id for g in PROBLEM.groups}, result_test
    return result_test.line, result_test.visibility




def expected_score(failing: set[tuple[str, str]]) -> float:
    return sum(PROBLEM.share(g, v) for g in PROBLEM.groups for v in g.visibilities if (g.id, v) not in failing)


def grade_attention(tmp_path, source: str):
    return grade_files(tmp_path, {"attention.py": source}, only=["attention"])


@functools.cache
def graded_bug(bug: str):
    """The reference with one catalogued bug, graded once per session (several tests read the same result)."""
    with tempfile.TemporaryDirectory(prefix="bug-") as tmp:
        return grade_attention(Path(tmp), edit((SOLUTIONS / "attention.py").read_text(), BUGS[bug][0]))


# name -> (edits of the reference, failing tests, a fragment every failing message shares or None)
BUGS = {
    # A_sig is wrong on every case with T > 1; each visibility has one, and
    # every backward quantity goes through A_sig.
    "no_scaling": (
        [('scores = (self.A_w / math.sqrt(d_k)).masked_fill', "scores = self.A_w.masked_fill", 1),
         ("dLdA_w = self.A_sig * (dLdA_sig - row_dot) / math.sqrt(d_k)",
          "dLdA_w = self.A_sig * (dLdA_sig - row_dot)", 1)],
        lines_of(FORWARD_DOWNSTREAM),
        None,
    ),
    # Normalising columns instead of rows: same reach as a missing scale.
    "softmax_wrong_axis": (
        [("scores.max(dim=-1, keepdim=True)", "scores.max(dim=1, keepdim=True)", 1),
         ("weights.sum(dim=-1, keepdim=True)", "weights.sum(dim=1, keepdim=True)", 1)],
        lines_of(FORWARD_DOWNSTREAM),
        None,
    ),
    # Position 0 only ever sees itself, but every other row with T > 1 differs.
    "missing_causal_mask": (
        [('.masked_fill(future, float("-inf"))', "", 1)],
        lines_of(FORWARD_DOWNSTREAM),
        None,
    ),
    # mean over the batch equals the sum only for B = 1: 'batched' (public)
    # and 'dk_ne_dv' (hidden) have B > 1.
    "weight_grads_averaged": (
        [(").sum(dim=0)  # (D, D", ").mean(dim=0)  # (D, D", 3)],
        lines_of(("backward_weights",)),
        None,
    ),
    "weight_grads_first_batch_only": (
        [("(X_t @ self.dLdQ).sum(dim=0)", "X_t[0] @ self.dLdQ[0]", 1),
         ("(X_t @ self.dLdK).sum(dim=0)", "X_t[0] @ self.dLdK[0]", 1),
         ("(X_t @ self.dLdV).sum(dim=0)", "X_t[0] @ self.dLdV[0]", 1)],
        lines_of(("backward_weights",)),
        None,
    ),
    # (Dk, D) instead of (D, Dk): a shape failure on every case with D != Dk.
    "weight_grads_transposed": (
        [("(X_t @ self.dLdQ).sum(dim=0)", "(self.dLdQ.transpose(1, 2) @ self.X).sum(dim=0)", 1),
         ("(X_t @ self.dLdK).sum(dim=0)", "(self.dLdK.transpose(1, 2) @ self.X).sum(dim=0)", 1),
         ("(X_t @ self.dLdV).sum(dim=0)", "(self.dLdV.transpose(1, 2) @ self.X).sum(dim=0)", 1)],
        lines_of(("backward_weights",)),
        "'dLdWq' has the wrong shape: got (",
    ),
    # exp() overflows on large_scores_float32 (public) and large_scores_float64
    # (hidden) only: inf / inf gives NaN rows there, and the stability line alone pays.
    "naive_softmax_overflow": (
        [("        scores = scores - scores.max(dim=-1, keepdim=True).values\n", "", 1)],
        lines_of(("numerical_stability",)),
        "NaN",
    ),
    # For T = 1 dLdA_w is (B, 1, 1), so the transpose is a no-op there only.
    "dLdK_missing_transpose": (
        [("self.dLdK = dLdA_w.transpose(1, 2) @ self.Q", "self.dLdK = dLdA_w @ self.Q", 1)],
        lines_of(SCORE_GRADIENT_DOWNSTREAM),
        None,
    ),
    # Only the Dk != Dv cases tell sqrt(Dv) from sqrt(Dk): their own line pays, on the public case too.
    "scale_by_sqrt_dv": (
        [("d_k = self.W_k.shape[1]", "d_k = self.W_v.shape[1]", 2)],
        lines_of(("key_value_widths",)),
        None,
    ),
    # Drops the T axis only when T = 1: the public one_position case shows it, as the hidden single_step ones.
    "squeezed_context": (
        [("X_new = self.A_sig @ self.V  # (B, T, Dv)", "X_new = (self.A_sig @ self.V).squeeze(1)  # (B, T, Dv)", 1)],
        lines_of(("single_position",)),
        "'X_new' has the wrong shape",
    ),
    # dLdV = A_sig^T dLdXnew does not involve the scale; Q, K and what they feed do.
    "backward_missing_inverse_sqrt_dk": (
        [("dLdA_w = self.A_sig * (dLdA_sig - row_dot) / math.sqrt(d_k)",
          "dLdA_w = self.A_sig * (dLdA_sig - row_dot)", 1)],
        lines_of(SCORE_GRADIENT_DOWNSTREAM),
        None,
    ),
    # dLdX is still returned, so only the stored gradients are missing.
    "grads_not_stored_on_self": (
        [("self.dLd", "dLd", 12)],
        lines_of(("backward_values", "backward_queries_keys", "backward_weights")),
        "did not store it on self",
    ),
    # The diagonal of the softmax Jacobian only: right for T = 1 (both are 0), wrong elsewhere.
    "softmax_jacobian_elementwise": (
        [("dLdA_w = self.A_sig * (dLdA_sig - row_dot) / math.sqrt(d_k)",
          "dLdA_w = self.A_sig * (1 - self.A_sig) * dLdA_sig / math.sqrt(d_k)", 1)],
        lines_of(SCORE_GRADIENT_DOWNSTREAM),
        None,
    ),
    "dLdX_missing_value_path": (
        [(" + self.dLdV @ self.W_v.T", "", 1)],
        lines_of(("backward_input",)),
        None,
    ),
    # The contract stores A_w raw; scaling it before storing loses that line alone.
    "A_w_stored_scaled": (
        [("self.A_w = self.Q @ self.K.transpose(1, 2)  # (B, T, T)",
          "self.A_w = self.Q @ self.K.transpose(1, 2) / math.sqrt(self.W_k.shape[1])", 1),
         ("scores = (self.A_w / math.sqrt(d_k)).masked_fill", "scores = self.A_w.masked_fill", 1)],
        lines_of(("forward_scores",)),
        None,
    ),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_bug_fails_exactly_its_tests(tmp_path, reference_attention, bug):
    _, failing, fragment = BUGS[bug]
    result = graded_bug(bug)
    got_failing = {line_of(t) for t in result.tests if not t.passed}
    assert got_failing == failing, "\n".join(f"{t.name}: {t.output}" for t in result.tests if not t.passed)
    assert result.score == pytest.approx(expected_score(failing))
    for t in result.tests:
        if t.passed:
            assert t.score == t.max_score
        else:
            assert t.score == 0.0
            assert "failed on" in t.output and "Hint:" in t.output, t.output
            if fragment:
                assert fragment in t.output, t.output


def test_overflow_message_points_at_max_subtraction(tmp_path, reference_attention):
    result = graded_bug("naive_softmax_overflow")
    softmax = next(t for t in result.tests if line_of(t) == ("numerical_stability", "public"))
    assert "large_scores_float32" in softmax.output
    assert "'A_sig' has" in softmax.output and "NaN" in softmax.output
    assert "subtract each row's max" in softmax.output


def test_sqrt_dv_failure_names_the_dk_ne_dv_case(tmp_path, reference_attention):
    """The public narrow_keys case shows it (the student can fix it locally), the hidden dk_ne_dv grades it too;
    the report's first failed line is that edge line with its case and cause."""
    from autograder.batch.feedback import text as feedback

    result = graded_bug("scale_by_sqrt_dv")
    for vis, case in (("public", "narrow_keys"), ("hidden", "dk_ne_dv")):
        softmax = next(t for t in result.tests if line_of(t) == ("key_value_widths", vis))
        assert f"case '{case}'" in softmax.output and "max abs error" in softmax.output
        assert "A_w / sqrt(Dv): the scale uses the value width Dv" in softmax.output, softmax.output
    group = GROUPS["key_value_widths"]
    assert result.score == pytest.approx(PROBLEM.points - group.points)
    lines = feedback(result).splitlines()
    at = lines.index(f"attention {PROBLEM.points - group.points:.2f} / {PROBLEM.points:.2f}: "
                     f"{len(result.tests) - 2} of {len(result.tests)} lines pass")
    assert lines[at + 1].startswith(f"  FAIL 0.00 / {PROBLEM.share(group, 'public'):.2f} edge case Dk != Dv"), lines
    assert "case 'narrow_keys'" in " ".join(lines[at + 2:at + 5]), lines


def test_a_missing_scale_is_named_as_such(tmp_path, reference_attention):
    """Not the generic formula: the A_sig line says the scores were not divided by sqrt(Dk), and by how much."""
    result = graded_bug("no_scaling")
    for vis in ("public", "hidden"):
        softmax = next(t for t in result.tests if line_of(t) == ("forward_softmax", vis))
        assert "the 1/sqrt(Dk) scaling is missing (divide the scores by sqrt(Dk) = " in softmax.output, softmax.output


@pytest.mark.parametrize("factor, said", [
    ("1", "the 1/sqrt(Dk) scaling is missing"), ("1/Dk", "divided by Dk = 4"), ("sqrt(Dk)", "multiplied by sqrt(Dk)"),
    ("1/sqrt(Dv)", "value width Dv = 3"), ("1/sqrt(D)", "input width D = 6"), ("1/sqrt(Dk)", None)])
def test_the_scale_of_the_scores_is_diagnosed_against_torch(factor, said):
    """A_sig computed by torch (float32, as a student's would be) from the raw scores times each factor:
    a wrong one is named, the right one (1/sqrt(Dk)) and unrelated rows are not blamed on the scale."""
    import torch

    from gradelib.problems.attention import diagnose_scaling

    B, T, D, Dk, Dv = 2, 5, 6, 4, 3
    gen = torch.Generator().manual_seed(3)
    Q, K, V = (torch.randn(B, T, n, generator=gen, dtype=torch.float64) * 2 for n in (Dk, Dk, Dv))
    a_w = Q @ K.transpose(1, 2)
    scale = {"1": 1.0, "1/Dk": 1 / Dk, "sqrt(Dk)": math.sqrt(Dk), "1/sqrt(Dv)": 1 / math.sqrt(Dv),
             "1/sqrt(D)": 1 / math.sqrt(D), "1/sqrt(Dk)": 1 / math.sqrt(Dk)}[factor]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    a_sig = torch.softmax((a_w * scale).masked_fill(future, float("-inf")).float(), dim=-1).numpy()
    expected = {"A_w": a_w.numpy(), "Q": Q.numpy(), "V": V.numpy(), "dLdX": np.zeros((B, T, D))}
    got = diagnose_scaling(a_sig, expected)
    if said is None:
        assert got == ""
    else:
        assert said in got, got
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    assert diagnose_scaling(np.broadcast_to(uniform, (B, T, T)), expected) == ""


BMM_STYLE = '''
import math
import torch


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def forward(self, X):
        B, T, D = X.shape
        self.X = X
        W_q = self.W_q.unsqueeze(0).expand(B, -1, -1)
        W_k = self.W_k.unsqueeze(0).expand(B, -1, -1)
        W_v = self.W_v.unsqueeze(0).expand(B, -1, -1)
        self.Q, self.K, self.V = torch.bmm(X, W_q), torch.bmm(X, W_k), torch.bmm(X, W_v)
        self.A_w = torch.bmm(self.Q, self.K.permute(0, 2, 1))
        scaled = self.A_w / math.sqrt(self.W_k.shape[1])
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        scaled = torch.where(mask, scaled, torch.full_like(scaled, float("-inf")))
        self.A_sig = torch.softmax(scaled, dim=2)
        return torch.bmm(self.A_sig, self.V)

    def backward(self, dLdXnew):
        B = dLdXnew.shape[0]
        dA = torch.bmm(dLdXnew, self.V.permute(0, 2, 1))
        dS = self.A_sig * (dA - (dA * self.A_sig).sum(2, keepdim=True)) / math.sqrt(self.W_k.shape[1])
        self.dLdV = torch.bmm(self.A_sig.permute(0, 2, 1), dLdXnew)
        self.dLdQ = torch.bmm(dS, self.K)
        self.dLdK = torch.bmm(dS.permute(0, 2, 1), self.Q)
        Xt = self.X.permute(0, 2, 1)
        self.dLdWq = torch.bmm(Xt, self.dLdQ).sum(0)
        self.dLdWk = torch.bmm(Xt, self.dLdK).sum(0)
        self.dLdWv = torch.bmm(Xt, self.dLdV).sum(0)
        back = lambda g, W: torch.bmm(g, W.t().unsqueeze(0).expand(B, -1, -1))
        return back(self.dLdQ, self.W_q) + back(self.dLdK, self.W_k) + back(self.dLdV, self.W_v)
'''

EINSUM_STYLE = '''
import torch


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def forward(self, X):
        self.X = X
        self.Q = torch.einsum("btd,dk->btk", X, self.W_q)
        self.K = torch.einsum("btd,dk->btk", X, self.W_k)
        self.V = torch.einsum("btd,dv->btv", X, self.W_v)
        self.A_w = torch.einsum("bik,bjk->bij", self.Q, self.K)
        T, dk = X.shape[1], self.W_k.shape[1]
        s = self.A_w * dk ** -0.5 + torch.triu(torch.full((T, T), float("-inf"), dtype=X.dtype), 1)
        e = torch.exp(s - s.amax(-1, keepdim=True))
        self.A_sig = e / e.sum(-1, keepdim=True)
        return torch.einsum("bij,bjv->biv", self.A_sig, self.V)

    def backward(self, dLdXnew):
        dk = self.W_k.shape[1]
        dA = torch.einsum("biv,bjv->bij", dLdXnew, self.V)
        dS = self.A_sig * (dA - torch.einsum("bij,bij->bi", dA, self.A_sig)[..., None]) * dk ** -0.5
        self.dLdV = torch.einsum("bij,biv->bjv", self.A_sig, dLdXnew)
        self.dLdQ = torch.einsum("bij,bjk->bik", dS, self.K)
        self.dLdK = torch.einsum("bij,bik->bjk", dS, self.Q)
        self.dLdWq = torch.einsum("btd,btk->dk", self.X, self.dLdQ)
        self.dLdWk = torch.einsum("btd,btk->dk", self.X, self.dLdK)
        self.dLdWv = torch.einsum("btd,btv->dv", self.X, self.dLdV)
        return (torch.einsum("btk,dk->btd", self.dLdQ, self.W_q)
                + torch.einsum("btk,dk->btd", self.dLdK, self.W_k)
                + torch.einsum("btv,dv->btd", self.dLdV, self.W_v))
'''


@pytest.mark.parametrize("style", ["bmm", "einsum"])
def test_other_correct_styles_get_full_marks(tmp_path, style):
    source = {"bmm": BMM_STYLE, "einsum": EINSUM_STYLE}[style]
    result = grade_attention(tmp_path, source)
    assert [t.name + ": " + t.output for t in result.tests if not t.passed] == []
    assert result.score == result.max_score == pytest.approx(PROBLEM.points)


AUTOGRAD_BACKWARD = '''
import math
import torch


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = (
            w.detach().clone().requires_grad_(True) for w in (weights_keys, weights_queries, weights_values)
        )

    def forward(self, X):
        self.X = X.detach().clone().requires_grad_(True)
        self.Q, self.K, self.V = self.X @ self.W_q, self.X @ self.W_k, self.X @ self.W_v
        for t in (self.Q, self.K, self.V):
            t.retain_grad()
        self.A_w = self.Q @ self.K.transpose(1, 2)
        T = X.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = (self.A_w / math.sqrt(self.W_k.shape[1])).masked_fill(~mask, float("-inf"))
        self.A_sig = torch.softmax(scores, dim=-1)
        self.out = self.A_sig @ self.V
        return self.out.detach()

    def backward(self, dLdXnew):
        self.out.backward(dLdXnew)
        self.dLdQ, self.dLdK, self.dLdV = self.Q.grad, self.K.grad, self.V.grad
        self.dLdWq, self.dLdWk, self.dLdWv = self.W_q.grad, self.W_k.grad, self.W_v.grad
        return self.X.grad
'''


SDPA_FORWARD = edit(
    REFERENCE,
    [("X_new = self.A_sig @ self.V  # (B, T, Dv)",
      "X_new = torch.nn.functional.scaled_dot_product_attention(self.Q, self.K, self.V, is_causal=True)", 1)],
)


@pytest.mark.parametrize(
    "source,flagged", [(AUTOGRAD_BACKWARD, "backward"), (SDPA_FORWARD, "scaled_dot_product_attention")]
)
def test_autograd_and_builtin_attention_lose_exactly_the_backward_points(tmp_path, source, flagged):
    result = grade_attention(tmp_path, source)
    backward = {g.id for g in PROBLEM.groups if g.backward}
    failing = {line_of(t) for t in result.tests if not t.passed}
    assert failing == lines_of(tuple(backward)), [t.name + ": " + t.output for t in result.tests if not t.passed]
    assert result.score == pytest.approx(expected_score(failing))
    for t in result.tests:
        if not t.passed:
            assert t.output.startswith("Backward points withheld"), t.output
            assert "hand-derived gradients" in t.output and flagged in t.output


CALLS_OWN_BACKWARD = edit(
    REFERENCE,
    [("        return dLdX\n",
      "        return dLdX\n\n"
      "    def step(self, X, dLdXnew):\n"
      "        \"\"\"Forward then backward, as a training loop would call them.\"\"\"\n"
      "        self.forward(X)\n"
      "        return self.backward(dLdXnew)\n", 1)],
)




def test_transposed_weight_gradient_message_gives_both_shapes():
    result = graded_bug("weight_grads_transposed")
    weights = next(t for t in result.tests if line_of(t) == ("backward_weights", "public"))
    # single_batch has D = 5, Dk = 3.
    assert "case 'single_batch'" in weights.output
    assert "'dLdWq' has the wrong shape: got (3, 5), expected (5, 3)" in weights.output


SELF_TEST = '''

if __name__ == "__main__":
    # The student's own check against autograd; never runs when the grader imports the file.
    X = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    att = Attention(*[torch.randn(4, 3, dtype=torch.float64) for _ in range(3)])
    out = att.forward(X)
    dX = att.backward(torch.ones_like(out))
    out.sum().backward()
    print(torch.allclose(dX, X.grad))
'''

FINITE_DIFFERENCES = '''

if __name__ == "__main__":
    # The student's own check by central differences, no autograd: dL/dX[0, 0, 0] for L = sum(out * G).
    torch.manual_seed(0)
    X, G = torch.randn(1, 3, 4, dtype=torch.float64), torch.randn(1, 3, 3, dtype=torch.float64)
    att = Attention(*[torch.randn(4, 3, dtype=torch.float64) for _ in range(3)])
    att.forward(X)
    dX = att.backward(G)
    up, down, h = X.clone(), X.clone(), 1e-6
    up[0, 0, 0] += h
    down[0, 0, 0] -= h
    numeric = ((att.forward(up) * G).sum() - (att.forward(down) * G).sum()) / (2 * h)
    print("finite differences agree:", abs(numeric - dX[0, 0, 0]).item() < 1e-6)
'''


def test_own_backward_and_self_tests_under_main_guard_are_not_mistaken_for_autograd(tmp_path):
    """One handin holds all three (one grading): a method that calls its own backward, and the student's own
    checks under the __main__ guard, by autograd and by central differences. Each alone is looked for by the
    source check as the grader runs it (gradelib/problems/autograd_source.py), and none of them may lose a point."""
    from gradelib.problems.autograd_source import autograd_uses

    assert "self.backward(" in CALLS_OWN_BACKWARD
    for extra in (CALLS_OWN_BACKWARD, REFERENCE + SELF_TEST, REFERENCE + FINITE_DIFFERENCES):
        assert autograd_uses(extra) == [], extra[-400:]
    assert ".backward()" in SELF_TEST  # autograd, under the guard
    result = grade_attention(tmp_path, CALLS_OWN_BACKWARD + SELF_TEST + FINITE_DIFFERENCES)
    assert [t.name + ": " + t.output for t in result.tests if not t.passed] == []
    assert result.score == pytest.approx(PROBLEM.points)


def test_autograd_outside_the_main_guard_is_still_found():
    from gradelib.problems.autograd_source import autograd_uses

    source = ("import torch\n"
              "if __name__ == '__main__':\n    x.backward()\n"
              "else:\n    y.backward()\n"
              "if '__main__' == __name__:\n    z.backward()\n"
              "if __name__ != '__main__':\n    w.backward()\n")
    assert autograd_uses(source) == ["line 5: y.backward()", "line 9: w.backward()"]


def test_requires_grad_keyword_is_found():
    from gradelib.problems.autograd_source import autograd_uses

    source = "import torch\nw = torch.zeros(3, requires_grad=True)\n"
    assert autograd_uses(source) == ["line 2: w = torch.zeros(3, requires_grad=True)"]


def test_backward_that_hangs_keeps_the_forward_points(tmp_path):
    # It sleeps rather than spins: the time limit stops both alike (the attack tests spin), and a spin burns 8
    # CPU-seconds.
    source = edit(
        REFERENCE,
        [
            (
                "        d_k = self.W_k.shape[1]\n\n        dLdA_sig",
                "        import time\n        while True:\n            time.sleep(3600)\n        dLdA_sig",
                1,
            )
        ],
    )
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=8)
    forward = [t for t in result.tests if "forward" in t.name]
    backward = [t for t in result.tests if "backward" in t.name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward if not t.passed]
    assert backward and not any(t.passed for t in backward)
    # The edge lines keep theirs too: backward fails on their cases as on the ordinary ones, and forward is right.
    assert result.score == sum(GROUPS[g].points for g in GROUPS if not GROUPS[g].backward)
    assert any("time limit" in n for n in result.notes), result.notes


@pytest.mark.parametrize(
    "bug, diagnosis",
    [("missing_causal_mask", "nonzero above the diagonal"), ("softmax_wrong_axis", "softmax over the last axis")],
)
def test_softmax_message_names_the_mistake(tmp_path, reference_attention, bug, diagnosis):
    result = graded_bug(bug)
    softmax = next(t for t in result.tests if line_of(t) == ("forward_softmax", "public"))
    assert diagnosis in softmax.output, softmax.output


def test_failures_that_follow_from_an_earlier_one_say_so(tmp_path, reference_attention):
    result = graded_bug("missing_causal_mask")
    backward = [t for t in result.tests if not t.passed and t.line.startswith("backward")]
    assert backward
    for t in backward:
        assert (
            "probably follows from the 'A_sig' failure" in t.output or "probably follows from the 'dLd" in t.output
        ), t.output
    softmax = [t for t in result.tests if t.line == "forward_softmax"]
    assert all("probably follows" not in t.output for t in softmax)  # the first failure keeps its own hint


def test_a_constant_factor_of_sqrt_dk_is_named(tmp_path, reference_attention):
    result = graded_bug("A_w_stored_scaled")
    scores = [t for t in result.tests if t.line == "forward_scores"]
    assert scores and all("got/expected" in t.output and "that is 1/sqrt(Dk)" in t.output for t in scores), \
        [t.output for t in scores]


def test_a_weight_gradient_averaged_over_the_batch_is_named_as_such(tmp_path, reference_attention):
    """Where B = 2 and Dk = 4, a factor of 0.5 is both 1/B and 1/sqrt(Dk): both causes are named, the batch
    first; on other batch sizes, 1/B alone. No failing weight-gradient case is left without a cause."""
    result = graded_bug("weight_grads_averaged")
    weights = [t for t in result.tests if t.line == "backward_weights" and not t.passed]
    assert weights
    for t in weights:
        assert "the weight gradient must be summed over the batch, not averaged" in t.output, t.output
        assert "a constant factor is off" not in t.output, t.output
        # Each case, float32 with saturated softmax rows included (its ratio holds to 1e-3 only).
        cases = [ln for ln in t.output.splitlines() if ln.startswith(("case ", "cases "))]
        assert cases and all("that is 1/B" in ln for ln in cases), t.output
