"""Calibration of the language-model thresholds: the source, the reference model and baselines.

    python -m autograder.reference.calibrate [--fixtures fixtures] [--repeats 5]

For each model it prints the two graded figures, exactly as the grader computes
them for a handed-in model:

- prediction NLL: the mean NLL of the 20 true characters after each prompt,
  each predicted from the prompt and the true characters before it (teacher
  forcing), on prediction.npz (validation) and prediction_test (hidden, graded);
- generation perplexity: the oracle's perplexity of the model's own greedy
  generation for every prompt of generation_test.npz;

with the credit the rubric gives. Models: the oracle itself (labelled
"Bayes-optimal" only when it is the exact toy source; otherwise "oracle (order-6
n-gram)" or "reference-model oracle": the best a model can do is then unknown),
the reference model (fixtures/lm/reference_model.pt), character n-grams of the
training text (unigram to 10-gram), and two degenerate generators (one constant
phrase for every prompt; a copy of the prompt). The thresholds must give the
reference full credit with margin and every baseline up to the trigram nothing.
Ends with the oracle's scoring time for 128 x 30 generations. `lm_figures()`
returns the same numbers for `make bench`; `propose_thresholds()` applies the
threshold rule (README, "The language-model scores") to them and
`write_thresholds()` writes the result into rubric.toml, as `make course` does.

It refuses, with one line naming the command to run, when the reference model or
the rubric's thresholds were measured on another corpus than the fixtures'.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from autograder.grading import rubric_check as rubric_mod
from autograder.oracle import metrics as M
from gradelib.lm.vocab import EOS, PAD
from gradelib.problems.lm_common import credit

from ..oracle.ngram import NGramModel
from ..oracle.oracles import load_oracle, toy_source
from ..oracle.text import encode
from . import provenance

REFERENCE = "reference_model.pt"
REFERENCE_LABEL = f"reference model ({REFERENCE})"
NGRAM_ORDERS = (10, 8, 5, 3, 2, 1)
# Every baseline at or below this order must score nothing on both quality lines.
NO_CREDIT_UP_TO_ORDER = 3
CONSTANT_PHRASE = "THE DOG THAT SEES THE CAT RUNS"  # 30 characters, grammatical on its own
GENERATED_STEPS = 30  # characters generated after each prompt of generation_test.npz


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
    from .train import THREADS

    model = load_model(path)
    torch.set_num_threads(THREADS)  # as the reference was trained and evaluated

    def probs(ids):
        with torch.no_grad():
            return torch.softmax(model(torch.as_tensor(ids, dtype=torch.long)).double(), -1).numpy()

    return (lambda inp, out: nll_of(teacher_forced_probs(probs, inp, out), out),
            lambda inp, steps: generate(model, torch.as_tensor(inp), steps).numpy())


def _degenerate(ids_for):
    """A generator that writes without a model; it predicts nothing (no NLL)."""
    return None, ids_for


def oracle_label(spec: dict) -> str:
    """How a table names the oracle's own figures: Bayes-optimal only where the source is exact."""
    kind = spec.get("kind")
    if kind == "toy_source":
        return "Bayes-optimal (the source)"
    if kind == "ngram":
        return f"oracle (order-{spec.get('order', '?')} n-gram)"
    if kind == "model":
        return "reference-model oracle"
    return f"oracle ({kind})"


def _models(lm: Path, oracle, label: str) -> list[tuple]:
    """(name, teacher-forced NLL or None, generate) of every model measured: the oracle, the reference, n-grams,
    degenerate text."""
    models = [(
        label,
        lambda inp, o: nll_of(teacher_forced_probs(oracle.next_id_probs, inp, o), o),
        lambda inp, steps: M.greedy_generate(lambda x: oracle.next_id_probs(x)[:, -1], inp, steps),
    )]
    if (lm / REFERENCE).is_file():
        models.append((REFERENCE_LABEL, *_reference(lm / REFERENCE)))
    train = (lm / "train.txt").read_text().splitlines()
    for order in NGRAM_ORDERS:
        name = {1: "unigram", 2: "bigram", 3: "trigram"}.get(order, f"character {order}-gram")
        models.append((name, *_ngram(NGramModel.fit(train, order))))
    phrase = np.array(encode(CONSTANT_PHRASE), dtype=np.int64)
    models.append(
        ("constant phrase for every prompt", *_degenerate(lambda inp, steps: np.tile(phrase[:steps], (len(inp), 1))))
    )
    models.append(
        ("copy of the prompt", *_degenerate(lambda inp, steps: np.where(inp[:, :steps] < 2, 29, inp[:, :steps])))
    )
    return models


