"""What a problem's grader gets: the handin, the cases, the limits, a place for notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runner.limits import Limits


@dataclass
class GradeContext:
    """Everything one problem needs to grade one submission. submission: the handin's folder; case_root:
    <problem>/<visibility>/ case sets; scratch_root: where run folders go (system temp if None); course: the course
    grader's additions (score_line, model_run, run_sets, ...), None in the handout; cache: work a submission's
    problems share; flags: integrity flags for the staff; run_expected: False for the local grader before notebook 3
    has trained (a missing run file is not trained yet)."""

    submission: Path
    case_root: Path
    visibilities: tuple[str, ...]
    limits: Limits
    scratch_root: Path | None = None
    course: Any = None
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
