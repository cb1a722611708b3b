"""Grade one submission (the entry the local grader and the course grader share): open the handin, grade each
problem, collect the results. A bad submission never raises: it becomes a message and 0 for what it affects."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Callable

from . import rubric as rubric_mod
from . import runner
from .context import Course, GradeContext
from .handin_contract import HANDIN_FILES, OPTIONAL, RUN_FILES
from .intake import HandinError, Intake, found_text, open_upload
from .problems import GRADERS, RUNS, graded
from .problems.handin_runs import SKIP_TAGS
from .results import SubmissionResult, TestResult
from .safeio import clean_text, notebook_budget, quote
from .scoring import all_zero


def runs_matplotlib(notebooks) -> bool:
    """Whether a cell the grader runs in these notebooks names matplotlib (then the warm process imports it once:
    0.3 s); a speed matter only, so one that cannot be read here (malformed, past notebook_budget) counts as yes."""
    for path in notebooks:
        try:
            if notebook_budget(path):
                return True
            for cell in json.loads(path.read_bytes())["cells"]:
                skipped = set(cell.get("metadata", {}).get("tags", [])) & set(SKIP_TAGS)
                if cell["cell_type"] == "code" and not skipped and "matplotlib" in "".join(cell["source"]):
                    return True
        except Exception:  # unreadable here: the child reports it
            return True
    return False


def missing_files_notes(intake: Intake, files: Path, run_expected: bool = True) -> list[str]:
    """One note, at the top, when expected files are missing: what was expected and what the upload held
    (the trained run's files only when a run is expected: the local grader before any training says so itself)."""
    missing = [n for n in HANDIN_FILES if n not in OPTIONAL and not (files / n).is_file()
               and (run_expected or n not in RUN_FILES)]
    if not missing:
        return []
    expected = ", ".join(n if n not in OPTIONAL else f"{n} (optional)" for n in HANDIN_FILES)
    return [f"The handin lacks {', '.join(missing)}; what is missing scores 0. Expected at the top level of handin.tar "
            f"(or of the uploaded folder or .zip): {expected}. Found: {found_text(intake.found)}."]


def grade_submission(path: Path, *, case_root: Path, visibilities: tuple[str, ...] = ("public", "hidden"),
                     problems: dict[str, rubric_mod.Problem] | None = None, only: list[str] | None = None,
                     limits: runner.Limits = runner.Limits(), name: str | None = None, course: Course = Course(),
                     scratch_root: Path | None = None, run_expected: bool = True,
                     open_upload: Callable[[Path, Path], Intake] = open_upload) -> SubmissionResult:
    """Grade the handin at `path` on the given case sets; the SubmissionResult. `run_expected`, `course`,
    `scratch_root`: see GradeContext; `open_upload(path, dest)` puts the files in place (the course passes its own)."""
    start = time.monotonic()
    selected = list(graded(problems if problems is not None else rubric_mod.load(), only).values())
    result = course.result(submission=name or Path(path).name, problems=tuple(p.id for p in selected),
                           max_points={p.id: p.max_points(visibilities) for p in selected})
    workdir = Path(tempfile.mkdtemp(prefix="handin-", dir=scratch_root))
    runner.current().hold(workdir)
    try:
        files = workdir / "files"
        files.mkdir(mode=0o700)
        try:
            intake = open_upload(Path(path), files)
        except Exception as exc:  # an intake bug must not cost the student a results file either
            bug = not isinstance(exc, HandinError)
            if bug and course.raise_grader_bugs:
                raise  # the course's worker dies of it: retried, then not graded, never a score (batch/pool.py)
            why = f"internal grader error ({type(exc).__name__}); tell the course staff." if bug else clean_text(exc)
            result.notes.append(f"The handin could not be opened: {why}")
            for p in selected:
                result.tests += all_zero(p, visibilities, f"not graded: {result.notes[-1] if bug else why}")
            return result
        # With --only the other problems' files are not wanted; a note about them would mislead.
        result.notes += ([] if only else missing_files_notes(intake, files, run_expected)) + intake.notes
        shared: dict = {}  # one run of the trained model serves every problem that grades it
        preload = runner.PRELOAD + (runner.PRELOAD_NOTEBOOKS if runs_matplotlib(sorted(files.glob("*.ipynb"))) else ())
        runs = sum(n * len(visibilities) for p in selected if p.id in RUNS for name, n in [RUNS[p.id]]
                   if (files / name).is_file())
        contexts = [GradeContext(files, Path(case_root), visibilities, limits, scratch_root=workdir, course=course,
                                 cache=shared, run_expected=run_expected) for _ in selected]
        jobs = [partial(_grade_problem, p, ctx, result.submission) for p, ctx in zip(selected, contexts)]
        # One process imports torch for every run (one run: a fresh interpreter); public runs first (course.in_order).
        with runner.session(workdir, limits, preload) if runs > 1 else contextlib.nullcontext():
            done = course.in_order(jobs)
        for p, ctx, ((tests, failed), seconds) in zip(selected, contexts, done):
            notes = [clean_text(n) for n in ctx.notes]
            result.tests, result.notes = result.tests + tests, result.notes + notes
            result.flags.update(ctx.flags)
            course.graded(result, p.id, notes, ctx.flags, failed, seconds)
    finally:
        runner.current().release(workdir)
        result.wall_s = time.monotonic() - start
    return result


def _grade_problem(p: rubric_mod.Problem, ctx: GradeContext, submission: str) -> tuple[list[TestResult], str]:
    """(problem `p`'s tests, '') or (its zeros, the grader's own error): a grader bug costs this problem only."""
    try:
        return GRADERS[p.id](ctx, p), ""
    except Exception as exc:  # a grader bug must not cost the student a results file
        # The traceback is for the staff (the worker's log), not for the student's feedback.
        print(clean_text(f"grading {p.id} of {submission}: {traceback.format_exc(limit=5)}"), file=sys.stderr)
        failed = quote(f"{type(exc).__name__}: {exc}", 300)
        ctx.flags = {}
        return all_zero(p, ctx.visibilities, f"not graded: internal grader error ({failed}); this is no grade: the "
                                             "course staff will regrade it."), failed