def _model_row(name: str, tf_nll, generated: np.ndarray, data: dict, oracle, settings: dict, eps: float) -> dict:
    """One model's figures and credits: NLL on the validation and hidden prediction sets, perplexity of its
    generations."""
    p_set, g_set = settings["prediction"], settings["generation"]
    row = {"model": name}
    if tf_nll is not None:
        row["val_nll"] = tf_nll(data["val"]["inp"], data["val"]["out"])
        if data["test_out"] is not None:
            row["test_nll"] = tf_nll(data["test_inp"], data["test_out"])
        graded = row.get("test_nll", row["val_nll"])
        row["prediction_credit"] = credit(graded, float(p_set["full_credit_nll"]), float(p_set["zero_credit_nll"]))
    tok = M.generation_token_nll(oracle, data["gen_inp"], generated, eps)
    row["generation_perplexity"] = float(np.exp(tok.mean()))
    # The same figure on each half of the prompts: how much the graded figure depends on which prompts were drawn.
    half = len(tok) // 2
    row["generation_perplexity_halves"] = [float(np.exp(tok[:half].mean())), float(np.exp(tok[half:].mean()))]
    row["generation_credit"] = credit(
        math.log(row["generation_perplexity"]),
        math.log(float(g_set["full_credit_perplexity"])),
        math.log(float(g_set["zero_credit_perplexity"])),
    )
    return row


def lm_figures(fixtures: Path = Path("fixtures"), repeats: int = 5, rubric_path: Path | None = None) -> dict:
    """All figures as a dict (see the module doc). The reference model must be the fixtures' own."""
    lm = fixtures / "lm"
    info = json.loads((lm / "oracle.json").read_text())
    if (lm / REFERENCE).is_file():
        provenance.check_reference(lm)
    problems = rubric_mod.load(rubric_path)
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

    hidden = lm / "hidden" / "prediction_test_out.npz"
    data = {"val": dict(np.load(lm / "prediction.npz")), "test_inp": np.load(lm / "prediction_test.npz")["inp"],
            "test_out": np.load(hidden)["out"] if hidden.is_file() else None,
            "gen_inp": np.load(lm / "generation_test.npz")["inp"]}
    label = oracle_label(info["oracle"])
    out["oracle_label"] = label
    out["corpus"] = provenance.corpus_label(lm)
    out["corpus_sha256"] = provenance.corpus_hash(lm)
    rows, generations = [], {}
    for name, tf_nll, generate in _models(lm, oracle, label):
        t = time.monotonic()
        generations[name] = generate(data["gen_inp"], GENERATED_STEPS)
        rows.append({**_model_row(name, tf_nll, generations[name], data, oracle, out["settings"], eps),
                     "seconds": time.monotonic() - t})
    out["models"] = rows

    # Scoring time of 128 x 30 generations (what the grader does per handin), warm oracle.
    times = {}
    for what, name in (("greedy source text", label), ("bigram text", "bigram")):
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            M.generation_token_nll(oracle, data["gen_inp"], generations[name], eps)
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
    lines.append("gen ppl: oracle perplexity of the model's greedy generations for generation_test.npz (graded);")
    lines.append(
        "halves: the same on its first and on its second half of the prompts (how much the figure depends on the draw)."
    )
    head = (f"{'model':36s} {'val':>7s} {'test':>7s} {'credit':>7s}   {'gen ppl':>10s} {'credit':>7s} "
            f"{'halves':>19s} {'time':>6s}")
    lines += ["", head, "-" * len(head)]
    for r in f["models"]:
        pred = (f"{r['val_nll']:7.3f} {r.get('test_nll', float('nan')):7.3f} {r['prediction_credit']:7.0%}"
                if "val_nll" in r else f"{'-':>7s} {'-':>7s} {'-':>7s}")
        halves = " / ".join(f"{x:.2f}" for x in r.get("generation_perplexity_halves", []))
        lines.append(f"{r['model']:36s} {pred}   {r['generation_perplexity']:10.2f} {r['generation_credit']:7.0%} "
                     f"{halves:>19s} {r['seconds']:5.1f}s")
    lines.append("")
    lines.append(
        "oracle scoring of 128 x 30 generations (median): "
        + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in f["scoring_s"].items())
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the threshold rule
# Prediction NLL (nats/char) and log generation perplexity alike: with R the reference model's figure
# (the worse of validation and hidden test) and B the best figure of the baselines that must earn
# nothing (the same worst-of-two rule, taken as the best of them), gap = B - R:
#   full credit at R + FULL_AT * gap, no credit at B - ZERO_AT * gap,
# then each rounded down to a multiple of 0.05 nats / to two significant digits of the perplexity,
# unless rounding takes more than ROUND_SLACK * gap off the reference's margin. The reference then
# passes with at least (FULL_AT - ROUND_SLACK) * gap to spare and every such baseline earns 0.
FULL_AT = 0.25
ZERO_AT = 0.15
ROUND_SLACK = 0.05
MIN_GAP_NLL = 0.05  # nats/char: below this the reference and the trigram cannot be told apart
MIN_GAP_LOG_PPL = math.log(1.5)
ZERO_CREDIT_PREDICTION = ("trigram", "bigram", "unigram")
ZERO_CREDIT_GENERATION = ZERO_CREDIT_PREDICTION + ("constant phrase for every prompt", "copy of the prompt")
RULE_TEXT = (
    f"full credit at the reference's figure + {FULL_AT:g} of the gap to the best baseline that must earn nothing "
    f"(trigram and below; for generation also the constant phrase and the prompt copy), none at that baseline - "
    f"{ZERO_AT:g} of the gap (perplexity: in log space), rounded down to 0.05 nats / 2 significant digits"
)


