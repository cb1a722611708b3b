"""The committed attention cases are reproducible and have the properties grading relies on."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from autograder.fixturegen import attention_cases
from autograder.fixturegen.rotation import rotated
from gradelib import rubric

from support import FIXTURES, REPO, TOY_ENGLISH

pytestmark = pytest.mark.slow

CASE_DIR = FIXTURES / "attention"


def cases(visibility: str) -> list[dict]:
    return json.loads((CASE_DIR / visibility / "cases.json").read_text())


def arrays(visibility: str, name: str) -> dict[str, np.ndarray]:
    with np.load(CASE_DIR / visibility / f"{name}.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def all_cases():
    return [(vis, c["name"]) for vis in ("public", "hidden") for c in cases(vis)]


def test_regenerating_in_one_process_gives_byte_identical_files(tmp_path):
    first = attention_cases.write(tmp_path / "one")
    second = attention_cases.write(tmp_path / "two")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_make_fixtures_rewrites_no_committed_byte(tmp_path):
    """`make fixtures` on this machine gives the committed case files byte for byte, whatever CPU wrote them:
    the generator pins MKL's and torch's code paths (autograder/fixturegen/__init__.py)."""
    done = subprocess.run([sys.executable, "-m", "autograder.fixturegen", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    folders = ["attention", "notebooks", "lm_functions"] + (["lm"] if TOY_ENGLISH else [])
    fresh = sorted(
        p.relative_to(tmp_path).as_posix() for f in folders for p in (tmp_path / f).rglob("*") if p.is_file()
    )
    assert len(fresh) > 40
    changed = [rel for rel in fresh if (tmp_path / rel).read_bytes() != (FIXTURES / rel).read_bytes()]
    assert changed == [], f"`make fixtures` would rewrite these committed files: {changed}"


def naive_softmax(scores: np.ndarray) -> np.ndarray:
    """exp / sum without subtracting the row maximum, in the scores' own dtype."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores)
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("vis,name", all_cases())
def test_large_magnitude_cases_overflow_a_naive_softmax(vis, name):
    spec = next(c for c in attention_cases.CASES if c.name == name)
    data = arrays(vis, name)
    T, Dk = data["X"].shape[1], data["W_k"].shape[1]
    scores = (data["expected_A_w"] / np.asarray(math.sqrt(Dk), dtype=data["X"].dtype)).astype(data["X"].dtype)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf).astype(data["X"].dtype)
    naive = naive_softmax(scores)
    if spec.max_score is None:
        np.testing.assert_allclose(naive, data["expected_A_sig"], rtol=1e-4, atol=1e-6)
    else:
        assert not np.isfinite(naive).all(), f"{name}: a softmax without max-subtraction stays finite"
        assert np.isfinite(data["expected_A_sig"]).all()


def test_large_magnitude_cases_exist_in_both_sets():
    large = {c.visibility for c in attention_cases.CASES if c.max_score is not None}
    assert large == {"public", "hidden"}


def test_each_edge_has_a_public_case_and_a_hidden_one():
    """Scaling by sqrt(Dv), or a slip only T = 1 shows, fails a public case the student sees, not a hidden case
    alone."""
    dims = {vis: [arrays(vis, c["name"]) for c in cases(vis)] for vis in ("public", "hidden")}
    for vis, found in dims.items():
        assert any(a["W_k"].shape[1] != a["W_v"].shape[1] for a in found), vis
        assert any(a["X"].shape[1] == 1 for a in found), vis


@pytest.mark.parametrize("vis,name", all_cases())
def test_expected_values_match_an_independent_float64_computation(vis, name):
    """The stored answers agree with numpy in float64 (forward) and the chain rule written out per entry."""
    d = {k: v.astype(np.float64) for k, v in arrays(vis, name).items()}
    X, Wk, Wq, Wv, G = d["X"], d["W_k"], d["W_q"], d["W_v"], d["dLdXnew"]
    T, Dk = X.shape[1], Wk.shape[1]
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    A_w = Q @ K.transpose(0, 2, 1)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), A_w / math.sqrt(Dk), -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    A = e / e.sum(axis=-1, keepdims=True)
    dA = G @ V.transpose(0, 2, 1)
    # Full softmax Jacobian per row: J = diag(a) - a a^T.
    J = np.einsum("bij,jk->bijk", A, np.eye(T)) - np.einsum("bij,bik->bijk", A, A)
    dS = np.einsum("bijk,bij->bik", J, dA) / math.sqrt(Dk)
    dQ, dK, dV = dS @ K, dS.transpose(0, 2, 1) @ Q, A.transpose(0, 2, 1) @ G
    mine = {"Q": Q, "K": K, "V": V, "A_w": A_w, "A_sig": A, "X_new": A @ V, "dLdQ": dQ, "dLdK": dK, "dLdV": dV,
            "dLdWq": np.einsum("btd,btk->dk", X, dQ), "dLdWk": np.einsum("btd,btk->dk", X, dK),
            "dLdWv": np.einsum("btd,btv->dv", X, dV), "dLdX": dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T}
    rtol = 1e-9 if arrays(vis, name)["X"].dtype == np.float64 else 1e-5
    for q, value in mine.items():
        expected = d[f"expected_{q}"]
        scale = max(1.0, float(np.abs(value).max()))
        np.testing.assert_allclose(expected, value, rtol=rtol, atol=rtol * scale, err_msg=f"{name}: {q}")


