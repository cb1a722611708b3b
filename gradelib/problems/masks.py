"""Problem `masks`: notebook 2, attention with causal and padding masks in torch (graded by notebook_functions.py)."""

from __future__ import annotations

from ..context import GradeContext
from ..results import TestResult
from ..rubric_schema import Problem
from . import notebook_diagnoses as D
from .notebook_functions import Call, NotebookSpec, Quantity, grade_notebook

TENSOR = ("torch.Tensor",)
SCALAR = ("torch.Tensor", "float", "numpy.float64")
QKV = ("tensor:Q", "tensor:K", "tensor:V")
LOSS_ARGS = ("tensor:logits", "tensor:targets", "int:pad_id")

SPEC = NotebookSpec(
    notebook="02_attention_and_masks.ipynb",
    calls=(
        Call("uniform_attention", ("tensor:X",), {"uniform": None}),
        Call("attention", QKV, {"A": 0, "C": 1}),
        Call("attention", (*QKV, "tensor:mask"), {"A_masked": 0, "C_masked": 1}),
        Call("causal_mask", ("int:T",), {"causal_mask": None}),
        Call("padding_mask", ("tensor:tokens", "int:pad_id"), {"padding_mask": None}),
        Call("combined_mask", ("tensor:tokens", "int:pad_id"), {"combined_mask": None}),
        Call("masked_mean_loss", LOSS_ARGS, {"masked_mean_loss": None}),
        Call("perplexity", LOSS_ARGS, {"perplexity": None}),
    ),
    quantities={
        "uniform": Quantity(TENSOR, "H[b, t] is the mean of X[b, 0..t]: cumsum over dim 1 divided by 1..T."),
        "A": Quantity(TENSOR, "A = softmax(Q K^T / sqrt(D)) over the last axis; transpose only K's last two axes.",
                      diagnose=D.nb2_attention_scale(masked=False)),
        "C": Quantity(TENSOR, "C = A @ V, shape (B, Tq, Dv).", upstream=("A",)),
        "A_masked": Quantity(TENSOR, "fill blocked scores (mask False) with -inf before the softmax; a query with no "
                                     "allowed key gets a row of zeros, not NaN.",
                             diagnose=D.nb2_attention_scale(masked=True)),
        "C_masked": Quantity(TENSOR, "C = A @ V with the masked A; a query with no allowed key gets a zero vector.",
                             upstream=("A_masked",)),
        "causal_mask": Quantity(TENSOR, "bool (T, T), True where j <= i (diagonal included).",
                                diagnose=D.wrong_side(additive=False)),
        "padding_mask": Quantity(TENSOR, "bool (B, T), True where the token is not pad_id."),
        "combined_mask": Quantity(TENSOR, "mask[b, i, j] = (j <= i) and tokens[b, j] != pad_id (padding on the key "
                                          "axis, the last).", diagnose=D.combined_mask_axis),
        "masked_mean_loss": Quantity(SCALAR, "average -log_softmax(logits)[target] over the targets that are not "
                                             "pad_id.", diagnose=D.masked_mean),
        "perplexity": Quantity(SCALAR, "perplexity = exp(mean NLL per valid token) = exp(masked_mean_loss).",
                               diagnose=D.perplexity_of_sum, upstream=("masked_mean_loss",)),
    },
)

SCHEMA = SPEC.schema()


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade notebook 2's functions on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    return grade_notebook(ctx, problem, SPEC)
