"""Problem `losses`: notebook 1, masked-LM and next-token losses in numpy (graded by notebook_functions.py)."""

from __future__ import annotations

from ..context import GradeContext
from ..results import TestResult
from ..rubric_schema import Problem
from . import notebook_diagnoses as D
from .notebook_functions import Call, NotebookSpec, Quantity, grade_notebook

ARRAY = ("numpy.ndarray",)
SCALAR = ("numpy.float64", "float", "numpy.ndarray")
QKV = ("array:Q", "array:K", "array:V")

SPEC = NotebookSpec(
    notebook="01_mlm_and_next_token.ipynb",
    calls=(
        Call("softmax", ("array:z",), {"softmax": None}),
        Call("scaled_dot_product_attention", QKV, {"attn_weights": 0, "attn_output": 1}),
        Call("scaled_dot_product_attention", (*QKV, "array:mask"), {"masked_weights": 0, "masked_output": 1}),
        Call("predicted_ids", ("array:logits",), {"predicted_ids": None}),
        Call("token_nll", ("array:logits", "array:nll_targets"), {"token_nll": None}),
        Call("cross_entropy_loss", ("array:logits", "array:targets"), {"cross_entropy_loss": None},
             kwargs={"ignore_index": "int:ignore_index"}),
        Call("causal_mask", ("int:T",), {"causal_mask": None}),
    ),
    quantities={
        "softmax": Quantity(ARRAY, "softmax(z) = exp(z - max) / sum(exp(z - max)) over the last axis, each row "
                                   "summing to 1.", diagnose=D.softmax_axis),
        "attn_weights": Quantity(ARRAY, "weights = softmax(Q K^T / sqrt(d_k)) over the last (key) axis, with d_k = "
                                        "K.shape[-1].", diagnose=D.nb1_attention_scale(masked=False),
                                 upstream=("softmax",)),
        "attn_output": Quantity(ARRAY, "output = weights @ V, shape (Tq, d_v).", upstream=("attn_weights",)),
        "masked_weights": Quantity(ARRAY, "add the mask to the scaled scores before the softmax; -inf entries get "
                                          "weight exactly 0.", diagnose=D.nb1_attention_scale(masked=True),
                                   upstream=("softmax",)),
        "masked_output": Quantity(ARRAY, "output = weights @ V with the masked weights.", upstream=("masked_weights",)),
        "predicted_ids": Quantity(ARRAY, "take the arg-max over the vocabulary axis (axis=-1): one id per position, "
                                         "shape (N,)."),
        "token_nll": Quantity(ARRAY, "nll[i] = -log softmax(logits[i])[target_ids[i]] from the max-subtracted "
                                     "log-softmax, shape (N,).", diagnose=D.overflow("token_nll")),
        "cross_entropy_loss": Quantity(SCALAR, "the mean of -log p(target) over the positions whose target is not "
                                               "ignore_index (a scalar).", diagnose=D.cross_entropy_reduction,
                                       upstream=("token_nll",)),
        "causal_mask": Quantity(ARRAY, "M[i, j] = 0 for j <= i (the diagonal included) and -inf for j > i, float.",
                                additive_mask=True, diagnose=D.wrong_side(additive=True)),
    },
)

# Notebook 1's case files tag edge cases (cases.json "edge"), each graded by the rubric line naming it.
SCHEMA = SPEC.schema(edge_lines=True)


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade notebook 1's functions on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    return grade_notebook(ctx, problem, SPEC)
