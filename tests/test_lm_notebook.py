"""Notebook 3 (solutions/03_language_model.ipynb): it runs, it matches autograder/reference/model.py, and the
grader's predict/generate lines give it full marks, the blank handout zero, and planted bugs exactly
the lines they break."""

from __future__ import annotations

import re

import nbformat
import numpy as np
import pytest
import torch

from autograder.reference import model as ref

from support import FIXTURES, HANDOUT, LM_LINES, SOLUTIONS, function_scores, grade_files

pytestmark = pytest.mark.slow

NOTEBOOK = "03_language_model.ipynb"
LM_PROBLEMS = ["prediction", "generation"]


def master() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTIONS / NOTEBOOK, as_version=4)


def graded_code(nb: nbformat.NotebookNode) -> str:
    """The code the grader runs: every code cell not tagged skip-grading (the master's otter tests included)."""
    return "\n\n".join(
        c.source for c in nb.cells if c.cell_type == "code" and "skip-grading" not in c.metadata.get("tags", [])
    )


def test_training_and_plotting_cells_are_tagged_skip_grading():
    nb = master()
    tagged = [c.source for c in nb.cells if "skip-grading" in c.metadata.get("tags", [])]
    assert any("def train(" in s for s in tagged) and any("plt." in s for s in tagged)
    untagged = graded_code(nb)
    for heavy in ("train_sentences", "model, runid, history = train()", "plt.subplots"):
        assert heavy not in untagged, f"{heavy!r} would run in the grader"


def test_solution_notebook_runs_without_its_training_cells(tmp_path):
    from nbclient import NotebookClient

    nb = master()
    nb.cells = [c for c in nb.cells if "skip-grading" not in c.metadata.get("tags", [])]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]


def test_notebook_model_is_the_reference_model():
    namespace: dict = {"__name__": "__main__"}
    exec(compile(graded_code(master()), NOTEBOOK, "exec"), namespace)
    cfg = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=80)
    torch.manual_seed(0)
    reference = ref.CausalLanguageModel(ref.ModelConfig(**cfg)).eval()
    student = namespace["CausalLanguageModel"](namespace["ModelConfig"](**cfg)).eval()
    student.load_state_dict(reference.state_dict(), strict=True)
    inp = torch.randint(2, 30, (3, 30))
    with torch.no_grad():
        torch.testing.assert_close(student(inp), reference(inp))
    torch.testing.assert_close(namespace["predict"](student, inp, 5), ref.predict(reference, inp, 5))
    assert torch.equal(namespace["generate"](student, inp, 5), ref.generate(reference, inp, 5))
    x_nb, y_nb = namespace["collate"]([torch.tensor([0, 4, 5]), torch.tensor([6, 7, 8, 9])])
    x_ref, y_ref = ref.collate([torch.tensor([0, 4, 5]), torch.tensor([6, 7, 8, 9])])
    assert torch.equal(x_nb, x_ref) and torch.equal(y_nb, y_ref)


