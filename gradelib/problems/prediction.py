"""Problem `prediction`: the teacher-forced NLL of the handed-in model, and predictions.npy's form.

The quality line grades model.pt itself, rebuilt with the handin's notebook 3
code in the sandbox (problems/lm_model.py): no array the student wrote decides
it. Rubric lines (rubric.toml [problems.prediction]):

- id "format" (public): predictions.npy is present, well formed, and what the
  handed-in model predicts (its first rows against the model's own predict());
  full points or 0: an array the model did not make earns nothing, and the
  mismatch is flagged for the course staff.
- id "nll" (hidden): the mean NLL of the hidden continuations of
  prediction_test.npz, each character predicted from the prompt and the true
  characters before it (a proper score: no choice of the model's decides which
  steps count); full credit at or below settings.full_credit_nll, none at or
  above settings.zero_credit_nll, linear in between.
- lines that list quantities: notebook 3's predict() on fixed-weight models
  (predict_function) and its building blocks on fixed inputs and weights
  (collate_and_loss, causal_attention, model_building), graded by
  problems/lm_functions.py.
"""

from __future__ import annotations

import numpy as np

from ..context import GradeContext
from ..handin_contract import PREDICTION_STEPS
from ..lm.nll import prediction_nll
from ..lm.vocab import VOCAB_SIZE
from ..results import TestResult
from ..rubric_schema import Problem, ProblemSchema, Setting
from ..scoring import Line, all_zero, lines
from . import lm_common, lm_functions, lm_model
from .lm_common import below, course_line, credit, load_npy

FILENAME = "predictions.npy"
INPUTS = "lm/prediction_test.npz"
TARGETS = "lm/hidden/prediction_test_out.npz"
STEPS = PREDICTION_STEPS

SCHEMA = ProblemSchema(
    settings={
        "full_credit_nll": Setting(
            (int, float), None, "Prediction NLL (nats/char) at or below which the nll line earns all its points."
        ),
        "zero_credit_nll": Setting(
            (int, float), None, "Prediction NLL at or above which the nll line earns nothing (linear in between)."
        ),
        **lm_functions.FUNCTION_SETTINGS,
    },
    line_ids=frozenset({"format", "nll"}),
    quantities=lm_functions.QUANTITIES,
    relations=(below("full_credit_nll", "zero_credit_nll"),),
)


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade predictions.npy and predict() on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    arrays = lm_functions.split_lines(problem)[0]
    tests = _grade_arrays(ctx, arrays)
    if arrays.groups:
        model_notes(ctx, problem, _handin_logits(ctx))
    return tests + lm_functions.grade(ctx, problem)


def _handin_logits(ctx: GradeContext) -> np.ndarray | None:
    prompts = lm_common.prompts(ctx, INPUTS)
    if prompts is None:
        return None
    rows = prompts.shape[0]
    return load_npy("prediction", ctx.submission / FILENAME, (rows, STEPS, VOCAB_SIZE), "f", "")[0]


def model_mismatch(run: lm_model.ModelRun, logits: np.ndarray) -> str:
    """'' when predictions.npy's first rows are what the handed-in model's own predict() gives, else why not."""
    if run.problem:
        return f"there is no model to check it against: {run.said(run.problem)}"
    predicted = run.predicted
    if (
        predicted is None
        or predicted.ndim != 3
        or predicted.shape[1:] != logits.shape[1:]
        or len(predicted) > len(logits)
    ):
        why = run.call_problems.get("predict", "predict() returned nothing the grader could compare")
        return f"your model's predict() could not be compared with it: {run.said(why)}"
    head = logits[: len(predicted)]
    differ = np.abs(predicted.astype(np.float64) - head) > 1e-3 * max(1.0, float(np.abs(head).max()))
    if differ.any():
        rows = int(differ.any(axis=(1, 2)).sum())
        return (f"{FILENAME} is not what model.pt predicts: {rows} of the first {len(predicted)} rows "
                f"{'differs' if rows == 1 else 'differ'} from the model's own predict()")
    return ""


def _grade_arrays(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    vis = ctx.visibilities
    prompts = lm_common.prompts(ctx, INPUTS)
    if prompts is None:
        return all_zero(problem, vis, lm_common.missing("prediction", ctx, INPUTS))
    rows = prompts.shape[0]
    shape = (rows, STEPS, VOCAB_SIZE)
    what = f"raw logits (B, {STEPS}, {VOCAB_SIZE}) of predict(inp, {STEPS}) for the {rows} rows of prediction_test.npz"
    logits, message = load_npy("prediction", ctx.submission / FILENAME, shape, "f", what,
                               "" if ctx.run_expected else ctx.not_trained(FILENAME))
    tests = []
    for line in lines(problem, vis):
        group = line.group
        if group.id == "nll":
            tests.append(course_line(ctx, problem, line))
        elif logits is None:
            tests.append(line.result(0.0, message))
        elif group.id == "format":
            tests.append(_format_result(ctx, problem, line, logits))
        else:
            tests.append(line.result(0.0, f"prediction: unknown rubric line '{group.id}'"))
    return tests


def _format_result(ctx: GradeContext, problem: Problem, line: Line, logits: np.ndarray) -> TestResult:
    """Full points for a well-formed predictions.npy that the handed-in model made, none for any other."""
    why = model_mismatch(lm_model.model_run(ctx, problem.settings), logits)
    if why:
        return line.result(0.0, f"prediction: {FILENAME} is well formed (shape {logits.shape}, dtype {logits.dtype}), "
                                f"but this line counts only for the arrays your handed-in model makes, and {why}.")
    return line.result(
        1.0,
        f"{FILENAME}: shape {logits.shape}, dtype {logits.dtype}, all finite, and its first rows are "
        "what model.pt's predict() gives. The NLL line grades model.pt itself, after you submit.",
    )


def model_notes(ctx: GradeContext, problem: Problem, logits: np.ndarray | None) -> None:
    """What the handed-in model did, said once: its validation figure locally, and whether
    predictions.npy is what the model predicts."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        ctx.note(f"prediction: {run.said(run.problem)}")
        return
    full = float(problem.settings["full_credit_nll"])
    zero = float(problem.settings["zero_credit_nll"])
    note = lm_model.causal_note(run)
    if "validation" in run.teacher_forced:
        nll = prediction_nll(run.teacher_forced["validation"], run.targets["validation"])
        said = f"prediction: your model.pt's teacher-forced NLL on prediction.npz (validation) is {nll:.4f} nats/char"
        if note:  # one forward pass over the true characters: a model that sees the future reads them
            ctx.note(f"{said}, but your model is not causal, so it read the characters it was to predict: the course "
                     "grader reveals each one only after your model has answered, and finds a much higher figure.")
        else:
            ctx.note(
                f"{said}. The course grader computes the same figure on hidden test rows: full credit at <= {full:g}, "
                f"none at >= {zero:g}, linear in between ({credit(nll, full, zero) * 100:.0f}% at this figure)."
            )
    elif run.set_problems.get("validation"):
        ctx.note(f"prediction: {run.said(run.set_problems['validation'])}")
    if note:
        ctx.note(f"prediction: {note}")
    mismatch = model_mismatch(run, logits) if logits is not None else ""
    if mismatch.startswith(f"{FILENAME} is not what model.pt predicts"):
        message = f"{mismatch}. The grader scores the model, not the array."
        ctx.note(f"prediction: {message}")
        ctx.flags["predictions_do_not_match_model"] = message
