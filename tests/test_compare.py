"""compare.check: stages in order, each failure message naming what, where and by how much."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gradelib.compare import Observed, check

EXPECTED = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7.0


def tensor(arr: np.ndarray) -> Observed:
    return Observed(True, "torch.Tensor", arr)


def run(got: Observed, expected: np.ndarray = EXPECTED, **kw):
    kw.setdefault("rtol", 1e-7)
    kw.setdefault("atol", 1e-9)
    return check("dLdK", got, expected, hint="transpose dLdA_w first.", **kw)


def test_matching_values_pass_and_report_the_error():
    c = run(tensor(EXPECTED + 1e-12))
    assert c.passed and c.stage == "ok"
    assert c.max_abs_error == pytest.approx(1e-12, rel=0.5)


def test_absent_quantity_says_why_and_gives_the_hint():
    c = run(Observed(False, note="backward raised ValueError: bad (in attention.py, line 9)"))
    assert not c.passed and c.stage == "present"
    assert c.message == ("'dLdK' was not produced (backward raised ValueError: bad (in attention.py, line 9)). "
                         "Hint: transpose dLdA_w first.")


def test_wrong_type_names_both_types():
    c = run(Observed(True, "numpy.ndarray", EXPECTED))
    assert c.stage == "type"
    assert "'dLdK' has the wrong type: got numpy.ndarray, expected torch.Tensor" in c.message


def test_unreadable_object_fails_at_type_with_its_note():
    c = run(Observed(True, "torch.Tensor", None, note="could not be read back: RuntimeError: boom"))
    assert c.stage == "type" and "could not be read back: RuntimeError: boom" in c.message


def test_wrong_shape_gives_got_and_expected():
    c = run(tensor(EXPECTED.transpose(0, 2, 1)))
    assert c.stage == "shape"
    assert "'dLdK' has the wrong shape: got (2, 4, 3), expected (2, 3, 4)." in c.message


def test_one_dimensional_shapes_keep_their_comma():
    c = check("v", tensor(np.zeros(3)), np.zeros(4), rtol=0, atol=0)
    assert "got (3,), expected (4,)" in c.message


def test_shape_is_checked_before_dtype():
    c = run(tensor(EXPECTED.reshape(4, 3, 2).astype(np.float32)))
    assert c.stage == "shape"


def test_wrong_dtype_gives_got_and_expected():
    c = run(tensor(EXPECTED.astype(np.float32)))
    assert c.stage == "dtype"
    assert "'dLdK' has the wrong dtype: got float32, expected float64" in c.message


def test_wrong_values_give_count_max_error_and_index():
    got = EXPECTED.copy()
    got[1, 2, 3] += 0.5
    got[0, 0, 1] += 0.25
    c = run(tensor(got))
    assert c.stage == "values" and not c.passed
    assert c.max_abs_error == pytest.approx(0.5)
    assert "2 of 24 entries outside tolerance" in c.message
    assert "max abs error 0.5" in c.message and "at index (1, 2, 3)" in c.message
    assert f"got {got[1, 2, 3]:.6g}, expected {EXPECTED[1, 2, 3]:.6g}" in c.message
    assert c.message.endswith("Hint: transpose dLdA_w first.")


def test_nan_and_inf_are_counted_and_located():
    got = EXPECTED.copy()
    got[0, 1, 2] = np.nan
    got[1, 0, 0] = np.inf
    c = run(tensor(got))
    assert c.stage == "values" and c.max_abs_error == float("inf")
    assert "'dLdK' has 1 NaN and 1 inf entries of 24, first at index (0, 1, 2)" in c.message


def test_tolerance_scales_with_the_largest_expected_magnitude():
    """An entry that cancels to ~0 is judged against the size of its neighbours."""
    error = np.array([0.0, 5e-4])
    large = np.array([1e6, 1e-3])  # allowed error: 1e-9 * 1e6 + 1e-7 * 1e-3
    small = np.array([1.0, 1e-3])  # allowed error: 1e-9 * 1 + 1e-7 * 1e-3
    assert check("g", tensor(large + error), large, rtol=1e-7, atol=1e-9).passed
    assert not check("g", tensor(small + error), small, rtol=1e-7, atol=1e-9).passed


def test_empty_arrays_match():
    assert check("e", tensor(np.zeros((0, 3))), np.zeros((0, 3)), rtol=0, atol=0).passed


def test_a_constant_factor_is_named_and_other_errors_are_not():
    expected = np.linspace(-2.0, 3.0, 12).reshape(3, 4)
    scaled = check("X", Observed(True, "torch.Tensor", expected * 2.0), expected, rtol=1e-7, atol=1e-9)
    assert not scaled.passed and scaled.ratio == pytest.approx(2.0) and "got/expected = 2 everywhere" in scaled.message
    noisy = expected + np.random.default_rng(0).normal(0, 0.1, expected.shape)
    other = check("X", Observed(True, "torch.Tensor", noisy), expected, rtol=1e-7, atol=1e-9)
    assert not other.passed and other.ratio is None and "got/expected" not in other.message


def test_a_float32_factor_is_named_with_float32_digits_with_or_without_masked_entries():
    """A float32 A_w stored scaled (and masked with -inf): its finite entries are 1/2 of the expected ones to float32's
    digits (a matmul summed in another order, as another CPU's kernels do, leaves 3e-4 relative where entries
    cancel). The factor is named either way, so the same slip is one mistake on every machine; 1e-3 off is not."""
    rng = np.random.default_rng(0)
    expected = rng.normal(0, 1, (3, 4, 4)).astype(np.float32)
    wobble = 1 + 3e-4 * rng.choice([-1.0, 1.0], expected.shape)
    scaled = (expected * 0.5 * wobble).astype(np.float32)
    masked = scaled.copy()
    masked[:, 0, 1:] = -np.inf
    for got in (scaled, masked):
        c = check("A_w", Observed(True, "torch.Tensor", got), expected, rtol=1e-4, atol=1e-5)
        assert not c.passed and c.ratio == pytest.approx(0.5, rel=1e-3), c.message
    off = (expected * 0.5 * (1 + 3e-3 * rng.choice([-1.0, 1.0], expected.shape))).astype(np.float32)
    off[:, 0, 1:] = -np.inf
    assert check("A_w", Observed(True, "torch.Tensor", off), expected, rtol=1e-4, atol=1e-5).ratio is None


def test_a_constant_factor_is_named_for_real_numbers_only():
    """Scaled values get 'got/expected = k'; integer ids (a generator that emitted id 0 everywhere) do not."""
    scaled = run(tensor(EXPECTED * 0.5))
    assert "got/expected = 0.5 everywhere: a constant factor is off." in scaled.message and scaled.ratio == 0.5
    ids = np.full((2, 3), 29, dtype=np.int64)
    zeros = check("greedy_ids", tensor(np.zeros_like(ids)), ids, rtol=0.0, atol=0.0)
    assert not zeros.passed and zeros.stage == "values" and zeros.ratio is None
    assert "got/expected" not in zeros.message and "constant factor" not in zeros.message, zeros.message


def test_numbers_that_print_alike_are_shown_with_the_digits_that_tell_them_apart():
    """-0.8576372 against itself times (1 + 3e-7): equal to 6 digits, 3e-7 apart, so shown to 7 and more."""
    expected = np.full((2, 2), -0.8576372)
    got = expected * (1 + 3e-7)
    c = run(tensor(got), expected)
    assert not c.passed
    shown_got, shown_expected = re.search(r"got (\S+), expected (\S+) \(rtol", c.message).groups()
    assert shown_got != shown_expected and shown_expected == "-0.8576372", c.message
    assert float(shown_got) == pytest.approx(got[0, 0], rel=1e-7)  # rounded to the digits shown, no further


def test_a_float64_value_right_to_float32_precision_only_is_put_down_to_a_float32_value():
    """exp of inputs rounded to float32 first: every entry within float32 precision of the float64 answer. With
    the quantity's float32 case passing, the message names a float32 value in the float64 computation first;
    a value wrong by more is not blamed on float32."""
    from gradelib.scoring import CaseOutcome, name_float32

    x = np.linspace(-5.0, 5.0, 24).reshape(4, 6) + 1 / 3
    expected = np.exp(x)
    got = np.exp(x.astype(np.float32).astype(np.float64))
    near = check("X_new", tensor(got), expected, rtol=1e-7, atol=1e-9)
    assert not near.passed and near.float32_level, near.message
    float32_case = check("X_new", tensor(got.astype(np.float32)), expected.astype(np.float32), rtol=1e-4, atol=1e-5)
    assert float32_case.passed
    outcomes = [
        CaseOutcome("f64", "hidden", "f64", {"X_new": near}),
        CaseOutcome("f32", "hidden", "f32", {"X_new": float32_case}),
    ]
    name_float32(outcomes)
    said = outcomes[0].checks["X_new"].message
    assert said.startswith(
        "'X_new' is right to float32 precision only on this float64 case (its ordinary float32 cases pass): "
    ), said
    assert "Hint: a float32 value entered this float64 computation" in said
    far = check("X_new", tensor(expected * 1.001), expected, rtol=1e-7, atol=1e-9)
    assert not far.float32_level


def test_masks_and_ids_are_counted_not_measured():
    """Booleans and ids are right or wrong: how many differ and the first, no error size, no ratio."""
    mask = np.tril(np.ones((3, 3), dtype=bool))
    wrong_mask = mask.copy()
    wrong_mask[0, 1] = True
    c = check("causal_mask", tensor(wrong_mask), mask, rtol=0.0, atol=0.0)
    assert (
        "'causal_mask' has wrong values: 1 of 9 entries differ, first at index (0, 1): got True, expected False."
        in c.message
    )
    ids = np.array([[3, 4, 5]])
    c = check("greedy_ids", tensor(np.array([[3, 9, 0]])), ids, rtol=0.0, atol=0.0)
    assert "2 of 3 entries differ, first at index (0, 1): got 9, expected 4." in c.message
    for message in (c.message, check("m", tensor(wrong_mask), mask, rtol=0.0, atol=0.0).message):
        assert "relative" not in message and "max abs error" not in message and "got/expected" not in message


def test_an_additive_mask_is_compared_exactly_with_its_minus_infinities():
    """exact=True: -inf is a value like any other; a wrong entry is said as the student wrote it, and counts as
    non-finite (not within any tolerance)."""
    mask = np.triu(np.full((3, 3), -np.inf), 1)
    assert check("causal_mask", tensor(mask.copy()), mask, rtol=0.0, atol=0.0, exact=True).passed
    c = check("causal_mask", tensor(np.zeros((3, 3))), mask, rtol=0.0, atol=0.0, exact=True)
    assert c.message.startswith("'causal_mask' has wrong values: 3 of 9 entries differ, first at index (0, 1): got 0, "
                                "expected -inf.") and c.max_abs_error == float("inf"), c