class ThresholdError(ValueError):
    """The measured figures admit no thresholds under the rule; the message says why (the caller, what to do)."""


def _worst(row: dict) -> float:
    return max(row["val_nll"], row.get("test_nll", row["val_nll"]))


def _best(row: dict) -> float:
    return min(row["val_nll"], row.get("test_nll", row["val_nll"]))


def _floor_to(value: float, step: float) -> float:
    return round(math.floor(value / step + 1e-9) * step, 10)


def _floor_2_digits(value: float) -> float:
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    return _floor_to(value, step)


def propose_thresholds(figures: dict) -> dict:
    """The rule above applied to lm_figures() output: the four thresholds and the figures they came from."""
    rows = {r["model"]: r for r in figures["models"]}
    if REFERENCE_LABEL not in rows:
        raise ThresholdError("no reference model to set thresholds by: train it first")
    ref = rows[REFERENCE_LABEL]
    out: dict = {"rule": RULE_TEXT}

    r_nll = _worst(ref)
    base_p = min(ZERO_CREDIT_PREDICTION, key=lambda name: _best(rows[name]))
    b_nll = _best(rows[base_p])
    gap = b_nll - r_nll
    if gap < MIN_GAP_NLL:
        raise ThresholdError(
            f"the reference model's prediction NLL ({r_nll:.3f}) is not at least {MIN_GAP_NLL} nats/char below the "
            f"{base_p}'s ({b_nll:.3f}), so no threshold can give it full credit and the {base_p} none")
    full, zero = r_nll + FULL_AT * gap, b_nll - ZERO_AT * gap
    full = _floor_to(full, 0.05) if full - _floor_to(full, 0.05) <= ROUND_SLACK * gap else round(full, 3)
    zero = _floor_to(zero, 0.05) if _floor_to(zero, 0.05) > full else round(zero, 3)
    out["prediction"] = {"full_credit_nll": full, "zero_credit_nll": zero, "reference": r_nll, "baseline": base_p,
                         "baseline_value": b_nll, "gap": gap}

    r_ppl = ref["generation_perplexity"]
    base_g = min(ZERO_CREDIT_GENERATION, key=lambda name: rows[name]["generation_perplexity"])
    b_ppl = rows[base_g]["generation_perplexity"]
    lgap = math.log(b_ppl) - math.log(r_ppl)
    if lgap < MIN_GAP_LOG_PPL:
        raise ThresholdError(
            f"the reference model's generation perplexity ({r_ppl:.2f}) is not at least x{math.exp(MIN_GAP_LOG_PPL):g} "
            f"below the {base_g}'s ({b_ppl:.2f}), so no threshold can give it full credit and the {base_g} none")
    full_g, zero_g = r_ppl * math.exp(FULL_AT * lgap), b_ppl * math.exp(-ZERO_AT * lgap)
    full_g = (
        _floor_2_digits(full_g)
        if math.log(full_g / _floor_2_digits(full_g)) <= ROUND_SLACK * lgap
        else round(full_g, 3)
    )
    zero_g = _floor_2_digits(zero_g) if _floor_2_digits(zero_g) > full_g else round(zero_g, 3)
    out["generation"] = {"full_credit_perplexity": full_g, "zero_credit_perplexity": zero_g, "reference": r_ppl,
                         "baseline": base_g, "baseline_value": b_ppl, "log_gap": lgap}
    return out


