"""Command line of the instructor grader (see autograder/autograder.py): what to grade, then the pool, then the class
files.

Results are written atomically, so a run stopped at any point (Ctrl-C,
SIGTERM) leaves every submission either graded or not; the same command run
again grades only what is missing or stale: each results.json records the
rubric and fixtures that graded each of its problems (regrade.py), and a
problem whose rubric or fixtures changed since is regraded, its tests merged
into the results already there (--force regrades all). The worker pool is
pool.py; the class files (classfiles.py) are rebuilt from every results.json
under --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from autograder import isolation as sandbox
from autograder.grading import rubric_check as rubric_mod
from autograder.isolation import levels
from autograder.isolation.levels import ISOLATION_CHOICES
from gradelib.problems import graded
from gradelib.safeio import SafeReadError, clean_text

from ..isolation import safe_reading
from . import gradebook, regrade, results_json
from .autolab import autolab_line
from .classfiles import REGRADE_LOG, log_regrades, read_book_inputs, write_class_files, write_stop
from .pool import Batch, Job
from .records import adopt_zip_folders, already_graded, claim, class_folders, read_row, submission_names
from .submission_times import keep_metadata
from .worker import CASE_ROOT

RUBRIC_REFUSED = "The rubric cannot be used, so nothing was graded: {}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (sys.argv when `argv` is None), parsed."""
    ap = argparse.ArgumentParser(
        prog="autograder.py", description="Grade handins on public and hidden cases, each in an isolated process."
    )
    ap.add_argument(
        "submissions", nargs="+", type=Path,
        help="handins: .tar, .tar.gz or .zip files, or folders (of handin files, or holding one archive)",
    )
    ap.add_argument("--out", type=Path, default=Path("grades"), help="output folder (default: grades/)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--similarity", action="store_true",
                    help="also compare every pair of submissions' code (similarity.csv/.html, pairs in report.html)")
    ap.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds per problem run (default 60)")
    ap.add_argument("--memory-mb", type=int, default=3072, help="address-space cap of a submission's process")
    ap.add_argument("--only", nargs="+", metavar="PROBLEM", help="grade only these problem ids")
    ap.add_argument("--force", action="store_true", help="regrade submissions that already have results.json")
    ap.add_argument("--retries", type=int, default=2,
                    help="attempts again where the grader failed: its process died, or a run was lost to a fault "
                    "(default 2)")
    ap.add_argument(
        "--submission-timeout", type=float, default=None,
        help="cap on grading one submission, on the wall clock less its waits for a CPU "
             "(default: (1.5 x problems + 1) x --timeout + 60 s)",
    )
    ap.add_argument("--worker-memory-mb", type=int, default=8192, help="address-space cap of a grader process")
    ap.add_argument("--title", default="Class report", help="heading of report.html")
    ap.add_argument("--rubric", type=Path, default=None, help="rubric file (default: gradelib/rubric.toml)")
    book = ap.add_argument_group(
        "gradebook (grades.csv, scores.csv, canvas.csv; the late policy is the rubric's [late] table)"
    )
    book.add_argument(
        "--roster",
        type=Path,
        help="CSV: student id, name, email, submission (folder or file name) [, section, canvas id]",
    )
    book.add_argument("--extensions", type=Path, help="CSV: student id or submission, extra days")
    book.add_argument(
        "--submitted-at",
        type=Path,
        help="CSV: submission, ISO time (else submission_metadata.json in the submission folder)",
    )
    book.add_argument("--due", help="due time, ISO 8601 (else the due date in submission_metadata.json)")
    book.add_argument(
        "--assignment-title",
        default="Self-attention and language modeling",
        help="the assignment's column in canvas.csv",
    )
    ap.add_argument("--fixtures", type=Path, default=CASE_ROOT,
                    help="folder of the public and hidden cases and MANIFEST.sha256 (default: fixtures/)")
    ap.add_argument(
        "--isolation", choices=ISOLATION_CHOICES, default="best",
        help="best: namespaces where the machine allows, else the fallback (Landlock, seccomp, a sandbox uid; "
        "recorded per submission), and refuse where neither can be made; strict: refuse to grade without "
        "namespaces; portable: grade even where only the portable level runs (a plain child process: it stops "
        "runaway code, not a hostile submission)",
    )
    return ap.parse_args(argv)


