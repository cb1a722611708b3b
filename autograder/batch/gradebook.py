"""The course gradebook: identities from a roster, the late policy, rounding, and the exports.

Built from the rows of every results.json under --out (records.read_row) and never
written back into them: results.json holds what the grader measured, the gradebook
what the course makes of it.

- Rounding: every problem column and the total are in cents (2 decimals), and the
  total is always the sum of the columns shown: the total is rounded half up, each
  column is rounded down (floor), and the cents left over go to the columns that lost most
  (largest remainder), so no column is off by more than 0.01.
- Late policy (rubric.toml [late]): days late = started days past the due time plus
  the student's extension; penalty = total x min(1, days x penalty_per_day), the whole
  total past max_days; final = total - penalty, in cents.
- Exports: grades.csv (every row), scores.csv (id,score), canvas.csv (Canvas's
  gradebook import, with a roster).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal
from pathlib import Path

from autograder.grading.rubric_check import LatePolicy
from gradelib.safeio import SafeReadError, clean_text

from ..isolation import safe_reading
from .atomic import write_text_atomic
from .records import Row
from .records import spreadsheet_cell as cell

CENT = Decimal("0.01")
# Gradescope's, beside the upload; a copy is kept in grades/<name>/ (submission_times.py)
METADATA = "submission_metadata.json"
MAX_TABLE_BYTES = 16 * 1024 * 1024
DAY_S = 86400.0

# Accepted header names (lower case, spaces/underscores/dashes ignored) for each roster column.
ROSTER_COLUMNS = {
    "student_id": ("studentid", "sid", "id", "sisuserid", "studentnumber"),
    "name": ("name", "student", "studentname", "fullname"),
    "email": ("email", "emailaddress", "mail"),
    "submission": ("submission", "submissionfolder", "submissionname", "folder", "handin"),
    "section": ("section",),
    "canvas_id": ("canvasid", "canvasuserid"),
}
REQUIRED_ROSTER = ("student_id", "name", "email", "submission")


class BookError(ValueError):
    """A roster, extensions or times file that cannot be used; the message names the file, line and what was
    expected."""


@dataclass(frozen=True)
class Student:
    student_id: str
    name: str
    email: str
    submission: str
    section: str = ""
    canvas_id: str = ""


@dataclass
class Entry:
    """One gradebook row: a graded submission, who it belongs to, its rounded scores and late penalty."""

    row: Row
    student: Student | None
    columns: dict[str, Decimal]
    total: Decimal
    max: Decimal
    submitted: datetime | None = None
    due: datetime | None = None
    extension_days: float = 0.0
    days_late: int | None = None
    penalty: Decimal = Decimal("0.00")
    final: Decimal = Decimal("0.00")


@dataclass
class Book:
    entries: list[Entry]
    missing: list[Student] = field(default_factory=list)  # on the roster, no results
    unknown: list[str] = field(default_factory=list)  # results, not on the roster
    untimed: list[str] = field(default_factory=list)  # late policy given, no submission time or due time known
    max_points: Decimal = Decimal("0.00")
    notes: dict[str, list[str]] = field(default_factory=dict)  # submission -> what went wrong with its row


def _key(header: str) -> str:
    return "".join(c for c in header.lower() if c.isalnum())


def _table(path: Path, what: str) -> list[list[str]]:
    try:
        text = safe_reading.read_text(path, MAX_TABLE_BYTES)
    except SafeReadError as exc:
        raise BookError(f"{what} {path}: {exc}") from None
    rows = [r for r in csv.reader(io.StringIO(text.lstrip("\ufeff"))) if any(c.strip() for c in r)]
    if not rows:
        raise BookError(f"{what} {path} is empty; expected a header line and one line per student")
    return rows


def read_roster(path: Path) -> list[Student]:
    """roster.csv: a header naming student id, name, email and submission (folder or file name) columns; section and
    canvas id optional."""
    rows = _table(path, "roster")
    header = [_key(h) for h in rows[0]]
    where: dict[str, int] = {}
    for col, names in ROSTER_COLUMNS.items():
        for i, h in enumerate(header):
            if h in names and i not in where.values():
                where[col] = i
                break
    missing = [c for c in REQUIRED_ROSTER if c not in where]
    if missing:
        raise BookError(
            f"roster {path}: no column for {', '.join(missing)} in the header {rows[0]}; expected columns "
            f"'student id', 'name', 'email', 'submission' (the submission's folder or file name), "
            f"optionally 'section', 'canvas id'"
        )
    students, seen = [], set()
    for n, r in enumerate(rows[1:], start=2):
        get = {c: (r[i].strip() if i < len(r) else "") for c, i in where.items()}
        if not get["student_id"]:
            raise BookError(f"roster {path}, line {n}: no student id ({r}); every line needs one")
        if get["student_id"] in seen:
            raise BookError(f"roster {path}, line {n}: student id {get['student_id']!r} appears twice")
        seen.add(get["student_id"])
        students.append(Student(**{c: get.get(c, "") for c in ROSTER_COLUMNS}))
    return students


def read_extensions(path: Path) -> dict[str, float]:
    """ext.csv: student id or submission name, extra days (a number >= 0); a header line is optional."""
    out = {}
    for n, r in enumerate(_table(path, "extensions"), start=1):
        if len(r) < 2:
            raise BookError(f"extensions {path}, line {n}: expected 'student id or submission, extra days', got {r}")
        who, days = r[0].strip(), r[1].strip()
        try:
            value = float(days)
        except ValueError:
            if n == 1:
                continue  # the header
            raise BookError(f"extensions {path}, line {n}: extra days {days!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise BookError(f"extensions {path}, line {n}: extra days must be a number >= 0, got {days!r}")
        out[who] = value
    return out


def parse_time(text: str, where: str) -> datetime:
    """An ISO 8601 time; one without a UTC offset is taken in this machine's time zone."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BookError(
            f"{where}: {text!r} is not an ISO 8601 time (expected e.g. 2025-03-01T23:59:00-05:00)"
        ) from None
    return t if t.tzinfo else t.astimezone()


