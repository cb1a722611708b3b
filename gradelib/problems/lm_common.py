"""What the two language-model problems share: the handin's arrays read safely and graded, credit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from .. import safeio
from ..context import GradeContext
from ..results import TestResult
from ..safeio import SafeReadError
from ..scoring import all_zero, lines

# A handin array may be at most this many times larger than the expected one before it is refused unread.
MAX_SIZE_FACTOR = 4
MAX_HEADER_BYTES = 64 * 1024
FORMAT_LINE = "format"  # each language-model problem's line on its array's form, graded here
QUALITY_LINES = {"prediction": "nll", "generation": "perplexity"}  # the lines that score the model: the course's


def credit(value: float, full: float, zero: float) -> float:
    """Fraction of the points: 1 at or below `full`, 0 at or above `zero`, linear in between (full < zero)."""
    return min(1.0, max(0.0, (zero - value) / (zero - full)))


def fixture_array(path: Path, key: str) -> np.ndarray | None:
    """Array `key` of the case file at `path`, None when the file or the key is missing."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        return data[key] if key in data.files else None


def missing(problem_id: str, ctx: GradeContext, rel: str) -> str:
    """The message for a case file <case_root>/<rel> that is not there."""
    return (f"{problem_id}: {rel} is missing under {ctx.case_root}: the case files are incomplete "
            "(download the handout again).")


def grade_array(ctx: GradeContext, problem, rel: str, filename: str, tail: tuple[int, ...], kinds: str, what: str,
                judge: Callable) -> list[TestResult]:
    """A TestResult per array line of `problem` (those without quantities) for the handin's `filename`: a row per
    prompt of the case file <case_root>/<rel>, read by load_npy (`what`, {rows} filled in, says what it holds).
    judge(arr, prompts) gives why it is not well formed, or (what it is, why the handed-in model did not make it or
    '', the full-points message) for the 'format' line. The model-quality line is ctx.course's (score_line)."""
    problem = replace(problem, groups=tuple(g for g in problem.groups if not g.quantities))
    prompts = fixture_array(ctx.case_root / rel, "inp")
    if prompts is None:
        return all_zero(problem, ctx.visibilities, missing(problem.id, ctx, rel))
    rows = prompts.shape[0]
    arr, message = load_npy(problem.id, ctx.submission / filename, (rows, *tail), kinds, what.format(rows=rows),
                            "" if ctx.run_expected else ctx.not_trained(filename))
    judged = judge(arr, prompts) if arr is not None else message
    if isinstance(judged, str):  # not a well-formed array
        verdict = (0.0, judged)
    else:
        well_formed, why, ok = judged
        verdict = (0.0, f"{problem.id}: {well_formed}, but this line counts only for the arrays your handed-in model "
                        f"makes, and {why}.") if why else (1.0, ok)
    return [line.result(*verdict) if line.group.id == FORMAT_LINE
            else ctx.course.score_line(ctx, problem, line) for line in lines(problem, ctx.visibilities)]


def load_npy(problem_id: str, path: Path, expected_shape: tuple[int, ...], kinds: str, what: str,
             missing: str = "") -> tuple[np.ndarray | None, str]:
    """A handin .npy read the safe way (safeio: refused from its header when it is no plain array or far too large)
    and checked, as (array, "") or (None, message). A wrong row count or shape is said before a wrong dtype."""
    name = path.name
    size_cap = MAX_SIZE_FACTOR * int(np.prod(expected_shape))
    try:
        arr = safeio.read_npy(path, max_bytes=size_cap * 8 + MAX_HEADER_BYTES, kinds=kinds, max_elements=size_cap)
        shape, dtype_problem = arr.shape, ""
    except SafeReadError as exc:
        if exc.reason == "missing":
            return None, f"{problem_id}: " + (
                missing or f"{name} is missing from the handin; {what}, saved with np.save, must be in handin.tar.")
        if exc.reason == "size" and exc.shape is not None:
            return None, (f"{problem_id}: {name} has shape {exc.shape}, far larger than the expected "
                          f"{expected_shape}; it was not read.")
        if exc.reason != "dtype" or exc.shape is None:
            return None, f"{problem_id}: {exc}"
        arr, shape, dtype_problem = None, exc.shape, f"{problem_id}: {exc}"
    if len(shape) >= 1 and shape[0] != expected_shape[0] and shape[1:] == expected_shape[1:]:
        return None, (f"{problem_id}: {name} has {shape[0]} rows, expected {expected_shape[0]} (one per row of the "
                      f"fixture's inp, in the same order); shape {shape}, expected {expected_shape}.")
    if shape != expected_shape:
        return None, f"{problem_id}: {name} has shape {shape}, expected {expected_shape}: {what}."
    if arr is None:
        return None, dtype_problem
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return None, (f"{problem_id}: {name} holds {int(bad.sum())} NaN or infinite values (first at index "
                          f"{where}); logits must be finite: do not mask them to -inf or take log of a probability "
                          "of 0.")
    return arr, ""
