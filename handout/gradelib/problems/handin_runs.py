"""Run a handin's code in the sandbox for every problem that needs it: attention.py, a notebook, a trained model.
Each run's scratch folder holds the handin file (under submission/), each case's inputs (never its expected_*
arrays), the child harness scripts and task.json; the child writes outputs/."""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from .. import runner as sandbox
from .. import safeio
from ..compare import Observed
from ..context import GradeContext
from ..results import TestResult
from ..rubric_schema import Problem
from ..safeio import quote
from ..scoring import all_zero, group_results, load_meta, observed_from_child

CHILD = Path(__file__).resolve().parent.parent / "child"
NOTEBOOK_HARNESS = ("child_common.py", "notebook_child.py")
# Cells the grader does not run: plots and demos carry this tag in the handout.
SKIP_TAGS = ("skip-grading",)
# A cell made only of otter's client calls (init, check, export) needs otter and the public tests; the grader has no
# use for it. The handout's init cell imports the client from gradelib.notebook_check.
OTTER_CELL = (r"\A(?:[ \t]*(?:#[^\n]*|import otter|from gradelib\.notebook_check import Notebook"
              r"|grader\s*=\s*(?:otter\.)?Notebook\([^\n]*\)"
              r"|grader\.(?:check|check_all|export)\([^\n]*\))?[ \t]*(?:\n|\Z))+\Z")
MAX_CELL_NOTES = 6


def run_child(ctx: GradeContext, label: str, *, src: Path, name: str, cases: list[tuple[str, Path]], child: str,
              harness: tuple[str, ...], task: dict, collect: Callable, limits: sandbox.Limits,
              prepare: Callable[[Path], dict] | None = None):
    """Run `child` in the sandbox within `limits` on the handin file `src` (as submission/<name>) and `cases` ((name,
    .npz path)), `task` written as task.json; prepare(scratch) adds files and task entries, collect(scratch, run)
    reads the outputs before the scratch folder goes. Returns (what collect returned, the run)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"grade-{label}-", dir=ctx.scratch_root))
    try:
        (scratch / "submission").mkdir()
        shutil.copyfile(src, scratch / "submission" / name)
        (scratch / "inputs").mkdir()
        for case_name, path in cases:
            with np.load(path, allow_pickle=False) as data:
                np.savez(scratch / "inputs" / f"{case_name}.npz",
                         **{k: data[k] for k in data.files if not k.startswith("expected_")})
        for script in harness:
            shutil.copyfile(CHILD / script, scratch / script)
        task = {**task, "cases": [{"name": n, "inputs": f"inputs/{n}.npz"} for n, _ in cases]}
        if prepare is not None:
            task.update(prepare(scratch))
        (scratch / "task.json").write_text(json.dumps(task, allow_nan=False))
        run = sandbox.run([child], scratch, limits)
        return collect(scratch, run), run
    finally:
        sandbox.current().release(scratch)


def run_notebook(ctx: GradeContext, label: str, src: Path, notebook: str, cases: list[tuple[str, Path]], calls,
                 settings: dict, collect: Callable, limits: sandbox.Limits, child: str = "notebook_child.py",
                 harness: tuple[str, ...] = NOTEBOOK_HARNESS, prepare: Callable[[Path], dict] | None = None):
    """Run the notebook `src` in the sandbox and call `calls` on each case's inputs; collect(scratch, run, report)
    gets the child's outputs/notebook.json as `report` (None if never written). As run_child otherwise."""
    task = {
        "notebook": f"submission/{notebook}", "skip_tags": list(SKIP_TAGS), "skip_patterns": [OTTER_CELL],
        "cell_timeout_s": float(settings["cell_timeout_s"]), "call_timeout_s": float(settings["call_timeout_s"]),
        "budget_s": max(1.0, limits.timeout_s * 0.85 - 2.0),  # a margin before the sandbox's kill: results come back
        "functions": sorted({c.function for c in calls}),
        "calls": [{"function": c.function, "args": list(c.args), "kwargs": dict(c.kwargs), "outputs": dict(c.outputs)}
                  for c in calls],
    }

    def collect_with_report(scratch: Path, run: sandbox.ChildRun):
        return collect(scratch, run, load_meta(scratch / "outputs" / "notebook.json", root=scratch)[0])

    return run_child(ctx, label, src=src, name=notebook, cases=cases, child=child, harness=harness, task=task,
                     collect=collect_with_report, prepare=prepare, limits=limits)