def with_thresholds(figures: dict, t: dict) -> dict:
    """A copy of lm_figures() output whose settings and credits follow thresholds `t` (propose_thresholds)."""
    f = json.loads(json.dumps(figures))
    p, g = f["settings"]["prediction"], f["settings"]["generation"]
    p.update({k: t["prediction"][k] for k in ("full_credit_nll", "zero_credit_nll")})
    g.update({k: t["generation"][k] for k in ("full_credit_perplexity", "zero_credit_perplexity")})
    for row in f["models"]:
        if "val_nll" in row:
            row["prediction_credit"] = credit(
                row.get("test_nll", row["val_nll"]), p["full_credit_nll"], p["zero_credit_nll"]
            )
        row["generation_credit"] = credit(math.log(row["generation_perplexity"]), math.log(g["full_credit_perplexity"]),
                                          math.log(g["zero_credit_perplexity"]))
    return f


# ------------------------------------------------------------------------ rubric.toml and README table

def _pred_cell(row: dict) -> str:
    return f"{row['val_nll']:.3f} / {row['test_nll']:.3f}" if "test_nll" in row else f"{row['val_nll']:.3f} / -"


def _comment_blocks(f: dict, t: dict) -> tuple[list[str], list[str]]:
    pred = [
        f"# Calibration, measured on {f['corpus']} (corpus sha256 {f['corpus_sha256'][:12]}), "
        f"oracle: {f['oracle_label']}.",
        "# Teacher-forced NLL in nats/char of the 20 true characters after each prompt,",
        "# on prediction.npz (validation) / prediction_test (hidden, graded):",
    ]
    gen = ["# Calibration (as above): perplexity, under the smoothed oracle,",
           "# of what each model generates greedily after the prompts of generation_test.npz:"]
    for row in f["models"]:
        name = row["model"].replace(REFERENCE_LABEL, "reference model")
        if "val_nll" in row:
            pred.append(f"#   {name:36s} {_pred_cell(row):>15s}  -> {row['prediction_credit']:.0%} credit")
        gen.append(f"#   {name:36s} {row['generation_perplexity']:10.2f}  -> {row['generation_credit']:.0%} credit")
    tp, tg = t["prediction"], t["generation"]
    pred.append(
        f"# Rule: full credit at the reference's {tp['reference']:.3f} + {FULL_AT:g} of the gap "
        f"({tp['gap']:.3f}) to the "
        f"{tp['baseline']}'s {tp['baseline_value']:.3f},"
    )
    pred.append(f"# none at the {tp['baseline']} - {ZERO_AT:g} of the gap, rounded down to 0.05 "
                f"(kept unrounded when that takes over {ROUND_SLACK:g} of the gap).")
    gen.append(f"# Rule: as for prediction, in log(perplexity): the reference's {tg['reference']:.2f}, the "
               f"{tg['baseline']}'s {tg['baseline_value']:.2f}, rounded down to 2 significant digits.")
    return pred, gen


