"""The class files of a batch run: grades.csv, scores.csv, canvas.csv, report.html and the regrade log.

Each is rebuilt from every results.json under --out (records.class_rows), not
only from the submissions of the run, so the gradebook never shrinks; a
score that a regrade changed is appended to regrades.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
from datetime import datetime, timezone
from pathlib import Path

from autograder.grading import rubric_check as rubric_mod
from gradelib.safeio import SafeReadError, clean_text

from ..grading import safe_reading
from . import gradebook
from .compared_code import NOT_COMPARED_MISSING
from .pool import Job
from .records import Row, class_rows, read_row, source_of, spreadsheet_cell
from .report import thresholds_of, write_report
from .similarity_report import pairs_for_report
from .submission_times import read_kept
from .triage import needs_look

REGRADE_LOG = "regrades.csv"
REGRADE_LOG_HEADER = ["time", "submission", "problem", "old_score", "new_score", "reason"]


def log_regrades(out: Path, jobs: list[Job], before: dict[str, Row]) -> int:
    """Append to out/regrades.csv each problem score a regrade changed; return how many changed."""
    stamp = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    lines = []
    for job in jobs:
        old = before.get(job.name)
        if old is None or old.notes.startswith("results.json could not be read"):
            continue
        new = read_row(out / job.name / "results.json", job.name)
        for pid, reason in job.reasons.items():
            if pid in old.scores and abs(new.scores.get(pid, 0.0) - old.scores[pid]) > 1e-9:
                lines.append(
                    [
                        stamp,
                        spreadsheet_cell(job.name),
                        pid,
                        f"{old.scores[pid]:g}",
                        f"{new.scores.get(pid, 0.0):g}",
                        reason,
                    ]
                )
    if lines:
        path = out / REGRADE_LOG
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if not path.is_file():
            writer.writerow(REGRADE_LOG_HEADER)
        writer.writerows(lines)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
    return len(lines)


def read_book_inputs(args: argparse.Namespace) -> dict:
    """The roster, extensions, times, due time and late policy, read and checked before anything is graded."""
    return {
        "roster": gradebook.read_roster(args.roster) if args.roster else None,
        "extensions": gradebook.read_extensions(args.extensions) if args.extensions else {},
        "submitted_at": gradebook.read_submitted_at(args.submitted_at) if args.submitted_at else {},
        "due": gradebook.parse_time(args.due, "--due") if args.due else None,
        "policy": rubric_mod.late_policy(args.rubric),
    }


def similarity_notes(out: Path) -> dict[str, list[str]]:
    """Submission -> the files the similarity run written in `out` could not read (a missing file is not listed)."""
    try:
        data = safe_reading.read_json(out / "similarity.json", 64 * 1024 * 1024)
    except SafeReadError:
        return {}
    notes = data.get("notes") if isinstance(data, dict) else None
    if not isinstance(notes, dict):
        return {}
    return {
        str(name): [
            f"similarity: {clean_text(n)[:300]}"
            for n in ns
            if isinstance(n, str) and not n.endswith(NOT_COMPARED_MISSING)
        ]
        for name, ns in notes.items()
        if isinstance(ns, list)
    }


def write_class_files(args: argparse.Namespace, problem_ids: list[str]) -> tuple[int, str]:
    """grades.csv, scores.csv, canvas.csv (with a roster) and report.html from every results.json under --out.

    Returns the number of rows and the lines that say who is missing, unknown or late, and what went
    wrong with a submission's row. Whatever one submission's files hold costs its own row only.
    """
    rows = class_rows(args.out)
    inputs = args.book
    metadata, kept_notes = {}, {}
    for r in rows:
        metadata[r.submission], notes = read_kept(args.out / r.submission)
        if notes:
            kept_notes[r.submission] = notes
    sources = {r.submission: source_of(args.out / r.submission) or "" for r in rows}
    problems = args.problems  # loaded once, by cli.refusal
    book = gradebook.build(rows, problem_ids, sources=sources, metadata={k: v for k, v in metadata.items() if v},
                           max_points=sum(problems[p].points for p in problem_ids), **inputs)
    for name, notes in kept_notes.items():
        book.notes.setdefault(name, []).extend(notes)
    for r in rows:
        if r.not_graded:  # its cells read "not graded"; the next run of the same command regrades it
            book.notes.setdefault(r.submission, []).append(
                f"not graded ({', '.join(r.not_graded)}): the grader failed, not the submission; marked for regrading")
    gradebook.write_grades(args.out / "grades.csv", book, problem_ids, roster=inputs["roster"] is not None)
    gradebook.write_scores(args.out / "scores.csv", book)
    if inputs["roster"] is not None:
        gradebook.write_canvas(args.out / "canvas.csv", book, inputs["roster"], args.assignment_title)
    similar = pairs_for_report(args.out) if (args.out / "similarity.json").is_file() else None
    extra = {name: list(notes) for name, notes in book.notes.items()}
    for name, notes in similarity_notes(args.out).items():
        extra.setdefault(name, []).extend(notes)
    write_report(args.out / "report.html", rows, problem_ids, args.title, thresholds_of(problems), similar,
                 needs_look(rows, problem_ids, extra))
    return len(rows), gradebook.summary(book, inputs["roster"] is not None)
