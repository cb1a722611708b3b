"""Regenerate fixtures/ (`make fixtures`): every case set, the language-model data, the manifest.

    python -m autograder.fixturegen [--out fixtures] [--corpus PATH] [--manifest-only] [--seed N [--public-too]]

Each generator is deterministic and prints what it made; the manifest (sha256 of every
file) comes last. --corpus builds the language-model data from an instructor's text
instead of the toy source. --manifest-only rewrites the manifest alone (after
`make reference-model` replaced the reference model's files). --seed N rotates the
hidden cases of attention, the notebooks and notebook 3's functions for a new term
(rotation.py); public cases stay unless --public-too. The language-model prediction
and generation sets are not rotated (their thresholds are calibrated on them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import attention_cases, lm_fixtures, lm_function_cases, manifest, notebook_cases


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m autograder.fixturegen", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("fixtures"))
    ap.add_argument("--corpus", type=Path, default=None, help="an instructor's text (plain or transcript rows)")
    ap.add_argument("--manifest-only", action="store_true", help="only rewrite MANIFEST.sha256")
    ap.add_argument("--seed", type=int, default=None,
                    help="term seed: new random values for the hidden cases (attention, notebooks, notebook 3's functions)")
    ap.add_argument("--public-too", action="store_true", help="with --seed: rotate the public cases too (the handout must be rebuilt)")
    args = ap.parse_args()
    if args.public_too and args.seed is None:
        ap.error("--public-too rotates cases with --seed N; give a seed")
    if not args.manifest_only:
        attention_cases.write(args.out, args.seed, args.public_too)
        notebook_cases.write(args.out, args.seed, args.public_too)
        lm_fixtures.write(args.out, args.corpus)
        lm_function_cases.build(args.out, args.seed, args.public_too)
        counts = {v: sum(1 for s in lm_function_cases.CASES.values() if s[0] == v) for v in ("public", "hidden")}
        term = "" if args.seed is None else f"; term seed {args.seed}, {'all' if args.public_too else 'hidden'} cases rotated"
        print(f"lm_functions: {counts['public']} public and {counts['hidden']} hidden cases (seed {lm_function_cases.SEED}{term})")
    manifest.write(args.out)


if __name__ == "__main__":
    main()
