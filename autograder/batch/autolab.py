"""Autolab's autoresult, the last line a grading prints on stdout: {"scores": {<problem id>: points, ...}}.

autolab_line is its one writer, for the batch CLI and for the platform's run (platforms/runtime.py). A problem
the grader failed on is left out (no grade, so no score: never a 0); a refusal leaves every problem out and says why.
"""

from __future__ import annotations

import json

from .records import Row


def autolab_line(row: Row | None, problem_ids: list[str], refused: str = "") -> str:
    """Autolab's last line: the points of `row` on each problem of `problem_ids` the grader graded; with no row (the
    grader refused to grade), no score at all and `refused`, why."""
    if row is None:
        line = {"scores": {}, "message": f"not graded: {refused}"[:1000]}
    else:
        missing = set(row.not_graded)
        line = {"scores": {p: row.scores.get(p, 0.0) for p in problem_ids if p not in missing}}
    return json.dumps(line, separators=(",", ":"), allow_nan=False)