def read_submitted_at(path: Path) -> dict[str, datetime]:
    """times.csv: submission (or student id), ISO time; a header line is optional."""
    out = {}
    for n, r in enumerate(_table(path, "submission times"), start=1):
        if len(r) < 2:
            raise BookError(f"submission times {path}, line {n}: expected 'submission, ISO time', got {r}")
        try:
            out[r[0].strip()] = parse_time(r[1], f"submission times {path}, line {n}")
        except BookError:
            if n == 1:
                continue  # the header
            raise
    return out


def metadata_times(data) -> tuple[datetime | None, datetime | None, list[dict]]:
    """(submitted, due, users) from Gradescope's submission_metadata.json or the copy kept of it (the same shape);
    what is missing or malformed is None. A user's own due date (Gradescope's extension) comes before the
    assignment's."""
    if not isinstance(data, dict):
        return None, None, []

    def t(value):
        try:
            return parse_time(value, METADATA) if isinstance(value, str) else None
        except BookError:
            return None

    users = [u for u in data.get("users", []) if isinstance(u, dict)] if isinstance(data.get("users"), list) else []
    due = None
    for u in users:  # a user's own due date is Gradescope's extension for them
        own = u.get("assignment") if isinstance(u.get("assignment"), dict) else {}
        due = due or t(own.get("due_date"))
    assignment = data.get("assignment") if isinstance(data.get("assignment"), dict) else {}
    return t(data.get("created_at")), due or t(assignment.get("due_date")), users


def round_columns(values: list[float]) -> tuple[list[Decimal], Decimal]:
    """Each value and their total in cents, the total equal to the sum of the rounded values (largest remainder)."""
    exact = [Decimal(repr(float(v))) for v in values]
    total = sum(exact, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_UP)
    floors = [v.quantize(CENT, rounding=ROUND_FLOOR) for v in exact]
    left = int((total - sum(floors, Decimal(0))) / CENT)  # 0 <= left <= len(values)
    for i in sorted(range(len(exact)), key=lambda i: (-(exact[i] - floors[i]), i))[:left]:
        floors[i] += CENT
    return floors, total


