"""What a problem's grader gets (GradeContext), and every hook the kit calls on the course it grades for (Course)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from .results import SubmissionResult, TestResult
from .rubric_schema import Problem
from .runner.limits import ChildRun, Limits
from .safeio import quote
from .scoring import Case, CaseOutcome, Line

T = TypeVar("T")


class Course:
    """The kit's hooks for a course, each body the kit's own behaviour: course_side.py's CourseSide overrides some."""

    raise_grader_bugs: bool = False  # a bug of the grader opening a handin: raised, or a note with zeros (the kit)
    result: type[SubmissionResult] = SubmissionResult  # the record of one submission's grading

    def graded(self, result: SubmissionResult, problem_id: str, notes: list[str], flags: dict[str, str], failed: str,
               seconds: float) -> None:
        """Keep in `result` what grading one problem added (`failed`: the grader's own error, or ''): nothing more."""

    def in_order(self, jobs: list[Callable[[], T]]) -> list[tuple[T, float]]:
        """Each problem's grading job run: (its value, the seconds it ran); in turn, seconds not kept."""
        return [(job(), 0.0) for job in jobs]

    def run_sets(self, ctx: GradeContext, cases: list[Case], run_set: Callable[..., ChildRun | None]) -> None:
        """run_set(cases, limits, hidden) -> its run (None: stop) on `cases`: one run of them all, none hidden."""
        run_set(cases, ctx.limits, False)

    def model_run(self, ctx: GradeContext, settings: dict, public_run: Callable[[GradeContext, dict], T]) -> T:
        """The run of the handed-in model (lm_model.model_run's): the kit's public_run(ctx, settings)."""
        return public_run(ctx, settings)

    def score_line(self, ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
        """A model-quality line (lm_common.QUALITY_LINES), which needs what the handout does not hold: 0."""
        return line.result(0.0, f"{problem.id}: the course grader scores this line (with what the handout does not "
                                "hold); this grader does not.")

    def autograd_uses(self, source: str) -> list[str]:
        """attention.py's static autograd check (autograd_source.autograd_uses): its main-guarded blocks skipped."""
        from .problems.autograd_source import autograd_uses  # a package that imports this module
        return autograd_uses(source)

    def said_record(self, label: object) -> str:
        """A record of an autograd call, as attention's grading repeats it: on one line."""
        return quote(label, 200)

    def attention_records(self, run: ChildRun, outcomes: list[CaseOutcome]) -> tuple[set[str], list[str]]:
        """What only a hostile attention run records, and why its records cannot be trusted: none."""
        return set(), []


@dataclass
class GradeContext:
    """Everything one problem needs to grade one submission. submission: the handin's folder; case_root:
    <problem>/<visibility>/ case sets; scratch_root: where run folders go (system temp if None); course: its hooks;
    cache: work a submission's problems share; flags: integrity flags for the staff; run_expected: False for the
    local grader before notebook 3 has trained (a missing run file is not trained yet)."""

    submission: Path
    case_root: Path
    visibilities: tuple[str, ...]
    limits: Limits
    scratch_root: Path | None = None
    course: Course = field(default_factory=Course)
    notes: list[str] = field(default_factory=list)
    cache: dict = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    run_expected: bool = True

    def note(self, message: str) -> None:
        """Add a note the student reads at the top of the feedback."""
        self.notes.append(message)

    def not_trained(self, name: str) -> str:
        """Why a file of the trained run is absent, for the local grader before any training."""
        return (f"{name} is not there yet: notebook 3 has no trained run under experiments/ (its training "
                "cells write one); until then what grades it scores 0.")
