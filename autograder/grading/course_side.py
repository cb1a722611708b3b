"""The course grader's hooks on the kit's grading (CourseSide, gradelib.context.Course's subclass), passed as
grade_submission's `course` (GradeContext.course).

The model-quality lines (model_quality.py: score_line, and model_run, which runs the handed-in model on the hidden
rows); one run per case set (run_sets), every public run of a submission before any hidden one (in_order,
run_order.py); the words in which attention's grading repeats what the child's tripwires recorded: a run with a
hidden input at hand may write anything on the audit pipe or in meta.json, so a label the tripwires do not write is
named, never quoted. The static autograd check that also reads a forged main guard, and the course's records
(CourseResult).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Callable, TypeVar

from autograder.isolation.boot import PROGRAM_EVENTS  # the events the child's boot refuses and records
from autograder.isolation.guards import LABELS, REFUSED, alive_token
from autograder.isolation.interpreter import Limits
from gradelib.context import Course, GradeContext
from gradelib.problems import autograd_source
from gradelib.results import TestResult
from gradelib.rubric_schema import Problem
from gradelib.runner.limits import ChildRun
from gradelib.scoring import Case, CaseOutcome, Line

from . import model_quality, run_order
from .course_result import CourseResult

T = TypeVar("T")

# The records the attention harness's tripwires (attention_child.py's and guards.py's) write.
KNOWN_RECORDS = frozenset({"torch.autograd.backward", "torch.autograd.grad", "Tensor.backward",
                           "scaled_dot_product_attention", *LABELS})
# Backward quantities: a case that has one was run through backward (the stage after forward).
BACKWARD = frozenset({"dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv", "dLdX"})


def said_program(label: object) -> str:
    """An attempt to start another program as the grader may repeat it: a known event, or that it was one."""
    return str(label) if str(label) in PROGRAM_EVENTS else "an attempt the grader's harness recorded"


def said_refused(event: object) -> str:
    """A refused audit event as the grader may repeat it (a hidden run may write anything there): a known one, or
    what kind it is."""
    text = str(event)
    if text in REFUSED or text in ("open", "import", "object.__getattr__", "object.__setattr__", "object.__delattr__"):
        return text
    return "ctypes" if text.startswith("ctypes.") else "an attempt the grader's harness recorded"


def stages_run(outcomes: list) -> int:
    """How many stages (each case's forward, then its backward) produced a quantity the grader read."""
    return sum(any(c.stage not in ("present", "unchecked") for q, c in o.checks.items() if (q in BACKWARD) == back)
               for o in outcomes for back in (False, True))


def silent_guards(keys: list[str], heartbeats: list[str], stages: int) -> str:
    """Why a run's guards cannot have been in place through its `stages` ('' when they were): the reporter sends
    the run's key first, then after each stage a heartbeat numbered from 0 and signed with it (guards.py)."""
    if not stages:
        return ""
    if len(keys) != 1:
        return "no key record" if not keys else "more than one key record"
    try:
        key = bytes.fromhex(keys[0])
    except ValueError:
        return "a key record that is not one"
    signed = [f"{n} {alive_token(key, n)}" for n in range(len(heartbeats))]
    if heartbeats != signed:
        return "a heartbeat not signed with the run's key"
    if len(heartbeats) < stages:
        return f"{len(heartbeats)} heartbeats for {stages} stages"
    return ""


# Names of the ways a module can rebind its own __name__ (or reach names the source does not spell):
# a file that uses any of them gets no benefit of the doubt for its `if __name__ == "__main__":` blocks.
META_NAMES = {"globals", "vars", "locals", "setattr", "delattr", "exec", "eval", "compile", "__import__",
              "__dict__", "__builtins__", "modules", "import_module"}


def _main_guards_never_run(tree: ast.Module) -> bool:
    """Whether the module's `if __name__ == "__main__":` blocks surely do not run when it is imported:
    it never binds __name__ itself nor uses META_NAMES."""
    return not any(
        (isinstance(node, ast.Name) and ((node.id == "__name__" and not isinstance(node.ctx, ast.Load))
                                         or node.id in META_NAMES))
        or (isinstance(node, ast.Attribute) and node.attr in META_NAMES)
        or (isinstance(node, (ast.Global, ast.Nonlocal)) and "__name__" in node.names)
        or (isinstance(node, ast.Constant) and node.value == "__name__")
        or (isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.asname == "__name__" for a in node.names))
        for node in ast.walk(tree))