def _match(
    students: list[Student], rows: list[Row], sources: dict[str, str]
) -> tuple[dict[str, Student], list[Student]]:
    """Submission name -> student; students whose submission has no results."""
    by_name = {r.submission: r for r in rows}
    folded = {r.submission.casefold(): r.submission for r in rows}
    found, missing = {}, []
    for s in students:
        want = s.submission.strip().rstrip("/")
        candidates = [want, Path(want).name]
        for ext in (".tar.gz", ".tgz", ".tar", ".zip"):
            if Path(want).name.endswith(ext):
                candidates.append(Path(want).name[: -len(ext)])
        if Path(want).name.startswith("handin.") and Path(want).parent.name:
            candidates.append(Path(want).parent.name)
        name = next((c for c in candidates if c in by_name), None)
        name = name or next((folded[c.casefold()] for c in candidates if c.casefold() in folded), None)
        name = name or next(
            (n for n, src in sources.items() if want and (src == want or src.endswith("/" + want))), None
        )
        if name is None or name in found:
            missing.append(s)
        else:
            found[name] = s
    return found, missing


def build(
    rows: list[Row],
    problem_ids: list[str],
    *,
    roster: list[Student] | None = None,
    sources: dict[str, str] | None = None,
    policy: LatePolicy | None = None,
    due: datetime | None = None,
    extensions: dict[str, float] | None = None,
    submitted_at: dict[str, datetime] | None = None,
    metadata: dict[str, dict] | None = None,
    max_points: float | None = None,
) -> Book:
    """The gradebook of `rows`; `metadata`: submission -> a kept submission_metadata.json."""
    owners, missing = _match(roster, rows, sources or {}) if roster is not None else ({}, [])
    extensions, submitted_at, metadata = extensions or {}, submitted_at or {}, metadata or {}
    entries, untimed, notes = [], [], {}
    for row in sorted(rows, key=lambda r: r.submission):
        student = owners.get(row.submission)
        cols, total = round_columns([row.scores.get(p, 0.0) for p in problem_ids])
        entry = Entry(
            row,
            student,
            dict(zip(problem_ids, cols)),
            total,
            Decimal(repr(row.max)).quantize(CENT, rounding=ROUND_HALF_UP),
        )
        keys = [row.submission] + ([student.student_id] if student else [])
        try:  # the times come partly from the submission's own metadata: whatever it holds costs this row only
            _late(entry, keys, policy, due, extensions, submitted_at, metadata.get(row.submission))
        except Exception as exc:
            entry.days_late, entry.penalty = None, Decimal("0.00")
            notes.setdefault(row.submission, []).append(
                f"late policy not applied: its times could not be used ({type(exc).__name__}: {clean_text(exc)[:200]})")
        if policy is not None and entry.days_late is None and row.submission not in notes:
            untimed.append(row.submission)
        entry.final = total - entry.penalty
        entries.append(entry)
    unknown = [
        r.submission
        for r in sorted(rows, key=lambda r: r.submission)
        if roster is not None and r.submission not in owners
    ]
    top = max_points if max_points is not None else max((r.max for r in rows), default=0.0)
    return Book(
        entries, missing, unknown, untimed, Decimal(repr(float(top))).quantize(CENT, rounding=ROUND_HALF_UP), notes
    )


