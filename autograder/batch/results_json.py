"""Gradescope's results.json of a graded submission: its serialisation (to_json), reading it back (read,
from_json), and its one writer (write); no_results, the one record of no grade on a platform.

Each results.json carries, in its top-level `extra_data` (which Gradescope keeps
and shows to nobody), a record of what graded it:

    "grader": {"format": 1, "notes": [submission-wide notes],
               "problems": {"<id>": {"rubric": {"sha256", "parts", "settings"},
                                     "fixtures": "<sha256 of the problem's MANIFEST.sha256 lines>",
                                     "notes": [...], "flags": [...], "seconds": s}}}

regrade.py reads that record to say which problems are stale.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from gradelib.results import SubmissionResult
from gradelib.safeio import SafeReadError, clean_text

from ..grading.course_result import NOT_GRADED, CourseResult, CourseTest, score_number
from ..isolation import safe_reading
from .atomic import write_json_atomic
from .records import MAX_RESULTS_BYTES

FORMAT = 1
VISIBILITY_TO_GRADESCOPE = {"public": "visible", "hidden": "after_published"}
FROM_GRADESCOPE = {v: k for k, v in VISIBILITY_TO_GRADESCOPE.items()}
GRADESCOPE_VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


def read(path: Path) -> dict | None:
    """A results.json as a dict, None when it is missing or not a Gradescope results object."""
    try:
        data = safe_reading.read_json(path, MAX_RESULTS_BYTES)
    except SafeReadError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("tests"), list) else None


def grader_record(data: dict | None) -> dict | None:
    extra = data.get("extra_data") if isinstance(data, dict) else None
    record = extra.get("grader") if isinstance(extra, dict) else None
    if isinstance(record, dict) and record.get("format") == FORMAT and isinstance(record.get("problems"), dict):
        return record
    return None


def from_json(data: dict, name: str, problem_order: list[str]) -> CourseResult:
    """A CourseResult back from a results.json, with its per-problem notes and flags when recorded."""
    record = grader_record(data) or {}
    graded = record.get("problems", {}) if record else {}
    result = CourseResult(submission=name)
    for t in data.get("tests", []):
        if not isinstance(t, dict):
            continue
        tags = t.get("tags") if isinstance(t.get("tags"), list) else [""]
        extra = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
        figures = extra.get("figures") if isinstance(extra.get("figures"), dict) else {}
        shown = t.get("visibility") if t.get("visibility") in GRADESCOPE_VISIBILITIES else ""
        result.tests.append(CourseTest(
            problem=str(tags[0] if tags else ""), name=str(t.get("name", "")), score=t.get("score") or 0.0,
            max_score=t.get("max_score", 0.0), visibility=FROM_GRADESCOPE.get(t.get("visibility"), "hidden"),
            output=str(t.get("output", "")), line=str(extra.get("line", "")),
            figures={k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            shown=shown,  # a hidden test's rubric visibility (hidden_tests) is kept when its problem is not regraded
        ))
    present = {t.problem for t in result.tests} | set(graded)
    result.problems = tuple([p for p in problem_order if p in present] + sorted(present - set(problem_order)))
    for t in result.tests:
        result.max_points[t.problem] = round(result.max_points.get(t.problem, 0.0) + t.max_score, 4)
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    flags = extra.get("flags") if isinstance(extra.get("flags"), dict) else {}
    result.flags = {str(k): str(v) for k, v in flags.items()}
    result.isolation = str(extra.get("isolation", ""))
    for pid, rec in graded.items():
        if isinstance(rec, dict):
            result.problem_notes[pid] = [str(n) for n in rec.get("notes", []) if isinstance(n, str)]
            result.problem_flags[pid] = [str(f) for f in rec.get("flags", []) if isinstance(f, str)]
            if isinstance(rec.get("seconds"), (int, float)):
                result.problem_seconds[pid] = float(rec["seconds"])
    general = record.get("notes") if record else None
    if isinstance(general, list):
        result.notes = [str(n) for n in general] + [
            n for pid in result.problems for n in result.problem_notes.get(pid, [])
        ]
    else:
        output = str(data.get("output", "") or "")
        result.notes = [output] if output else []
    wall = data.get("execution_time", 0.0)
    result.wall_s = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else 0.0
    return result


def general_notes(result: CourseResult) -> list[str]:
    """The notes of the whole submission (intake, missing files): those no problem added."""
    mine = sum(len(result.problem_notes.get(p, [])) for p in result.problems)
    return list(result.notes[: len(result.notes) - mine]) if mine else list(result.notes)


LACKS = re.compile(r"The handin lacks ([^;]+);")
MISSING = re.compile(r"(\S+) is missing from the handin")


def not_graded_normally(result: SubmissionResult) -> list[str]:
    """A line for each problem that could not be graded normally -- every one of its lines scored 0 with one and
    the same message (a file that does not parse or load, an internal error) -- that the notes do not say already.
    Only a message a public line shows already: the top-level output is visible before hidden tests are."""
    said = "\n".join(result.notes)
    lacking = LACKS.search(said)
    lacking = set(lacking.group(1).split(", ")) if lacking else set()
    out = []
    for pid in result.problems:
        tests = [t for t in result.tests if t.problem == pid]
        messages = {t.output.strip() for t in tests}
        if (
            not tests
            or any(t.score > 0 for t in tests)
            or len(messages) != 1
            or all(t.visibility != "public" for t in tests)
        ):
            continue
        message = messages.pop()
        missing = MISSING.search(message)
        if not message or message.removeprefix("not graded: ") in said or (missing and missing.group(1) in lacking):
            continue
        out.append(f"{pid}: not graded normally: {message}")
    return out


def gradescope_test(t: CourseTest, number: str) -> dict:
    """Test `t` as one entry of results.json's tests, numbered `number` (e.g. "1.2"); a hidden test's visibility is
    the rubric's hidden_tests (t.shown)."""
    return {
        "name": t.name,
        "number": number,
        "score": round(score_number(t.score), 4),
        "max_score": round(score_number(t.max_score), 4),
        "status": "passed" if t.passed else "failed",
        "output": clean_text(t.output),
        "visibility": t.shown or VISIBILITY_TO_GRADESCOPE[t.visibility],
        "tags": [t.problem],
        **({"extra_data": {"line": t.line, **({"figures": t.figures} if t.figures else {})}} if t.line else {}),
    }