def test_training_cells_write_the_experiment_folder_the_handin_reads(tmp_path, monkeypatch, capsys):
    from gradelib.handin import check_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(FIXTURES, target_is_directory=True)  # data/lm/ as in the handout
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__main__"}
    for cell in master().cells:
        if cell.cell_type != "code":
            continue
        if "def train(" in cell.source:  # one short epoch of a tiny model on the first 20k ids
            namespace["CONFIG"] = namespace["ModelConfig"](d_model=16, n_heads=2, n_layers=1, d_ff=32)
            namespace["EPOCHS"] = 1
            namespace["train_stream"] = namespace["train_stream"][:20_000]
        exec(compile(cell.source, NOTEBOOK, "exec"), namespace)
    # Plain progress lines (they show when run headless): threads measured, the default run's duration, ETA.
    shown = capsys.readouterr().out
    assert re.search(r"threads: 1: \d+ ms/step", shown) or "on cuda" in shown or "on mps" in shown, shown
    assert re.search(r"the default run \(1 epochs x \d+ steps\) takes about [\d.]+ min on this machine", shown), shown
    assert re.search(r"epoch 1 step \d+/\d+  loss [\d.]+  [\d.]+ steps/s  ETA", shown), shown
    run = tmp_path / "experiments" / namespace["runid"]
    names = {p.name for p in run.iterdir()}
    assert {"model_1.pt", "predictions_test_1.npy", "generated_1.npy", "generated_1.txt", "metrics.json", "loss.png",
            "train.log"} <= names
    # The same lines in train.log, for a run that has no notebook to show them (jupyter nbconvert --execute).
    logged = (run / "train.log").read_text()
    assert re.search(r"epoch 1 step \d+/\d+  loss [\d.]+  [\d.]+ steps/s  ETA", logged), logged
    assert logged.splitlines()[0].startswith("run ")
    assert re.search(r"epoch 1/1, \d+ s: validation NLL [\d.]+, .* \(full credit at <= [\d.]+, none at >= [\d.]+\); "
                     r"generation perplexity: the course grader's \(full credit at <= [\d.]+", logged), logged
    assert re.search(r"^threads: 1: \d+ ms/step", logged, re.MULTILINE) or "on cuda" in logged or "on mps" in logged
    for handin_name, file in (("predictions.npy", "predictions_test_1.npy"), ("generated.npy", "generated_1.npy"),
                              ("generated.txt", "generated_1.txt"), ("model.pt", "model_1.pt")):
        assert check_file(handin_name, run / file) == [], file
    ckpt = torch.load(run / "model_1.pt", weights_only=True)
    assert ckpt["state_dict"]["token_embedding.weight"].shape == (30, 16)
    # The grader rebuilds the model from the stored config with the notebook's own classes.
    rebuilt = namespace["CausalLanguageModel"](namespace["ModelConfig"](**ckpt["config"]))
    rebuilt.load_state_dict(ckpt["state_dict"])
    # The figure printed per epoch is the graded one: teacher-forced NLL, checked against cross_entropy here.
    val_inp, val_out = namespace["val_inp"], namespace["val_out"]
    with torch.no_grad():
        logits = rebuilt.eval()(torch.cat([val_inp, val_out[:, :-1]], 1))[:, val_inp.shape[1] - 1 :]
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), val_out.reshape(-1)).item()
    assert namespace["history"]["val_nll"][-1] == pytest.approx(expected, rel=1e-5)


def test_solution_notebook_earns_every_function_line_and_blank_handout_none(tmp_path):
    (tmp_path / "solved").mkdir()
    (tmp_path / "blank").mkdir()
    solved = grade_files(
        tmp_path / "solved", {NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text()}, only=LM_PROBLEMS, timeout_s=90
    )
    scores = function_scores(solved)
    assert len(scores) == 12 and all(v == 1.0 for v in scores.values()), scores
    # Without predictions.npy / generated.npy only the array lines are lost, each saying so.
    arrays = [t for t in solved.tests if t.name.rsplit(" [", 1)[0] not in LM_LINES]
    assert len(arrays) == 4 and all(t.score == 0.0 and "is missing from the handin" in t.output for t in arrays), arrays
    blank = grade_files(
        tmp_path / "blank", {NOTEBOOK: (HANDOUT / NOTEBOOK).read_text()}, only=LM_PROBLEMS, timeout_s=90
    )
    scores = function_scores(blank)
    assert len(scores) == 12 and all(v == 0.0 for v in scores.values()), scores
    assert all("NotImplementedError" in t.output for t in blank.tests if t.name.rsplit(" [", 1)[0] in LM_LINES)


