"""Which submissions a TA should open, and why: the report's attention list.

A submission is listed for each of these, each said with its reason:
- a problem not graded (the grader failed: a run lost to a fault, a worker that kept dying), with what happened;
- a graded test whose message tells of a run ended from outside its limits (a fault may have touched its score);
- what results.json says at the top (results.py's notes and, for a problem that could not be graded
  normally, what happened: regrade.top_output): a file that did not parse or load, an internal grader
  error, a grader process that died (infrastructure), a time-out, or another note of the grader;
- a results.json that could not be read;
- an integrity flag;
- a score far below the class: the total, or one problem's score, under half the class median
  (in a class of at least MIN_CLASS submissions);
- a total of 0;
- what the class run found about it (`extra`): a submission_metadata.json inside the upload, times the
  late policy could not use, a file the similarity run could not read.
"""

from __future__ import annotations

import statistics

from ..grading.course_result import NOT_GRADED
from .records import Row

MIN_CLASS = 5  # fewer submissions make no class median worth comparing to
FAR_BELOW = 0.5  # listed under this share of the class median
# The grader's wording of what went wrong (gradelib's messages and the pool's), first match wins.
KINDS = (
    ("no usable results.json", ("results.json could not be read",)),
    ("infrastructure error", ("could not be graded: the grader's own process",)),
    ("internal grader error", ("internal grader error",)),
    ("time-out", ("time limit", "timed out", "ran past")),
    ("a file is missing", ("is missing from the handin", "the handin lacks")),
    (
        "a file did not parse or load",
        (
            "does not parse",
            "could not be read",
            "could not be opened",
            "could not be loaded",
            "is not valid",
            "syntax error",
            "not graded normally",
        ),
    ),
)


def kind_of(note: str) -> str:
    """What a line of the grader's notes is about, in the list's words."""
    low = note.lower()
    return next((kind for kind, words in KINDS if any(w in low for w in words)), "grader's note")


SANDBOX_LINE = "Sandbox: "  # results_json.to_json ends every output with it


def notes_of(output: str) -> list[str]:
    """results.json's top-level output as its notes: each starts at an unindented line and holds the indented
    lines after it (e.g. a process's last output). Its last line, the sandbox level that graded it, says
    nothing about the submission and is not one."""
    notes: list[str] = []
    for line in output.strip().splitlines():
        if line.startswith(SANDBOX_LINE):
            continue
        if notes and (line[:1].isspace() or not line.strip()):
            notes[-1] += "\n" + line
        elif line.strip():
            notes.append(line)
    return [n.rstrip() for n in notes]


def _far_below(rows: list[Row], problem_ids: list[str]) -> dict[str, list[str]]:
    rows = [r for r in rows if not r.not_graded]  # no score yet: neither compared nor part of the median
    if len(rows) < MIN_CLASS:
        return {}
    out: dict[str, list[str]] = {}
    for what, score in [("total", lambda r: r.total)] + [(p, lambda r, p=p: r.scores.get(p, 0.0)) for p in problem_ids]:
        median = statistics.median(score(r) for r in rows)
        if median <= 0:
            continue
        for r in rows:
            if score(r) < FAR_BELOW * median:
                out.setdefault(r.submission, []).append(
                    f"score far below the class: {what} {score(r):g}, under half the class median {median:g}")
    return out


def needs_look(
    rows: list[Row], problem_ids: list[str], extra: dict[str, list[str]] | None = None
) -> dict[str, list[str]]:
    """Submission -> why it is listed ("kind: what"), for every submission a TA should open; in name order."""
    far = _far_below(rows, problem_ids)
    out: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: r.submission):
        lost = r.not_graded
        reasons: dict[str, list[str]] = {}  # one line per reason, naming every problem it cost
        for pid in lost:
            reasons.setdefault(r.flags[NOT_GRADED + pid], []).append(pid)
        why = [f"not graded: {', '.join(pids)}: {reason}" for reason, pids in reasons.items()]
        if r.faults:
            why.append(f"a fault may have touched this score: {', '.join(r.faults[:3])}"
                       f"{' ...' if len(r.faults) > 3 else ''} (a run ended from outside its limits): regrade it")
        said = tuple(f"{pid}: not graded normally:" for pid in lost)  # the line above says it already
        why += [f"{kind_of(note.splitlines()[0])}: {note}" for note in notes_of(r.notes) if not note.startswith(said)]
        why += [f"integrity flag: {key}" for key in sorted(r.flags) if not key.startswith(NOT_GRADED)]
        if not lost and r.total <= 1e-9 and r.tests:  # (a problem not graded has no score, so no 0 either)
            why.append("scored 0 on every test")
        elif not lost:
            why += far.get(r.submission, [])
        why += [f"class run: {note}" for note in (extra or {}).get(r.submission, [])]
        if why:
            out[r.submission] = why
    return out