def _late(entry: Entry, keys: list[str], policy: LatePolicy | None, due: datetime | None, extensions: dict[str, float],
          submitted_at: dict[str, datetime], metadata: dict | None) -> None:
    """Set the entry's times, days late and penalty; `keys`: its submission name and student id."""
    meta_submitted, meta_due, _ = metadata_times(metadata)
    entry.submitted = next((submitted_at[k] for k in keys if k in submitted_at), meta_submitted)
    entry.due = due or meta_due
    entry.extension_days = next((extensions[k] for k in keys if k in extensions), 0.0)
    if entry.submitted is not None and entry.due is not None:
        late_s = (entry.submitted - (entry.due + timedelta(days=entry.extension_days))).total_seconds()
        entry.days_late = max(0, math.ceil(late_s / DAY_S))
    if policy is not None and entry.days_late:
        fraction = Decimal(repr(policy.penalty(entry.days_late)))
        entry.penalty = (
            entry.total if fraction >= 1 else (entry.total * fraction).quantize(CENT, rounding=ROUND_HALF_UP)
        )


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def write_grades(path: Path, book: Book, problem_ids: list[str], roster: bool) -> None:
    """grades.csv: a row per graded submission, sorted by name."""
    who = ["student_id", "name", "email"] if roster else []
    lines = [["submission", *who, *problem_ids, "total", "max", "days_late", "penalty", "final"]]
    for e in book.entries:
        s = e.student
        ident = [cell(s.student_id), cell(s.name), cell(s.email)] if s else ["", "", ""]
        # A problem the grader failed on has no grade (marked for regrading), so neither has the total.
        missing = set(e.row.not_graded)
        lines.append([cell(e.row.submission), *(ident if roster else []),
                      *["not graded" if p in missing else f"{e.columns[p]:.2f}" for p in problem_ids],
                      "not graded" if missing else f"{e.total:.2f}", f"{e.max:.2f}",
                      "" if e.days_late is None else e.days_late, f"{e.penalty:.2f}",
                      "not graded" if missing else f"{e.final:.2f}"])
    write_text_atomic(path, _csv(lines))


def write_gradebook(path: Path, rows: list[Row], problem_ids: list[str]) -> None:
    """grades.csv without a roster or late policy: one row per submission."""
    write_grades(path, build(rows, problem_ids), problem_ids, roster=False)


def write_scores(path: Path, book: Book) -> None:
    """scores.csv: id (the student id when the roster names one, else the submission), final score."""
    lines = [["id", "score"]] + [[cell(e.student.student_id if e.student else e.row.submission),
                                  "" if e.row.not_graded else f"{e.final:.2f}"] for e in book.entries]
    write_text_atomic(path, _csv(lines))


def write_canvas(path: Path, book: Book, roster: list[Student], title: str) -> None:
    """canvas.csv for Canvas's gradebook import: a row per roster student (blank when nothing was graded)."""
    by_id = {e.student.student_id: e for e in book.entries if e.student}
    lines = [
        ["Student", "ID", "SIS User ID", "Section", title],
        ["Points Possible", "", "", "", f"{book.max_points:.2f}"],
    ]
    for s in roster:
        e = by_id.get(s.student_id)
        lines.append([cell(s.name), cell(s.canvas_id), cell(s.student_id), cell(s.section),
                      f"{e.final:.2f}" if e and not e.row.not_graded else ""])
    write_text_atomic(path, _csv(lines))


def summary(book: Book, roster: bool) -> str:
    """Lines for the run's output: who is missing or unknown, how many were late, what went wrong with a row."""
    lines = []
    if roster:
        graded = len(book.entries) - len(book.unknown)
        lines.append(f"roster: {graded} of {graded + len(book.missing)} students have results")
        if book.missing:
            lines.append("  no results for: " + ", ".join(f"{s.student_id} ({s.submission})" for s in book.missing))
        if book.unknown:
            lines.append("  not on the roster: " + ", ".join(book.unknown))
    late = [e for e in book.entries if e.days_late]
    if late:
        lines.append(f"late: {len(late)} submissions, {sum(e.penalty > 0 for e in late)} with a penalty")
    if book.untimed:
        lines.append(
            f"late policy: no submission or due time for {len(book.untimed)} submissions (no penalty applied): "
            + ", ".join(book.untimed[:10])
            + (" ..." if len(book.untimed) > 10 else "")
        )
    if book.notes:
        lines.append(f"to look at ({len(book.notes)} submissions, also in report.html):")
        lines += [f"  {name}: {'; '.join(notes)}" for name, notes in sorted(book.notes.items())[:10]]
        lines += [f"  ... and {len(book.notes) - 10} more"] if len(book.notes) > 10 else []
    return "\n".join(lines)
