"""Test results and the formats they are written in.

One TestResult is one Gradescope test: a rubric line on one case set. The same
list renders as a score table for a terminal, as Gradescope's results.json
and as Autolab's {"scores": {...}} line.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .safeio import clean_text

VISIBILITY_TO_GRADESCOPE = {"public": "visible", "hidden": "after_published"}


@dataclass
class TestResult:
    problem: str
    name: str
    score: float
    max_score: float
    visibility: str  # "public" or "hidden"
    output: str = ""
    line: str = ""  # the rubric line's id (rubric.toml), stable whatever its title says
    figures: dict[str, float] = field(default_factory=dict)  # measured figures a line scored (e.g. prediction_nll)

    def __post_init__(self) -> None:
        # The last guard: whatever a grader computed, a score is a finite number and text is safe to show.
        self.name, self.output = clean_text(self.name), clean_text(self.output)
        if not _finite(self.max_score):
            self.max_score = 0.0
        if not _finite(self.score):
            self.output += f"\n(the score computed for this line was {self.score!r}, not a finite number; it counts as 0)"
            self.score = 0.0
        self.figures = {clean_text(k): float(v) for k, v in self.figures.items() if _finite(v)}

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score - 1e-9

    def to_gradescope(self, number: str) -> dict:
        return {
            "name": self.name,
            "number": number,
            "score": round(_number(self.score), 4),
            "max_score": round(_number(self.max_score), 4),
            "status": "passed" if self.passed else "failed",
            "output": clean_text(self.output),
            "visibility": VISIBILITY_TO_GRADESCOPE[self.visibility],
            "tags": [self.problem],
            **({"extra_data": {"line": self.line, **({"figures": self.figures} if self.figures else {})}}
               if self.line else {}),
        }


@dataclass
class SubmissionResult:
    submission: str
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # submission-wide messages
    problems: tuple[str, ...] = ()  # ids graded, in rubric order
    max_points: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    flags: dict[str, str] = field(default_factory=dict)  # integrity findings for the course staff
    isolation: str = ""  # sandbox level the submission's code ran under (gradelib.sandbox.LEVELS)
    # Per problem id: the notes and flag keys its grading added, and the seconds it took (notes and
    # flags hold them too); a regrade of some problems keeps the others' with these.
    problem_notes: dict[str, list[str]] = field(default_factory=dict)
    problem_flags: dict[str, list[str]] = field(default_factory=dict)
    problem_seconds: dict[str, float] = field(default_factory=dict)

    def problem_scores(self) -> dict[str, float]:
        scores = {pid: 0.0 for pid in self.problems}
        for t in self.tests:
            scores[t.problem] = scores.get(t.problem, 0.0) + _number(t.score)
        return {k: round(v, 4) for k, v in scores.items()}

    @property
    def score(self) -> float:
        return round(sum(_number(t.score) for t in self.tests), 4)

    @property
    def max_score(self) -> float:
        return round(sum(_number(v) for v in self.max_points.values()), 4)

    def to_gradescope(self) -> dict:
        per_problem: dict[str, int] = {}
        tests = []
        for t in self.tests:
            per_problem[t.problem] = per_problem.get(t.problem, 0) + 1
            number = f"{self.problems.index(t.problem) + 1}.{per_problem[t.problem]}" if t.problem in self.problems else ""
            tests.append(t.to_gradescope(number))
        out = {
            "score": self.score,
            "execution_time": round(_number(self.wall_s), 2),
            "output": clean_text("\n".join(self.notes)),
            "output_format": "text",
            "visibility": "visible",
            "stdout_visibility": "hidden",
            "tests": tests,
        }
        extra: dict = {}  # Gradescope keeps extra_data and shows it to nobody
        if self.flags:
            extra["flags"] = dict(self.flags)
        if self.isolation:
            extra["isolation"] = self.isolation
        if extra:
            out["extra_data"] = extra
        return out

    def autolab_line(self) -> str:
        return json.dumps({"scores": self.problem_scores()}, separators=(",", ":"), allow_nan=False)

    def table(self, show_hidden_output: bool = True) -> str:
        """A readable score table: one line per test, then messages of failed ones."""
        lines = [f"Submission: {self.submission}"]
        if self.isolation:
            lines.append(f"Sandbox: {self.isolation}")
        lines += [f"  note: {n}" for n in self.notes]
        width = max([len(t.name) for t in self.tests] + [20])
        for pid in self.problems:
            mine = [t for t in self.tests if t.problem == pid]
            got = sum(t.score for t in mine)
            lines.append(f"{pid:<{width + 6}} {got:6.2f} / {self.max_points.get(pid, 0):6.2f}")
            for t in mine:
                mark = "PASS" if t.passed else "FAIL"
                lines.append(f"  {mark} {t.name:<{width}} {t.score:6.2f} / {t.max_score:6.2f}")
        lines.append(f"{'TOTAL':<{width + 6}} {self.score:6.2f} / {self.max_score:6.2f}")
        failed = [t for t in self.tests if not t.passed and t.output]
        if failed:
            lines.append("")
            lines.append("Why points were lost:")
            for t in failed:
                if t.visibility == "hidden" and not show_hidden_output:
                    continue
                lines.append(f"- {t.name}:")
                lines += [f"    {line}" for line in t.output.splitlines()]
        return clean_text("\n".join(lines))


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError, OverflowError):
        return False


def _number(x) -> float:
    """`x` as a float, 0.0 when it is not a finite number."""
    return float(x) if _finite(x) else 0.0


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False))


def write_text_atomic(path: Path, text: str) -> None:
    """Write text so a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; graders and TAs share these files
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_submission(result: SubmissionResult, folder: Path) -> None:
    """results.json (Gradescope's format) and feedback.txt (the score table) for one submission.

    feedback.txt is written first: a folder with results.json counts as graded.
    """
    write_text_atomic(folder / "feedback.txt", result.table() + "\n")
    write_json_atomic(folder / "results.json", result.to_gradescope())
