"""The reference Attention matches two independent oracles and gets full marks."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from gradelib import rubric

from support import SOLUTIONS, grade_files


def load_reference():
    spec = importlib.util.spec_from_file_location("reference_attention", SOLUTIONS / "attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Attention


def random_problem(B, T, D, Dk, Dv, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return mk(B, T, D), mk(D, Dk), mk(D, Dk), mk(D, Dv), mk(B, T, Dv)


@pytest.mark.parametrize("B,T,D,Dk,Dv", [(1, 1, 3, 2, 4), (2, 5, 4, 3, 6), (3, 7, 6, 6, 2)])
def test_backward_matches_autograd_float64(B, T, D, Dk, Dv):
    X, Wk, Wq, Wv, G = random_problem(B, T, D, Dk, Dv, seed=B * 100 + T)
    att = load_reference()(Wk, Wq, Wv)
    att.forward(X)
    dX = att.backward(G)

    leaves = [t.clone().requires_grad_(True) for t in (X, Wk, Wq, Wv)]
    x, wk, wq, wv = leaves
    scores = (x @ wq) @ (x @ wk).transpose(1, 2) / math.sqrt(Dk)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    out = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ (x @ wv)
    out.backward(G)
    for got, want in ((dX, x.grad), (att.dLdWk, wk.grad), (att.dLdWq, wq.grad), (att.dLdWv, wv.grad)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_backward_matches_central_differences():
    B, T, D, Dk, Dv = 2, 4, 3, 2, 3
    X, Wk, Wq, Wv, G = random_problem(B, T, D, Dk, Dv, seed=7)
    Attention = load_reference()
    inputs = {"X": X, "Wk": Wk, "Wq": Wq, "Wv": Wv}

    def loss() -> float:
        """L = sum(X_new * G), so dL/dX_new = G."""
        att = Attention(inputs["Wk"], inputs["Wq"], inputs["Wv"])
        return float((att.forward(inputs["X"]) * G).sum())

    att = Attention(Wk, Wq, Wv)
    att.forward(X)
    analytic = {"X": att.backward(G), "Wk": att.dLdWk, "Wq": att.dLdWq, "Wv": att.dLdWv}
    h = 1e-6
    for name, tensor in inputs.items():
        numeric = torch.zeros_like(tensor)
        flat, out = tensor.view(-1), numeric.view(-1)
        for i in range(flat.numel()):
            orig = flat[i].item()
            flat[i] = orig + h
            up = loss()
            flat[i] = orig - h
            down = loss()
            flat[i] = orig
            out[i] = (up - down) / (2 * h)
        torch.testing.assert_close(analytic[name], numeric, rtol=1e-5, atol=1e-7)


def test_forward_is_causal_and_rows_sum_to_one():
    X, Wk, Wq, Wv, _ = random_problem(2, 6, 4, 3, 5, seed=3)
    att = load_reference()(Wk, Wq, Wv)
    att.forward(X)
    upper = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    assert torch.all(att.A_sig[:, upper] == 0)
    torch.testing.assert_close(att.A_sig.sum(-1), torch.ones(2, 6, dtype=torch.float64))


def test_float32_in_float32_out():
    X, Wk, Wq, Wv, G = random_problem(2, 3, 4, 2, 2, seed=5, dtype=torch.float32)
    att = load_reference()(Wk, Wq, Wv)
    assert att.forward(X).dtype == torch.float32
    assert att.backward(G).dtype == torch.float32


def test_reference_gets_full_marks_on_public_and_hidden(tmp_path, reference_attention):
    result = grade_files(tmp_path, {"attention.py": reference_attention}, only=["attention"])
    failed = [t.name + ": " + t.output for t in result.tests if not t.passed]
    assert not failed, failed
    assert result.score == result.max_score == rubric.load()["attention"].points
    assert {t.visibility for t in result.tests} == {"public", "hidden"}
    # Each line is graded on both case sets: the rubric's hidden share.
    hidden = rubric.load()["attention"].max_points(("hidden",))
    assert np.isclose(sum(t.max_score for t in result.tests if t.visibility == "hidden"), hidden)
