"""What a problem's grader gets: the handin, the cases, the limits, a place for notes."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runner.limits import Limits


@dataclass
class GradeContext:
    """Everything one problem needs to grade one submission.

    submission: folder holding the handin's files (already extracted and vetted).
    case_root: folder with <problem>/<visibility>/ case sets (tests/ in the handout;
        the course staff's copy adds the hidden sets).
    visibilities: the case sets to grade on, ("public",) or ("public", "hidden").
    limits: resources the submission's process may use.
    scratch_root: where per-run scratch folders are made (system temp if None).
    course: what the course grader adds, None in the handout (which holds no hidden rows
        and no oracle): course.score_line(ctx, problem, line), the TestResult of a
        model-quality line only it scores (problems/lm_common.course_line), and
        course.reveal(outputs, inputs, sets), which reveals the hidden rows' characters to
        the handed-in model one step at a time (problems/lm_model.py), and course.said_record and
        said_program, which name the child's records without quoting a hidden run (problems/attention.py).
    run_expected: False for the local grader before notebook 3 has trained: a missing
        run file is said to be not trained yet rather than missing from the handin.
    """

    submission: Path
    case_root: Path
    visibilities: tuple[str, ...]
    limits: Limits
    scratch_root: Path | None = None
    course: Any = None
    notes: list[str] = field(default_factory=list)
    # Work shared by problems of one submission (e.g. the run of its trained model).
    cache: dict = field(default_factory=dict)
    # Integrity flags for the course staff (e.g. arrays that do not match the handed-in model).
    flags: dict[str, str] = field(default_factory=dict)
    run_expected: bool = True

    def new_scratch(self, label: str) -> Path:
        """A new folder for one run under the submission's scratch root."""
        return Path(tempfile.mkdtemp(prefix=f"grade-{label}-", dir=self.scratch_root))

    def note(self, message: str) -> None:
        """Add a note the student reads at the top of the feedback."""
        self.notes.append(message)

    def not_trained(self, name: str) -> str:
        """Why a file of the trained run is absent, for the local grader before any training."""
        return (f"{name} is not there yet: notebook 3 has no trained run under experiments/ (its training "
                "cells write one); until then what grades it scores 0.")
