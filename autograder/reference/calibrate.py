"""Figures of the language-model track: the source, the calibration of the thresholds, timings.

    python -m autograder.reference.calibrate [--fixtures fixtures] [--repeats 5]

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

from gradelib import rubric as rubric_mod
from gradelib.problems.prediction import credit
from gradelib.lm import metrics as M
from ..oracle.ngram import NGramModel
from ..oracle.oracles import load_oracle, toy_source

REFERENCE = "reference_model.pt"
NGRAM_ORDERS = (8, 4, 2)  # order 2 is the bigram baseline, which must fail both thresholds


def _ngram_model(model: NGramModel):
    def predict(inp, steps):
        return M.greedy_predict(lambda x: np.log(np.maximum(model.next_id_probs(x)[:, -1], 1e-30)), inp, steps)

    def generate(inp, steps):
        return M.greedy_generate(lambda x: model.next_id_probs(x)[:, -1], inp, steps)

    return predict, generate


def _reference_model(path: Path):
    import torch

    from .model import generate, predict
    from ..oracle.oracles import load_model

    model = load_model(path)
    torch.set_num_threads(2)
    return (
        lambda inp, steps: predict(model, torch.as_tensor(inp), steps).double().numpy(),
        lambda inp, steps: generate(model, torch.as_tensor(inp), steps).numpy(),
    )


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
    T_pred, T_gen = val["out"].shape[1], 30

    models = [(
        "Bayes-optimal (the source)",
        lambda inp, steps: M.oracle_prediction_logits(oracle, inp, steps, 0.0),
        lambda inp, steps: M.oracle_greedy_generation(oracle, inp, steps),
    )]
    if (lm / REFERENCE).is_file():
        models.append((f"reference model ({REFERENCE})", *_reference_model(lm / REFERENCE)))
    train = (lm / "train.txt").read_text().splitlines()
    for order in NGRAM_ORDERS:
        name = "bigram baseline" if order == 2 else f"character {order}-gram"
        models.append((name, *_ngram_model(NGramModel.fit(train, order))))

    rows, generations = [], {}
    for name, predict, generate in models:
        t = time.monotonic()
        row = {"model": name, **M.prediction_report(predict(val["inp"], T_pred), val["out"])}
        if test_out is not None:
            row["test_nll"] = M.prediction_report(predict(test_inp, T_pred), test_out)["on_track_nll"]
        generations[name] = generate(gen_inp, T_gen)
        tok = M.generation_token_nll(oracle, gen_inp, generations[name], eps)
        row["generation_perplexity"] = float(np.exp(tok.mean()))
        row["seconds"] = time.monotonic() - t
        rows.append(row)

    full = np.concatenate([val["inp"], val["out"][:, :-1]], axis=1)
    probs = oracle.next_id_probs(full)[:, val["inp"].shape[1] - 1 :]
    out["teacher_forced_nll"] = float(-np.log(np.take_along_axis(probs, val["out"][..., None], axis=-1)).mean())

    bayes = rows[0]
    for r in rows:
        r["nll_ratio"] = r["on_track_nll"] / bayes["on_track_nll"]
        r["perplexity_ratio"] = r["generation_perplexity"] / bayes["generation_perplexity"]
        graded_nll = r.get("test_nll", r["on_track_nll"])
        r["prediction_credit"] = credit(graded_nll, float(p_set["full_credit_nll"]), float(p_set["zero_credit_nll"]))
        r["generation_credit"] = credit(
            math.log(r["generation_perplexity"]),
            math.log(float(g_set["full_credit_perplexity"])),
            math.log(float(g_set["zero_credit_perplexity"])),
        )
    out["models"] = rows

    # Scoring time of 128 x 30 generations (what the grader does per handin), warm oracle.
    times = {}
    for label, name in (("greedy source text", bayes["model"]), ("bigram text", "bigram baseline")):
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            M.generation_token_nll(oracle, gen_inp, generations[name], eps)
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
    lines.append("pred NLL: on-track NLL on prediction.npz (validation); test: the same on prediction_test (graded, hidden);")
    lines.append("step0 / all: NLL of step 0 / of all 20 steps (not graded); gen ppl: oracle perplexity of greedy generations.")
    head = (f"{'model':34s} {'pred NLL':>9s} {'x Bayes':>8s} {'steps':>6s} {'step0':>7s} {'all':>7s} {'test':>7s} {'credit':>7s}   "
            f"{'gen ppl':>9s} {'x Bayes':>8s} {'credit':>7s} {'time':>6s}")
    lines += ["", head, "-" * len(head)]
    for r in f["models"]:
        lines.append(
            f"{r['model']:34s} {r['on_track_nll']:9.4f} {r['nll_ratio']:8.3f} {r['on_track_steps']:6d} "
            f"{r['step0_nll']:7.3f} {r['all_steps_nll']:7.3f} {r.get('test_nll', float('nan')):7.3f} {r['prediction_credit']:7.0%}   "
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
