"""Problems `losses` and `masks` (notebooks 1 and 2): run the student's notebook in the child, judge here. Only a
case's inputs reach the child (child/notebook_child.py), never its expected_<quantity> arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from ..compare import check
from ..context import GradeContext
from ..results import TestResult
from ..rubric_schema import Problem
from ..scoring import Case, CaseOutcome, follow_upstream, load_cases
from . import notebook_diagnoses as D
from .handin_runs import grade_notebook

CASE_FOLDER = "notebooks"


@dataclass(frozen=True)
class Call:
    """One call of a graded function; args/kwargs are 'kind:key' (kind: array, tensor, int)."""

    function: str
    args: tuple[str, ...]
    outputs: dict[str, int | None]  # quantity -> index into a returned tuple, None for the value itself
    kwargs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Quantity:
    """A graded return value: the types accepted, its formula (the hint), and what can name a cause."""

    types: tuple[str, ...]  # accepted type names; the first is the one named in messages
    hint: str  # what the value is, said with every failure
    additive_mask: bool = False  # holds -inf on purpose: compared entry for entry, -inf == -inf
    # (array, the case's arrays, the case's edge) -> a cause the grader tested, or '' (notebook_diagnoses.py).
    diagnose: Callable[[np.ndarray, dict, str], str] | None = None
    upstream: tuple[str, ...] = ()  # quantities it is usually computed from: wrong when they are


@dataclass(frozen=True)
class NotebookSpec:
    """A notebook, the calls to make and, per quantity, the types accepted and a hint."""

    notebook: str
    calls: tuple[Call, ...]
    quantities: dict[str, Quantity]


# Notebook 1: masked-LM and next-token losses in numpy.
ARRAY = ("numpy.ndarray",)
NP_SCALAR = ("numpy.float64", "float", "numpy.ndarray")
NP_QKV = ("array:Q", "array:K", "array:V")

LOSSES = NotebookSpec(notebook="01_mlm_and_next_token.ipynb",
    calls=(Call("softmax", ("array:z",), {"softmax": None}),
           Call("scaled_dot_product_attention", NP_QKV, {"attn_weights": 0, "attn_output": 1}),
           Call("scaled_dot_product_attention", (*NP_QKV, "array:mask"), {"masked_weights": 0, "masked_output": 1}),
           Call("predicted_ids", ("array:logits",), {"predicted_ids": None}),
           Call("token_nll", ("array:logits", "array:nll_targets"), {"token_nll": None}),
           Call("cross_entropy_loss", ("array:logits", "array:targets"), {"cross_entropy_loss": None},
                kwargs={"ignore_index": "int:ignore_index"}),
           Call("causal_mask", ("int:T",), {"causal_mask": None})),
    quantities={
        "softmax": Quantity(ARRAY, "softmax(z) = exp(z - max) / sum(exp(z - max)) over the last axis, each row "
                                   "summing to 1.", diagnose=D.softmax_axis),
        "attn_weights": Quantity(ARRAY, "weights = softmax(Q K^T / sqrt(d_k)) over the last (key) axis, with d_k = "
                                        "K.shape[-1].", diagnose=partial(D.nb1_attention_scale, masked=False),
                                 upstream=("softmax",)),
        "attn_output": Quantity(ARRAY, "output = weights @ V, shape (Tq, d_v).", upstream=("attn_weights",)),
        "masked_weights": Quantity(ARRAY, "add the mask to the scaled scores before the softmax; -inf entries get "
                                          "weight exactly 0.", diagnose=partial(D.nb1_attention_scale, masked=True),
                                   upstream=("softmax",)),
        "masked_output": Quantity(ARRAY, "output = weights @ V with the masked weights.", upstream=("masked_weights",)),
        "predicted_ids": Quantity(ARRAY, "take the arg-max over the vocabulary axis (axis=-1): one id per position, "
                                         "shape (N,)."),
        "token_nll": Quantity(ARRAY, "nll[i] = -log softmax(logits[i])[target_ids[i]] from the max-subtracted "
                                     "log-softmax, shape (N,).", diagnose=partial(D.overflow, what="token_nll")),
        "cross_entropy_loss": Quantity(NP_SCALAR, "the mean of -log p(target) over the positions whose target is not "
                                            "ignore_index (a scalar).", diagnose=D.cross_entropy_reduction,
                                       upstream=("token_nll",)),
        "causal_mask": Quantity(ARRAY, "M[i, j] = 0 for j <= i (the diagonal included) and -inf for j > i, float.",
                                additive_mask=True, diagnose=partial(D.wrong_side, additive=True))})

# Notebook 2: attention with causal and padding masks in torch.
TENSOR = ("torch.Tensor",)
PT_SCALAR = ("torch.Tensor", "float", "numpy.float64")
PT_QKV = ("tensor:Q", "tensor:K", "tensor:V")
LOSS_ARGS = ("tensor:logits", "tensor:targets", "int:pad_id")

MASKS = NotebookSpec(notebook="02_attention_and_masks.ipynb",
    calls=(Call("uniform_attention", ("tensor:X",), {"uniform": None}),
           Call("attention", PT_QKV, {"A": 0, "C": 1}),
           Call("attention", (*PT_QKV, "tensor:mask"), {"A_masked": 0, "C_masked": 1}),
           Call("causal_mask", ("int:T",), {"causal_mask": None}),
           Call("padding_mask", ("tensor:tokens", "int:pad_id"), {"padding_mask": None}),
           Call("combined_mask", ("tensor:tokens", "int:pad_id"), {"combined_mask": None}),
           Call("masked_mean_loss", LOSS_ARGS, {"masked_mean_loss": None}),
           Call("perplexity", LOSS_ARGS, {"perplexity": None})),
    quantities={
        "uniform": Quantity(TENSOR, "H[b, t] is the mean of X[b, 0..t]: cumsum over dim 1 divided by 1..T."),
        "A": Quantity(TENSOR, "A = softmax(Q K^T / sqrt(D)) over the last axis; transpose only K's last two axes.",
                      diagnose=partial(D.nb2_attention_scale, masked=False)),
        "C": Quantity(TENSOR, "C = A @ V, shape (B, Tq, Dv).", upstream=("A",)),
        "A_masked": Quantity(TENSOR, "fill blocked scores (mask False) with -inf before the softmax; a query with no "
                                     "allowed key gets a row of zeros, not NaN.",
                             diagnose=partial(D.nb2_attention_scale, masked=True)),
        "C_masked": Quantity(TENSOR, "C = A @ V with the masked A; a query with no allowed key gets a zero vector.",
                             upstream=("A_masked",)),
        "causal_mask": Quantity(TENSOR, "bool (T, T), True where j <= i (diagonal included).",
                                diagnose=partial(D.wrong_side, additive=False)),
        "padding_mask": Quantity(TENSOR, "bool (B, T), True where the token is not pad_id."),
        "combined_mask": Quantity(TENSOR, "mask[b, i, j] = (j <= i) and tokens[b, j] != pad_id (padding on the key "
                                          "axis, the last).", diagnose=D.combined_mask_axis,
                                  upstream=("causal_mask", "padding_mask")),
        "masked_mean_loss": Quantity(PT_SCALAR, "average -log_softmax(logits)[target] over the targets that are not "
                                          "pad_id.", diagnose=D.masked_mean),
        "perplexity": Quantity(PT_SCALAR, "perplexity = exp(mean NLL per valid token) = exp(masked_mean_loss).",
                               diagnose=D.perplexity_of_sum, upstream=("masked_mean_loss",))})

SPECS = {"losses": LOSSES, "masks": MASKS}


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade notebook 1 (`losses`) or 2 (`masks`) on ctx's case sets: a TestResult per (line, visibility)."""
    spec, cases = SPECS[problem.id], load_cases(ctx.case_root, CASE_FOLDER, ctx.visibilities, problem.id)
    said = ("", "add it and submit again.", f"no {problem.id} cases under {ctx.case_root / CASE_FOLDER}")
    return grade_notebook(ctx, problem, spec.notebook, cases, spec.calls, partial(judge_case, problem, spec), said)


