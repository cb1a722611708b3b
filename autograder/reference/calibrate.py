"""Calibration of the language-model thresholds: the source, the reference model and baselines.

    python -m autograder.reference.calibrate [--fixtures fixtures] [--repeats 5]

For each model it prints the two graded figures, exactly as the grader computes
them for a handed-in model:

- prediction NLL: the mean NLL of the 20 true characters after each prompt,
  each predicted from the prompt and the true characters before it (teacher
  forcing), on prediction.npz (validation) and prediction_test (hidden, graded);
- generation perplexity: the oracle's perplexity of the model's own greedy
  generation for every prompt of generation_test.npz;

with the credit the rubric gives. Models: the Bayes-optimal predictor (the toy
source itself, exact; labelled "oracle" when the oracle is not an exact source),
the reference model (fixtures/lm/reference_model.pt), character n-grams of the
training text (unigram to 10-gram), and two degenerate generators (one constant
phrase for every prompt; a copy of the prompt). The thresholds must give the
reference full credit with margin and every baseline up to the trigram nothing.
Ends with the oracle's scoring time for 128 x 30 generations. `lm_figures()`
returns the same numbers for `make bench`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from gradelib import rubric as rubric_mod
from gradelib.lm import metrics as M
from gradelib.lm.vocab import EOS, PAD, encode
from gradelib.problems.prediction import credit

from ..oracle.ngram import NGramModel
from ..oracle.oracles import load_oracle, toy_source

REFERENCE = "reference_model.pt"
NGRAM_ORDERS = (10, 8, 5, 3, 2, 1)
# Every baseline at or below this order must score nothing on both quality lines.
NO_CREDIT_UP_TO_ORDER = 3
CONSTANT_PHRASE = "THE DOG THAT SEES THE CAT RUNS"  # 30 characters, grammatical on its own


def teacher_forced_probs(next_id_probs, inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """P(next id) at each of the steps, given the prompt and the true characters before it. (B, steps, 30)"""
    return next_id_probs(np.concatenate([inp, out[:, :-1]], axis=1))[:, inp.shape[1] - 1 :]


def nll_of(probs: np.ndarray, out: np.ndarray) -> float:
    p = np.take_along_axis(probs, out[..., None], axis=-1)[..., 0]
    return float(-np.log(np.maximum(p, 1e-300)).mean())


def _allowed_argmax(probs: np.ndarray) -> np.ndarray:
    p = probs.copy()
    p[..., [EOS, PAD]] = -np.inf
    return p.argmax(-1)


def _ngram(model: NGramModel):
    def tf_nll(inp, out):
        return nll_of(teacher_forced_probs(model.next_id_probs, inp, out), out)

    def generate(inp, steps):
        return M.greedy_generate(lambda x: model.next_id_probs(x)[:, -1], inp, steps)

    return tf_nll, generate


def _reference(path: Path):
    import torch

    from ..oracle.oracles import load_model
    from .model import generate

    model = load_model(path)
    torch.set_num_threads(2)

    def probs(ids):
        with torch.no_grad():
            return torch.softmax(model(torch.as_tensor(ids, dtype=torch.long)).double(), -1).numpy()

    return (lambda inp, out: nll_of(teacher_forced_probs(probs, inp, out), out),
            lambda inp, steps: generate(model, torch.as_tensor(inp), steps).numpy())


def _degenerate(ids_for):
    """A generator that writes without a model; it predicts nothing (no NLL)."""
    return None, ids_for


def lm_figures(fixtures: Path = Path("fixtures"), repeats: int = 5) -> dict:
    """All figures as a dict (see the module doc)."""
    lm = fixtures / "lm"
    info = json.loads((lm / "oracle.json").read_text())
    problems = rubric_mod.load()
    p_set, g_set = problems["prediction"].settings, problems["generation"].settings
    eps = float(g_set["smoothing_eps"])
    out: dict = {"oracle": info["oracle"], "settings": {"prediction": p_set, "generation": g_set}}
    exact = info["oracle"]["kind"] == "toy_source"

    start = time.monotonic()
    oracle = load_oracle(lm, eps)
    if exact:
        source = toy_source(int(info["oracle"]["seed"]))
        out["source"] = {
            "entropy_rate": source.automaton.entropy_rate(),
            "mean_sentence_chars": source.automaton.mean_sentence_length(),
            "automaton_states": source.automaton.n_states,
            "words": len(source.vocabulary()),
        }
    out["oracle_load_s"] = time.monotonic() - start

    val = dict(np.load(lm / "prediction.npz"))
    test_inp = np.load(lm / "prediction_test.npz")["inp"]
    hidden = lm / "hidden" / "prediction_test_out.npz"
    test_out = np.load(hidden)["out"] if hidden.is_file() else None
    gen_inp = np.load(lm / "generation_test.npz")["inp"]
    T_gen = 30

    label = "Bayes-optimal (the source)" if exact else f"oracle ({info['oracle'].get('kind')})"
    models = [(
        label,
        lambda inp, o: nll_of(teacher_forced_probs(oracle.next_id_probs, inp, o), o),
        lambda inp, steps: M.greedy_generate(lambda x: oracle.next_id_probs(x)[:, -1], inp, steps),
    )]
    if (lm / REFERENCE).is_file():
        models.append((f"reference model ({REFERENCE})", *_reference(lm / REFERENCE)))
    train = (lm / "train.txt").read_text().splitlines()
    for order in NGRAM_ORDERS:
        name = {1: "unigram", 2: "bigram", 3: "trigram"}.get(order, f"character {order}-gram")
        models.append((name, *_ngram(NGramModel.fit(train, order))))
    phrase = np.array(encode(CONSTANT_PHRASE), dtype=np.int64)
    models.append(("constant phrase for every prompt", *_degenerate(lambda inp, steps: np.tile(phrase[:steps], (len(inp), 1)))))
    models.append(("copy of the prompt", *_degenerate(lambda inp, steps: np.where(inp[:, :steps] < 2, 29, inp[:, :steps]))))

    rows, generations = [], {}
    for name, tf_nll, generate in models:
        t = time.monotonic()
        row = {"model": name}
        if tf_nll is not None:
            row["val_nll"] = tf_nll(val["inp"], val["out"])
            if test_out is not None:
                row["test_nll"] = tf_nll(test_inp, test_out)
            graded = row.get("test_nll", row["val_nll"])
            row["prediction_credit"] = credit(graded, float(p_set["full_credit_nll"]), float(p_set["zero_credit_nll"]))
        generations[name] = generate(gen_inp, T_gen)
        tok = M.generation_token_nll(oracle, gen_inp, generations[name], eps)
        row["generation_perplexity"] = float(np.exp(tok.mean()))
        row["generation_credit"] = credit(
            math.log(row["generation_perplexity"]),
            math.log(float(g_set["full_credit_perplexity"])),
            math.log(float(g_set["zero_credit_perplexity"])),
        )
        row["seconds"] = time.monotonic() - t
        rows.append(row)
    out["models"] = rows

    # Scoring time of 128 x 30 generations (what the grader does per handin), warm oracle.
    times = {}
    for what, name in (("greedy source text", label), ("bigram text", "bigram")):
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            M.generation_token_nll(oracle, gen_inp, generations[name], eps)
            runs.append(time.perf_counter() - t)
        times[what] = statistics.median(runs)
    out["scoring_s"] = times
    return out


def format_figures(f: dict) -> str:
    lines = []
    if "source" in f:
        s = f["source"]
        lines.append(
            f"toy source: {s['words']} words, {s['automaton_states']} automaton states; exact entropy rate "
            f"{s['entropy_rate']:.6f} nats/char (perplexity {math.exp(s['entropy_rate']):.4f}); "
            f"{s['mean_sentence_chars']:.2f} chars per sentence with <eos>"
        )
    lines.append(f"oracle: {f['oracle']}; loaded and prepared in {f['oracle_load_s']:.2f} s")
    p, g = f["settings"]["prediction"], f["settings"]["generation"]
    lines.append(
        f"thresholds: prediction NLL full <= {p['full_credit_nll']}, zero >= {p['zero_credit_nll']}; "
        f"generation perplexity full <= {g['full_credit_perplexity']}, zero >= {g['zero_credit_perplexity']} "
        f"(eps {g['smoothing_eps']})"
    )
    lines.append("val / test: teacher-forced NLL (nats/char) on prediction.npz / prediction_test (graded, hidden);")
    lines.append("gen ppl: oracle perplexity of the model's greedy generations for generation_test.npz (graded).")
    head = f"{'model':36s} {'val':>7s} {'test':>7s} {'credit':>7s}   {'gen ppl':>10s} {'credit':>7s} {'time':>6s}"
    lines += ["", head, "-" * len(head)]
    for r in f["models"]:
        pred = (f"{r['val_nll']:7.3f} {r.get('test_nll', float('nan')):7.3f} {r['prediction_credit']:7.0%}"
                if "val_nll" in r else f"{'-':>7s} {'-':>7s} {'-':>7s}")
        lines.append(f"{r['model']:36s} {pred}   {r['generation_perplexity']:10.2f} {r['generation_credit']:7.0%} {r['seconds']:5.1f}s")
    lines.append("")
    lines.append("oracle scoring of 128 x 30 generations (median): " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in f["scoring_s"].items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=Path("fixtures"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(format_figures(lm_figures(args.fixtures, args.repeats)))


if __name__ == "__main__":
    main()