NEW_LINE = """
[[problems.attention.groups]]
id = "two_positions"
title = "edge case T = 2: the first position attends to itself alone, the second to both"
quantities = ["Q", "K", "V", "A_w", "A_sig", "X_new", "dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv", "dLdX"]
points = 1
edge = "two_positions"
visibilities = ["hidden"]
"""
NEW_CASE = attention_cases.CaseSpec("two_positions", "hidden", 3, 2, 5, 4, 4, "float64", 209, None, "T = 2",
                                    "two_positions")


def test_a_new_edge_line_is_its_rubric_entry_and_its_case(tmp_path):
    """The trial of adding a hidden edge line: its rubric entry and the case it adds, nothing else. The fixture
    generator refuses either without the other, and the grader grades the new case on that line alone: code
    wrong only where T = 2 loses that line and keeps every other."""
    from autograder.batch.worker import grade_hidden
    from gradelib.runner.limits import Limits

    from support import SOLUTIONS

    path = tmp_path / "rubric.toml"
    path.write_text(rubric.RUBRIC_PATH.read_text() + NEW_LINE)
    with pytest.raises(ValueError, match="no hidden case carries it"):
        attention_cases.write(tmp_path / "none", rubric_path=path)
    with pytest.raises(ValueError, match="no hidden rubric line of attention is graded on it"):
        attention_cases.write(tmp_path / "none", cases=(*attention_cases.CASES, NEW_CASE))
    attention_cases.write(tmp_path / "fixtures", cases=(*attention_cases.CASES, NEW_CASE), rubric_path=path)
    assert {"name": "two_positions", "edge": "two_positions"}.items() <= next(
        c for c in json.loads((tmp_path / "fixtures/attention/hidden/cases.json").read_text())
        if c["name"] == "two_positions").items()

    source = (SOLUTIONS / "attention.py").read_text()
    anchor = "        return X_new\n"
    assert source.count(anchor) == 1
    handin = tmp_path / "handin"
    handin.mkdir()
    (handin / "attention.py").write_text(source.replace(
        anchor, "        if X.shape[1] == 2:\n            X_new = 2 * X_new\n" + anchor))
    problems = rubric.load(path)
    result = grade_hidden(handin, case_root=tmp_path / "fixtures", problems=problems, only=["attention"],
                          limits=Limits(timeout_s=120))
    lost = {(t.line, t.visibility) for t in result.tests if t.score < t.max_score}
    assert lost == {("two_positions", "hidden")}, [t.output for t in result.tests if t.score < t.max_score]
    assert result.max_points["attention"] == problems["attention"].points


@pytest.mark.parametrize("name", ["large_scores_float32", "large_scores_float32_batched"])
def test_a_float32_large_scores_case_is_one_float32_can_meet_on_every_term_seed(name):
    """Where every causal row is saturated, the gradients are as small as float32's error in the scores: the
    generator redraws such a draw. On 12 term seeds, float32 written another way (numpy, Q scaled first, the full
    softmax Jacobian) meets the rubric's tolerance, and some seed's first draw is refused (the check is live)."""
    tol = rubric.load()["attention"].tolerance["float32"]
    spec0 = next(c for c in attention_cases.CASES if c.name == name)
    refused = 0
    for term in range(1, 13):
        spec = replace(spec0, seed=rotated(spec0.seed, spec0.visibility, term, public_too=True))
        first = attention_cases.draw(spec, torch.Generator().manual_seed(spec.seed))
        refused += not attention_cases.fair(first, "float32", tol)
        d = attention_cases.make_case(spec, {"float32": tol})
        X, Wk, Wq, Wv, G = d["X"], d["W_k"], d["W_q"], d["W_v"], d["dLdXnew"]
        T, root = X.shape[1], np.float32(math.sqrt(Wk.shape[1]))
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), (Q / root) @ K.transpose(0, 2, 1), np.float32(-np.inf))
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        A = e / e.sum(axis=-1, keepdims=True)
        J = np.einsum("bij,jk->bijk", A, np.eye(T, dtype=np.float32)) - np.einsum("bij,bik->bijk", A, A)
        dS = np.einsum("bijk,bij->bik", J, G @ V.transpose(0, 2, 1)) / root
        dQ, dK, dV = dS @ K, dS.transpose(0, 2, 1) @ Q, A.transpose(0, 2, 1) @ G
        got = {"A_sig": A, "X_new": A @ V, "dLdQ": dQ, "dLdK": dK, "dLdV": dV,
               "dLdWq": np.einsum("btd,btk->dk", X, dQ), "dLdWk": np.einsum("btd,btk->dk", X, dK),
               "dLdWv": np.einsum("btd,btv->dv", X, dV), "dLdX": dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T}
        for q, value in got.items():
            assert value.dtype == np.float32, q
            e64, g64 = d[f"expected_{q}"].astype(np.float64), value.astype(np.float64)
            allowed = tol["atol"] * max(1.0, np.abs(e64).max()) + tol["rtol"] * np.abs(e64)
            assert np.all(np.abs(g64 - e64) <= allowed), f"{name}, term seed {term}: {q}"
    assert refused > 0
