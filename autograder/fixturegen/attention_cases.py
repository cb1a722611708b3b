"""Generate the attention test cases: public ones for the handout, hidden ones for grading.

Every case is one row of CASES: its sizes, dtype, seed, score magnitude and
visibility. Expected values come from torch.autograd in float64 applied to a
direct transcription of the forward equations -- an oracle that shares no code
with solutions/attention.py. Run via `make fixtures`; output goes to
fixtures/attention/<visibility>/ as <name>.npz plus a cases.json index.

    python -m autograder.fixturegen [--out fixtures]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from autograder.fixturegen.rotation import rotated
from autograder.grading import rubric_check
from autograder.oracle import npzio

QUANTITIES = ("Q", "K", "V", "A_w", "A_sig", "X_new", "dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv", "dLdX")
# exp() of a score above this overflows in the dtype; "large" cases exceed it.
EXP_OVERFLOW = {"float32": 88.8, "float64": 709.8}
# A case's dtype, computing the equations itself, must land within this share of the rubric's tolerance (fair()).
FAIR = 0.125


@dataclass(frozen=True)
class CaseSpec:
    name: str
    visibility: str
    B: int
    T: int
    D: int
    Dk: int
    Dv: int
    dtype: str
    seed: int
    # Largest |A_w / sqrt(Dk)| wanted in the case; None keeps unit-scale inputs.
    max_score: float | None
    why: str
    # The edge case it is, graded by the rubric line with that `edge` alone ('' for an ordinary case):
    # large_scores (overflow without the max subtraction), single_position (T = 1), key_value_widths (Dk != Dv).
    # A new edge is this tag and its rubric line, nothing else (rubric_check.check_edges).
    edge: str = ""


# Each edge case varies one thing from the ordinary cases (which all have T > 1 and Dk == Dv, with
# unit-scale scores), so a slip that only the edge shows costs the edge's own line and no other.
CASES = (
    CaseSpec("single_batch", "public", 1, 4, 5, 3, 3, "float64", 101, None, "B = 1, D != Dk"),
    CaseSpec("batched", "public", 3, 6, 8, 4, 4, "float64", 102, None, "B > 1: weight gradients sum over the batch"),
    CaseSpec("batched_float32", "public", 2, 5, 6, 4, 4, "float32", 103, None, "float32 inputs stay float32"),
    CaseSpec(
        "large_scores_float32",
        "public",
        2,
        7,
        6,
        4,
        4,
        "float32",
        104,
        300.0,
        "scores large enough that exp() without max-subtraction overflows in float32",
        "large_scores",
    ),
    # Public twins of the other edges, so that a slip only they show (sqrt(Dv) for sqrt(Dk), a T = 1 shape slip)
    # loses its public line too: the student sees it and can fix it before the hidden cases grade it. In float32,
    # as one of each edge's hidden cases: code that raises on float64 alone is verified on them, as on the hidden ones.
    CaseSpec(
        "one_position",
        "public",
        2,
        1,
        4,
        3,
        3,
        "float32",
        105,
        None,
        "T = 1: a single position attends to itself",
        "single_position",
    ),
    CaseSpec(
        "narrow_keys",
        "public",
        2,
        5,
        6,
        3,
        5,
        "float32",
        106,
        None,
        "Dk != Dv: scale by sqrt(Dk), not sqrt(Dv)",
        "key_value_widths",
    ),
    CaseSpec("long_sequence", "hidden", 4, 9, 10, 5, 5, "float64", 207, None, "B > 1, T = 9"),
    CaseSpec("wide_float32", "hidden", 5, 12, 16, 6, 6, "float32", 205, None, "longer sequences in float32"),
    CaseSpec("narrow_input", "hidden", 3, 6, 4, 6, 6, "float64", 206, None, "D < Dk"),
    CaseSpec(
        "large_scores_float64",
        "hidden",
        2,
        8,
        6,
        8,
        8,
        "float64",
        204,
        3000.0,
        "scores large enough that exp() without max-subtraction overflows in float64",
        "large_scores",
    ),
    # In float32 too: code that raises on float64 alone (a float32 helper) is verified here, NaN and all, so the
    # forgiveness of a crash the ordinary float64 cases share never pays for a softmax that overflows.
    CaseSpec(
        "large_scores_float32_batched",
        "hidden",
        3,
        6,
        5,
        4,
        4,
        "float32",
        210,
        400.0,
        "scores large enough that exp() without max-subtraction overflows in float32, B > 1",
        "large_scores",
    ),
    CaseSpec(
        "single_step",
        "hidden",
        1,
        1,
        4,
        2,
        2,
        "float64",
        202,
        None,
        "T = 1: a single position attends to itself",
        "single_position",
    ),
    CaseSpec(
        "single_step_batched_float32",
        "hidden",
        3,
        1,
        5,
        4,
        4,
        "float32",
        203,
        None,
        "T = 1 with B > 1 in float32",
        "single_position",
    ),
    CaseSpec(
        "dk_ne_dv",
        "hidden",
        4,
        9,
        10,
        3,
        7,
        "float64",
        201,
        None,
        "Dk != Dv: scale by sqrt(Dk), not sqrt(Dv)",
        "key_value_widths",
    ),
    CaseSpec(
        "dk_ne_dv_float32", "hidden", 5, 12, 16, 5, 9, "float32", 208, None, "Dk != Dv in float32", "key_value_widths"
    ),
)


def oracle(X: torch.Tensor, W_k: torch.Tensor, W_q: torch.Tensor, W_v: torch.Tensor, dLdXnew: torch.Tensor,
           dtype: torch.dtype = torch.float64) -> dict:
    """Forward by the equations, backward by torch.autograd, all in float64 (or `dtype`)."""
    X, W_k, W_q, W_v = (t.detach().to(dtype).clone().requires_grad_(True) for t in (X, W_k, W_q, W_v))
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    for t in (Q, K, V):
        t.retain_grad()
    A_w = Q @ K.transpose(-1, -2)
    T = X.shape[1]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    A_sig = torch.softmax((A_w / math.sqrt(W_k.shape[1])).masked_fill(~allowed, float("-inf")), dim=-1)
    X_new = A_sig @ V
    X_new.backward(dLdXnew.to(dtype))
    values = {
        "Q": Q, "K": K, "V": V, "A_w": A_w, "A_sig": A_sig, "X_new": X_new,
        "dLdQ": Q.grad, "dLdK": K.grad, "dLdV": V.grad,
        "dLdWq": W_q.grad, "dLdWk": W_k.grad, "dLdWv": W_v.grad, "dLdX": X.grad,
    }
    return {k: v.detach().numpy() for k, v in values.items()}


def make_case(spec: CaseSpec, tolerance: dict[str, dict[str, float]]) -> dict[str, np.ndarray]:
    """The case's arrays: the first draw of its seed's stream that its dtype can be graded on at `tolerance`."""
    gen = torch.Generator().manual_seed(spec.seed)
    for _ in range(100):
        arrays = draw(spec, gen)
        if fair(arrays, spec.dtype, tolerance[spec.dtype]):
            return arrays
    raise ValueError(f"{spec.name}: 100 draws, none that {spec.dtype} computes within {FAIR:g} of the tolerance")


def fair(arrays: dict[str, np.ndarray], dtype: str, tol: dict[str, float]) -> bool:
    """Whether the equations computed in `dtype` itself land within FAIR of the tolerance on every quantity.

    float32 keeps ~7 digits of a score: one of 400 is off by 3e-5 or more. Where every causal row is saturated
    (its softmax near one-hot), the gradients are that small and no float32 code gets them right: such draws are
    redrawn. FAIR leaves room for the same sums in other orders (4x apart at most on 150 seeds). Float64 is the
    oracle's own."""
    if dtype == "float64":
        return True
    inputs = (torch.from_numpy(arrays[k]) for k in ("X", "W_k", "W_q", "W_v", "dLdXnew"))
    got = oracle(*inputs, dtype=getattr(torch, dtype))
    for q in QUANTITIES:
        g, e = got[q].astype(np.float64), arrays[f"expected_{q}"].astype(np.float64)
        if np.any(np.abs(g - e) > FAIR * (tol["atol"] * max(1.0, np.abs(e).max()) + tol["rtol"] * np.abs(e))):
            return False
    return True


