"""Compare one computed quantity with its expected value and say why it differs.

A check runs its stages in order -- present, type, shape, dtype, values -- and
stops at the first that fails, so a message always names the earliest problem:

    'dLdK' has the wrong shape: got (2, 6, 4), expected (2, 4, 6).

Only plain numpy arrays reach this module: the submission's process hands back
arrays, and the comparison runs in the grader's process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STAGES = ("present", "type", "shape", "dtype", "values")


@dataclass(frozen=True)
class Observed:
    """What the submission produced for one quantity.

    present: the attribute or return value exists.
    type_name: fully qualified type of the object, e.g. 'torch.Tensor'.
    array: its contents as a plain numpy array, when it could be converted.
    note: why it is absent (an exception in the student's code, a timeout).
    """

    present: bool
    type_name: str | None = None
    array: np.ndarray | None = None
    note: str = ""
    # Why the quantity could not be checked on this case (an earlier stage of the computation raised).
    unchecked: str = ""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    stage: str  # the first failing stage, or "ok"
    message: str
    max_abs_error: float | None = None
    ratio: float | None = None  # got / expected when a constant factor is all that is wrong
    dtype: str = ""  # of the expected values, once the values stage was reached
    # A float64 quantity whose values are wrong only at float32 precision (see FLOAT32_LEVEL).
    float32_level: bool = False
    # Right, but the expected values are all zero: what blank or zeroed output gets right too (T = 1's score
    # gradients), so it shows nothing of the code; the edge rule wants a right answer that does.
    trivial: bool = False


def _fmt_index(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def constant_ratio(got: np.ndarray, expected: np.ndarray, rtol: float = 1e-4) -> float | None:
    """got / expected when it is the same number (not 1, to `rtol`) at every entry that is not ~0, else None."""
    mask = np.abs(expected) > 1e-6 * max(1.0, float(np.abs(expected).max()))
    if mask.sum() < 2:
        return None
    r = got[mask] / expected[mask]
    ratio = float(np.median(r))
    if abs(ratio - 1.0) < 1e-3 or not np.allclose(r, ratio, rtol=rtol, atol=0):
        return None
    return ratio


# An error this small, relative to the expected values (and atol to their scale), is what float32
# arithmetic leaves behind: about a hundred float32 epsilons (1.2e-7) at most.
FLOAT32_LEVEL = {"rtol": 1e-5, "atol": 1e-6}
# Where a float32 value entered a float64 computation: said when every entry is within FLOAT32_LEVEL.
FLOAT32_CAUSE = ("a float32 value entered this float64 computation (a constant made with torch.tensor(...).float() "
                 "or np.float32, a helper that computes in float32): keep every tensor and constant in the inputs' "
                 "dtype, or use Python numbers")


def pair(got: float, expected: float) -> tuple[str, str]:
    """The two numbers with as many significant digits as it takes to tell them apart (6 at least, 17 at most)."""
    for digits in range(6, 18):
        a, b = f"{got:.{digits}g}", f"{expected:.{digits}g}"
        if a != b:
            return a, b
    return a, b


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check(
    name: str,
    got: Observed,
    expected: np.ndarray,
    *,
    rtol: float,
    atol: float,
    expected_type: str = "torch.Tensor",
    hint: str = "",
) -> Check:
    """Check `got` against `expected`, stage by stage.

    Values match when |got - expected| <= atol * max(1, max|expected|) + rtol * |expected|
    elementwise; scaling atol by the largest expected magnitude keeps the test
    fair for quantities whose entries cancel (a sum of large terms near 0).
    """
    tail = f" Hint: {hint}" if hint else ""
    if got.unchecked:
        return Check(name, False, "unchecked", f"not checked: {got.unchecked}")
    early = _form(name, got, expected, expected_type, tail)
    if early is not None:
        return early
    arr = got.array
    if arr.size == 0:
        return Check(name, True, "ok", f"'{name}' matches (empty).", 0.0, trivial=True)
    return _values(name, arr, expected, rtol, atol, tail)


def _form(name: str, got: Observed, expected: np.ndarray, expected_type: str, tail: str) -> Check | None:
    """The first of the present, type, shape and dtype stages that fails, or None when all pass."""
    if not got.present:
        why = f" ({got.note})" if got.note else ""
        return Check(name, False, "present", f"'{name}' was not produced{why}.{tail}")
    if got.type_name == expected_type and got.array is None:
        return Check(name, False, "type", f"'{name}' is a {expected_type} whose values could not be read back"
                                          f"{f' ({got.note})' if got.note else ''}.{tail}")
    if got.type_name != expected_type or got.array is None:
        note = f" ({got.note})" if got.note else ""
        return Check(name, False, "type",
                     f"'{name}' has the wrong type: got {got.type_name}, expected {expected_type}{note}.{tail}")
    arr = got.array
    if arr.shape != expected.shape:
        return Check(name, False, "shape", f"'{name}' has the wrong shape: got {_fmt_shape(arr.shape)}, "
                                           f"expected {_fmt_shape(expected.shape)}.{tail}")
    if arr.dtype != expected.dtype:
        # NaN or inf said too: the wrong dtype must not hide an overflow (a float32 softmax on large scores).
        bad = _non_finite(arr) if arr.dtype.kind == "f" and np.isfinite(expected).all() else ""
        return Check(name, False, "dtype", f"'{name}' has the wrong dtype: got {arr.dtype}, expected {expected.dtype} "
                                           f"(outputs keep the dtype of the inputs){bad}.{tail}",
                     float("inf") if bad else None)
    return None


def _non_finite(arr: np.ndarray) -> str:
    """', and 3 NaN entries of 98' when `arr` has NaN or inf entries, else ''."""
    kinds = [f"{n} {what}" for n, what in ((int(np.isnan(arr).sum()), "NaN"), (int(np.isinf(arr).sum()), "inf")) if n]
    return f", and {' and '.join(kinds)} entries of {arr.size}" if kinds else ""


def _values(name: str, arr: np.ndarray, expected: np.ndarray, rtol: float, atol: float, tail: str) -> Check:
    """The values stage: NaN or infinite entries first, then each entry against its tolerance; booleans and
    integers (masks, ids) are right or wrong, entry by entry."""
    dtype = str(expected.dtype)
    if expected.dtype.kind in "biu":
        return _exact_values(name, arr, expected, tail)
    got64 = arr.astype(np.float64)
    exp64 = expected.astype(np.float64)
    finite = np.isfinite(got64)
    if not finite.all():
        first = tuple(np.argwhere(~finite)[0])
        kinds = []
        if np.isnan(got64).any():
            kinds.append(f"{int(np.isnan(got64).sum())} NaN")
        if np.isinf(got64).any():
            kinds.append(f"{int(np.isinf(got64).sum())} inf")
        return Check(name, False, "values", f"'{name}' has {' and '.join(kinds)} entries of {arr.size}, first at index "
                                            f"{_fmt_index(first)} (expected {exp64[first]:.6g}).{tail}", float("inf"),
                     dtype=dtype)
    err = np.abs(got64 - exp64)
    scale = max(1.0, float(np.abs(exp64).max()))
    allowed = atol * scale + rtol * np.abs(exp64)
    outside = err > allowed
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
    max_err = float(err[worst])
    if not outside.any():
        return Check(name, True, "ok", f"'{name}' matches (max abs error {max_err:.2g}).", max_err, dtype=dtype,
                     trivial=not np.any(exp64))
    rel = max_err / max(abs(float(exp64[worst])), 1e-300)
    # A factor means something for real numbers only: ids, counts and masks are right or wrong.
    # float32 entries that cancel (a saturated softmax's gradients) keep fewer correct digits.
    ratio = constant_ratio(got64, exp64, 1e-3 if arr.dtype == np.float32 else 1e-4)
    factor = f" got/expected = {ratio:.4g} everywhere: a constant factor is off." if ratio is not None else ""
    float32_level = expected.dtype == np.float64 and ratio is None and bool(
        np.all(err <= FLOAT32_LEVEL["atol"] * scale + FLOAT32_LEVEL["rtol"] * np.abs(exp64)))
    shown_got, shown_expected = pair(float(got64[worst]), float(exp64[worst]))
    return Check(
        name,
        False,
        "values",
        f"'{name}' has wrong values: {int(outside.sum())} of {arr.size} entries outside tolerance; "
        f"max abs error {max_err:.3g} (relative {rel:.3g}) at index {_fmt_index(worst)}: "
        f"got {shown_got}, expected {shown_expected} (rtol {rtol:g}, atol {atol:g}).{factor}{tail}",
        max_err,
        ratio=ratio,
        dtype=dtype,
        float32_level=float32_level,
    )


def _exact_values(name: str, arr: np.ndarray, expected: np.ndarray, tail: str) -> Check:
    """Booleans and integers: how many entries differ and the first one, no error sizes."""
    got = arr.astype(expected.dtype) if arr.dtype.kind in "biu" else arr
    same = got == expected
    if np.all(same):
        return Check(
            name, True, "ok", f"'{name}' matches.", 0.0, dtype=str(expected.dtype), trivial=not np.any(expected)
        )
    wrong = np.argwhere(~same)
    first = tuple(int(i) for i in wrong[0])

    def shown(value) -> str:
        return (
            str(bool(value)) if expected.dtype.kind == "b" else f"{value:g}" if isinstance(value, float) else str(value)
        )

    return Check(
        name,
        False,
        "values",
        f"'{name}' has wrong values: {len(wrong)} of {arr.size} entries differ, first at index "
        f"{_fmt_index(first)}: got {shown(arr[first].item())}, expected {shown(expected[first].item())}.{tail}",
        float(len(wrong)),
        dtype=str(expected.dtype),
    )