def _replace_block(lines: list[str], section: str, anchor: str, block: list[str]) -> list[str]:
    """Replace the '# Calibration' comment block of [problems.<section>] that ends before the line starting with
    `anchor`."""
    top = lines.index(f"[problems.{section}]")
    end = next(i for i in range(top, len(lines)) if lines[i].startswith(anchor))
    start = next((i for i in range(top, end) if lines[i].startswith("# Calibration")), end)
    return lines[:start] + block + lines[end:]


def _set_number(text: str, key: str, value: float) -> str:
    pattern = re.compile(rf"\b{key} = [0-9.eE+-]+")
    if len(pattern.findall(text)) != 1:
        raise ThresholdError(f"rubric.toml: expected exactly one '{key} = <number>'")
    return pattern.sub(f"{key} = {value:g}", text)


def write_thresholds(rubric_path: Path, figures: dict, t: dict) -> None:
    """Write thresholds `t` into rubric.toml: the four settings, the calibration comments (the figures
    they came from, the rule) and the [calibration] table (the corpus and its hash). The result is
    validated by loading it before it replaces the file."""
    rubric_path = Path(rubric_path)
    text = rubric_path.read_text()
    for key in ("full_credit_nll", "zero_credit_nll"):
        text = _set_number(text, key, t["prediction"][key])
    for key in ("full_credit_perplexity", "zero_credit_perplexity"):
        text = _set_number(text, key, t["generation"][key])
    lines = text.split("\n")
    pred, gen = _comment_blocks(with_thresholds(figures, t), t)
    lines = _replace_block(lines, "prediction", "# full_credit_nll /", pred)
    lines = _replace_block(lines, "generation", "# smoothing_eps:", gen)
    text = "\n".join(lines)
    table = (
        f'[calibration]\ncorpus = {json.dumps(figures["corpus"])}\ncorpus_sha256 = "{figures["corpus_sha256"]}"\n'
        f"oracle = {json.dumps(figures['oracle_label'])}\n"
    )
    if "\n[calibration]\n" in text:
        text = text[: text.index("\n[calibration]\n") + 1] + table
    else:
        text = text.rstrip("\n") + "\n\n" + table
    tmp = rubric_path.with_suffix(".toml.tmp")
    tmp.write_text(text)
    try:
        rubric_mod.load(tmp)
        tmp.replace(rubric_path)
    finally:
        tmp.unlink(missing_ok=True)


def markdown_table(f: dict, t: dict) -> str:
    """The README's threshold table for figures `f` under thresholds `t`."""
    f = with_thresholds(f, t)
    p, g = f["settings"]["prediction"], f["settings"]["generation"]
    out = ["| model | prediction NLL (validation / hidden test) | generation perplexity |", "|---|---|---|"]
    for row in f["models"]:
        pred = f"{_pred_cell(row)}: {row['prediction_credit']:.0%}" if "val_nll" in row else "(no model)"
        out.append(f"| {row['model']} | {pred} | {row['generation_perplexity']:,.2f}: {row['generation_credit']:.0%} |")
    out.append(f"| full credit at / none at | <= {p['full_credit_nll']:g} / >= {p['zero_credit_nll']:g} (linear) | "
               f"<= {g['full_credit_perplexity']:g} / >= {g['zero_credit_perplexity']:g} (linear in log) |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=Path("fixtures"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rubric", type=Path, default=None, help="rubric.toml to read (default: gradelib/rubric.toml)")
    args = ap.parse_args(argv)
    try:
        provenance.check_thresholds(args.fixtures / "lm", args.rubric)
        figures = lm_figures(args.fixtures, args.repeats, args.rubric)
    except provenance.StaleCalibration as exc:
        print(f"calibrate: not measuring: {exc}", file=sys.stderr)
        return 2
    print(format_figures(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
