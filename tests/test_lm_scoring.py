"""Problems prediction and generation: the metrics, malformed handins, and the calibration ends
(the bigram baseline fails both lines, the source itself passes both).

The handins here hold arrays only: the lines about notebook 3's functions score 0 for the missing
notebook (tests/test_lm_notebook.py grades them), and the array lines are graded all the same."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradelib.lm import metrics as M
from autograder.oracle.ngram import NGramModel
from autograder.oracle.oracles import load_oracle, next_char_logprobs
from gradelib.lm.vocab import EOS, GENERATABLE, N_GENERATABLE, PAD, VOCAB_SIZE
from gradelib.rubric import load as load_rubric
from conftest import FIXTURES, grade_files

LM = FIXTURES / "lm"
EPS = float(load_rubric()["generation"].settings["smoothing_eps"])
NOTEBOOK_MISSING = "03_language_model.ipynb is missing from the handin"


def split_tests(result) -> tuple[list, list]:
    """(tests of the array lines, tests of the notebook-function lines), by the rubric."""
    function_titles = {f"{pid}: {g.title}" for pid, p in load_rubric().items() for g in p.groups if g.quantities}
    arrays = [t for t in result.tests if t.name.rsplit(" [", 1)[0] not in function_titles]
    return arrays, [t for t in result.tests if t not in arrays]


def npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def oracle():
    return load_oracle(LM, EPS)


@pytest.fixture(scope="module")
def prompts():
    return {
        "prediction_test": np.load(LM / "prediction_test.npz")["inp"],
        "generation_test": np.load(LM / "generation_test.npz")["inp"],
    }


@pytest.fixture(scope="module")
def bigram():
    return NGramModel.fit((LM / "train.txt").read_text().splitlines()[:20000], 2)


def test_prediction_nll_equals_torch_cross_entropy():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 5, VOCAB_SIZE, generator=gen, dtype=torch.float64) * 4
    targets = torch.randint(0, VOCAB_SIZE, (7, 5), generator=gen)
    expected = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), targets.reshape(-1)).item()
    assert M.prediction_nll(logits.numpy().astype(np.float32), targets.numpy()) == pytest.approx(expected, rel=1e-6)
    assert M.prediction_nll(logits.numpy(), targets.numpy()) == pytest.approx(expected, rel=1e-12)
    huge = logits.numpy() * 1e4  # no overflow in the log-sum-exp
    ref = F.cross_entropy(torch.from_numpy(huge).reshape(-1, VOCAB_SIZE), targets.reshape(-1)).item()
    assert M.prediction_nll(huge, targets.numpy()) == pytest.approx(ref, rel=1e-12)


def test_on_track_steps_stop_after_the_first_wrong_greedy_pick():
    targets = np.array([[3, 4, 5, 6], [3, 4, 5, 6]])
    logits = np.zeros((2, 4, VOCAB_SIZE))
    logits[0, [0, 1, 2, 3], [3, 4, 5, 6]] = 5.0  # all right
    logits[1, [0, 1, 2, 3], [3, 9, 5, 6]] = 5.0  # step 1 wrong: steps 2, 3 condition on other text
    mask = M.on_track(logits, targets)
    assert mask.tolist() == [[True] * 4, [True, True, False, False]]
    report = M.prediction_report(logits, targets)
    tok = M.prediction_token_nll(logits, targets)
    assert report["on_track_nll"] == pytest.approx(tok[mask].mean())
    assert report["on_track_steps"] == 6


def test_generation_nll_conditions_on_prompt_and_earlier_generated_ids(oracle, prompts):
    """Batched scoring equals scoring each id separately with next_char_logprobs on its own prefix."""
    inp = prompts["generation_test"][:3]
    gen = np.random.default_rng(0).integers(2, VOCAB_SIZE, size=(3, 6))
    batched = M.generation_token_nll(oracle, inp, gen, EPS)
    for t in range(gen.shape[1]):
        prefix = np.concatenate([inp, gen[:, :t]], axis=1)
        logp = next_char_logprobs(oracle, prefix)  # (3, 30)
        p = np.exp(logp[:, GENERATABLE])
        q = (1 - EPS) * p / p.sum(-1, keepdims=True) + EPS / N_GENERATABLE
        expected = -np.log(q[np.arange(3), gen[:, t] - 2])
        np.testing.assert_allclose(batched[:, t], expected, rtol=1e-12)


def test_impossible_characters_cost_the_smoothing_floor(oracle, prompts):
    inp = prompts["generation_test"][:4]
    gen = np.full((4, 3), GENERATABLE[0] + 16)  # 'Q' three times: never possible after a space
    tok = M.generation_token_nll(oracle, inp, gen, EPS)
    assert np.all(np.isfinite(tok))
    assert tok.max() == pytest.approx(-np.log(EPS / N_GENERATABLE), rel=1e-6)


@pytest.fixture(scope="module")
def oracle_handin(oracle, prompts) -> dict[str, bytes]:
    """The source itself as a student: its smoothed logits and its greedy generations."""
    logits = M.oracle_prediction_logits(oracle, prompts["prediction_test"], 20, EPS).astype(np.float32)
    ids = M.oracle_greedy_generation(oracle, prompts["generation_test"], 30)
    return {"predictions.npy": npy(logits), "generated.npy": npy(ids)}


def test_source_itself_passes_both_lines(tmp_path, oracle_handin):
    result = grade_files(tmp_path, oracle_handin, only=["prediction", "generation"])
    arrays, functions = split_tests(result)
    assert len(arrays) == 4 and all(t.passed for t in arrays), [t.output for t in arrays]
    assert len(functions) == 6 and all(t.score == 0.0 and NOTEBOOK_MISSING in t.output for t in functions)
    assert result.problem_scores() == {"prediction": 20.0, "generation": 20.0}


def test_bigram_baseline_fails_both_lines(tmp_path, prompts, bigram):
    logits = M.greedy_predict(lambda x: np.log(np.maximum(bigram.next_id_probs(x)[:, -1], 1e-30)), prompts["prediction_test"], 20)
    ids = M.greedy_generate(lambda x: bigram.next_id_probs(x)[:, -1], prompts["generation_test"], 30)
    files = {"predictions.npy": npy(logits.astype(np.float32)), "generated.npy": npy(ids)}
    result = grade_files(tmp_path, files, only=["prediction", "generation"])
    arrays = split_tests(result)[0]
    by_id = {t.name.split(":")[1].strip(): t for t in arrays}
    public = [t for t in arrays if t.visibility == "public"]
    assert len(public) == 2 and all(t.passed for t in public), [t.output for t in public]
    graded = [t for t in arrays if t.visibility == "hidden"]
    assert len(graded) == 2 and all(t.score == 0.0 for t in graded), [t.output for t in graded]
    assert "prediction NLL 2." in by_id["prediction NLL on the hidden targets [hidden]"].output


GOOD_PRED = np.zeros((128, 20, VOCAB_SIZE), dtype=np.float32)
GOOD_GEN = np.full((128, 30), 5, dtype=np.int64)


def _with(arr, index, value):
    arr = arr.copy()
    arr[index] = value
    return arr


PREDICTION_CASES = {
    "missing": (None, "predictions.npy is missing"),
    "not_npy": (b"this is not an array", "is not a .npy array"),
    "pickled_objects": (npy(np.array([{"a": 1}], dtype=object)), "Python objects (a pickle)"),
    "raw_pickle": (pickle.dumps(GOOD_PRED), "is not a .npy array"),
    "far_too_large": (npy(np.zeros((128, 20, 30 * 10), dtype=np.float32)), "far larger than the expected"),
    "wrong_count": (npy(GOOD_PRED[:100]), "has 100 rows, expected 128"),
    "wrong_shape": (npy(GOOD_PRED[:, :10]), "has shape (128, 10, 30), expected (128, 20, 30)"),
    "probabilities_last_step_only": (npy(GOOD_PRED[:, 0]), "has shape (128, 30), expected (128, 20, 30)"),
    "int_dtype": (npy(GOOD_PRED.astype(np.int64)), "has dtype int64, expected a float dtype"),
    "nan": (npy(_with(GOOD_PRED, (3, 4, 5), np.nan)), "1 NaN or infinite values (first at index (3, 4, 5))"),
    "minus_inf": (npy(_with(GOOD_PRED, (0, 0, 1), -np.inf)), "NaN or infinite values (first at index (0, 0, 1))"),
}


@pytest.mark.parametrize("case", sorted(PREDICTION_CASES))
def test_malformed_predictions_score_zero_with_message(tmp_path, case):
    data, needle = PREDICTION_CASES[case]
    files = {} if data is None else {"predictions.npy": data}
    result = grade_files(tmp_path, files, only=["prediction"])
    arrays, functions = split_tests(result)
    assert len(arrays) == 2 and len(functions) == 2
    assert all(t.score == 0.0 and NOTEBOOK_MISSING in t.output for t in functions)
    for t in arrays:
        assert t.score == 0.0
        assert t.output.startswith("prediction: ") and needle in t.output, t.output


GENERATION_CASES = {
    "missing": (None, "generated.npy is missing"),
    "not_npy": (b"\x93NUMPY garbage", "is not a .npy array"),
    "pickled_objects": (npy(np.array(["A"] * 3, dtype=object)), "Python objects (a pickle)"),
    "wrong_count": (npy(GOOD_GEN[:127]), "has 127 rows, expected 128"),
    "wrong_shape": (npy(GOOD_GEN[:, :20]), "has shape (128, 20), expected (128, 30)"),
    "text_not_ids": (npy(np.full((128, 30), "A")), "has dtype <U1, expected an integer dtype"),
    "float_ids": (npy(GOOD_GEN.astype(np.float64)), "has dtype float64, expected an integer dtype"),
    "negative_id": (npy(_with(GOOD_GEN, (7, 2), -1)), "ids outside the vocabulary 0..29 (first -1 at index (7, 2))"),
    "id_30": (npy(_with(GOOD_GEN, (0, 29), 30)), "ids outside the vocabulary 0..29 (first 30 at index (0, 29))"),
    "eos": (npy(_with(GOOD_GEN, (5, 0), EOS)), "holds <eos> (id 0) 1 times (first at index (5, 0))"),
    "pad": (npy(_with(GOOD_GEN, (1, 1), PAD)), "holds <pad> (id 1) 1 times (first at index (1, 1))"),
}


@pytest.mark.parametrize("case", sorted(GENERATION_CASES))
def test_malformed_generations_score_zero_with_message(tmp_path, case):
    data, needle = GENERATION_CASES[case]
    files = {} if data is None else {"generated.npy": data}
    result = grade_files(tmp_path, files, only=["generation"])
    arrays, functions = split_tests(result)
    assert len(arrays) == 2 and len(functions) == 4
    assert all(t.score == 0.0 and NOTEBOOK_MISSING in t.output for t in functions)
    for t in arrays:
        assert t.score == 0.0
        assert t.output.startswith("generation: ") and needle in t.output, t.output


def test_local_run_checks_the_format_and_leaves_perplexity_to_the_course_grader(tmp_path, oracle_handin):
    result = grade_files(tmp_path, oracle_handin, visibilities=("public",), only=["prediction", "generation"])
    arrays = split_tests(result)[0]
    assert [(t.visibility, t.passed) for t in arrays] == [("public", True), ("public", True)]
    gen = next(t for t in arrays if t.problem == "generation")
    assert "perplexity under the source of the text is computed by the course grader" in gen.output, gen.output
    assert not any("oracle" in n for n in result.notes), result.notes
    assert any("perplexity under the source of the text is computed by the course grader" in n for n in result.notes)


def test_reference_model_handin_passes_both_lines_with_margin(tmp_path):
    """The arrays the reference model wrote (make reference-model) earn full points with room to spare."""
    pred, gen = LM / "reference_predictions.npy", LM / "reference_generated.npy"
    if not (pred.is_file() and gen.is_file()):
        pytest.skip("no reference model arrays in fixtures/lm yet")
    files = {"predictions.npy": pred.read_bytes(), "generated.npy": gen.read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction", "generation"])
    arrays = split_tests(result)[0]
    assert len(arrays) == 4 and all(t.passed for t in arrays), [t.output for t in arrays]
    settings = {pid: p.settings for pid, p in load_rubric().items()}
    targets = np.load(LM / "hidden" / "prediction_test_out.npz")["out"]
    nll = M.prediction_report(np.load(pred), targets)["on_track_nll"]
    assert nll <= settings["prediction"]["full_credit_nll"] - 0.1
    ppl = M.generation_perplexity(load_oracle(LM, EPS), np.load(LM / "generation_test.npz")["inp"], np.load(gen), EPS)
    assert ppl <= settings["generation"]["full_credit_perplexity"] / 2
