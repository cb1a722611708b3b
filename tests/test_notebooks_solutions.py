"""The solution notebooks run top to bottom, earn full marks, and agree with torch; the blank ones earn 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from notebook_tools import NB1, NB2, PROBLEM_OF, grade, load, source
from support import HANDOUT, SOLUTIONS

pytestmark = pytest.mark.slow

SKIP_TAG = "skip-grading"


def execute(path, cwd, allow_errors=False):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.parametrize("name", [NB1, NB2])
def test_solution_notebook_executes_top_to_bottom_with_plots(name, tmp_path):
    nb = execute(SOLUTIONS / name, tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if name == NB2:
        images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.data]
        assert len(images) >= 3, "the causal mask, padding mask and attention heatmaps render"


@pytest.mark.parametrize("name", [NB1, NB2])
def test_committed_solution_notebook_has_rendered_outputs_and_tagged_plots(name):
    nb = load(name)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "run `make notebooks` to save the executed masters"
    for cell in code:
        if "plt." in source(cell):
            assert SKIP_TAG in cell["metadata"].get("tags", []), "plot cells are tagged skip-grading"


def test_solutions_get_full_marks_on_public_and_hidden(tmp_path):
    files = {n: (SOLUTIONS / n).read_text() for n in (NB1, NB2)}
    result = grade(tmp_path, files, only=["losses", "masks"])
    failed = [f"{t.name}: {t.output}" for t in result.tests if not t.passed]
    assert not failed, failed
    assert result.score == result.max_score == 40.0
    assert {t.visibility for t in result.tests} == {"public", "hidden"}
    assert not result.notes, result.notes


def test_blank_handout_notebooks_score_zero_saying_not_attempted(tmp_path):
    files = {n: (HANDOUT / n).read_text() for n in (NB1, NB2)}
    result = grade(tmp_path, files, only=["losses", "masks"])
    assert result.score == 0.0 and result.max_score == 40.0
    for t in result.tests:
        assert "not attempted" in t.output and "NotImplementedError" in t.output, t.output
    assert not result.notes, "the blank notebooks' cells run without error under grading"


def test_missing_notebooks_score_zero_saying_so(tmp_path):
    result = grade(tmp_path, {"unrelated.txt": "x"}, only=["losses", "masks"])
    assert result.score == 0.0
    assert all(f"{t.problem}" in PROBLEM_OF.values() and "missing from the handin" in t.output for t in result.tests)


# --- the reference functions against torch -----------------------------------------

def solution_functions(name: str) -> dict:
    """Run the master's code cells that are not demos or plots; return its namespace."""
    ns: dict = {}
    for cell in load(name)["cells"]:
        if cell["cell_type"] == "code" and SKIP_TAG not in cell["metadata"].get("tags", []):
            exec(source(cell), ns)
    return ns


@pytest.fixture(scope="module")
def nb1():
    return solution_functions(NB1)


@pytest.fixture(scope="module")
def nb2():
    return solution_functions(NB2)


@pytest.mark.parametrize("seed,n_ignored,scale", [(0, 0, 1.0), (1, 5, 3.0), (2, 9, 800.0)])
def test_cross_entropy_loss_matches_torch_cross_entropy(nb1, seed, n_ignored, scale):
    g = np.random.default_rng(seed)
    logits = g.standard_normal((10, 12)) * scale
    targets = g.integers(0, 12, 10)
    targets[g.permutation(10)[:n_ignored]] = -100
    want = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets), ignore_index=-100, reduction="mean")
    assert np.isclose(nb1["cross_entropy_loss"](logits, targets), want.item(), rtol=1e-12, atol=0)
    per_token = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(np.abs(targets) % 12), reduction="none")
    np.testing.assert_allclose(nb1["token_nll"](logits, np.abs(targets) % 12), per_token.numpy(), rtol=1e-12)


def test_notebook_toy_losses_match_torch(nb1):
    """The two losses the notebook prints, recomputed with torch from the notebook's own inputs."""
    ns = nb1
    t = lambda a: torch.from_numpy(np.asarray(a))  # noqa: E731
    w_mlm = torch.softmax(t(ns["Q_mlm"]) @ t(ns["K_mlm"]).T / np.sqrt(3), dim=-1)
    logits_mlm = (w_mlm @ t(ns["V_mlm"])) @ t(ns["W_out"])
    want = F.cross_entropy(logits_mlm, t(ns["mlm_target_ids"]), ignore_index=-100)
    weights, H = ns["scaled_dot_product_attention"](ns["Q_mlm"], ns["K_mlm"], ns["V_mlm"])
    assert np.isclose(ns["cross_entropy_loss"](H @ ns["W_out"], ns["mlm_target_ids"]), want.item(), rtol=1e-12)

    T = len(ns["next_input"])
    scores = t(ns["Q_next"]) @ t(ns["K_next"]).T / np.sqrt(3)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    w_next = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    want_next = F.cross_entropy((w_next @ t(ns["V_next"])) @ t(ns["W_out"]), t(ns["next_target_ids"]))
    _, H_next = ns["scaled_dot_product_attention"](ns["Q_next"], ns["K_next"], ns["V_next"], ns["causal_mask"](T))
    assert np.isclose(
        ns["cross_entropy_loss"](H_next @ ns["W_out"], ns["next_target_ids"]), want_next.item(), rtol=1e-12
    )


def test_softmax_matches_torch_softmax_on_large_logits(nb1):
    z = np.random.default_rng(4).standard_normal((3, 5, 7)) * 1000
    np.testing.assert_allclose(
        nb1["softmax"](z), torch.softmax(torch.from_numpy(z), -1).numpy(), rtol=1e-12, atol=1e-300
    )


def test_masked_mean_loss_and_perplexity_match_torch(nb2):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 6, 30, generator=g, dtype=torch.float64)
    targets = torch.randint(2, 30, (3, 6), generator=g)
    targets[0, 4:] = 1
    targets[2, 1:] = 1
    want = F.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1), ignore_index=1)
    torch.testing.assert_close(nb2["masked_mean_loss"](logits, targets, 1), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(nb2["perplexity"](logits, targets, 1), torch.exp(want), rtol=1e-12, atol=0)


def test_attention_fully_masked_row_is_zero_not_nan(nb2):
    Q, K, V = (torch.randn(1, 3, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[[True, False, False], [False, False, False], [True, True, True]]])
    A, C = nb2["attention"](Q, K, V, mask)
    assert not torch.isnan(A).any() and not torch.isnan(C).any()
    assert torch.all(A[0, 1] == 0) and torch.all(C[0, 1] == 0)
    torch.testing.assert_close(A[0, [0, 2]].sum(-1), torch.ones(2, dtype=torch.float64))
