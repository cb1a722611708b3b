"""The instructor's path for any corpus, as one command (`make course CORPUS=path`).

    python -m autograder.reference.course [--corpus PATH] [--oracle ngram|model:PATH]
                                          [--fixtures fixtures] [--rubric gradelib/rubric.toml]
                                          [--epochs 6] [--seed 0] [--config key=value,...] [--max-steps N] [--init CKPT]
                                          [--retrain] [--repeats 3]

1. fixtures: builds fixtures/lm/ from the corpus (the toy-English source without --corpus),
   printing what the text gave and what was dropped (the case sets that do not depend on
   the corpus are built only where missing); a corpus below the minimum size ends here
   with one line saying so;
2. reference model: trains it on the new training text with notebook 3's settings, or
   reuses the one in fixtures/lm/ when its inputs -- corpus hash, config, epochs, seed,
   step cap, warm-start checkpoint -- are those recorded in reference_model.json
   (--retrain trains anyway);
3. thresholds: measures the reference, n-gram baselines and degenerate generators
   (autograder/reference/calibrate.py), applies the stated rule (calibrate.RULE_TEXT),
   writes the four thresholds into rubric.toml with comments giving the figures they
   came from and the corpus hash in its [calibration] table, and records the figures
   in fixtures/lm/calibration.json;
4. prints the README's threshold table for this corpus and what to run next
   (`make handout` fills notebook 3's and the handout README's corpus facts).

Exit status 0 when the course is ready, 2 with a one-line reason otherwise (a corpus too
small, an unusable --oracle, a reference that does not beat the trigram).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..fixturegen import __main__ as fixturegen_main
from ..fixturegen import checksums, lm_fixtures
from ..oracle.corpus import CorpusTooSmall
from . import calibrate, provenance, train

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_JSON = "calibration.json"


def reusable(lm: Path, inputs: dict) -> bool:
    """Whether fixtures/lm holds a reference model trained with exactly these inputs."""
    path = lm / provenance.REFERENCE_JSON
    if not (path.is_file() and (lm / "reference_model.pt").is_file()):
        return False
    recorded = json.loads(path.read_text()).get("inputs")
    if not isinstance(recorded, dict):
        return False
    # Records written before warm starts existed say nothing of one: they started from scratch.
    return {"init_sha256": None, **recorded} == inputs


def reference_step(lm: Path, args: argparse.Namespace) -> tuple[dict, bool]:
    """Train or reuse; returns (reference_model.json's content, whether it was trained now)."""
    config = train.initial_config(args.init, train.parse_config(args.config))
    inputs = train.training_inputs(lm, config, args.epochs, args.seed, args.max_steps, init=args.init)
    if reusable(lm, inputs) and not args.retrain:
        print(f"reference model: reused (its inputs are unchanged: corpus {inputs['corpus_sha256'][:12]}, "
              f"config, {args.epochs} epochs, seed {args.seed})", flush=True)
        return json.loads((lm / provenance.REFERENCE_JSON).read_text()), False
    model, figures = train.train(lm, args.epochs, args.seed, config, args.max_steps, rubric_path=args.rubric, init=args.init)
    train.write_outputs(model, figures, lm, rubric_path=args.rubric)
    return figures, True


def run(args: argparse.Namespace) -> dict:
    """Steps 1-3; returns what calibration.json records."""
    start = time.perf_counter()
    fixtures, lm = args.fixtures, args.fixtures / "lm"
    # The case sets that do not depend on the corpus are built only when missing (a new folder):
    # rebuilding them on another CPU would change float64 expectations in their last bits.
    lm_only = all((fixtures / name).is_dir() for name in fixturegen_main.CORPUS_FREE)
    print(f"== 1. fixtures -> {fixtures}" + (" (language-model data; the other case sets are kept)" if lm_only else ""), flush=True)
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
    train.mark_full_credit(ref, (thresholds["prediction"]["full_credit_nll"], thresholds["generation"]["full_credit_perplexity"]))
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
                      "epochs": len(ref["epochs"])},
        "seconds": {"fixtures": fixtures_s, "reference": reference_s, "thresholds": time.perf_counter() - t0},
    }
    (lm / CALIBRATION_JSON).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    checksums.write(fixtures)
    record["seconds"]["total"] = time.perf_counter() - start
    print(calibrate.format_figures(measured))
    print(f"\nthresholds written to {rubric_path} ({calibrate.RULE_TEXT}):\n")
    print(calibrate.markdown_table(figures, thresholds))
    print(f"\n{train.full_credit_text(ref)}; course built in {record['seconds']['total']:.0f} s "
          f"(fixtures {fixtures_s:.0f} s, reference {reference_s:.0f} s, thresholds {record['seconds']['thresholds']:.0f} s)")
    return record


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m autograder.reference.course", description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=None, help="your text (plain or transcript rows); default: toy English")
    ap.add_argument("--oracle", default=None, metavar="ngram|model:PATH",
                    help="what scores generations: the corpus' default, or a CausalLanguageModel checkpoint")
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--rubric", type=Path, default=None, help="rubric.toml to write (default: gradelib/rubric.toml)")
    ap.add_argument("--epochs", type=int, default=train.EPOCHS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default=None, help="ModelConfig overrides, key=value,... (default: notebook 3's CONFIG)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop training after this many steps (tests)")
    ap.add_argument("--init", type=Path, default=None, help="start the reference from this checkpoint (a warm start)")
    ap.add_argument("--retrain", action="store_true", help="train the reference even when its inputs are unchanged")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the oracle timing (calibrate)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (CorpusTooSmall, lm_fixtures.OracleChoiceError, calibrate.ThresholdError, provenance.StaleCalibration) as exc:
        print(f"course not built: {exc}", file=sys.stderr)
        return 2
    print("next: make handout (fills notebook 3's and the handout README's corpus facts), then make demo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
