"""The course's SubmissionResult and TestResult: the kit's, plus what its records (results.json, a regrade) keep."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gradelib.results import SubmissionResult, TestResult
from gradelib.rubric_schema import Problem
from gradelib.safeio import clean_text

NOT_GRADED = "not graded: "  # a flag key NOT_GRADED + problem id: the grader failed there, not the submission
GRADER_FAULTS = ("RunLost: ", "StartFailure: ")  # how the kit names the isolation's faults (GraderFault) it caught


def finite(x) -> bool:
    """Whether `x` is a finite number."""
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError, OverflowError):
        return False


def score_number(x) -> float:
    """`x` as a float, 0.0 when it is not a finite number."""
    return float(x) if finite(x) else 0.0


@dataclass
class CourseTest(TestResult):
    """A test as the course records it: the figures its line measured (e.g. prediction_nll: the staff's report) and
    a hidden test's visibility on Gradescope (the rubric's hidden_tests; '' for the default)."""

    figures: dict[str, float] = field(default_factory=dict)
    shown: str = ""

    def __post_init__(self) -> None:
        # The last guard: whatever the course computed or a results.json held, a score is a finite number.
        super().__post_init__()
        if not finite(self.score):
            said = f"the score computed for this line was {self.score!r}, not a finite number; it counts as 0"
            self.output, self.score = f"{self.output}\n({said})", 0.0
        self.score, self.max_score = float(self.score), score_number(self.max_score)
        self.figures = {clean_text(k): float(v) for k, v in self.figures.items() if finite(v)}

    @property
    def grades_run(self) -> bool:
        """A line that measured a figure (notebook 3's NLL) grades the run's files too."""
        return bool(self.figures) or super().grades_run


@dataclass
class CourseResult(SubmissionResult):
    """Per problem id, its notes, flag keys (in notes and flags too) and seconds: a regrade keeps the others'."""

    isolation: str = ""  # the level the submission's code ran under (autograder/isolation/levels.py)
    problem_notes: dict[str, list[str]] = field(default_factory=dict)
    problem_flags: dict[str, list[str]] = field(default_factory=dict)
    problem_seconds: dict[str, float] = field(default_factory=dict)

    def graded(self, problem_id: str, notes: list[str], flags: dict[str, str], failed: str, seconds: float) -> None:
        """Keep what grading `problem_id` added (gradelib.grade calls it); `failed`: the grader's own error, or ''."""
        self.problem_notes[problem_id] = list(notes)
        self.problem_flags[problem_id] = list(flags)
        if failed:  # a run lost to a fault (isolation's GraderFault) says what happened; anything else is a bug
            fault = failed.split(": ", 1)[1] if failed.startswith(GRADER_FAULTS) else ""
            self.mark_not_graded(problem_id, fault or f"internal grader error: {failed}")
        self.problem_seconds[problem_id] = round(seconds, 3)

    def mark_not_graded(self, problem_id: str, why: str) -> None:
        """The grader itself failed on this problem: a flag for the staff; its zeros are no grade (regrade it)."""
        key = NOT_GRADED + problem_id
        self.flags[key] = f"{why} (an internal failure, not the submission's: regrade it)"
        self.problem_flags.setdefault(problem_id, []).append(key)

    def recorded(self, problems: dict[str, Problem]) -> CourseResult:
        """`self`, each test a CourseTest, a hidden one shown on Gradescope as its problem's hidden_tests says."""
        self.tests = [t if isinstance(t, CourseTest) else CourseTest(**vars(t)) for t in self.tests]
        for t in self.tests:
            if t.visibility == "hidden":
                t.shown = problems[t.problem].hidden_tests
        return self
