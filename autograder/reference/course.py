"""The instructor's path for any corpus, as one command (`make course CORPUS=path`).

    make course [CORPUS=path] [ORACLE=ngram|model:PATH] [STEPS=3678] [TRAIN_SEED=0] [CONFIG=key=value,...]
                [INIT=CKPT] [RETRAIN=1] [REPEATS=3] [FIXTURES=fixtures] [RUBRIC=gradelib/rubric.toml]
    = python -m autograder.reference.course [--corpus PATH] [--oracle ...] [--steps N] [--seed N] [--config ...]
                                            [--init CKPT] [--retrain] [--repeats N] [--fixtures DIR] [--rubric PATH]

Every option has its `make` variable (MAKE_VARS), and every message names the `make` form.

1. fixtures: builds fixtures/lm/ from the corpus (the toy-English source without --corpus),
   printing what the text gave and what was dropped (the case sets that do not depend on
   the corpus are built only where missing); a corpus below the minimum size ends here
   with one line saying so;
2. reference model: trains it on the new training text with notebook 3's settings for
   train.STEPS optimisation steps whatever the corpus' size (stopping early, with the best
   weights, once its validation NLL stops improving), or reuses the one in fixtures/lm/
   when its inputs -- corpus hash, config, steps, seed, warm-start checkpoint -- are those
   recorded in reference_model.json (--retrain trains anyway);
3. thresholds: measures the reference, n-gram baselines and degenerate generators
   (autograder/reference/calibrate.py), applies the stated rule (calibrate.RULE_TEXT),
   writes the four thresholds into rubric.toml with comments giving the figures they
   came from and the corpus hash in its [calibration] table, and records the figures
   in fixtures/lm/calibration.json;
4. prints the README's threshold table for this corpus, a note when it gives an n-gram of
   order 5 or more full credit (the thresholds then do not tell the reference from one),
   and what to run next (`make handout` fills notebook 3's and the handout README's corpus facts).

Exit status 0 when the course is ready, 2 with a one-line reason otherwise (a corpus too
small, an unusable --oracle, a reference that does not beat the trigram).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from ..fixturegen import __main__ as fixturegen_main
from ..fixturegen import checksums, lm_fixtures
from ..oracle.corpus import CorpusTooSmall
from . import calibrate, provenance, train

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_JSON = "calibration.json"
# The Makefile's variable for each option (its course target passes each one on; a test checks it).
MAKE_VARS = {"corpus": "CORPUS", "oracle": "ORACLE", "steps": "STEPS", "seed": "TRAIN_SEED", "config": "CONFIG",
             "init": "INIT", "retrain": "RETRAIN", "repeats": "REPEATS", "fixtures": "FIXTURES", "rubric": "RUBRIC"}
UNSEPARATED_ORDER = 5  # an n-gram of this order or more earning full credit is worth a note


def make_form(args: argparse.Namespace, **changes) -> str:
    """The `make course ...` line for these options (with `changes`): what an instructor types."""
    defaults = vars(parse_args([]))
    words = ["make course"]
    for key, var in MAKE_VARS.items():
        value = changes.get(key, getattr(args, key))
        if value != defaults[key]:
            words.append(f"{var}=1" if value is True else f"{var}={shlex.quote(str(value))}")
    return " ".join(words)


def in_make_words(message: str) -> str:
    """A message of the fixture builder, its flags named as the `make` variables that set them."""
    for key, var in MAKE_VARS.items():
        message = message.replace(f"--{key} ", f"{var}=")
    return message


def unseparated_note(measured: dict) -> str | None:
    """A paragraph when an n-gram of order UNSEPARATED_ORDER or more earns full credit on both quality lines,
    else None. One line alone is no news: the default course gives its 5-gram full prediction credit too (20
    characters after a 30-character prompt are mostly inside words, where a 5-gram predicts well) and tells
    it from the reference by its generations."""
    names = [
        row["model"]
        for row in measured["models"]
        if (order := row["model"].removeprefix("character ").removesuffix("-gram")).isdigit()
        and int(order) >= UNSEPARATED_ORDER
        and row.get("prediction_credit", 0) >= 1
        and row["generation_credit"] >= 1
    ]
    if not names:
        return None
    return (
        f"note: these thresholds give full credit on both lines to the {' and the '.join(names)} too: on this corpus "
        f"they do not tell the reference transformer from a character n-gram of order {UNSEPARATED_ORDER} or more, "
        "so a student's model that learnt no more than one passes (the trigram and below still earn nothing). "
        "What helps: more text (a transformer gains more from it than an n-gram; the default corpus has 1.9 million "
        "characters), a reference that makes more of the 30-character prompts than an n-gram's few characters of "
        "context (CONFIG=... for a larger one, at the cost of training time), or accepting it."
    )


def reusable(lm: Path, inputs: dict) -> bool:
    """Whether fixtures/lm holds a reference model trained with exactly these inputs."""
    path = lm / provenance.REFERENCE_JSON
    if not (path.is_file() and (lm / "reference_model.pt").is_file()):
        return False
    recorded = train.recorded_inputs(lm, json.loads(path.read_text()))
    if not isinstance(recorded, dict):
        return False
    # Records written before warm starts existed say nothing of one: they started from scratch.
    return {"init_sha256": None, **recorded} == inputs


def reference_step(lm: Path, args: argparse.Namespace) -> tuple[dict, bool]:
    """Train or reuse; returns (reference_model.json's content, whether it was trained now)."""
    config = train.initial_config(args.init, train.parse_config(args.config))
    inputs = train.training_inputs(lm, config, args.steps, args.seed, init=args.init)
    if reusable(lm, inputs) and not args.retrain:
        print(
            f"reference model: reused (its inputs are unchanged: corpus {inputs['corpus_sha256'][:12]}, "
            f"config, {args.steps} steps, seed {args.seed}; {make_form(args, retrain=True)} trains it anyway)",
            flush=True,
        )
        return json.loads((lm / provenance.REFERENCE_JSON).read_text()), False
    model, figures = train.train(lm, args.steps, args.seed, config, rubric_path=args.rubric, init=args.init)
    train.write_outputs(model, figures, lm, rubric_path=args.rubric)
    return figures, True


def run(args: argparse.Namespace) -> dict:
    """Steps 1-3; returns what calibration.json records."""
    start = time.perf_counter()
    fixtures, lm = args.fixtures, args.fixtures / "lm"
    # The case sets that do not depend on the corpus are built only when missing (a new folder):
    # rebuilding them on another CPU would change float64 expectations in their last bits.
    lm_only = all((fixtures / name).is_dir() for name in fixturegen_main.CORPUS_FREE)
    print(
        f"== 1. fixtures -> {fixtures}" + (" (language-model data; the other case sets are kept)" if lm_only else ""),
        flush=True,
    )
    fixturegen_main.build(fixtures, args.corpus, args.oracle, lm_only=lm_only)
    fixtures_s = time.perf_counter() - start

    print("== 2. reference model", flush=True)
    t0 = time.perf_counter()
    ref, trained = reference_step(lm, args)
    reference_s = time.perf_counter() - t0

    print("== 3. thresholds", flush=True)
    t0 = time.perf_counter()
    figures = calibrate.lm_figures(fixtures, args.repeats, args.rubric)
    thresholds = calibrate.propose_thresholds(figures)
    rubric_path = args.rubric or (REPO / "gradelib" / "rubric.toml")
    calibrate.write_thresholds(rubric_path, figures, thresholds)
    measured = calibrate.with_thresholds(figures, thresholds)
    # The reference's per-epoch figures, now judged by this corpus' thresholds.
    train.mark_full_credit(
        ref, (thresholds["prediction"]["full_credit_nll"], thresholds["generation"]["full_credit_perplexity"])
    )
    (lm / provenance.REFERENCE_JSON).write_text(json.dumps(ref, indent=2, sort_keys=True) + "\n")
    record = {
        "corpus": figures["corpus"],
        "corpus_sha256": figures["corpus_sha256"],
        "oracle": figures["oracle"],
        "oracle_label": figures["oracle_label"],
        "thresholds": thresholds,
        "models": measured["models"],
        "reference": {"trained_now": trained, "parameters": ref["parameters"], "train_s": ref["train_s"],
                      "wall_s": ref["wall_s"], "wall_s_to_full_credit": ref.get("wall_s_to_full_credit"),
                      "steps": ref["epochs"][-1]["steps"], "epochs": ref["epochs"][-1]["epoch"],
                      "kept": ref.get("kept", {k: ref["epochs"][-1][k] for k in ("steps", "epoch")})},
        "seconds": {"fixtures": fixtures_s, "reference": reference_s, "thresholds": time.perf_counter() - t0},
        "unseparated_note": unseparated_note(measured),
    }
    (lm / CALIBRATION_JSON).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    checksums.write(fixtures)
    record["seconds"]["total"] = time.perf_counter() - start
    print(calibrate.format_figures(measured))
    print(f"\nthresholds written to {rubric_path} ({calibrate.RULE_TEXT}):\n")
    print(calibrate.markdown_table(figures, thresholds))
    if note := record["unseparated_note"]:
        print(f"\n{note}")
    print(
        f"\n{train.full_credit_text(ref)}; course built in {record['seconds']['total']:.0f} s "
        f"(fixtures {fixtures_s:.0f} s, reference {reference_s:.0f} s, "
        f"thresholds {record['seconds']['thresholds']:.0f} s)"
    )
    return record


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m autograder.reference.course", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--corpus", type=Path, default=None, help="your text (plain or transcript rows); default: toy English"
    )
    ap.add_argument("--oracle", default=None, metavar="ngram|model:PATH",
                    help="what scores generations: the corpus' default, or a CausalLanguageModel checkpoint")
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--rubric", type=Path, default=None, help="rubric.toml to write (default: gradelib/rubric.toml)")
    ap.add_argument(
        "--steps",
        type=train.positive,
        default=train.STEPS,
        help=f"the reference's optimisation steps, at most (default {train.STEPS}, whatever the corpus' size)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the reference's training seed")
    ap.add_argument(
        "--config", default=None, help="ModelConfig overrides, key=value,... (default: notebook 3's CONFIG)"
    )
    ap.add_argument("--init", type=Path, default=None, help="start the reference from this checkpoint (a warm start)")
    ap.add_argument("--retrain", action="store_true", help="train the reference even when its inputs are unchanged")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the oracle timing (calibrate)")
    return ap.parse_args(argv)


def remedy(args: argparse.Namespace) -> str:
    """What helps a reference that does not beat the trigram, as the `make` line to type."""
    path = args.fixtures / "lm" / provenance.REFERENCE_JSON
    ref = json.loads(path.read_text()) if path.is_file() else {}
    if ref.get("stopped_early"):
        return (f"its validation NLL stopped improving at step {ref['kept']['steps']} of {args.steps}, so more steps "
                f"will not help; more text will (`{make_form(args, corpus='<more text>')}`), or check the corpus")
    return (f"train it longer (`{make_form(args, steps=2 * args.steps)}`) or on more text, or check the corpus")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except calibrate.ThresholdError as exc:
        print(f"course not built: {exc}: {remedy(args)}", file=sys.stderr)
        return 2
    except (CorpusTooSmall, lm_fixtures.OracleChoiceError, provenance.StaleCalibration) as exc:
        print(f"course not built: {in_make_words(str(exc))}", file=sys.stderr)
        return 2
    print("next: make handout (fills notebook 3's and the handout README's corpus facts), then make demo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
