"""Problem `prediction`: predictions.npy's form ("format": it counts only as what model.pt's own predict() gives,
lm_model.py); the "nll" line, the model's teacher-forced NLL, is the course grader's. Functions: lm_functions.py."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..context import GradeContext
from ..handin_contract import PREDICTION_STEPS as STEPS
from ..lm.nll import prediction_nll
from ..lm.vocab import VOCAB_SIZE
from ..results import TestResult
from ..rubric_schema import Problem
from . import lm_common, lm_functions, lm_model
from .lm_common import credit

FILENAME = "predictions.npy"
INPUTS = "lm/prediction_test.npz"


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade predictions.npy and predict() on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    what = (f"raw logits (B, {STEPS}, {VOCAB_SIZE}) of predict(inp, {STEPS}) for the {{rows}} rows of "
            "prediction_test.npz")
    functions = lm_functions.grade(ctx, problem)  # first: its public run comes before the model's on hidden rows
    model_notes(ctx, problem)
    return lm_common.grade_array(ctx, problem, INPUTS, FILENAME, (STEPS, VOCAB_SIZE), "f", what,
                                 partial(_judge, ctx, problem)) + functions


def _judge(ctx: GradeContext, problem: Problem, logits: np.ndarray, _prompts) -> tuple[str, str, str]:
    """A well-formed predictions.npy judged for lm_common.grade_array."""
    return (f"{FILENAME} is well formed (shape {logits.shape}, dtype {logits.dtype})",
            model_mismatch(ctx, lm_model.model_run(ctx, problem.settings), logits),
            f"{FILENAME}: shape {logits.shape}, dtype {logits.dtype}, all finite, and its first rows are what "
            "model.pt's predict() gives. The NLL line grades model.pt itself, after you submit.")


def model_mismatch(ctx: GradeContext, run: lm_model.ModelRun, logits: np.ndarray) -> str:
    """'' when predictions.npy's first rows are what model.pt's own predict() gives, else why not (noted, flagged)."""
    head, why = lm_model.handin_head(run, logits, run.predicted, "predict")
    if why:
        return why
    differ = np.abs(run.predicted.astype(np.float64) - head) > 1e-3 * max(1.0, float(np.abs(head).max()))
    if differ.any():
        rows = int(differ.any(axis=(1, 2)).sum())
        why = (f"{FILENAME} is not what model.pt predicts: {rows} of the first {len(head)} rows "
               f"{'differs' if rows == 1 else 'differ'} from the model's own predict()")
        ctx.flags["predictions_do_not_match_model"] = f"{why}. The grader scores the model, not the array."
        ctx.note(f"prediction: {ctx.flags['predictions_do_not_match_model']}")
    return why


def model_notes(ctx: GradeContext, problem: Problem) -> None:
    """What the handed-in model did, said once: its validation figure and whether it is causal."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        ctx.note(f"prediction: {run.said(run.problem)}")
        return
    full, zero = float(problem.settings["full_credit_nll"]), float(problem.settings["zero_credit_nll"])
    note = lm_model.causal_note(run)
    if "validation" in run.teacher_forced:
        nll = prediction_nll(run.teacher_forced["validation"], run.targets["validation"])
        said = f"prediction: your model.pt's teacher-forced NLL on prediction.npz (validation) is {nll:.4f} nats/char"
        if note:  # one forward pass over the true characters: a model that sees the future reads them
            ctx.note(f"{said}, but your model is not causal, so it read the characters it was to predict: the course "
                     "grader reveals each one only after your model has answered, and finds a much higher figure.")
        else:
            ctx.note(f"{said}. The course grader computes the same figure on hidden test rows: full credit at <= "
                     f"{full:g}, none at >= {zero:g}, linear in between ({credit(nll, full, zero) * 100:.0f}% at this "
                     "figure).")
    elif run.set_problems.get("validation"):
        ctx.note(f"prediction: {run.said(run.set_problems['validation'])}")
    if note:
        ctx.note(f"prediction: {note}")
