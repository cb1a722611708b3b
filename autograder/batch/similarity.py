"""Similarity between the submissions of a class: every pair compared, file by file (`--similarity`, or on its own).

    python -m autograder.batch.similarity SUBMISSION... --out DIR [--threshold 0.5] [--jobs N]

The code compared is read by compared_code.py and fingerprinted by
winnowing.py (MOSS's algorithm, via copydetect), the handout's own code given
as boilerplate; then every pair is compared, file by file. A pair's score is
the similarity of its most similar file, in the direction that is higher (the
share of one file's fingerprinted code that is found in the other). The run's
files are written by similarity_report.py into DIR.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint

from gradelib.safeio import clean_text

from .compared_code import FILES, HANDOUT, Loaded, given_cells, handout_sources, load_submission
from .records import submission_names
from .similarity_report import LISTED_MIN, MAX_LISTED, Run, write_outputs
from .winnowing import (
    GUARANTEE_T,
    NOISE_T,
    Prints,
    boilerplate_hashes,
    compare,
    fingerprint,
    line_ranges,
    raw_slices,
    score_rows,
)

DEFAULT_THRESHOLD = 0.5


# Set before the worker processes fork, so they share it without pickling.
_STATE: dict = {}


def _load_and_fingerprint(task: tuple[str, str]) -> tuple[Loaded, dict[str, CodeFingerprint]]:
    path, name = task
    try:
        loaded = load_submission(Path(path), name, _STATE["given"])
    except Exception as exc:  # whatever one handin holds, the class is compared without it
        return Loaded(
            name, {}, [f"not compared: reading it failed ({type(exc).__name__}: {clean_text(exc)[:200]})"]
        ), {}
    prints = {}
    for kind, source in loaded.sources.items():
        try:
            prints[kind] = fingerprint(source.text, kind, _STATE["boilerplate"])
        except Exception as exc:  # a tokenizer failure on one file must not stop the class
            loaded.notes.append(f"{kind} could not be tokenized ({type(exc).__name__}); it was not compared")
    return loaded, prints


def _score_rows(task: tuple[str, list[int]]) -> tuple[str, list[int], np.ndarray]:
    kind, rows = task
    return kind, rows, score_rows(_STATE["prints"][kind], rows)


def _detail(task: tuple[int, int, str]) -> tuple:
    """One listed pair and file: its similarities and the line ranges of the matched code on each side."""
    i, j, kind = task
    a, b = _STATE["prints"][kind][i], _STATE["prints"][kind][j]
    sim_a, sim_b, sa, sb = compare(a, b)
    names, sources = _STATE["names"], _STATE["sources"]
    lines_a = line_ranges(sources[i][kind], raw_slices(a.fp, sa))
    lines_b = line_ranges(sources[j][kind], raw_slices(b.fp, sb))
    return names[i], names[j], kind, sim_a, sim_b, lines_a, lines_b


def _pool(jobs: int):
    # copydetect hashes k-grams with Python's hash(), which is salted per
    # interpreter: fingerprints are comparable only within one process and its
    # forks, so workers must be forked, never spawned.
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork").Pool(jobs)


def find_similar(paths: list[Path], names: list[str], *, jobs: int = 1, threshold: float = DEFAULT_THRESHOLD,
                 listed_min: float = LISTED_MIN, handout: Path = HANDOUT) -> Run:
    """Compare every pair of submissions; rows (a, b, file, score_a, score_b, lines_a, lines_b) best first."""
    started = time.perf_counter()
    _STATE.clear()
    _STATE["boilerplate"] = boilerplate_hashes(handout_sources(handout))
    _STATE["listed_min"] = listed_min
    _STATE["given"] = given_cells(handout)
    tasks = [(str(p), n) for p, n in zip(paths, names, strict=True)]
    pool = _pool(jobs)
    try:
        loaded = (
            pool.map(_load_and_fingerprint, tasks, chunksize=4) if pool else list(map(_load_and_fingerprint, tasks))
        )
    finally:
        if pool:
            pool.close()
            pool.join()
    phases = {"open and fingerprint": time.perf_counter() - started}
    prints = {kind: [Prints(fps[kind]) if kind in fps else None for _, fps in loaded] for kind in FILES}
    _STATE.update(prints=prints, names=names, sources=[sub.sources for sub, _ in loaded])
    n = len(names)
    # Every file against the whole class (a few rows per task), then the pairs worth listing in detail.
    tasks = [(kind, list(range(start, min(n, start + 8)))) for kind in FILES for start in range(0, n, 8)]
    scores = {kind: np.zeros((n, n)) for kind in FILES}
    pool = _pool(jobs)
    try:
        for kind, rows_done, block in (pool.imap_unordered(_score_rows, tasks) if pool else map(_score_rows, tasks)):
            scores[kind][rows_done] = block
        phases["score every pair"] = time.perf_counter() - started - sum(phases.values())
        details, unlisted, flagged = _pairs_to_list(scores, threshold, listed_min)
        chunk = max(1, len(details) // (8 * max(1, jobs)))
        rows = list(pool.imap_unordered(_detail, details, chunksize=chunk) if pool else map(_detail, details))
        phases["matched lines of listed pairs"] = time.perf_counter() - started - sum(phases.values())
    finally:
        if pool:
            pool.close()
            pool.join()
    _STATE.clear()
    rows.sort(key=lambda r: (-max(r[3], r[4]), r[0], r[1], r[2]))
    file_pairs = sum(
        1 for kind in FILES for i in range(n) for j in range(i + 1, n)
        if prints[kind][i] is not None and prints[kind][j] is not None
    )
    return Run(
        names=names, notes={sub.name: sub.notes for sub, _ in loaded if sub.notes},
        sources={sub.name: sub.sources for sub, _ in loaded}, rows=rows, unlisted=unlisted, flagged=flagged,
        pairs=n * (n - 1) // 2, file_pairs=file_pairs, threshold=threshold, seconds=time.perf_counter() - started,
        noise_t=NOISE_T, guarantee_t=GUARANTEE_T, phases=phases,
    )


def _pairs_to_list(scores: dict, threshold: float, listed_min: float) -> tuple[list[tuple[int, int, str]], int, int]:
    """From each file's score matrix: the pairs to list in detail (best first, at most MAX_LISTED), how many more
    reached `listed_min`, and how many pairs of submissions reach `threshold` in some file."""
    n = len(next(iter(scores.values())))
    candidates, best = [], np.zeros((n, n))
    for kind in FILES:
        both = np.maximum(scores[kind], scores[kind].T)
        best = np.maximum(best, both)
        i, j = np.nonzero(np.triu((both >= listed_min) & (both > 0), k=1))
        candidates += [(-both[a, b], int(a), int(b), kind) for a, b in zip(i, j)]
    candidates.sort()
    details = [(a, b, kind) for _, a, b, kind in candidates[:MAX_LISTED]]
    flagged = int(np.count_nonzero(np.triu((best >= threshold) & (best > 0), k=1)))
    return details, len(candidates) - len(details), flagged


def run_class(paths: list[Path], out: Path, *, threshold: float = DEFAULT_THRESHOLD, jobs: int = 1,
              handout: Path = HANDOUT) -> Run:
    """Compare the submissions and write similarity.csv, .html and .json into `out`."""
    run = find_similar(paths, submission_names(paths), jobs=jobs, threshold=threshold, handout=handout)
    write_outputs(run, out)
    return run


def summary_line(run: Run, out: Path) -> str:
    unread = len(run.notes)
    return (
        f"similarity: {len(run.names)} submissions, {run.pairs:,} pairs ({run.file_pairs:,} file pairs) compared, "
        f"{run.flagged} flagged at {run.threshold:g}, {unread} with notes, {run.seconds:.1f} s"
        + (f", {run.unlisted:,} pair-files beyond the {MAX_LISTED:,} listed" if run.unlisted else "")
        + " -> "
        f"{out / 'similarity.html'}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m autograder.batch.similarity",
        description="Similarity between submissions (winnowing, as MOSS), handout code excluded.",
    )
    ap.add_argument("submissions", nargs="+", type=Path, help="handin.tar files or folders of handin files")
    ap.add_argument("--out", type=Path, required=True, help="folder for similarity.csv, .html and .json")
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                    help=f"flag pairs whose score is at least this (0..1, default {DEFAULT_THRESHOLD})")
    ap.add_argument("--jobs", type=int, default=1, help="processes used (default 1)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 0.0 <= args.threshold <= 1.0:
        print(f"--threshold must be between 0 and 1 (got {args.threshold:g})", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"--jobs must be at least 1 (got {args.jobs})", file=sys.stderr)
        return 2
    if len(args.submissions) < 2:
        print("give at least two submissions to compare", file=sys.stderr)
        return 2
    run = run_class(args.submissions, args.out, threshold=args.threshold, jobs=args.jobs)
    for name, notes in sorted(run.notes.items()):
        print(f"  {name}: {'; '.join(notes)}", file=sys.stderr)
    print(summary_line(run, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
