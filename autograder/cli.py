"""Command line of the instructor grader (see autograder/autograder.py)."""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

from . import rubric as rubric_mod
from .grade import PROBLEM_MODULES, grade_submission
from .results import SubmissionResult, write_json_atomic
from .sandbox import Limits

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def submission_names(paths: list[Path]) -> list[str]:
    """A distinct, filesystem-safe name per submission (handin.tar -> its folder's name)."""
    names: list[str] = []
    for p in paths:
        base = p.name
        for ext in (".tar.gz", ".tgz", ".tar"):
            if base.endswith(ext):
                base = base[: -len(ext)]
                break
        if base == "handin" and p.parent.name:
            base = p.parent.name
        base = "".join(c if c.isalnum() or c in "-_." else "_" for c in base).strip(".") or "submission"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def _grade_to_disk(path: str, name: str, out: str, only: list[str] | None, limits: Limits) -> dict:
    result = grade_submission(
        Path(path), case_root=FIXTURES, visibilities=("public", "hidden"), only=only, limits=limits, name=name
    )
    folder = Path(out) / name
    write_json_atomic(folder / "results.json", result.to_gradescope())
    feedback = folder / "feedback.txt"
    tmp = feedback.with_suffix(".tmp")
    tmp.write_text(result.table() + "\n")
    os.replace(tmp, feedback)
    return summary(result)


def summary(result: SubmissionResult) -> dict:
    return {
        "submission": result.submission,
        "scores": result.problem_scores(),
        "total": result.score,
        "max": result.max_score,
        "wall_s": round(result.wall_s, 2),
        "table": result.table(),
        "autolab": result.autolab_line(),
    }


def write_gradebook(path: Path, rows: list[dict], problem_ids: list[str]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["submission", *problem_ids, "total", "max", "wall_s"])
    for row in sorted(rows, key=lambda r: r["submission"]):
        writer.writerow(
            [row["submission"], *[row["scores"].get(p, 0.0) for p in problem_ids], row["total"], row["max"], row["wall_s"]]
        )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="autograder.py", description="Grade handins on public and hidden cases, each in an isolated process."
    )
    ap.add_argument("submissions", nargs="+", type=Path, help="handin.tar files or folders of handin files")
    ap.add_argument("--out", type=Path, default=Path("grades"), help="output folder (default: grades/)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds per problem run (default 60)")
    ap.add_argument("--memory-mb", type=int, default=3072, help="address-space cap of a submission's process")
    ap.add_argument("--only", nargs="+", metavar="PROBLEM", help="grade only these problem ids")
    ap.add_argument("--force", action="store_true", help="regrade submissions that already have results.json")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problems = rubric_mod.load()
    if args.only:
        unknown = [p for p in args.only if p not in problems or p not in PROBLEM_MODULES]
        if unknown:
            print(f"unknown problem id(s) {unknown}; known: {[p for p in problems if p in PROBLEM_MODULES]}", file=sys.stderr)
            return 2
    limits = Limits(timeout_s=args.timeout, memory_mb=args.memory_mb)
    names = submission_names(args.submissions)
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [
        (str(p), n)
        for p, n in zip(args.submissions, names)
        if args.force or not (args.out / n / "results.json").exists()
    ]
    rows: list[dict] = []
    if len(args.submissions) == 1 and todo:
        row = _grade_to_disk(todo[0][0], todo[0][1], str(args.out), args.only, limits)
        print(row["table"])
        print(row["autolab"])
        return 0
    rows = _grade_many(todo, args, limits)
    problem_ids = [p for p in problems if p in PROBLEM_MODULES and (not args.only or p in args.only)]
    done = {r["submission"] for r in rows}
    for name in names:  # already graded earlier: read their scores back
        if name not in done:
            prior = _read_prior(args.out / name / "results.json", name)
            if prior:
                rows.append(prior)
    if len(args.submissions) > 1:
        write_gradebook(args.out / "grades.csv", rows, problem_ids)
        print(f"graded {len(todo)} of {len(names)} submissions ({len(names) - len(todo)} already had results); "
              f"gradebook: {args.out / 'grades.csv'}")
    else:
        print(f"{names[0]} already graded: {args.out / names[0] / 'results.json'} (use --force to regrade)")
    return 0


def _grade_many(todo: list[tuple[str, str]], args: argparse.Namespace, limits: Limits) -> list[dict]:
    from tqdm import tqdm

    rows: list[dict] = []
    pending = list(todo)
    with tqdm(total=len(todo), unit="handin", file=sys.stderr, disable=not todo) as bar:
        while pending:
            with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(_grade_to_disk, p, n, str(args.out), args.only, limits): (p, n) for p, n in pending}
                pending = []
                try:
                    for fut in as_completed(futures):
                        rows.append(fut.result())
                        bar.update(1)
                except BrokenProcessPool:
                    # A worker died (the grader's own process, not a sandbox): retry what is unfinished.
                    finished = {r["submission"] for r in rows}
                    pending = [pn for pn in futures.values() if pn[1] not in finished]
    return rows


def _read_prior(path: Path, name: str) -> dict | None:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    scores: dict[str, float] = {}
    max_total = 0.0
    for t in data.get("tests", []):
        for tag in t.get("tags", []):
            scores[tag] = round(scores.get(tag, 0.0) + t.get("score", 0.0), 4)
        max_total += t.get("max_score", 0.0)
    return {"submission": name, "scores": scores, "total": data.get("score", 0.0), "max": round(max_total, 4),
            "wall_s": data.get("execution_time", 0.0)}