# bug -> (text in the master's solution, its buggy replacement, the lines that must fail)
def test_committed_checkpoint_reproduces_committed_arrays():
    ckpt = torch.load(FIXTURES / "lm" / "reference_model.pt", map_location="cpu", weights_only=True)
    assert all(v.dtype == torch.float16 for v in ckpt["state_dict"].values() if v.is_floating_point())
    model = ref.CausalLanguageModel(ref.ModelConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    with np.load(FIXTURES / "lm" / "prediction_test.npz") as f:
        test_inp = f["inp"]
    with np.load(FIXTURES / "lm" / "generation_test.npz") as f:
        gen_inp = f["inp"]
    logits = ref.predict(model, test_inp, 20).numpy()
    np.testing.assert_allclose(logits, np.load(FIXTURES / "lm" / "reference_predictions.npy"), rtol=0, atol=1e-4)
    np.testing.assert_array_equal(
        ref.generate(model, gen_inp, 30).numpy(), np.load(FIXTURES / "lm" / "reference_generated.npy")
    )


# --- the rules generate()'s docstring states, with expected values written by hand ---------------

def solution_namespace() -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec(compile(graded_code(master()), NOTEBOOK, "exec"), namespace)
    return namespace


def hand_rows():
    """Two rows whose kept sets are written below by hand: ids 5, 12, 16 (logits 2, 1, 1) and ids 3, 9, 20."""
    tie = torch.full((1, 30), -3.0)
    tie[0, [0, 1]] = torch.tensor([5.0, 4.0])       # <eos>, <pad>: excluded before top-k
    tie[0, [5, 12, 16]] = torch.tensor([2.0, 1.0, 1.0])
    probs = torch.full((30,), 0.05 / 25, dtype=torch.float64)
    probs[[0, 1]] = 0.0
    probs[[3, 9, 20]] = torch.tensor([0.45, 0.35, 0.15], dtype=torch.float64)
    edge = torch.log(probs.clamp_min(1e-300)).float()[None]
    edge[0, [0, 1]] = 3.0
    return tie, edge


def test_filter_logits_keeps_top_k_ties_and_the_top_p_crossing_token():
    ns = solution_namespace()
    tie, edge = hand_rows()
    kept = torch.isfinite(ns["filter_logits"](tie, 1.0, 2, None))[0].nonzero().flatten().tolist()
    assert kept == [5, 12, 16], "k = 2 with the 2nd and 3rd best tied: all three kept"
    kept = torch.isfinite(ns["filter_logits"](edge, 1.0, None, 0.5))[0].nonzero().flatten().tolist()
    assert kept == [3, 9], "0.45 < 0.5 <= 0.45 + 0.35: the token with 0.35 carries the sum past top_p and is kept"
    kept = torch.isfinite(ns["filter_logits"](edge, 1.0, None, 0.8 + 1e-3))[0].nonzero().flatten().tolist()
    assert kept == [3, 9, 20]


def test_grader_rules_match_the_hand_computed_sets_and_the_case_files():
    from gradelib.problems import lm_functions as lf

    tie, edge = hand_rows()
    assert lf._top_k(tie[0].numpy(), 2) == {5, 12, 16}
    assert lf._nucleus(edge[0].numpy(), 0.5) == {3, 9}
    for path in sorted((FIXTURES / "lm_functions").glob("*/*.npz")):
        with np.load(path) as c:
            t_row, e_row = c["t_table"][0], c["e_table"][0]
            kept = sorted(t_row[sorted(lf._top_k(t_row, int(c["tie_k"])))].tolist())
            assert kept == [1.0, 1.0, 2.0], path  # the best and both tied second-best logits
            probs = np.exp(e_row[2:].astype(np.float64))
            kept = sorted(
                np.exp(e_row[sorted(lf._nucleus(e_row, float(c["edge_p"])))].astype(np.float64)) / probs.sum()
            )
            np.testing.assert_allclose(kept, [0.35, 0.45], rtol=1e-6)
            assert c["zero_temperature"] == 0.0 and c["expected_mode"].tolist() == [True, False]


class Toy(torch.nn.Module):
    """Logits favour id (last + 1), with a parameter so that predict/generate can find a device."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, inp):
        nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)
        return torch.nn.functional.one_hot(nxt, 30).float() * 4.0 + self.w


def test_temperature_zero_is_greedy_and_the_mode_is_restored():
    ns = solution_namespace()
    model, inp = Toy(), torch.tensor([[0, 2], [0, 26]])
    greedy = [[3, 4, 5], [27, 2, 3]]  # by hand: each id is the previous + 1, wrapping 27 -> 2
    assert ns["generate"](model, inp, 3).tolist() == greedy
    assert ns["generate"](model, inp, 3, temperature=0.0, top_k=3, top_p=0.5).tolist() == greedy
    with pytest.raises(ValueError, match="temperature"):
        ns["generate"](model, inp, 3, temperature=-1.0)
    for training in (True, False):
        for call in (lambda: ns["predict"](model, inp, 2), lambda: ns["generate"](model, inp, 2, temperature=1.0)):
            model.train(training)
            call()
            assert model.training is training


def test_in_kernel_check_of_predict_and_generate_sees_each_rule_broken():
    """gradelib.notebook_check (grader.check) on the public cases: the solution passes, each broken rule fails."""
    from gradelib.notebook_check import grade_line

    ns = solution_namespace()
    predict, generate = ns["predict"], ns["generate"]
    assert grade_line("prediction", "predict_function", {"predict": predict}).passed
    assert grade_line("generation", "generate_greedy", {"generate": generate}).passed

    def leaves_eval(model, inp, steps):
        out = predict(model, inp, steps)
        model.eval()
        return out

    def samples_at_zero(model, inp, steps, temperature=0.0, top_k=None, top_p=None):
        if temperature == 0 and top_k is None and top_p is None:
            return generate(model, inp, steps)
        return generate(model, inp, steps, temperature=temperature or 1.0, top_k=top_k, top_p=top_p)

    failed = grade_line("prediction", "predict_function", {"predict": leaves_eval})
    assert not failed.passed and "'predict_mode'" in failed.output and "[False, False]" in failed.output
    failed = grade_line("generation", "generate_greedy", {"generate": samples_at_zero})
    assert not failed.passed and "'zero_temperature_ids'" in failed.output