def refusal(args: argparse.Namespace, rubric: rubric_mod.Rubric | None = None) -> tuple[list[str], str]:
    """The rubric's graded problem ids, and why nothing may be graded ("" when all is well): a rubric,
    problem id, bookkeeping file, calibration or isolation level that cannot be used. The rubric (`rubric`, or
    --rubric read here: once a command) is args.course_rubric for the rest of the run, workers included, and its
    problems args.problems; the book inputs are args.book."""
    try:
        args.course_rubric = rubric_mod.rubric_of(rubric or args.rubric)
        args.problems = args.course_rubric.problems
        known = list(graded(args.problems))
    except rubric_mod.RubricError as exc:
        return [], RUBRIC_REFUSED.format(exc)
    unknown = [p for p in args.only or [] if p not in known]
    if unknown:
        return known, f"unknown problem id(s) {unknown}; known: {known}"
    missing = edges_without_cases(args.problems, [p for p in known if not args.only or p in args.only], args.fixtures)
    if missing:
        return known, f"nothing was graded: {missing}"
    try:
        args.book = read_book_inputs(args)
    except (gradebook.BookError, rubric_mod.RubricError) as exc:
        return known, f"nothing was graded: {exc}"
    if {"prediction", "generation"} & {p for p in known if not args.only or p in args.only}:
        from ..reference.provenance import refusal as lm_refusal

        why = lm_refusal(Path(args.fixtures) / "lm", args.course_rubric)
        if why:
            return known, f"Not grading: {why}."
    if args.isolation == "strict" and sandbox.isolation_level() != "namespaces":
        return known, (
            f"--isolation strict: not grading, namespaces are unavailable on this machine "
            f"({sandbox.isolation_reason()}). "
            "Expected: root with bubblewrap and setpriv installed (make setup installs bubblewrap); "
            "or run without --isolation strict to use the fallback."
        )
    leaks = levels.exposed([Path(args.fixtures), args.out])
    if leaks:
        return known, (
            f"Not grading: at the fallback level without Landlock a submission could read {', '.join(leaks)} "
            "(every user may). Expected: those folders readable by root alone (chmod -R go-rwx <folder>), or a "
            "kernel with Landlock."
        )
    if args.isolation == "best" and sandbox.isolation_level() == "portable":
        return known, (
            f"Not grading: neither namespaces nor the fallback can be made here ({sandbox.isolation_reason()}), "
            "and the portable level isolates nothing: a submission could read or change this user's files, the "
            "hidden cases and other students' results included. Expected: Linux as root with an interpreter every "
            "user can read (or Landlock when not root); or pass --isolation portable to grade here anyway, "
            "trusting the submissions."
        )
    return known, ""


def edges_without_cases(problems: dict, ids: list[str], case_root: Path) -> str:
    """The first edge line of the problems `ids` that no case under `case_root` carries on a case set it is
    graded on, said in a sentence ('' when every edge line has its cases): it would score 0 for everyone."""
    tagged = set()
    for index in sorted(Path(case_root).glob("*/*/cases.json")):
        try:
            entries = json.loads(index.read_text())
        except (OSError, ValueError):
            continue
        folder, vis = index.parent.parent.name, index.parent.name
        tagged |= {(e.get("problem", folder), vis, e["edge"]) for e in entries if isinstance(e, dict) and e.get("edge")}
    for pid in ids:
        for g in problems[pid].groups:
            for vis in (v for v in g.visibilities if g.edge and (pid, v, g.edge) not in tagged):
                return (f"the rubric's line {pid}.{g.id} is graded on edge '{g.edge}', but no {vis} case under "
                        f"{case_root} carries it. Expected: the fixtures made with this rubric (make fixtures).")
    return ""