def draw(spec: CaseSpec, gen: torch.Generator) -> dict[str, np.ndarray]:
    X = torch.randn(spec.B, spec.T, spec.D, generator=gen, dtype=torch.float64)
    W_k = torch.randn(spec.D, spec.Dk, generator=gen, dtype=torch.float64) / math.sqrt(spec.D)
    W_q = torch.randn(spec.D, spec.Dk, generator=gen, dtype=torch.float64) / math.sqrt(spec.D)
    W_v = torch.randn(spec.D, spec.Dv, generator=gen, dtype=torch.float64) / math.sqrt(spec.D)
    dLdXnew = torch.randn(spec.B, spec.T, spec.Dv, generator=gen, dtype=torch.float64)
    if spec.max_score is not None:
        # Scores grow with the square of X's scale.
        scores = (X @ W_q) @ (X @ W_k).transpose(-1, -2) / math.sqrt(spec.Dk)
        # Rounded to 6 digits: the product's last bits depend on the CPU, the inputs must not.
        X = X * float(f"{math.sqrt(spec.max_score / scores.abs().max().item()):.6g}")
    dtype = getattr(torch, spec.dtype)
    inputs = {"X": X, "W_k": W_k, "W_q": W_q, "W_v": W_v, "dLdXnew": dLdXnew}
    inputs = {k: v.to(dtype) for k, v in inputs.items()}
    expected = oracle(**inputs)
    if spec.max_score is not None:
        largest = np.abs(expected["A_w"]).max() / math.sqrt(spec.Dk)
        assert largest > EXP_OVERFLOW[spec.dtype], f"{spec.name}: scores too small to overflow a naive softmax"
    arrays = {k: v.numpy() for k, v in inputs.items()}
    np_dtype = np.dtype(spec.dtype)
    arrays.update({f"expected_{q}": expected[q].astype(np_dtype) for q in QUANTITIES})
    return arrays


