"""Compare one computed quantity (a numpy array the submission's process handed back) with its expected value,
stage by stage (present, type, shape, dtype, values), stopping at the first that fails: a message names the earliest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# What float32 arithmetic leaves behind: about a hundred float32 epsilons (1.2e-7) at most, relative (atol: to scale).
FLOAT32_LEVEL = {"rtol": 1e-5, "atol": 1e-6}
# Where a float32 value entered a float64 computation: said when every entry is within FLOAT32_LEVEL.
FLOAT32_CAUSE = ("a float32 value entered this float64 computation (a constant made with torch.tensor(...).float() "
                 "or np.float32, a helper that computes in float32): keep every tensor and constant in the inputs' "
                 "dtype, or use Python numbers")


@dataclass(frozen=True)
class Observed:
    """One quantity a submission produced: its type (e.g. 'torch.Tensor'), its contents read back as an array, why it
    is absent (note) or could not be checked (unchecked: an earlier stage raised)."""

    present: bool
    type_name: str | None = None
    array: np.ndarray | None = None
    note: str = ""
    unchecked: str = ""


@dataclass(frozen=True)
class Check:
    """One comparison's verdict: the first failing stage ("ok" if none), its message, the largest error, got/expected
    if only a constant factor is wrong (on the finite entries), whether a float64 quantity is wrong only at float32
    precision (FLOAT32_LEVEL), whether it is right on all-zero expected values (trivial: blank output is too), the
    slip that factor is (its number, or its name): two failures with one slip are one mistake."""

    name: str
    passed: bool
    stage: str
    message: str
    max_abs_error: float | None = None
    ratio: float | None = None
    dtype: str = ""
    float32_level: bool = False
    trivial: bool = False
    slip: str = ""


def _fmt_index(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def constant_ratio(got: np.ndarray, expected: np.ndarray, rtol: float = 1e-4) -> float | None:
    """got / expected when it is the same number (not 1, to `rtol`) at every entry that is not ~0, else None."""
    mask = np.abs(expected) > 1e-6 * max(1.0, float(np.abs(expected).max()))
    r = got[mask] / expected[mask]
    ratio = float(np.median(r)) if mask.sum() >= 2 else 1.0  # fewer than two entries say nothing of a factor
    return None if abs(ratio - 1.0) < 1e-3 or not np.allclose(r, ratio, rtol=rtol, atol=0) else ratio


def _times(ratio: float | None) -> str:
    return f"times {ratio:.4g}" if ratio else ""


def _non_finite(arr: np.ndarray) -> str:
    """'3 NaN and 1 inf' for the NaN and infinite entries of `arr`, '' when there are none."""
    return " and ".join(f"{n} {what}" for n, what in ((int(np.isnan(arr).sum()), "NaN"),
                                                     (int(np.isinf(arr).sum()), "inf")) if n)


def check(name: str, got: Observed, expected: np.ndarray, *, rtol: float, atol: float,
          expected_type: str = "torch.Tensor", hint: str = "", exact: bool = False) -> Check:
    """The Check of `got` against `expected`, stage by stage, its message ending in `hint` when one fails. Values
    match when |got - expected| <= atol * max(1, max|expected|) + rtol * |expected| elementwise (atol scaled so that
    entries which cancel are judged fairly); booleans and integers (masks, ids), and every value when `exact` (an
    additive mask's -inf), must be equal entry by entry."""
    tail = f" Hint: {hint}" if hint else ""
    note = f" ({got.note})" if got.note else ""
    arr = got.array
    if got.unchecked:
        return Check(name, False, "unchecked", f"not checked: {got.unchecked}")
    if not got.present:
        return Check(name, False, "present", f"'{name}' was not produced{note}.{tail}")
    if got.type_name != expected_type or arr is None:
        what = (f"is a {expected_type} whose values could not be read back" if got.type_name == expected_type
                else f"has the wrong type: got {got.type_name}, expected {expected_type}")
        return Check(name, False, "type", f"'{name}' {what}{note}.{tail}")
    if arr.shape != expected.shape:
        return Check(name, False, "shape", f"'{name}' has the wrong shape: got {arr.shape}, "
                                           f"expected {expected.shape}.{tail}")
    if arr.dtype != expected.dtype:
        # NaN or inf said too: the wrong dtype must not hide an overflow (a float32 softmax on large scores).
        bad = _non_finite(arr) if arr.dtype.kind == "f" and np.isfinite(expected).all() else ""
        bad = f", and {bad} entries of {arr.size}" if bad else ""
        return Check(name, False, "dtype", f"'{name}' has the wrong dtype: got {arr.dtype}, expected {expected.dtype} "
                                           f"(outputs keep the dtype of the inputs){bad}.{tail}",
                     float("inf") if bad else None)
    if arr.size == 0:
        return Check(name, True, "ok", f"'{name}' matches (empty).", 0.0, trivial=True)
    if expected.dtype.kind not in "biu" and not exact:
        return _values(name, arr, expected, rtol, atol, tail)
    # Equal entry by entry (of the expected dtype, checked above): how many entries differ and the first one.
    wrong, dtype = np.argwhere(arr != expected), str(expected.dtype)
    if not len(wrong):
        return Check(name, True, "ok", f"'{name}' matches.", 0.0, dtype=dtype, trivial=not np.any(expected))
    first = tuple(int(i) for i in wrong[0])
    got_v, exp_v = (f"{a[first].item():g}" if exact else a[first].item() for a in (arr, expected))
    # A wrong mask entry counts as non-finite (scoring.failure_kind): 0 where -inf belongs, or the other way round.
    return Check(name, False, "values", f"'{name}' has wrong values: {len(wrong)} of {arr.size} entries differ, first "
                                        f"at index {_fmt_index(first)}: got {got_v}, expected {exp_v}.{tail}",
                 float("inf") if exact else float(len(wrong)), dtype=dtype)


def _values(name: str, arr: np.ndarray, expected: np.ndarray, rtol: float, atol: float, tail: str) -> Check:
    """The values stage for real numbers: NaN or infinite entries first, then each entry against its tolerance."""
    dtype = str(expected.dtype)
    got64, exp64 = arr.astype(np.float64), expected.astype(np.float64)
    bad, finite = _non_finite(got64), np.isfinite(got64)
    rtol_ratio = 1e-3 if arr.dtype == np.float32 else 1e-4  # float32 entries that cancel keep fewer correct digits
    if bad:
        first = tuple(np.argwhere(~finite)[0])
        ratio = constant_ratio(got64[finite], exp64[finite], rtol_ratio) if finite.any() else None  # A_w scaled, masked
        return Check(name, False, "values", f"'{name}' has {bad} entries of {arr.size}, first at index "
                                            f"{_fmt_index(first)} (expected {exp64[first]:.6g}).{tail}", float("inf"),
                     ratio=ratio, dtype=dtype, slip=_times(ratio))
    err = np.abs(got64 - exp64)
    scale = max(1.0, float(np.abs(exp64).max()))
    outside = err > atol * scale + rtol * np.abs(exp64)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
    max_err = float(err[worst])
    if not outside.any():
        return Check(name, True, "ok", f"'{name}' matches (max abs error {max_err:.2g}).", max_err, dtype=dtype,
                     trivial=not np.any(exp64))
    rel = max_err / max(abs(float(exp64[worst])), 1e-300)
    ratio = constant_ratio(got64, exp64, rtol_ratio)
    factor = f" got/expected = {ratio:.4g} everywhere: a constant factor is off." if ratio is not None else ""
    float32_level = expected.dtype == np.float64 and ratio is None and bool(
        np.all(err <= FLOAT32_LEVEL["atol"] * scale + FLOAT32_LEVEL["rtol"] * np.abs(exp64)))
    # As many significant digits as it takes to tell the two apart (6 at least, 17 at most).
    g, e = float(got64[worst]), float(exp64[worst])
    digits = next((d for d in range(6, 17) if f"{g:.{d}g}" != f"{e:.{d}g}"), 17)
    return Check(name, False, "values", f"'{name}' has wrong values: {int(outside.sum())} of {arr.size} entries "
                                        f"outside tolerance; max abs error {max_err:.3g} (relative {rel:.3g}) at index "
                                        f"{_fmt_index(worst)}: got {g:.{digits}g}, expected {e:.{digits}g} "
                                        f"(rtol {rtol:g}, atol {atol:g}).{factor}{tail}",
                 max_err, ratio=ratio, dtype=dtype, float32_level=float32_level, slip=_times(ratio))
