"""Problem `prediction`: the teacher-forced NLL of the handed-in model, and predictions.npy's form.

The "nll" line (hidden) grades model.pt itself, run by problems/lm_model.py: no array the student wrote decides it.
"format" counts predictions.npy only when it is what that model's predict() gives. Function lines: lm_functions.py.
"""

from __future__ import annotations

import numpy as np

from ..context import GradeContext
from ..handin_contract import PREDICTION_STEPS as STEPS
from ..lm.nll import prediction_nll
from ..lm.vocab import VOCAB_SIZE
from ..results import TestResult
from ..rubric_schema import Problem
from ..scoring import all_zero
from . import lm_common, lm_functions, lm_model
from .lm_common import credit, load_npy

FILENAME = "predictions.npy"
INPUTS = "lm/prediction_test.npz"

def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade predictions.npy and predict() on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    arrays = lm_functions.split_lines(problem)[0]
    tests = []
    if arrays.groups:
        tests, logits = _grade_arrays(ctx, arrays)
        model_notes(ctx, problem, logits)
    return tests + lm_functions.grade(ctx, problem)


def model_mismatch(run: lm_model.ModelRun, logits: np.ndarray) -> str:
    """'' when predictions.npy's first rows are what the handed-in model's own predict() gives, else why not."""
    head, why = lm_model.handin_head(run, logits, run.predicted, "predict")
    if why:
        return why
    differ = np.abs(run.predicted.astype(np.float64) - head) > 1e-3 * max(1.0, float(np.abs(head).max()))
    if differ.any():
        rows = int(differ.any(axis=(1, 2)).sum())
        return (f"{FILENAME} is not what model.pt predicts: {rows} of the first {len(head)} rows "
                f"{'differs' if rows == 1 else 'differ'} from the model's own predict()")
    return ""


def _grade_arrays(ctx: GradeContext, problem: Problem) -> tuple[list[TestResult], np.ndarray | None]:
    prompts = lm_common.prompts(ctx, INPUTS)
    if prompts is None:
        return all_zero(problem, ctx.visibilities, lm_common.missing("prediction", ctx, INPUTS)), None
    rows = prompts.shape[0]
    what = f"raw logits (B, {STEPS}, {VOCAB_SIZE}) of predict(inp, {STEPS}) for the {rows} rows of prediction_test.npz"
    logits, message = load_npy("prediction", ctx.submission / FILENAME, (rows, STEPS, VOCAB_SIZE), "f", what,
                               "" if ctx.run_expected else ctx.not_trained(FILENAME))
    verdict = None
    if logits is not None:
        verdict = lm_common.format_verdict(
            "prediction", f"{FILENAME} is well formed (shape {logits.shape}, dtype {logits.dtype})",
            model_mismatch(lm_model.model_run(ctx, problem.settings), logits),
            f"{FILENAME}: shape {logits.shape}, dtype {logits.dtype}, all finite, and its first rows are what "
            "model.pt's predict() gives. The NLL line grades model.pt itself, after you submit.")
    return lm_common.array_results(ctx, problem, "nll", verdict, message), logits


def model_notes(ctx: GradeContext, problem: Problem, logits: np.ndarray | None) -> None:
    """What the handed-in model did, said once: its validation figure locally, and whether
    predictions.npy is what the model predicts."""
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
