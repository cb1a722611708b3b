"""What the course grader adds to the kit's grading, passed as grade_submission's `course` (GradeContext.course).

The model-quality lines (model_quality.py: score_line, and model_run, which runs the handed-in model on the hidden
rows); one run per case set (run_sets) and what the notes say of a hidden one (hidden_end, hidden_cells); the words
in which attention's grading repeats what the child's tripwires recorded: a run with a hidden input at hand may write
anything on the audit pipe or in meta.json, so a label the tripwires do not write is named, never quoted. The static
autograd check that also reads a forged main guard, and the course's records (CourseResult).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from autograder.isolation.boot import PROGRAM_EVENTS  # the events the child's boot refuses and records
from autograder.isolation.interpreter import Limits
from gradelib.problems import autograd_source

from .course_result import CourseResult
from .model_quality import model_run, score_line

__all__ = ["CourseResult", "attention_records", "autograd_uses", "hidden_cells", "hidden_end", "model_run", "run_sets",
           "score_line", "said_program", "said_record"]

# The records the attention harness's tripwires (attention_child.py's and boot.py's) write.
KNOWN_RECORDS = frozenset(
    {
        "a call removing the grader's saved-tensors hook",
        "a saved-tensors hook pushed over the grader's",
        "a new autograd engine",
        "a call switching the grader's anomaly mode",
        "a change to the grader's tripwires (anomaly mode or torch.fx.traceback)",
        "torch.autograd.backward",
        "torch.autograd.grad",
        "Tensor.backward",
        "scaled_dot_product_attention",
        "an autograd graph (tensors that require grad)",
        *(f"torch.autograd.functional.{n}" for n in ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp")),
        *(f"torch.func.{n}" for n in ("grad", "vjp", "jacrev", "jacfwd", "grad_and_value")),
    }
)


def run_sets(ctx, cases: list, run_set) -> None:
    """The kit's handin_runs.run_sets on the course grader: run_set(cases, limits, hidden) once per case set, the
    public set first, since a run that has a hidden input at hand may write it into anything it says (`hidden`: its
    words are not shown). The runs share the problem's time limit, a hidden run getting what the public one left and
    at least half of it (an honest run takes a few seconds); a run_set that returns None stops them."""
    sets: dict[str, list] = {}
    for case in cases:
        sets.setdefault(case.visibility, []).append(case)
    used, limit = 0.0, ctx.limits.timeout_s
    for visibility in sorted(sets, key=lambda v: v != "public"):
        hidden = visibility != "public"
        run = run_set(sets[visibility], replace(Limits.of(ctx.limits), timeout_s=max(limit - used, limit / 2),
                                                hidden=hidden), hidden)
        if run is None:
            return
        used += run.wall_s


def hidden_end(ctx, run) -> None:
    """attention's note on a run that did not end well, for a run that had hidden inputs at hand: how it ended, by
    kind alone (its run says so: Limits.hidden), never what it printed (it could print one)."""
    if run.timed_out or run.returncode not in (0, None):
        ctx.note(f"attention: the submission's process on the hidden cases {run.describe()} (its exit code and "
                 "output are not shown: that run had the hidden cases at hand).")


def hidden_cells(ctx, problem, notebook: str, run, report: dict | None) -> None:
    """handin_runs.note_cells for a run that had hidden inputs at hand: only how its process ended, since its own
    words could carry a hidden input (the public run named the cells)."""
    lines = [f"the notebook's process {run.describe()} before it finished running the cells"] if report is None else []
    if report is not None and run.timed_out:
        lines.append(f"the notebook's process {run.describe()}; cases after that have no result")
    if lines:
        head = "when the grader ran your notebook on the hidden cases:"
        ctx.note(f"{problem.id} ({notebook}): " + "\n    ".join([head, *lines]))


def said_program(label: object) -> str:
    """An attempt to start another program as the grader may repeat it: a known event, or that it was one."""
    return str(label) if str(label) in PROGRAM_EVENTS else "an attempt the grader's harness recorded"


def said_record(label: object) -> str:
    """A record of an autograd call as the grader may repeat it: a known label, or what kind of record it is."""
    text = str(label)
    if text in KNOWN_RECORDS:
        return text
    if text.startswith("the autograd engine ("):
        return "the autograd engine"
    return "an autograd call the grader's harness recorded"


def attention_records(run) -> tuple[set[str], list[str]]:
    """What only a hostile attention run records, as attention's grading repeats it: each attempt to start another
    program (a fresh interpreter, free of every tripwire: refused), and why its audit pipe cannot be trusted (a
    reason to withhold the backward points; none when it can)."""
    tampered = getattr(run, "events_tampered", "")  # the kit's ChildRun (portable off Linux) has none
    return {f"another program ({said_program(label)}, refused)" for label in run.event_args("program")}, \
        [f"tampered with the grader's record of autograd calls ({tampered})"] if tampered else []


# Names of the ways a module can rebind its own __name__ (or reach names the source does not spell):
# a file that uses any of them gets no benefit of the doubt for its `if __name__ == "__main__":` blocks.
META_NAMES = {"globals", "vars", "locals", "setattr", "delattr", "exec", "eval", "compile", "__import__",
              "__dict__", "__builtins__", "modules", "import_module"}


def autograd_uses(source: str) -> list[str]:
    """The kit's static autograd check (autograd_source.autograd_uses), its `if __name__ == "__main__":` blocks
    counted too unless they surely do not run on import: a forged guard (`__name__ = "__main__"` first) would."""
    return autograd_source.autograd_uses(source, main_blocks=not _main_guards_never_run(ast.parse(source)))


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
