"""What the two language-model problems share: the handin's arrays read safely, the fixture prompts, credit.

problems/prediction.py and problems/generation.py each grade an array the trained
run wrote (predictions.npy, generated.npy) and a figure of the handed-in model
between two thresholds; these helpers are the parts they have in common.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import safeio
from ..context import GradeContext
from ..safeio import SafeReadError

# A handin array may be at most this many times larger than the expected one before it is refused unread.
MAX_SIZE_FACTOR = 4
MAX_HEADER_BYTES = 64 * 1024


def below(low: str, high: str):
    """A relation between two thresholds: full credit must be easier to reach than none."""
    return lambda s: None if s[low] < s[high] else f"'{low}' ({s[low]:g}) must be below '{high}' ({s[high]:g})"


def credit(value: float, full: float, zero: float) -> float:
    """Fraction of the points: 1 at or below `full`, 0 at or above `zero`, linear in between."""
    if value <= full:
        return 1.0
    if value >= zero:
        return 0.0
    return (zero - value) / (zero - full)


def fixture_array(path: Path, key: str) -> np.ndarray | None:
    """Array `key` of the case file at `path`, None when the file or the key is missing."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        return data[key] if key in data.files else None


def prompts(ctx: GradeContext, rel: str) -> np.ndarray | None:
    """The prompts (`inp`) of the case file <case_root>/<rel>, None when it is missing."""
    return fixture_array(ctx.case_root / rel, "inp")


def course_line(ctx: GradeContext, problem, line):
    """A model-quality line only the course grader scores (prediction's NLL on the hidden rows, generation's
    perplexity under the oracle: what the handout does not hold), through its ctx.course; 0 elsewhere."""
    if ctx.course is None:
        return line.result(0.0, f"{problem.id}: the course grader scores this line (with what the handout does not "
                                "hold); this grader does not.")
    return ctx.course.score_line(ctx, problem, line)


def missing(problem_id: str, ctx: GradeContext, rel: str) -> str:
    """The message for a case file <case_root>/<rel> that is not there."""
    return (
        f"{problem_id}: {rel} is missing under {ctx.case_root}: "
        "the case files are incomplete (download the handout again)."
    )


def load_npy(problem_id: str, path: Path, expected_shape: tuple[int, ...], kinds: str, what: str,
             missing: str = "") -> tuple[np.ndarray | None, str]:
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
            return None, f"{problem_id}: " + (
                missing or f"{name} is missing from the handin; {what}, saved with np.save, must be in handin.tar."
            )
        if exc.reason == "size" and exc.shape is not None:
            return (
                None,
                f"{problem_id}: {name} has shape {exc.shape}, far larger than the expected {expected_shape}; "
                "it was not read.",
            )
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