def judge_case(problem: Problem, spec: NotebookSpec, case: Case, observe, wanted=None) -> CaseOutcome:
    """Every quantity of `spec` (or the `wanted` ones) on one case: observe(q) -> Observed, compared here (from
    what the child wrote, or, for notebook_check.py's grader.check, the same calls made in the student's kernel)."""
    outcome = CaseOutcome.of(case)
    with np.load(case.path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    expected = {q: arrays[f"expected_{q}"] for q in spec.quantities if wanted is None or q in wanted}
    for q, exp in expected.items():
        tol = problem.tolerance.get(str(exp.dtype), {"rtol": 0.0, "atol": 0.0})
        got, quantity = observe(q), spec.quantities[q]
        compare = partial(check, q, got, exp, rtol=tol["rtol"], atol=tol["atol"], exact=quantity.additive_mask,
                          expected_type=got.type_name if got.type_name in quantity.types else quantity.types[0])
        result = compare(hint=quantity.hint)
        wrong = not result.passed and result.stage == "values" and quantity.diagnose
        cause = quantity.diagnose(got.array, arrays, case.edge) if wrong else ""
        outcome.checks[q] = compare(hint=cause) if cause else result
    follow_upstream(outcome, {q: spec.quantities[q].upstream for q in expected})
    return outcome