def main(argv: list[str] | None = None, rubric: rubric_mod.Rubric | None = None) -> int:
    """Grade the submissions named, then write the class files; the exit status (0; 2 refused; 128 + signal).
    `rubric`, the course's rubric already read (a platform's run), in place of --rubric."""
    from tqdm import tqdm

    args = parse_args(argv)
    known, why = refusal(args, rubric)
    if why:
        print(why, file=sys.stderr)
        return 2
    problem_ids = [p for p in known if not args.only or p in args.only]
    absent = [str(p) for p in args.submissions if not p.exists()]
    if absent:
        print(f"no such submission: {', '.join(absent[:10])}{' ...' if len(absent) > 10 else ''}; nothing was graded. "
              "Expected: handins (.tar, .tar.gz, .zip or folders) that exist; options go before `--`, "
              "after which every word is a submission.", file=sys.stderr)
        return 2
    names = submission_names(args.submissions)
    args.command = "python -m autograder " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:  # the grader's own writes: a full disk stops the run here, before anything is graded
        args.out.mkdir(parents=True, exist_ok=True)
        adopt_zip_folders(args.out, args.submissions, names)
        jobs, plan = plan_jobs(args, names, problem_ids)
        before = {job.name: read_row(args.out / job.name / "results.json", job.name) for job in jobs if job.reasons}
        for job in jobs:
            claim(job.path, args.out / job.name)
        for path, name in zip(args.submissions, names):
            keep_metadata(path, args.out / name)
    except OSError as exc:
        return write_stop(args, names, f"preparing {args.out}: {exc}", known)
    if plan:
        print(plan, file=sys.stderr if len(names) == 1 else sys.stdout, flush=True)
    # A problem's runs (its public and hidden cases apart) share its --timeout, the second getting at least half.
    deadline = args.submission_timeout or (1.5 * len(problem_ids) + 1) * args.timeout + 60.0
    try:
        batch = Batch(args, jobs, deadline)
    except OSError as exc:
        return write_stop(args, names, f"making the scratch folder in {tempfile.gettempdir()}: {exc}", known)
    start = time.monotonic()
    with tqdm(total=len(jobs), unit="handin", file=sys.stderr, disable=len(jobs) < 2, dynamic_ncols=True) as bar:
        batch.run(bar)
    wall = time.monotonic() - start
    if batch.write_error:
        return write_stop(args, names, batch.write_error, known)
    if batch.stop_signal is not None:
        done = sum((args.out / n / "results.json").is_file() for n in names)
        print(
            f"stopped by {signal.Signals(batch.stop_signal).name}: {done} of {len(names)} submissions have results; "
            "run the same command again to grade the rest",
            file=sys.stderr,
        )
        return 128 + batch.stop_signal
    try:
        changed = log_regrades(args.out, jobs, before)
        if len(names) == 1:
            return finish_one(args, names[0], jobs, known, problem_ids)
        return finish_class(args, names, jobs, batch, known, wall, changed)
    except OSError as exc:
        return write_stop(args, names, f"writing the class files: {exc}", known)


def finish_one(args: argparse.Namespace, name: str, jobs: list[Job], known: list[str], problem_ids: list[str]) -> int:
    """One submission: its feedback, the class files when --out holds a class, and Autolab's line last."""
    if not jobs:
        print(f"{name} was already graded (use --force to regrade)", file=sys.stderr)
    try:
        text = safe_reading.read_text(args.out / name / "feedback.txt", 64 * 1024 * 1024)
    except SafeReadError as exc:
        text = f"{name}: {exc}"
    print(clean_text(text).rstrip("\n"))
    if len(class_folders(args.out)) > 1:  # a late handin graded into a class's folder: the class files follow
        book_lines = write_class_files(args, known)[1]
        if book_lines:
            print(book_lines, file=sys.stderr)
    print(autolab_line(read_row(args.out / name / "results.json", name), problem_ids), flush=True)
    return 0


