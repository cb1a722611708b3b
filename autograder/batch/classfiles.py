"""The class files of a batch run: grades.csv, scores.csv, canvas.csv, report.html and the regrade log.

Each is rebuilt from every results.json under --out (records.class_rows), not
only from the submissions of the run, so the gradebook never shrinks; a
score that a regrade changed is appended to regrades.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

from gradelib.safeio import SafeReadError, clean_text

from ..isolation import safe_reading
from . import gradebook
from .atomic import remove_partial_writes
from .compared_code import NOT_COMPARED_MISSING
from .pool import Job
from .records import Row, class_folders, class_rows, read_row, source_of, spreadsheet_cell
from .report import thresholds_of, write_report
from .similarity_report import pairs_for_report
from .submission_times import read_kept
from .triage import needs_look

REGRADE_LOG = "regrades.csv"
REGRADE_LOG_HEADER = ["time", "submission", "problem", "old_score", "new_score", "reason"]


def log_regrades(out: Path, jobs: list[Job], before: dict[str, Row]) -> int:
    """Append to out/regrades.csv each problem score a regrade changed, and each first grade of a problem that was
    not graded (old_score `not graded`); return how many scores changed. The lines go in whole or not at all."""
    stamp = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    lines, changed = [], 0
    for job in jobs:
        old = before.get(job.name)
        if old is None or old.notes.startswith("results.json could not be read"):
            continue
        new = read_row(out / job.name / "results.json", job.name)
        for pid, reason in job.reasons.items():
            if pid in new.not_graded or pid not in new.scores:
                continue  # still no grade: nothing to log until there is one
            now = f"{new.scores[pid]:g}"
            if pid in old.not_graded:
                lines.append([stamp, spreadsheet_cell(job.name), pid, "not graded", now, f"first grade ({reason})"])
            elif pid in old.scores and abs(new.scores[pid] - old.scores[pid]) > 1e-9:
                lines.append([stamp, spreadsheet_cell(job.name), pid, f"{old.scores[pid]:g}", now, reason])
                changed += 1
    if lines:
        path = out / REGRADE_LOG
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if not path.is_file():
            writer.writerow(REGRADE_LOG_HEADER)
        writer.writerows(lines)
        append_whole(path, buf.getvalue().encode())
    return changed


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` to `path`, or, when a write fails (a full disk), leave the file as it was and raise."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        os.ftruncate(fd, size)
        raise
    finally:
        os.close(fd)


def read_book_inputs(args: argparse.Namespace) -> dict:
    """The roster, extensions, times, due time and late policy, read and checked before anything is graded."""
    return {
        "roster": gradebook.read_roster(args.roster) if args.roster else None,
        "extensions": gradebook.read_extensions(args.extensions) if args.extensions else {},
        "submitted_at": gradebook.read_submitted_at(args.submitted_at) if args.submitted_at else {},
        "due": gradebook.parse_time(args.due, "--due") if args.due else None,
        "policy": args.course_rubric.late,
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
    remove_partial_writes(args.out, older_than_s=60.0)  # class files of a run killed mid-write (atomic.py)
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


def write_stop(args: argparse.Namespace, names: list[str], why: str, problem_ids: list[str]) -> int:
    """The grader's own write failed (a full disk): the class files from the results there if they fit, and one
    paragraph: what was saved and where, the space needed, the command to run again. The exit status, 2."""
    out = args.out
    done = [n for n in names if (out / n / "results.json").is_file()]
    graded = len(class_folders(out)) if out.is_dir() else 0
    if graded:
        try:
            write_class_files(args, problem_ids)
            class_files = f"The class files (grades.csv, scores.csv, report.html) hold the {graded} results there."
        except OSError as exc:
            class_files = f"The class files could not be written ({exc.strerror}): any there are as they were."
    else:
        class_files = "No class file was written: there are no results yet."
    per = _mean([_size(out / n) + _size(out / ".logs" / f"{n}.log") for n in done]) or 1 << 20
    room = sum(_size(out / f) for f in ("grades.csv", "scores.csv", "canvas.csv", "report.html"))
    room = room or (64 << 10) * graded
    need = (len(names) - len(done)) * per + 2 * room  # a class file is rewritten beside the old one, then renamed
    try:
        free = f"{_amount(shutil.disk_usage(out if out.is_dir() else out.parent).free)} free there now"
    except OSError:
        free = "its free space unknown"
    print(f"Grading stopped: the grader could not write its own files ({why}). Saved: the results of {len(done)} "
          f"of {len(names)} submissions, in {out}, each whole (results.json and feedback.txt are written at once or "
          f"not at all); the other {len(names) - len(done)} were not graded, and no score was recorded for them. "
          f"{class_files} Grading the rest needs about {_amount(need)} on the disk of {out} ({_amount(per)} a "
          f"submission, and room to rewrite the class files; {free}). Free that space, then run the same command "
          f"again, which grades only what has no results: {args.command}", file=sys.stderr)
    return 2


def _size(path: Path) -> int:
    """Bytes the file, or the folder's files, take on disk."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _mean(values: list[int]) -> int:
    return sum(values) // len(values) if values else 0


def _amount(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB" if n >= 1 << 20 else f"{max(1, round(n / 1024))} KB"
