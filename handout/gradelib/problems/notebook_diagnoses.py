"""Tested causes for the notebooks' wrong values: each names a mistake only when the student's array is what it gives.
A diagnosis (got, the case's arrays, the case's edge) -> str recomputes a mistake on the case's inputs ('' if none)."""

from __future__ import annotations

import math

import numpy as np

from ..lm.nll import prediction_token_nll


def _same(got: np.ndarray, candidate: np.ndarray) -> bool:
    """Whether the student's array is a mistake's result (`candidate`), to 1e-6 relative."""
    with np.errstate(all="ignore"):
        return got.shape == candidate.shape and bool(np.allclose(got.astype(np.float64), candidate, 1e-6, 1e-9))


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of `z` over `axis`, the row's maximum subtracted first (float64 in, float64 out)."""
    with np.errstate(all="ignore"):
        e = np.exp(z - np.max(z, axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def overflow(got: np.ndarray, case: dict, edge: str, what: str) -> str:
    """NaN or inf on a case whose values are large enough to overflow exp(): the max subtraction is missing."""
    if edge and not np.isfinite(got.astype(np.float64)).all():
        return (f"{what} has NaN or inf where the values are huge: exp() overflowed, or log() met a probability "
                "that underflowed to 0; subtract each row's max before exp, and take the log-softmax "
                "(z - max - log(sum(exp(z - max)))) instead of np.log(softmax(z)).")
    return ""


def softmax_axis(got: np.ndarray, case: dict, edge: str) -> str:
    """softmax(z) normalised over another axis than the last."""
    z = case["z"].astype(np.float64)
    for axis in range(z.ndim - 1):
        if _same(got, softmax(z, axis)):
            return f"the rows are normalised over axis {axis}: take max, exp and sum over the last axis (axis=-1)."
    return overflow(got, case, edge, "softmax")


def nb1_attention_scale(got: np.ndarray, case: dict, edge: str, masked: bool) -> str:
    """Notebook 1's weights: softmax of the scores scaled by another factor than 1/sqrt(d_k)."""
    q, k, v = (case[n].astype(np.float64) for n in ("Q", "K", "V"))
    mask = case["mask"].astype(np.float64) if masked else 0.0
    d_k, d_v = k.shape[-1], v.shape[-1]
    candidates = [(1.0, f"the 1/sqrt(d_k) scaling is missing (divide Q K^T by sqrt(d_k) = {math.sqrt(d_k):.4g})"),
                  (1 / d_k, f"the scores are divided by d_k = {d_k} where sqrt(d_k) belongs")]
    if d_v != d_k:
        candidates.append((1 / math.sqrt(d_v), f"the scores are divided by sqrt(d_v), V's width ({d_v}); d_k is "
                                               f"K.shape[-1] = {d_k}"))
    said = next((words for factor, words in candidates if _same(got, softmax(q @ k.T * factor + mask))), "")
    return (f"the weights are the softmax of Q K^T times another factor: {said}." if said
            else overflow(got, case, edge, "the weights"))


def nb2_attention_scale(got: np.ndarray, case: dict, edge: str, masked: bool) -> str:
    """Notebook 2's A: the unscaled scores, or NaN in the rows of queries with no allowed key."""
    q, k = case["Q"].astype(np.float64), case["K"].astype(np.float64)
    allowed = case["mask"] if masked else np.ones(got.shape, dtype=bool)
    empty = ~allowed.any(axis=-1)  # (B, Tq): queries with no allowed key
    nan_rows = np.isnan(got.astype(np.float64)).any(axis=-1)
    if masked and nan_rows.any() and not (nan_rows & ~empty).any():
        return ("the rows of queries with no allowed key are NaN (the softmax of only -inf scores): give those "
                "rows any finite score before the softmax and zero them after it, so their row of A is all zeros.")
    with np.errstate(all="ignore"):
        unscaled = softmax(np.where(allowed, q @ np.swapaxes(k, -1, -2), -np.inf))
    unscaled = np.where(empty[..., None], 0.0, unscaled)
    if _same(got, unscaled):
        return (f"A is the softmax of the unscaled scores: the 1/sqrt(D) scaling is missing (divide Q K^T by "
                f"sqrt(D) = {math.sqrt(q.shape[-1]):.4g}, D = Q.shape[-1]).")
    return ""


def _nll(case: dict, skipped: str) -> tuple[np.ndarray, np.ndarray]:
    """-log p(target) at every position (ignore_index = -100 reads id 0), and which targets are not case[skipped]."""
    targets = case["targets"]
    nll = prediction_token_nll(case["logits"], np.clip(targets, 0, None))
    return nll, targets != int(case[skipped])


def cross_entropy_reduction(got: np.ndarray, case: dict, edge: str) -> str:
    """The scored positions' NLL summed, or divided by N instead of by their count."""
    nll, scored = _nll(case, "ignore_index")
    nll, n = nll[scored], scored.size
    if _same(got, np.asarray(nll.sum())):
        return (f"the loss is the sum over the {len(nll)} scored positions: divide it by their number (average, do "
                "not sum).")
    if len(nll) != n and _same(got, np.asarray(nll.sum() / n)):
        return (f"the loss is divided by N = {n}, every position: divide by the {len(nll)} positions whose target is "
                "not ignore_index, not by N.")
    return overflow(got, case, edge, "the loss")


def combined_mask_axis(got: np.ndarray, case: dict, edge: str) -> str:
    """Padding applied to the query axis instead of the key axis."""
    tokens, pad = case["tokens"], int(case["pad_id"])
    T = tokens.shape[1]
    wrong = np.tril(np.ones((T, T), bool))[None] & (tokens != pad)[:, :, None]
    if got.shape == (len(tokens), T, T) and np.array_equal(got, wrong):
        return ("padding blocks the query axis here: a padded token must not be attended to, so it blocks the key "
                "axis (the last): mask[b, i, j] = (j <= i) and tokens[b, j] != pad_id.")
    return ""


def wrong_side(got: np.ndarray, case: dict, edge: str, additive: bool) -> str:
    """A causal mask that blocks the past (j < i) where it must block the future (j > i)."""
    if got.ndim != 2 or got.shape[0] != got.shape[1] or got.shape[0] < 2:
        return ""
    blocked = np.isneginf(got.astype(np.float64)) if additive else ~got.astype(bool)
    i, j = np.indices(got.shape)
    if blocked[j < i].any() and not blocked[j > i].any():
        return ("the mask is on the wrong side of the diagonal: it blocks earlier positions (j < i) and lets "
                "position i see later ones (j > i); block j > i, the part above the diagonal.")
    return ""


def masked_mean(got: np.ndarray, case: dict, edge: str) -> str:
    """The mean taken over every position, padded ones included."""
    nll, valid = _nll(case, "pad_id")
    if not valid.all() and _same(got, np.asarray(nll.mean())):
        return ("the mean includes the padded positions: average only over the targets that are not pad_id "
                f"({int(valid.sum())} of {valid.size} here).")
    if not valid.all() and _same(got, np.asarray(nll[valid].sum() / valid.size)):
        return (f"got/expected = {int(valid.sum())}/{valid.size}, the valid targets over all positions: the sum over "
                "the valid targets is divided by every position, padded ones included; divide by the number of "
                "targets that are not pad_id.")
    return ""


def perplexity_of_sum(got: np.ndarray, case: dict, edge: str) -> str:
    """exp of the summed NLL instead of the mean."""
    nll, valid = _nll(case, "pad_id")
    with np.errstate(over="ignore"):
        summed = np.exp(nll[valid].sum())
    if valid.sum() > 1 and np.isfinite(summed) and _same(got, np.asarray(summed)):
        return ("the perplexity is exp of the summed NLL: it is exp of the mean NLL per valid token, not exp of the "
                "summed NLL.")
    return ""