def finish_class(args: argparse.Namespace, names: list[str], jobs: list[Job], batch: Batch, known: list[str],
                 wall: float, changed: int) -> int:
    """A class: the similarity run when asked for, the class files, and the lines that say where they are."""
    similar = ""
    if args.similarity:
        from .similarity import run_class, summary_line

        try:  # each handin's reading is guarded in the run; this keeps the class files whatever else goes wrong
            similar = "\n" + summary_line(run_class(list(args.submissions), args.out, jobs=max(1, args.jobs)), args.out)
        except Exception as exc:
            similar = (
                f"\nsimilarity: not finished ({type(exc).__name__}: {clean_text(exc)[:300]}); "
                "the class files are written without it"
            )
    book, book_lines = write_class_files(args, known)
    exports = f"\nexports:   {args.out / 'scores.csv'}" + (f", {args.out / 'canvas.csv'}" if args.roster else "")
    changes = f"; {changed} score(s) changed by the regrade: {args.out / REGRADE_LOG}" if changed else ""
    retried = f"; {batch.retried} attempt(s) started again after the grader failed" if batch.retried else ""
    print(
        f"graded {batch.graded + len(batch.failed)} of {len(names)} submissions in {wall:.1f} s "
        f"({len(names) - len(jobs)} up to date, {len(batch.failed)} could not be graded{retried}{changes})\n"
        f"gradebook: {args.out / 'grades.csv'} ({book} rows: every results.json under {args.out})\n"
        f"report:    {args.out / 'report.html'}{exports}{similar}" + (f"\n{book_lines}" if book_lines else "")
    )
    return 0


def plan_jobs(args: argparse.Namespace, names: list[str], problem_ids: list[str]) -> tuple[list[Job], str]:
    """Who is graded and why: new submissions, stale problems of graded ones (merged), or all with --force.

    Returns the jobs and the lines saying so ("regrading 12 of 60: rubric changed (...)", "48 up to date").
    """
    problems = args.problems
    current = regrade.current_records(problems, problem_ids, args.fixtures)
    only = list(args.only) if args.only else None
    jobs, new, stale, up_to_date, graded_before = [], [], Counter(), 0, 0
    for path, name in zip(args.submissions, names):
        folder = args.out / name
        if not already_graded(path, folder):
            jobs.append(Job(path, name, only=only))
            new.append(name)
            continue
        graded_before += 1
        if args.force:
            jobs.append(Job(path, name, only=only, merge=bool(only), reasons=dict.fromkeys(problem_ids, "--force")))
            stale["--force"] += 1
            continue
        data = results_json.read(folder / "results.json")
        why = (dict.fromkeys(problem_ids, "results.json could not be read") if data is None
               else regrade.stale_problems(data, current))
        if not why:
            up_to_date += 1
            continue
        ids = [p for p in problem_ids if p in why]
        whole = ids == list(graded(problems))
        jobs.append(Job(path, name, only=None if whole else ids, merge=True, reasons=why))
        stale["; ".join(dict.fromkeys(why[p] for p in ids))] += 1
    lines = []
    if new:
        lines.append(f"grading {len(new)} new submission{'s' if len(new) != 1 else ''}")
    if stale:
        n = sum(stale.values())
        if len(stale) == 1:
            lines.append(f"regrading {n} of {graded_before}: {next(iter(stale))}")
        else:
            parts = "; ".join(f"{k} ({v})" for k, v in stale.most_common())
            lines.append(f"regrading {n} of {graded_before}: {parts}")
    if graded_before and (stale or up_to_date):
        lines.append(f"{up_to_date} up to date")
    return jobs, "\n".join(lines)
