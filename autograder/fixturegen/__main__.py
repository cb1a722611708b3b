"""Regenerate fixtures/ (`make fixtures`): every case set, the language-model data, the manifest.

    python -m autograder.fixturegen [--out fixtures] [--corpus PATH] [--oracle ngram|model:PATH] [--manifest-only]
                                    [--seed N [--public-too]]

Each generator is deterministic and prints what it made; the manifest (sha256 of every
file) comes last. --corpus builds the language-model data from an instructor's text
instead of the toy source; --oracle model:PATH scores generations with a reference-model
checkpoint instead of the corpus' default oracle (oracle.json is rewritten by every build,
so pass it each time). A corpus below the minimum size, or an oracle that cannot be used,
ends with one line saying why (exit status 2). --manifest-only rewrites the manifest alone (after
`make reference-model` replaced the reference model's files). --seed N rotates the
hidden cases of attention, the notebooks and notebook 3's functions for a new term
(rotation.py); public cases stay unless --public-too. The language-model prediction
and generation sets are not rotated (their thresholds are calibrated on them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import REPRODUCIBLE_ENV, attention_cases, checksums, lm_fixtures, lm_function_cases, notebook_cases

CORPUS_FREE = ("attention", "notebooks", "lm_functions")  # case sets that do not depend on the corpus


def build(out: Path, corpus: Path | None = None, oracle: str | None = None, lm_only: bool = False,
          seed: int | None = None, public_too: bool = False) -> None:
    """Every fixture (lm_only: the language-model data alone, the other case sets left as they are), then
    the manifest; `seed` rotates the hidden cases for a term. Raises CorpusTooSmall / OracleChoiceError
    (one-line messages) before writing anything."""
    if corpus is not None and not Path(corpus).is_file():
        raise lm_fixtures.OracleChoiceError(f"--corpus {corpus}: no such file; expected plain text or transcript rows")
    lm_fixtures.parse_oracle(oracle)  # a bad --oracle is refused before anything is written
    if corpus is not None:  # a corpus below the minimum is refused before anything is written
        from autograder.oracle import corpus as corpus_mod

        loaded = corpus_mod.load(corpus)
        corpus_mod.split(loaded.sentences, lm_fixtures.N_ROWS,
                         (lm_fixtures.PROMPT + lm_fixtures.TARGET,) * 2 + (lm_fixtures.GEN_PROMPT,))
    if lm_only:
        lm_fixtures.write(out, corpus, oracle)
        checksums.write(out)
        return
    attention_cases.write(out, seed, public_too)
    notebook_cases.write(out, seed, public_too)
    lm_fixtures.write(out, corpus, oracle)
    lm_function_cases.build(out, seed, public_too)
    counts = {v: sum(1 for s in lm_function_cases.CASES.values() if s[0] == v) for v in ("public", "hidden")}
    term = "" if seed is None else f"; term seed {seed}, {'all' if public_too else 'hidden'} cases rotated"
    print(
        f"lm_functions: {counts['public']} public and {counts['hidden']} hidden cases "
        f"(seed {lm_function_cases.SEED}{term})"
    )
    checksums.write(out)


def main() -> None:
    if any(os.environ.get(k) != v for k, v in REPRODUCIBLE_ENV.items()):
        # torch reads these when it starts: run again in a fresh interpreter that has them (package docstring).
        env = {**os.environ, **REPRODUCIBLE_ENV}
        os.execve(sys.executable, [sys.executable, "-m", "autograder.fixturegen", *sys.argv[1:]], env)
    ap = argparse.ArgumentParser(prog="python -m autograder.fixturegen", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("fixtures"))
    ap.add_argument("--corpus", type=Path, default=None, help="an instructor's text (plain or transcript rows)")
    ap.add_argument(
        "--oracle",
        default=None,
        metavar="ngram|model:PATH",
        help="what scores generations: the corpus' default (toy source, or its order-6 n-gram) or a checkpoint",
    )
    ap.add_argument("--manifest-only", action="store_true", help="only rewrite MANIFEST.sha256")
    ap.add_argument(
        "--seed",
        type=int,
        default=None,
        help="term seed: new random values for the hidden cases (attention, notebooks, notebook 3's functions)",
    )
    ap.add_argument(
        "--public-too",
        action="store_true",
        help="with --seed: rotate the public cases too (the handout must be rebuilt)",
    )
    args = ap.parse_args()
    if args.public_too and args.seed is None:
        ap.error("--public-too rotates cases with --seed N; give a seed")
    if args.manifest_only:
        checksums.write(args.out)
        return
    from autograder.oracle.corpus import CorpusTooSmall

    try:
        build(args.out, args.corpus, args.oracle, seed=args.seed, public_too=args.public_too)
    except (CorpusTooSmall, lm_fixtures.OracleChoiceError) as exc:
        print(f"fixtures not built: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
