"""Grade one submission: open the handin, grade each problem, collect the results.

Used by the instructor CLI (autograder/autograder.py, public and hidden cases)
and by the handout's local autograder (public cases only). It never raises for
a bad submission: whatever is wrong becomes a message and a score of 0 for the
parts it affects.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from . import rubric as rubric_mod
from .context import GradeContext
from .results import SubmissionResult, TestResult
from .sandbox import Limits, isolation_level
from .scoring import all_zero
from .intake import HandinError, open_handin
from .lm.metrics import Oracle
from .problems import GRADERS

OracleLoader = Callable[[Path, float], Oracle]


def grade_submission(
    path: Path,
    *,
    case_root: Path,
    visibilities: tuple[str, ...] = ("public", "hidden"),
    problems: dict[str, rubric_mod.Problem] | None = None,
    only: list[str] | None = None,
    limits: Limits = Limits(),
    name: str | None = None,
    oracle_loader: OracleLoader | None = None,
    scratch_root: Path | None = None,
) -> SubmissionResult:
    """Grade the handin at `path` on the given case sets.

    `oracle_loader(lm_dir, eps)` gives the oracle that scores generated text; the staff
    grader passes one, the handout's local grader has none. Scratch folders are made
    under `scratch_root` (the system temp folder if None): the batch gives each
    worker its own and removes it whatever happens to the worker.
    """
    start = time.monotonic()
    problems = problems if problems is not None else rubric_mod.load()
    selected = [p for p in problems.values() if p.id in GRADERS and (not only or p.id in only)]
    result = SubmissionResult(
        submission=name or Path(path).name,
        problems=tuple(p.id for p in selected),
        max_points={
            p.id: sum(p.share(g, v) for g in p.groups for v in visibilities if v in g.visibilities) for p in selected
        },
        isolation=isolation_level(),
    )
    workdir = Path(tempfile.mkdtemp(prefix="handin-", dir=scratch_root))
    # Traversable (not listable) so a child running as `nobody` reaches its own scratch.
    workdir.chmod(0o711)
    try:
        files = workdir / "files"
        files.mkdir(mode=0o700)
        try:
            result.notes += open_handin(Path(path), files)
        except HandinError as exc:
            result.notes.append(f"The handin could not be opened: {exc}")
            for p in selected:
                result.tests += all_zero(p, visibilities, f"not graded: {exc}")
            return result
        for p in selected:
            ctx = GradeContext(files, Path(case_root), visibilities, limits, scratch_root=workdir, oracle_loader=oracle_loader)
            try:
                tests: list[TestResult] = GRADERS[p.id](ctx, p)
            except Exception:  # a grader bug must not cost the student a results file
                detail = traceback.format_exc(limit=3)
                tests = all_zero(p, visibilities, f"internal grader error; please tell the course staff.\n{detail}")
            result.tests += tests
            result.notes += ctx.notes
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        result.wall_s = time.monotonic() - start
    return result
