"""Problem `prediction`: the NLL of the handin's predictions.npy against the hidden targets.

No student code runs here: the handin holds the logits its notebook computed
for prediction_test.npz, and this process reads them as plain numbers (header
first, no pickles, bounded size), checks their form, and scores them with
gradelib/lm/metrics.py. Rubric lines (rubric.toml [problems.prediction]):

- id "format" (public): the file is present and well formed; full points or 0.
- id "nll" (hidden): on-track NLL against the hidden targets, full credit at or
  below settings.full_credit_nll, none at or above settings.zero_credit_nll,
  linear in between.
- lines that list quantities (predict_function): notebook 3's predict() on
  fixed-weight models, graded by problems/lm_functions.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from . import lm_functions
from .. import safeio
from ..context import GradeContext
from ..lm.metrics import prediction_report
from ..lm.vocab import VOCAB_SIZE
from ..results import TestResult
from ..rubric import Problem
from ..safeio import SafeReadError
from ..scoring import all_zero

FILENAME = "predictions.npy"
INPUTS = "lm/prediction_test.npz"
TARGETS = "lm/hidden/prediction_test_out.npz"
STEPS = 20
# A handin array may be at most this many times larger than the expected one before it is refused unread.
MAX_SIZE_FACTOR = 4
MAX_HEADER_BYTES = 64 * 1024


def load_npy(problem_id: str, path: Path, expected_shape: tuple[int, ...], kinds: str, what: str) -> tuple[np.ndarray | None, str]:
    """Read a handin .npy the safe way and check its form. Returns (array, "") or (None, message).

    gradelib/safeio.py reads it: a link or special file, pickled (object), structured,
    complex or long-double arrays and arrays far larger than expected are refused from
    the header, before any data is loaded. A wrong row count or shape is reported
    before a wrong dtype: it says more about what went wrong.
    """
    name = path.name
    size_cap = MAX_SIZE_FACTOR * int(np.prod(expected_shape))
    try:
        arr = safeio.read_npy(path, max_bytes=size_cap * 8 + MAX_HEADER_BYTES, kinds=kinds, max_elements=size_cap)
        shape, dtype_problem = arr.shape, ""
    except SafeReadError as exc:
        if exc.reason == "missing":
            return None, f"{problem_id}: {name} is missing from the handin; {what}, saved with np.save, must be in handin.tar."
        if exc.reason == "size" and exc.shape is not None:
            return None, f"{problem_id}: {name} has shape {exc.shape}, far larger than the expected {expected_shape}; it was not read."
        if exc.reason != "dtype" or exc.shape is None:
            return None, f"{problem_id}: {exc}"
        arr, shape, dtype_problem = None, exc.shape, f"{problem_id}: {exc}"
    if len(shape) >= 1 and shape[0] != expected_shape[0] and shape[1:] == expected_shape[1:]:
        return None, (
            f"{problem_id}: {name} has {shape[0]} rows, expected {expected_shape[0]} (one per row of the "
            f"fixture's inp, in the same order); shape {shape}, expected {expected_shape}."
        )
    if shape != expected_shape:
        return None, f"{problem_id}: {name} has shape {shape}, expected {expected_shape}: {what}."
    if arr is None:
        return None, dtype_problem
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return None, (
                f"{problem_id}: {name} holds {int(bad.sum())} NaN or infinite values (first at index {where}); "
                "logits must be finite: do not mask them to -inf or take log of a probability of 0."
            )
    return arr, ""


def credit(value: float, full: float, zero: float) -> float:
    """Fraction of the points: 1 at or below `full`, 0 at or above `zero`, linear in between."""
    if value <= full:
        return 1.0
    if value >= zero:
        return 0.0
    return (zero - value) / (zero - full)


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    arrays = lm_functions.split_lines(problem)[0]
    return _grade_arrays(ctx, arrays) + lm_functions.grade(ctx, problem)


def _grade_arrays(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    vis = ctx.visibilities
    inputs = ctx.case_root / INPUTS
    if not inputs.is_file():
        return all_zero(problem, vis, f"prediction: {INPUTS} is missing under {ctx.case_root}; run make fixtures.")
    with np.load(inputs, allow_pickle=False) as data:
        rows = data["inp"].shape[0]
    shape = (rows, STEPS, VOCAB_SIZE)
    what = f"raw logits (B, {STEPS}, {VOCAB_SIZE}) of predict(inp, {STEPS}) for the {rows} rows of prediction_test.npz"
    logits, message = load_npy("prediction", ctx.submission / FILENAME, shape, "f", what)
    settings = problem.settings
    tests = []
    for group in problem.groups:
        for v in vis:
            if v not in group.visibilities:
                continue
            points = problem.share(group, v)
            name = f"{problem.id}: {group.title} [{v}]"
            if logits is None:
                tests.append(TestResult(problem.id, name, 0.0, points, v, message))
            elif group.id == "format":
                tests.append(TestResult(problem.id, name, points, points, v,
                                        f"{FILENAME}: shape {logits.shape}, dtype {logits.dtype}, all finite. "
                                        "Its NLL against the hidden targets is graded after you submit."))
            elif group.id == "nll":
                tests.append(_score_nll(ctx, problem, name, points, v, logits, settings))
            else:
                tests.append(TestResult(problem.id, name, 0.0, points, v, f"prediction: unknown rubric line '{group.id}'"))
    return tests


def _score_nll(ctx, problem, name, points, vis, logits, settings) -> TestResult:
    path = ctx.case_root / TARGETS
    if not path.is_file():
        return TestResult(problem.id, name, 0.0, points, vis, f"prediction: the targets {TARGETS} are missing under {ctx.case_root}.")
    with np.load(path, allow_pickle=False) as data:
        targets = data["out"]
    report = prediction_report(logits, targets)
    full, zero = float(settings["full_credit_nll"]), float(settings["zero_credit_nll"])
    if not math.isfinite(report["on_track_nll"]):
        return TestResult(problem.id, name, 0.0, points, vis, (
            f"prediction: the NLL of {FILENAME} is {report['on_track_nll']}, not a finite number, so this line scores 0: "
            "its logits are finite but so far apart that their softmax gives a target probability 0 (or no number at "
            "all) in float64. Save the raw logits predict returns (float32), without rescaling them."))
    frac = credit(report["on_track_nll"], full, zero)
    text = (
        f"prediction NLL {report['on_track_nll']:.4f} nats/char over the {report['on_track_steps']} on-track steps "
        f"(step 0, and later steps while your greedy picks matched the true text); "
        f"full credit at <= {full}, none at >= {zero}: {frac * points:.2f} of {points:g} points.\n"
        f"For information: step-0 NLL {report['step0_nll']:.4f}; NLL over all {targets.size} steps "
        f"{report['all_steps_nll']:.4f} (steps after a wrong greedy pick are not graded)."
    )
    if frac < 1.0:
        text += (
            "\nHint: compare with the validation NLL the notebook prints for prediction.npz; if they differ "
            "much, predict may not condition step t on the prompt plus the greedy picks of steps < t, or the "
            "rows may be out of order."
        )
    return TestResult(problem.id, name, frac * points, points, vis, text)
