"""What the two language-model problems share: the handin's arrays read safely, the fixture prompts, credit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import safeio
from ..context import GradeContext
from ..results import TestResult
from ..safeio import SafeReadError
from ..scoring import lines

# A handin array may be at most this many times larger than the expected one before it is refused unread.
MAX_SIZE_FACTOR = 4
MAX_HEADER_BYTES = 64 * 1024


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
    return (f"{problem_id}: {rel} is missing under {ctx.case_root}: the case files are incomplete "
            "(download the handout again).")


def format_verdict(problem_id: str, well_formed: str, why: str, ok: str) -> tuple[float, str]:
    """The 'format' line's (fraction, message): full points for a well-formed array that the handed-in model made
    (`why` is ''), none for any other."""
    if why:
        return 0.0, (f"{problem_id}: {well_formed}, but this line counts only for the arrays your handed-in model "
                     f"makes, and {why}.")
    return 1.0, ok


def array_results(ctx: GradeContext, problem, scored: str, verdict: tuple[float, str] | None,
                  message: str) -> list[TestResult]:
    """A TestResult per array line of `problem`: `scored` is the course grader's (course_line), 'format' gets
    `verdict` (format_verdict), or `message` when the array could not be read (`verdict` None)."""
    tests = []
    for line in lines(problem, ctx.visibilities):
        if line.group.id == scored:
            tests.append(course_line(ctx, problem, line))
        elif verdict is None:
            tests.append(line.result(0.0, message))
        elif line.group.id == "format":
            tests.append(line.result(*verdict))
        else:
            tests.append(line.result(0.0, f"{problem.id}: unknown rubric line '{line.group.id}'"))
    return tests


def load_npy(problem_id: str, path: Path, expected_shape: tuple[int, ...], kinds: str, what: str,
             missing: str = "") -> tuple[np.ndarray | None, str]:
    """Read a handin .npy the safe way and check its form. Returns (array, "") or (None, message).

    safeio refuses links, special files and pickled, structured, complex or far too large arrays from the header,
    before any data is loaded. A wrong row count or shape is reported before a wrong dtype: it says more.
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
            return None, (f"{problem_id}: {name} has shape {exc.shape}, far larger than the expected "
                          f"{expected_shape}; it was not read.")
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