def observed(q: str, case_dir: Path, meta: dict | None, run: sandbox.ChildRun, report: dict | None,
             root: Path, refused: str) -> Observed:
    """What a notebook's child recorded for quantity q of a case, or why there is nothing (`refused`: why its
    meta.json was not read)."""
    if meta is None and refused:
        return Observed(False, note=f"no result: {refused}")
    if meta is None:
        stage = "running the notebook" if report is None else "calling its functions"
        return Observed(False, note=f"no result: the notebook's process {run.describe()} while {stage}")
    errors = meta.get("errors") if isinstance(meta.get("errors"), dict) else {}
    return observed_from_child(case_dir, meta, q, quote(errors.get(q, "not produced"), 800), root=root)


def grade_notebook(ctx: GradeContext, problem: Problem, notebook: str, cases: list, calls, judge: Callable,
                   said: tuple[str, str, str], **kwargs) -> list[TestResult]:
    """`problem`'s lines on the handin's `notebook`, run on `cases` (Course.run_sets): judge(case, observe) each case,
    observe(q) -> what the child recorded for q (observed); the cells that failed are noted. `said`: what comes before
    the notebook's name, after "is missing from the handin; ", and the words for no case. `kwargs`: run_notebook's."""
    vis, src, (prefix, missing, no_cases) = ctx.visibilities, ctx.submission / notebook, said
    if not src.is_file():
        return all_zero(problem, vis, f"{prefix}{notebook} is missing from the handin; {missing}")
    if not cases:
        return all_zero(problem, vis, no_cases)
    too_large = safeio.notebook_budget(src)  # the course grader's reader bounds its own parse of a notebook
    outcomes, unread = [], [too_large] if too_large else []

    def run_set(mine: list, limits: sandbox.Limits, hidden: bool) -> sandbox.ChildRun | None:
        def collect(scratch: Path, run: sandbox.ChildRun, report: dict | None) -> None:
            if report is not None and report.get("read_error"):
                unread.append(quote(report["read_error"], 300))
            else:
                for case in mine:
                    meta, refused = load_meta(scratch / "outputs" / case.name / "meta.json", root=scratch)
                    outcomes.append(judge(case, partial(observed, case_dir=scratch / "outputs" / case.name, meta=meta,
                                                        run=run, report=report, root=scratch, refused=refused)))
                note_cells(ctx, problem, notebook, run, report, hidden)

        run = run_notebook(ctx, problem.id, src, notebook, [(c.name, c.path) for c in mine], calls, problem.settings,
                           collect, limits=limits, **kwargs)[1]
        return None if unread else run

    if not unread:
        ctx.course.run_sets(ctx, cases, run_set)
    return all_zero(problem, vis, f"{prefix}{notebook} could not be read as a notebook ({unread[0]}); submit the "
                    ".ipynb file saved by Jupyter.") if unread else group_results(problem, outcomes, vis)


def note_cells(ctx: GradeContext, problem: Problem, notebook: str, run: sandbox.ChildRun, report: dict | None,
               hidden: bool) -> None:
    """Tell the student which cells of `notebook` failed to run, and how its process ended if that cut the run short;
    for a run that had hidden inputs at hand (`hidden`), only how it ended: its own words could carry one."""
    lines = []
    if report is None:
        lines.append(f"the notebook's process {run.describe()} before it finished running the cells")
    elif not hidden:
        for cell in report.get("cells", []):
            if isinstance(cell, dict) and cell.get("status") in ("raised", "syntax error", "timed out"):
                lines.append(f"{quote(cell.get('label') or 'code cell ' + str(cell.get('cell')), 60)} "
                             f"(`{quote(cell.get('first_line'), 60)}`) {cell.get('status')}: "
                             f"{quote(cell.get('message'), 320)}")
    if report is not None and run.timed_out:
        lines.append(f"the notebook's process {run.describe()}; cases after that have no result")
    if lines:
        more = [f"... and {len(lines) - MAX_CELL_NOTES} more"] if len(lines) > MAX_CELL_NOTES else []
        head = f"when the grader ran your notebook{' on the hidden cases' if hidden else ''}:"
        ctx.note(f"{problem.id} ({notebook}): " + "\n    ".join([head, *lines[:MAX_CELL_NOTES], *more]))
