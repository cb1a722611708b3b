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

from autograder.oracle import metrics as M
from autograder.oracle.ngram import NGramModel
from autograder.oracle.oracles import load_oracle, next_char_logprobs
from autograder.oracle.text import N_GENERATABLE, encode
from gradelib.lm.vocab import EOS, GENERATABLE, PAD, VOCAB_SIZE
from gradelib.rubric import load as load_rubric

from support import FIXTURES, grade_files, toy_english_only

LM = FIXTURES / "lm"
EPS = float(load_rubric()["generation"].settings["smoothing_eps"])
NOTEBOOK_MISSING = "03_language_model.ipynb is missing from the handin"


def split_tests(result) -> tuple[list, list]:
    """(tests of the array lines, tests of the notebook-function lines), by the rubric."""
    function_lines = {(pid, g.id) for pid, p in load_rubric().items() for g in p.groups if g.quantities}
    arrays = [t for t in result.tests if (t.problem, t.line) not in function_lines]
    return arrays, [t for t in result.tests if t not in arrays]


def function_tests(pid: str) -> int:
    """How many tests the notebook-function lines of a problem make (a line per case set)."""
    return sum(len(g.visibilities) for g in load_rubric()[pid].groups if g.quantities)


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


def teacher_forced_logits(next_id_probs, inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Smoothed logits of each step given the prompt and the true characters before it. (B, steps, 30)"""
    probs = next_id_probs(np.concatenate([inp, out[:, :-1]], axis=1))[:, inp.shape[1] - 1 :]
    return M.smoothed_logits(probs, EPS)


@pytest.fixture(scope="module")
def targets() -> np.ndarray:
    return np.load(LM / "hidden" / "prediction_test_out.npz")["out"]


@toy_english_only
def test_source_itself_scores_full_credit_on_both_figures(oracle, prompts, targets):
    settings = {pid: p.settings for pid, p in load_rubric().items()}
    nll = M.prediction_nll(teacher_forced_logits(oracle.next_id_probs, prompts["prediction_test"], targets), targets)
    assert nll <= settings["prediction"]["full_credit_nll"]
    ids = M.oracle_greedy_generation(oracle, prompts["generation_test"], 30)
    assert (
        M.generation_perplexity(oracle, prompts["generation_test"], ids, EPS)
        <= settings["generation"]["full_credit_perplexity"]
    )


def test_bigram_baseline_scores_no_credit_on_either_figure(oracle, prompts, targets, bigram):
    settings = {pid: p.settings for pid, p in load_rubric().items()}
    logits = teacher_forced_logits(bigram.next_id_probs, prompts["prediction_test"], targets)
    assert M.prediction_nll(logits, targets) >= settings["prediction"]["zero_credit_nll"]
    ids = M.greedy_generate(lambda x: bigram.next_id_probs(x)[:, -1], prompts["generation_test"], 30)
    assert (
        M.generation_perplexity(oracle, prompts["generation_test"], ids, EPS)
        >= settings["generation"]["zero_credit_perplexity"]
    )


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
    assert len(arrays) == 2 and len(functions) == function_tests("prediction")
    assert all(t.score == 0.0 and NOTEBOOK_MISSING in t.output for t in functions)
    fmt, quality = arrays
    assert fmt.score == 0.0 and fmt.output.startswith("prediction: ") and needle in fmt.output, fmt.output
    assert quality.score == 0.0 and "model.pt is missing from the handin" in quality.output, quality.output


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
    assert len(arrays) == 2 and len(functions) == function_tests("generation")
    assert all(t.score == 0.0 and NOTEBOOK_MISSING in t.output for t in functions)
    fmt, quality = arrays
    assert fmt.score == 0.0 and fmt.output.startswith("generation: ") and needle in fmt.output, fmt.output
    assert quality.score == 0.0 and "model.pt is missing from the handin" in quality.output, quality.output


def test_local_run_checks_the_format_and_leaves_perplexity_to_the_course_grader(tmp_path):
    """Well-formed arrays are said to be so; without the model.pt that made them their format lines score 0."""
    files = {"predictions.npy": npy(GOOD_PRED), "generated.npy": npy(GOOD_GEN)}
    result = grade_files(tmp_path, files, visibilities=("public",), only=["prediction", "generation"])
    arrays = split_tests(result)[0]
    assert [(t.visibility, t.passed) for t in arrays] == [("public", False), ("public", False)]
    for t in arrays:
        assert "is well formed" in t.output and "model.pt is missing" in t.output, t.output
    assert not any("oracle" in n for n in result.notes), result.notes
    assert any("computes the perplexity of what it writes under the source of the text" in n for n in result.notes)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_ngrams_up_to_the_trigram_score_nothing_on_either_line(oracle, prompts, targets, order):
    """The calibration rule: every baseline up to the trigram earns no quality points."""
    from autograder.reference.calibrate import nll_of, teacher_forced_probs

    settings = {pid: p.settings for pid, p in load_rubric().items()}
    gram = NGramModel.fit((LM / "train.txt").read_text().splitlines(), order)
    nll = nll_of(teacher_forced_probs(gram.next_id_probs, prompts["prediction_test"], targets), targets)
    assert nll >= settings["prediction"]["zero_credit_nll"]
    ids = M.greedy_generate(lambda x: gram.next_id_probs(x)[:, -1], prompts["generation_test"], 30)
    assert (
        M.generation_perplexity(oracle, prompts["generation_test"], ids, EPS)
        >= settings["generation"]["zero_credit_perplexity"]
    )


def test_degenerate_text_scores_nothing(oracle, prompts):
    """One constant phrase for every prompt, or a copy of the prompt, earns no generation points."""
    from autograder.reference.calibrate import CONSTANT_PHRASE

    gen = prompts["generation_test"]
    zero = load_rubric()["generation"].settings["zero_credit_perplexity"]
    phrase = np.tile(np.array(encode(CONSTANT_PHRASE)), (len(gen), 1))
    copy = np.where(gen[:, :30] < 2, 29, gen[:, :30])
    for ids in (phrase, copy):
        assert M.generation_perplexity(oracle, gen, ids, EPS) >= zero