def to_json(result: CourseResult, records: dict[str, dict]) -> dict:
    """Gradescope's results.json of `result`, with the grader record of each of its problems
    (records: id -> rubric/fixtures). A problem the grader failed on (a NOT_GRADED flag) has no score: its tests'
    `score` is null, and so is the top-level `score` (a platform records no grade for it: no_results).

    Its top-level `output` is the notes, then what happened to each problem that could not be graded normally,
    then the sandbox level that graded it (students see it: what ran their code, and how confined). write puts
    it on disk."""
    per_problem: dict[str, int] = {}
    tests = []
    not_graded = {k[len(NOT_GRADED):] for k in result.flags if k.startswith(NOT_GRADED)}  # mark_not_graded's
    for t in result.tests:
        per_problem[t.problem] = per_problem.get(t.problem, 0) + 1
        number = (
            f"{result.problems.index(t.problem) + 1}.{per_problem[t.problem]}" if t.problem in result.problems else ""
        )
        tests.append(gradescope_test(t, number))
        if t.problem in not_graded:  # no grade, so no score (null) and no status: never a 0 anyone records
            del tests[-1]["status"]
            tests[-1]["score"] = None
    level = [f"Sandbox: {result.isolation}"] if result.isolation else []
    wall = result.wall_s if isinstance(result.wall_s, (int, float)) and math.isfinite(result.wall_s) else 0.0
    data = {
        "score": None if not_graded else result.score,
        "execution_time": round(float(wall), 2),
        "output": clean_text("\n".join([*result.notes, *not_graded_normally(result), *level])),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    extra: dict = {}  # Gradescope keeps extra_data and shows it to nobody
    if result.flags:
        extra["flags"] = dict(result.flags)
    if result.isolation:
        extra["isolation"] = result.isolation
    problems = {}
    for pid in result.problems:
        rec = records.get(pid)
        if rec is None or pid in not_graded:
            continue  # graded by an older grader, or not graded (the grader failed): stays stale, so regraded
        problems[pid] = {
            **rec,
            "notes": [clean_text(n) for n in result.problem_notes.get(pid, [])],
            "flags": [clean_text(f) for f in result.problem_flags.get(pid, [])],
            "seconds": round(float(result.problem_seconds.get(pid, 0.0)), 3),
        }
    general = [clean_text(n) for n in general_notes(result)]
    extra["grader"] = {"format": FORMAT, "notes": general, "problems": problems}
    data["extra_data"] = extra
    return data


def records_of(data: dict | None) -> dict[str, dict]:
    """The rubric/fixture record of each problem of a results.json ({} for an older grader's)."""
    record = grader_record(data)
    if record is None:
        return {}
    return {pid: {"rubric": rec.get("rubric"), "fixtures": rec.get("fixtures")}
            for pid, rec in record["problems"].items() if isinstance(rec, dict)}


def write(path: Path, data: dict) -> None:
    """Put results.json `data` (to_json's) at `path`, whole or not at all: in a submission's folder of the batch, or
    where the platform reads it."""
    write_json_atomic(path, data)


def no_results(target: Path, why: str,
               then: str = "Gradescope records no score. Rerun the autograder on this submission once the cause is "
                           "fixed.") -> int:
    """No grade, the one writer of that record on Gradescope and PrairieLearn: no results.json (the platform shows
    the run as failed and records no score; `then`, what it does and what the staff do), and why on stdout, which
    only the staff see. The exit status, 1."""
    target.unlink(missing_ok=True)
    print(f"NOT GRADED: the grader failed, not the submission; no results.json was written, so {then}\n{why}",
          flush=True)
    return 1