def describe(spec: CaseSpec) -> str:
    return f"B={spec.B}, T={spec.T}, D={spec.D}, Dk={spec.Dk}, Dv={spec.Dv}, {spec.dtype}; {spec.why}"


def write(out: Path, seed: int | None = None, public_too: bool = False, cases: tuple[CaseSpec, ...] = CASES,
          rubric_path: Path | None = None) -> list[Path]:
    """Write `cases` under out/attention/ and return the paths; with `seed`, the hidden ones (and the public ones
    with public_too) rotated (rotation.py). Their edges are checked against the rubric's lines first."""
    rubric_check.check_edges("attention", [(c.name, c.visibility, c.edge) for c in cases], rubric_path)
    tolerance = rubric_check.load(rubric_path)["attention"].tolerance
    torch.set_num_threads(1)
    written = []
    for vis, folder in npzio.case_folders(out, "attention"):
        index = []
        for spec in (c for c in cases if c.visibility == vis):
            spec = replace(spec, seed=rotated(spec.seed, vis, seed, public_too))
            path = folder / f"{spec.name}.npz"
            npzio.save(path, make_case(spec, tolerance))
            written.append(path)
            index.append({"name": spec.name, "dtype": spec.dtype, "seed": spec.seed, "description": describe(spec),
                          **({"edge": spec.edge} if spec.edge else {})})
        written.append(npzio.write_index(folder, index))
        print(f"attention/{vis}: {len(index)} cases: {', '.join(c['name'] for c in index)}")
    return written