class CourseSide(Course):
    """What the course grader changes of the kit's grading (see the module's docstring); each hook's contract is
    gradelib.context.Course's."""

    raise_grader_bugs = True  # the worker dies of it: retried, then not graded, never a score (batch/pool.py)

    result = CourseResult  # the kit's record, with each problem's notes, flags and seconds

    def graded(self, result: CourseResult, problem_id: str, notes: list[str], flags: dict[str, str], failed: str,
               seconds: float) -> None:
        """CourseResult.graded: a regrade keeps the other problems' notes, flags and seconds."""
        result.graded(problem_id, notes, flags, failed, seconds)

    def in_order(self, jobs: list[Callable[[], T]]) -> list[tuple[T, float]]:
        """run_order.in_order: every public run of the submission before any hidden one."""
        return run_order.in_order(jobs)

    def run_sets(self, ctx: GradeContext, cases: list[Case], run_set: Callable[..., ChildRun | None]) -> None:
        """run_set(cases, limits, hidden) once per case set, the public set first, since a run that has a hidden
        input at hand may write it into anything it says (`hidden`: its words are not shown); the hidden set waits
        until the submission's other problems have done their public runs (run_order.py). The runs share the
        problem's time limit, a hidden run getting what the public one left and at least half of it (an honest run
        takes a few seconds); a run_set that returns None stops them."""
        sets: dict[str, list] = {}
        for case in cases:
            sets.setdefault(case.visibility, []).append(case)
        used, limit = 0.0, ctx.limits.timeout_s
        for visibility in sorted(sets, key=lambda v: v != "public"):
            hidden = visibility != "public"
            if hidden:
                run_order.hidden_run()
            else:
                run_order.public_run("a public case set")
            run = run_set(sets[visibility], replace(Limits.of(ctx.limits), timeout_s=max(limit - used, limit / 2),
                                                    hidden=hidden), hidden)
            if run is None:
                return
            used += run.wall_s

    def model_run(self, ctx: GradeContext, settings: dict, public_run: Callable[[GradeContext, dict], T]) -> T:
        """model_quality.model_run: the hidden rows revealed step by step (the public rows alone: the kit's run)."""
        return model_quality.model_run(ctx, settings)

    def score_line(self, ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
        """model_quality.score_line: the NLL on the hidden rows, the generations' perplexity under the oracle."""
        return model_quality.score_line(ctx, problem, line)

    def autograd_uses(self, source: str) -> list[str]:
        """The kit's static autograd check (autograd_source.autograd_uses), its `if __name__ == "__main__":` blocks
        counted too unless they surely do not run on import: a forged guard (`__name__ = "__main__"` first) would."""
        return autograd_source.autograd_uses(source, main_blocks=not _main_guards_never_run(ast.parse(source)))

    def said_record(self, label: object) -> str:
        """A record of an autograd call as the grader may repeat it: a known label, or what kind of record it is."""
        text = str(label)
        if text in KNOWN_RECORDS:
            return text
        if text.startswith("the autograd engine ("):
            return "the autograd engine"
        return "an autograd call the grader's harness recorded"

    def attention_records(self, run: ChildRun, outcomes: list[CaseOutcome]) -> tuple[set[str], list[str]]:
        """What only a hostile attention run records, as attention's grading repeats it: each attempt to start another
        program (a fresh interpreter, free of every tripwire) or to reach the grader's guards, each refused, and why
        its audit pipe or guards cannot be trusted (a reason to withhold the backward points; none when they can). A
        run whose guards could not be set is the grader's failure: an error, so that the problem counts as not graded.
        `outcomes`: its cases' CaseOutcomes, whose stages must each have sent a heartbeat (`silent_guards`)."""
        tampered = getattr(run, "events_tampered", None)  # the kit's ChildRun (portable off Linux) has none
        if tampered is None:
            return set(), []
        if run.event_args("guards"):
            raise RuntimeError("the grader's guards could not be set in the attention run")
        attempts = {f"another program ({said_program(label)}, refused)" for label in run.event_args("program")}
        attempts |= {f"a way to the grader's guards ({said_refused(e)}, refused)" for e in run.event_args("refused")}
        reasons = [f"tampered with the grader's record of autograd calls ({tampered})"] if tampered else []
        silent = silent_guards(run.event_args("key"), run.event_args("alive"), stages_run(outcomes))
        return attempts, reasons + ([f"ran with the grader's tripwires silenced ({silent})"] if silent else [])
