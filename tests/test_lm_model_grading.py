"""The language-model quality lines grade the handed-in model, not the arrays.

The grader rebuilds model.pt with the handin's notebook 3 code in the sandbox,
scores its teacher-forced NLL (targets revealed one step at a time) and the
perplexity of what its own generate() writes. Expected figures come from the
reference model run here in-process with autograder/reference/model.py (an
independent implementation of the same network) and from the metrics module.
"""

from __future__ import annotations

import functools
import io
import os

import numpy as np
import pytest
import torch

from autograder.batch.results_json import to_json as to_results_json
from autograder.grading import model_quality
from autograder.oracle import metrics as M
from autograder.oracle.ngram import NGramModel
from autograder.oracle.text import SPACE
from autograder.reference import model as ref
from gradelib.lm.vocab import PAD
from gradelib.problems import lm_model
from gradelib.rubric import load as load_rubric

from support import FIXTURES, SOLUTIONS, grade_files, toy_english_only

pytestmark = pytest.mark.slow

LM = FIXTURES / "lm"
NOTEBOOK = "03_language_model.ipynb"
SETTINGS = {pid: p.settings for pid, p in load_rubric().items()}


def npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def checkpoint() -> dict:
    return torch.load(LM / "reference_model.pt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def reference(checkpoint) -> ref.CausalLanguageModel:
    model = ref.CausalLanguageModel(ref.ModelConfig(**checkpoint["config"]))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def teacher_forced_nll(model, inp: np.ndarray, out: np.ndarray) -> float:
    """The reference's teacher-forced NLL computed in one forward pass (no step-by-step protocol)."""
    seq = torch.as_tensor(np.concatenate([inp, out[:, :-1]], axis=1), dtype=torch.long)
    with torch.no_grad():
        logits = model(seq)[:, inp.shape[1] - 1 :].float().numpy()  # (B, steps, V)
    return M.prediction_nll(logits, out)


@functools.cache
def ngram_arrays() -> dict[str, bytes]:
    """predictions.npy and generated.npy written by a character 5-gram, no transformer."""
    gram = NGramModel.fit((LM / "train.txt").read_text().splitlines()[:20000], 5)
    with np.load(LM / "prediction_test.npz") as f:
        test_inp = f["inp"]
    with np.load(LM / "generation_test.npz") as f:
        gen_inp = f["inp"]
    logits = M.greedy_predict(lambda x: np.log(np.maximum(gram.next_id_probs(x)[:, -1], 1e-30)), test_inp, 20)
    ids = M.greedy_generate(lambda x: gram.next_id_probs(x)[:, -1], gen_inp, 30)
    return {"predictions.npy": npy(logits.astype(np.float32)), "generated.npy": npy(ids.astype(np.int64))}


def quality(result) -> dict[str, object]:
    """The model-quality tests, by rubric line id ("nll", "perplexity")."""
    return {t.line: t for t in result.tests if t.line in ("nll", "perplexity")}


def test_an_ngrams_arrays_without_the_model_earn_no_points(tmp_path):
    """Well-formed arrays and no model.pt: the quality lines and the format lines all score 0, each saying why
    (the format lines count only for arrays the handed-in model makes)."""
    files = {NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text(), **ngram_arrays()}
    result = grade_files(tmp_path, files, only=["prediction", "generation"], timeout_s=90)
    lines = quality(result)
    assert len(lines) == 2, [t.name for t in result.tests]
    for t in lines.values():
        assert t.score == 0.0 and "model.pt is missing from the handin" in t.output, t.output
    formats = [t for t in result.tests if t.line == "format"]
    assert len(formats) == 2
    for t in formats:
        assert t.score == 0.0 and "is well formed" in t.output, t.output
        assert "counts only for the arrays your handed-in model makes" in t.output and "model.pt is missing" in t.output


def test_a_trivial_handin_of_arrays_alone_earns_nothing(tmp_path):
    """predictions.npy full of zeros and generated.npy of one repeated letter, no model.pt and no notebook: the
    two format lines, once 4 free points, score 0."""
    from autograder.oracle.text import encode

    files = {"predictions.npy": npy(np.zeros((128, 20, 30), np.float32)),
             "generated.npy": npy(np.full((128, 30), encode("E")[0], np.int64))}
    result = grade_files(tmp_path, files, only=["prediction", "generation"])
    assert result.score == 0.0
    formats = [t for t in result.tests if t.line == "format"]
    assert len(formats) == 2 and all("model.pt is missing" in t.output for t in formats), [t.output for t in formats]


@pytest.fixture(scope="module")
def tricked(tmp_path_factory, checkpoint, reference):
    """The reference model, handed in as a bare float32 state dict (the notebook's CONFIG builds it),
    with predictions.npy gamed and generated.npy taken from an n-gram."""
    with np.load(LM / "prediction_test.npz") as f:
        test_inp = f["inp"]
    logits = ref.predict(reference, test_inp, 20).numpy()
    # The old argmax trick: <pad> nudged above every greedy space, so the hard word-initial
    # steps dropped out of an on-track score.
    spaces = logits.argmax(-1) == SPACE
    logits[..., PAD] = np.where(spaces, logits.max(-1) + 1.0, logits[..., PAD])
    bare = {k: v.float() for k, v in checkpoint["state_dict"].items()}
    files = {
        NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text(),
        "model.pt": torch_bytes(bare),
        "predictions.npy": npy(logits.astype(np.float32)),
        "generated.npy": ngram_arrays()["generated.npy"],
    }
    return grade_files(tmp_path_factory.mktemp("tricked"), files, only=["prediction", "generation"], timeout_s=120)


def test_the_model_is_graded_and_the_argmax_trick_changes_nothing(tricked, reference):
    lines = quality(tricked)
    nll_line, ppl_line = lines["nll"], lines["perplexity"]
    assert nll_line.passed and ppl_line.passed, (nll_line.output, ppl_line.output)
    with np.load(LM / "prediction_test.npz") as f, np.load(LM / "hidden" / "prediction_test_out.npz") as g:
        expected = teacher_forced_nll(reference, f["inp"], g["out"])
    shown = float(nll_line.output.split("prediction NLL ")[1].split(" ")[0])
    assert shown == pytest.approx(expected, abs=2e-3)
    # The course records the figures it scored (the staff's report draws them), and shows them after the code lines.
    assert nll_line.figures == {"prediction_nll": pytest.approx(shown, abs=1e-4)} and nll_line.grades_run
    assert set(ppl_line.figures) == {"generation_perplexity"} and ppl_line.shown == "after_published"


def test_arrays_that_do_not_match_the_model_are_flagged_and_earn_no_format_points(tricked):
    formats = {t.problem: t for t in tricked.tests if t.line == "format"}
    assert set(formats) == {"prediction", "generation"} and all(t.score == 0.0 for t in formats.values())
    assert "predictions.npy is not what model.pt predicts" in formats["prediction"].output, formats["prediction"].output
    assert "generated.npy is not what model.pt generates" in formats["generation"].output, formats["generation"].output
    assert set(tricked.flags) == {"predictions_do_not_match_model", "generated_does_not_match_model"}
    assert any("generated.npy is not what model.pt generates" in n for n in tricked.notes), tricked.notes
    assert any("predictions.npy is not what model.pt predicts" in n for n in tricked.notes), tricked.notes
    assert to_results_json(tricked, {})["extra_data"]["flags"] == tricked.flags


def test_a_checkpoint_that_does_not_fit_the_notebook_is_named(tmp_path, checkpoint):
    state = dict(checkpoint["state_dict"])
    dropped = sorted(state)[0]
    del state[dropped]
    files = {
        NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text(),
        "model.pt": torch_bytes({"config": checkpoint["config"], "state_dict": state}),
    }
    result = grade_files(tmp_path, files, only=["prediction"], timeout_s=90)
    line = next(iter(quality(result).values()))
    assert line.score == 0.0 and "missing keys" in line.output and dropped in line.output, line.output
    # The run had the hidden rows at hand: the notes (always visible) name its words, never quote them.
    notes = "\n".join(result.notes)
    assert dropped not in notes and "is not shown here, since that run had the hidden rows at hand" in notes, notes


def test_a_model_without_its_causal_mask_is_told_so(tmp_path, checkpoint):
    text = (SOLUTIONS / NOTEBOOK).read_text()
    mask = 'att = att.masked_fill(~self.causal[:T, :T], float(\\"-inf\\"))'
    assert mask in text
    files = {NOTEBOOK: text.replace(mask, "pass"), "model.pt": torch_bytes(checkpoint)}
    result = grade_files(tmp_path, files, visibilities=("public",), only=["prediction"], timeout_s=90)
    assert any("Your model is not causal" in n for n in result.notes), result.notes
    # The local figure comes from one forward pass over public targets: a model that sees the future is told
    # the figure is not what the course grader finds, and is promised no credit.
    figure = next(n for n in result.notes if "(validation)" in n)
    assert "not causal, so it read the characters" in figure and "% at this figure" not in figure, figure


def test_a_target_is_never_written_where_the_child_points(tmp_path):
    """The child may plant a link under the name of the next reveal: the grader refuses to follow it."""
    inputs, outputs, victim = tmp_path / "inputs", tmp_path / "outputs" / "test", tmp_path / "victim.txt"
    inputs.mkdir()
    outputs.mkdir(parents=True)
    victim.write_text("untouched")
    (inputs / "test_reveal_0.npy").symlink_to(victim)
    np.save(outputs / "step_0.npy", np.zeros((3, 30), np.float32))
    fd = os.open(inputs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    revealer = model_quality.Revealer(tmp_path / "outputs", fd, {"test": np.ones((3, 20), np.int64)}, tmp_path)
    revealer.start()
    revealer.join(5)
    revealer.stop.set()
    revealer.join()
    os.close(fd)
    revealer.forget()
    assert victim.read_text() == "untouched"
    assert "could not reveal" in revealer.problems["test"]
    assert len(revealer.answers["test"]) == 1  # the answer it gave is kept; nothing after it is revealed


def test_the_probe_changes_only_tokens_after_its_position():
    probe = lm_model.probe_inputs()
    x, changed, p = probe["x"], probe["x_changed"], lm_model.PROBE_POSITION
    assert (x[:, : p + 1] == changed[:, : p + 1]).all()
    assert (x[:, p + 1 :] != changed[:, p + 1 :]).all()
    assert changed.min() >= 2  # characters only


@toy_english_only
def test_reference_figures_leave_margin_under_the_thresholds(reference):
    """Teacher-forced NLL of the reference on the hidden rows, computed here without the grader."""
    with np.load(LM / "prediction_test.npz") as f, np.load(LM / "hidden" / "prediction_test_out.npz") as g:
        nll = teacher_forced_nll(reference, f["inp"], g["out"])
    assert nll <= SETTINGS["prediction"]["full_credit_nll"] - 0.1


@toy_english_only
def test_reference_generations_leave_margin_under_the_perplexity_threshold():
    """reference_generated.npy is what the reference model generates (test_lm_notebook checks it)."""
    from autograder.oracle.oracles import load_oracle

    eps = SETTINGS["generation"]["smoothing_eps"]
    with np.load(LM / "generation_test.npz") as f:
        ppl = M.generation_perplexity(load_oracle(LM, eps), f["inp"], np.load(LM / "reference_generated.npy"), eps)
    assert ppl <= SETTINGS["generation"]["full_credit_perplexity"] / 2


def test_hidden_grading_scores_the_test_rows_only(tricked):
    # The validation rows grade nothing once the hidden rows are at hand, so the model is not run on them.
    assert not any("(validation)" in n for n in tricked.notes), tricked.notes


def test_the_local_grader_checks_generated_npy_on_its_first_rows(tmp_path, checkpoint, reference):
    ids = np.load(LM / "reference_generated.npy")
    changed = ids.copy()
    row = lm_model.GENERATE_CHECK_ROWS - 1
    changed[row, 0] = 2 + (changed[row, 0] - 1) % 27  # another character, still not <eos>/<pad>
    files = {
        NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text(),
        "model.pt": torch_bytes(checkpoint),
        "generated.npy": npy(changed),
    }
    result = grade_files(tmp_path, files, visibilities=("public",), only=["prediction", "generation"], timeout_s=90)
    flagged = [n for n in result.notes if "generated.npy is not what model.pt generates" in n]
    share = 100 * (1 - 1 / (lm_model.GENERATE_CHECK_ROWS * ids.shape[1]))
    assert flagged and f"{share:.1f}% of its ids in the first {lm_model.GENERATE_CHECK_ROWS} rows" in flagged[0], (
        result.notes
    )
    assert "generated_does_not_match_model" in result.flags
    assert not any("perplexity" in t.name for t in result.tests)  # the local grader scores no text
    # The validation figure (one forward pass in the child) is the teacher-forced NLL computed here.
    with np.load(LM / "prediction.npz") as f:
        expected = teacher_forced_nll(reference, f["inp"], f["out"][:, : lm_model.PREDICTION_STEPS])
    figure = next(n for n in result.notes if "(validation)" in n)
    assert float(figure.split(" is ")[1].split(" ")[0]) == pytest.approx(expected, abs=1e-4), figure


@toy_english_only
def test_generations_that_repeat_a_few_characters_are_pointed_out_locally(tmp_path):
    """Rows of generated.npy with 3 or fewer different characters: no 30-character stretch of the source's
    text is like that, the reference generates none (so its handin gets no such note), the oracle gives
    such text no credit, and the local grader (which scores no text) says so in a note."""
    from autograder.oracle.oracles import load_oracle
    from autograder.oracle.text import encode
    from gradelib.problems.generation import REPETITIVE_DISTINCT, repetitive_rows

    for name in ("train.txt", "valid.txt"):
        text = (LM / name).read_text()
        fewest = min(len(set(line[i:i + 30])) for line in text.splitlines() for i in range(len(line) - 29))
        assert fewest > REPETITIVE_DISTINCT, (name, fewest)
    reference_ids = np.load(LM / "reference_generated.npy")
    assert repetitive_rows(reference_ids) == []
    stuck = np.full_like(reference_ids, SPACE)
    stuck[::2] = np.array(encode("AB " * 10), dtype=reference_ids.dtype)
    eps = SETTINGS["generation"]["smoothing_eps"]
    with np.load(LM / "generation_test.npz") as f:
        ppl = M.generation_perplexity(load_oracle(LM, eps), f["inp"], stuck, eps)
    assert ppl >= SETTINGS["generation"]["zero_credit_perplexity"], ppl
    result = grade_files(tmp_path, {NOTEBOOK: (SOLUTIONS / NOTEBOOK).read_text(), "generated.npy": npy(stuck)},
                         visibilities=("public",), only=["generation"])
    said = [n for n in result.notes if "repeat 3 or fewer characters" in n]
    assert said and said[0].startswith(f"generation: {len(stuck)} of the {len(stuck)} rows of generated.npy"), (
        result.notes
    )
    # Well formed, but with no model.pt to have made it the format line counts nothing.
    fmt = next(t for t in result.tests if t.line == "format")
    assert not fmt.passed and "is well formed" in fmt.output and "model.pt is missing" in fmt.output, fmt.output
