"""Grade a notebook problem: run the student's notebook in the child, judge here.

A notebook problem (losses.py, masks.py) is plain data, a NotebookSpec: the notebook, the calls to make and, per
quantity, the types accepted and a hint. Cases (<case_root>/notebooks/<visibility>/cases.json) are tagged with their
problem id; only a case's inputs reach the child (child/notebook_child.py), never its expected_<quantity> arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from .. import runner as sandbox
from ..compare import Check, Observed, check
from ..context import GradeContext
from ..results import TestResult
from ..rubric_schema import Problem, ProblemSchema, Setting
from ..scoring import Case, CaseOutcome, all_zero, follow_upstream, group_results, load_cases, load_meta
from .handin_runs import observed, run_notebook_sets

CASE_FOLDER = "notebooks"
# Settings of every notebook problem (rubric.toml [problems.<id>].settings).
NOTEBOOK_SETTINGS = {
    "cell_timeout_s": Setting((int, float), 10.0, "CPU seconds one notebook cell may use before the grader stops it "
                                                  "and moves on."),
    "call_timeout_s": Setting((int, float), 5.0, "CPU seconds one call of a graded function may use."),
}


@dataclass(frozen=True)
class Call:
    """One call of a graded function; args/kwargs are 'kind:key' (kind: array, tensor, int)."""

    function: str
    args: tuple[str, ...]
    outputs: dict[str, int | None]  # quantity -> index into a returned tuple, None for the value itself
    kwargs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Quantity:
    """A graded return value: the types accepted, its formula (the hint), and what can name a cause."""

    types: tuple[str, ...]  # accepted type names; the first is the one named in messages
    hint: str  # what the value is, said with every failure
    additive_mask: bool = False  # holds -inf on purpose: compared entry for entry, -inf == -inf
    # (array, the case's arrays, the case's edge) -> a cause the grader tested, or '' (notebook_diagnoses.py).
    diagnose: Callable[[np.ndarray, dict, str], str] | None = None
    upstream: tuple[str, ...] = ()  # quantities it is usually computed from: wrong when they are


@dataclass(frozen=True)
class NotebookSpec:
    notebook: str
    calls: tuple[Call, ...]
    quantities: dict[str, Quantity]

    @property
    def functions(self) -> list[str]:
        return sorted({c.function for c in self.calls})

    def schema(self, edge_lines: bool = False) -> ProblemSchema:
        """What a problem graded from this notebook may list in the rubric (`edge_lines`: its cases tag edges)."""
        outputs = {q for c in self.calls for q in c.outputs}
        return ProblemSchema(settings=NOTEBOOK_SETTINGS, quantities=frozenset(self.quantities) | outputs,
                             edge_lines=edge_lines)


def grade_notebook(ctx: GradeContext, problem: Problem, spec: NotebookSpec) -> list[TestResult]:
    """Run the functions `spec` names from its notebook on the cases; a TestResult per (line, visibility)."""
    vis = ctx.visibilities
    src = ctx.submission / spec.notebook
    if not src.is_file():
        return all_zero(problem, vis, f"{spec.notebook} is missing from the handin; add it and submit again.")
    cases = load_cases(ctx.case_root, CASE_FOLDER, vis, problem.id)
    if not cases:
        return all_zero(problem, vis, f"no {problem.id} cases under {ctx.case_root / CASE_FOLDER}")
    outcomes, unread = run_notebook_sets(
        ctx, problem, src, spec.notebook, cases, spec.calls, problem.settings,
        lambda case, scratch, run, report: _outcome(problem, spec, case, scratch, run, report))
    if unread:
        return all_zero(problem, vis, f"{spec.notebook} could not be read as a notebook ({unread}); "
                                      "submit the .ipynb file saved by Jupyter.")
    return group_results(problem, outcomes, vis)


def _outcome(problem: Problem, spec: NotebookSpec, case: Case, scratch: Path, run: sandbox.ChildRun,
             report: dict | None) -> CaseOutcome:
    case_dir = scratch / "outputs" / case.name
    meta, refused = load_meta(case_dir / "meta.json", root=scratch)
    return judge_case(problem, spec, case, lambda q: observed(q, case_dir, meta, run, report, root=scratch,
                                                              refused=refused))


def judge_case(problem: Problem, spec: NotebookSpec, case: Case, observe, wanted=None) -> CaseOutcome:
    """Every quantity of `spec` (or the `wanted` ones) on one case: observe(q) -> Observed, compared here (from
    what the child wrote, or, for notebook_check.py's grader.check, the same calls made in the student's kernel)."""
    outcome = CaseOutcome.of(case)
    with np.load(case.path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    expected = {q: arrays[f"expected_{q}"] for q in spec.quantities if wanted is None or q in wanted}
    for q, exp in expected.items():
        tol = problem.tolerance.get(str(exp.dtype), {"rtol": 0.0, "atol": 0.0})
        got, quantity = observe(q), spec.quantities[q]
        result = _check(q, got, exp, quantity, tol)
        if not result.passed and result.stage == "values" and quantity.diagnose is not None:
            cause = quantity.diagnose(got.array, arrays, case.edge)
            if cause:
                result = _check(q, got, exp, replace(quantity, hint=cause), tol)
        outcome.checks[q] = result
    follow_upstream(outcome, {q: spec.quantities[q].upstream for q in expected})
    return outcome


def _check(name: str, got: Observed, expected: np.ndarray, quantity: Quantity, tol: dict) -> Check:
    expected_type = got.type_name if got.type_name in quantity.types else quantity.types[0]
    if not quantity.additive_mask:
        return check(name, got, expected, rtol=tol["rtol"], atol=tol["atol"], expected_type=expected_type,
                     hint=quantity.hint)
    # Present, type, shape and dtype stages as usual (on a copy without infinities) ...
    finite = None if got.array is None else np.nan_to_num(got.array, nan=0.0, neginf=0.0, posinf=0.0)
    early = check(name, Observed(got.present, got.type_name, finite, got.note), np.nan_to_num(expected, neginf=0.0),
                  rtol=0.0, atol=0.0, expected_type=expected_type, hint=quantity.hint)
    if early.stage in ("present", "type", "shape", "dtype"):
        return early
    # ... then exact values, where -inf is a value like any other.
    got64, exp64 = got.array.astype(np.float64), expected.astype(np.float64)
    same = (got64 == exp64) | (np.isnan(got64) & np.isnan(exp64))
    if same.all():
        return Check(name, True, "ok", f"'{name}' matches.", 0.0)
    wrong = np.argwhere(~same)
    first = tuple(int(i) for i in wrong[0])
    return Check(name, False, "values", f"'{name}' has wrong values: {len(wrong)} of {got64.size} entries differ, "
                 f"first at index ({', '.join(map(str, first))}): got {got64[first]:g}, expected {exp64[first]:g}. "
                 f"Hint: {quantity.hint}", float("inf"))
