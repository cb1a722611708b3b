"""Figures of the language-model track: the source, the calibration of the thresholds, timings.

    python -m autograder.lm.report [--fixtures fixtures] [--repeats 5]

Prints the source's exact entropy rate, then for each model -- the Bayes-optimal
predictor (the source itself), the reference model (fixtures/lm/reference_model.pt,
when present), character n-grams and the bigram baseline -- its prediction NLL
on prediction.npz (graded on-track NLL, with step 0 and all-steps figures) and
the perplexity of its greedy generations for generation_test.npz, each with its
ratio to the Bayes-optimal figure and the credit the rubric gives. Ends with the
oracle's scoring time for 128 x 30 generations. `lm_figures()` returns the same
numbers for `make bench`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from .. import rubric as rubric_mod
from ..problems.prediction import credit
from . import metrics as M
from .ngram import NGramModel
from .oracle import load_oracle, toy_source

REFERENCE = "reference_model.pt"
NGRAM_ORDERS = (8, 4, 2)  # order 2 is the bigram baseline, which must fail both thresholds


def _ngram_runner(model: NGramModel):
    def logits(x):
        return np.log(np.maximum(model.next_id_probs(x)[:, -1], 1e-30))

    return logits, lambda x: model.next_id_probs(x)[:, -1]


def _reference_runner(path: Path):
    import torch

    from .model import generate, predict
    from .oracle import load_model

    model = load_model(path)
    torch.set_num_threads(2)
    return model, predict, generate


def evaluate(name, predict_logits, generated, pred, gen_inp, oracle, eps, seconds) -> dict:
    report = M.prediction_report(predict_logits, pred["out"])
    tok = M.generation_token_nll(oracle, gen_inp, generated, eps)
    return {"model": name, **report, "generation_perplexity": float(np.exp(tok.mean())), "seconds": seconds}


def lm_figures(fixtures: Path = Path("fixtures"), repeats: int = 5) -> dict:
    """All figures as a dict (see the module doc)."""
    lm = fixtures / "lm"
    info = json.loads((lm / "oracle.json").read_text())
    problems = rubric_mod.load()
    p_set, g_set = problems["prediction"].settings, problems["generation"].settings
    eps = float(g_set["smoothing_eps"])
    out: dict = {"oracle": info["oracle"], "settings": {"prediction": p_set, "generation": g_set}}

    start = time.monotonic()
    oracle = load_oracle(lm, eps)
    if info["oracle"]["kind"] == "toy_source":
        auto = toy_source(int(info["oracle"]["seed"])).automaton
        out["source"] = {
            "entropy_rate": auto.entropy_rate(),
            "mean_sentence_chars": auto.mean_sentence_length(),
            "automaton_states": auto.n_states,
            "words": len(toy_source(int(info["oracle"]["seed"])).vocabulary()),
        }
    out["oracle_load_s"] = time.monotonic() - start

    pred = dict(np.load(lm / "prediction.npz"))
    gen_inp = np.load(lm / "generation_test.npz")["inp"]
    T_pred, T_gen = pred["out"].shape[1], 30
    rows = []

    t = time.monotonic()
    bayes_logits = M.oracle_prediction_logits(oracle, pred["inp"], T_pred, 0.0)
    bayes_gen = M.oracle_greedy_generation(oracle, gen_inp, T_gen)
    rows.append(evaluate("Bayes-optimal (the source)", bayes_logits, bayes_gen, pred, gen_inp, oracle, eps, time.monotonic() - t))
    full = np.concatenate([pred["inp"], pred["out"][:, :-1]], axis=1)
    probs = oracle.next_id_probs(full)[:, pred["inp"].shape[1] - 1 :]
    out["teacher_forced_nll"] = float(-np.log(np.take_along_axis(probs, pred["out"][..., None], axis=-1)).mean())

    if (lm / REFERENCE).is_file():
        import torch

        t = time.monotonic()
        model, predict, generate = _reference_runner(lm / REFERENCE)
        logits = predict(model, torch.as_tensor(pred["inp"]), T_pred).double().numpy()
        ids = generate(model, torch.as_tensor(gen_inp), T_gen).numpy()
        rows.append(evaluate(f"reference model ({REFERENCE})", logits, ids, pred, gen_inp, oracle, eps, time.monotonic() - t))

    train = (lm / "train.txt").read_text().splitlines()
    for order in NGRAM_ORDERS:
        t = time.monotonic()
        model = NGramModel.fit(train, order)
        logits_fn, probs_fn = _ngram_runner(model)
        logits = M.greedy_predict(logits_fn, pred["inp"], T_pred)
        ids = M.greedy_generate(probs_fn, gen_inp, T_gen)
        name = "bigram baseline" if order == 2 else f"character {order}-gram"
        rows.append(evaluate(name, logits, ids, pred, gen_inp, oracle, eps, time.monotonic() - t))
        if order == 2:
            bigram_ids = ids

    bayes = rows[0]
    for r in rows:
        r["nll_ratio"] = r["on_track_nll"] / bayes["on_track_nll"]
        r["perplexity_ratio"] = r["generation_perplexity"] / bayes["generation_perplexity"]
        r["prediction_credit"] = credit(r["on_track_nll"], float(p_set["full_credit_nll"]), float(p_set["zero_credit_nll"]))
        r["generation_credit"] = credit(
            math.log(r["generation_perplexity"]),
            math.log(float(g_set["full_credit_perplexity"])),
            math.log(float(g_set["zero_credit_perplexity"])),
        )
    out["models"] = rows

    # Scoring time of 128 x 30 generations (what the grader does per handin), warm oracle.
    times = {}
    for label, ids in (("greedy source text", bayes_gen), ("bigram text", bigram_ids)):
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            M.generation_token_nll(oracle, gen_inp, ids, eps)
            runs.append(time.perf_counter() - t)
        times[label] = statistics.median(runs)
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
    lines.append(f"teacher-forced NLL of the source on prediction.npz targets: {f['teacher_forced_nll']:.4f} nats/char")
    p, g = f["settings"]["prediction"], f["settings"]["generation"]
    lines.append(
        f"thresholds: prediction NLL full <= {p['full_credit_nll']}, zero >= {p['zero_credit_nll']}; "
        f"generation perplexity full <= {g['full_credit_perplexity']}, zero >= {g['zero_credit_perplexity']} "
        f"(eps {g['smoothing_eps']})"
    )
    head = f"{'model':34s} {'pred NLL':>9s} {'x Bayes':>8s} {'steps':>6s} {'step0':>7s} {'all':>7s} {'credit':>7s}   {'gen ppl':>9s} {'x Bayes':>8s} {'credit':>7s} {'time':>6s}"
    lines += ["", head, "-" * len(head)]
    for r in f["models"]:
        lines.append(
            f"{r['model']:34s} {r['on_track_nll']:9.4f} {r['nll_ratio']:8.3f} {r['on_track_steps']:6d} "
            f"{r['step0_nll']:7.3f} {r['all_steps_nll']:7.3f} {r['prediction_credit']:7.0%}   "
            f"{r['generation_perplexity']:9.3f} {r['perplexity_ratio']:8.2f} {r['generation_credit']:7.0%} {r['seconds']:5.1f}s"
        )
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
