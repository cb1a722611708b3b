"""Generate the notebook test cases (problems `losses` and `masks`), public and hidden.

Every case is one row of LOSSES_CASES or MASKS_CASES: sizes, seed, visibility
and what it is for. A case holds the inputs of every graded function of its
notebook plus expected_<quantity> arrays. Expected values come from torch
(torch.nn.functional.cross_entropy with ignore_index, torch.softmax, boolean
tril, per-row loops for masked attention), never from the solution notebooks.
Output: fixtures/notebooks/<visibility>/<name>.npz and a cases.json index.

    python -m autograder.fixturegen [--out fixtures]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from autograder.fixturegen.rotation import rotated
from autograder.grading import rubric_check
from autograder.oracle import npzio

IGNORE_INDEX = -100
# exp() of a float64 above this overflows; "large" cases exceed it.
EXP_OVERFLOW_FLOAT64 = 709.8


@dataclass(frozen=True)
class LossesCase:
    name: str
    visibility: str
    seed: int
    T: int  # sequence length for attention and the causal mask
    d_k: int
    d_v: int
    N: int  # positions of the logits
    V: int  # vocabulary size
    n_ignored: int  # positions whose target is ignore_index
    ignore_index: int
    logit_scale: float  # large scales overflow a softmax without max-subtraction
    window: int | None  # attention mask: causal, or causal within a window of this width
    why: str
    # The edge case it is, graded by the rubric line with that `edge` alone ('' for an ordinary case):
    # large_logits (overflow without the max subtraction, log(0) from np.log(softmax(...))).
    edge: str = ""


LOSSES_CASES = (
    LossesCase(
        "toy_sentence",
        "public",
        301,
        7,
        3,
        3,
        7,
        10,
        3,
        IGNORE_INDEX,
        1.0,
        None,
        "sizes of the notebook's sentence: T = 7, d = 3, V = 10",
    ),
    LossesCase(
        "short_sequence", "public", 302, 4, 2, 3, 5, 6, 1, IGNORE_INDEX, 2.0, None, "d_k != d_v, one ignored target"
    ),
    LossesCase(
        "large_logits",
        "hidden",
        401,
        5,
        4,
        4,
        6,
        12,
        2,
        IGNORE_INDEX,
        900.0,
        None,
        "logits and scores large enough that exp() without max-subtraction overflows",
        "large_logits",
    ),
    LossesCase(
        "mostly_ignored",
        "hidden",
        402,
        9,
        5,
        7,
        12,
        30,
        8,
        IGNORE_INDEX,
        3.0,
        None,
        "8 of 12 targets ignored: the mean runs over 4 positions",
    ),
    LossesCase(
        "custom_ignore_index", "hidden", 403, 6, 3, 2, 8, 10, 3, 3, 1.5, None, "ignore_index = 3 instead of -100"
    ),
    LossesCase(
        "windowed_mask",
        "hidden",
        404,
        8,
        6,
        5,
        9,
        15,
        2,
        IGNORE_INDEX,
        1.0,
        3,
        "attention mask that also blocks keys more than 2 steps back",
    ),
    LossesCase(
        "single_position",
        "hidden",
        405,
        1,
        2,
        2,
        3,
        5,
        0,
        IGNORE_INDEX,
        1.0,
        None,
        "T = 1 (a 1 x 1 causal mask) and no ignored target",
    ),
    # Public twins of the edge cases, so that `python autograder.py` and grader.check test them too.
    LossesCase(
        "huge_logits",
        "public",
        306,
        4,
        3,
        2,
        5,
        8,
        1,
        IGNORE_INDEX,
        1000.0,
        None,
        "logits and scores so large that exp() without max-subtraction overflows and "
        "np.log(softmax(...)) of an unlikely target is log(0) = -inf",
        "large_logits",
    ),
    # ignore_index inside the range of real ids, valid ids on both sides: `targets > ignore_index` or
    # `targets >= 0` fails here, as on the hidden custom_ignore_index, not on a hidden case alone.
    LossesCase(
        "ignore_index_inside",
        "public",
        307,
        5,
        2,
        2,
        6,
        7,
        2,
        3,
        1.0,
        None,
        "ignore_index = 3, a real id with valid ids on both sides, instead of -100",
    ),
    # A mask that is not the causal one (as the hidden windowed_mask): a function that builds its own causal
    # mask instead of adding the one it is given fails here.
    LossesCase(
        "windowed_causal",
        "public",
        308,
        5,
        2,
        3,
        5,
        8,
        1,
        IGNORE_INDEX,
        1.0,
        2,
        "attention mask that also blocks keys more than 1 step back: add the mask given",
    ),
    # T = 1 (as the hidden single_position): a squeeze() or a shape that assumes T > 1 fails here.
    LossesCase(
        "one_position",
        "public",
        309,
        1,
        3,
        2,
        2,
        6,
        0,
        IGNORE_INDEX,
        1.0,
        None,
        "T = 1 (a 1 x 1 causal mask), two positions of logits, no ignored target",
    ),
)
# A target this far (in log-probability) below its row's best logit has softmax probability 0.0 in float64.
LOG_UNDERFLOW_FLOAT64 = -745.2


@dataclass(frozen=True)
class MasksCase:
    name: str
    visibility: str
    seed: int
    B: int
    Tq: int
    Tk: int
    D: int
    Dv: int
    T: int  # token sequence length (masks and loss)
    V: int
    pad_id: int
    lengths: tuple[int, ...]  # real tokens per sequence; the rest is padding
    left_padded: bool
    empty_rows: int  # rows of the attention mask with no allowed key
    score_scale: float
    why: str


MASKS_CASES = (
    MasksCase("small_batch", "public", 501, 2, 4, 4, 3, 3, 5, 30, 1, (5, 3), False, 0, 1.0,
              "B = 2, right padding, square attention"),
    MasksCase("padded_words", "public", 502, 3, 3, 6, 4, 2, 8, 30, 1, (5, 8, 6), False, 1, 1.0,
              "three padded sequences, Tq != Tk, one query with no allowed key"),
    # Public twins of hidden cases: left padding with pad_id = 0 (a mask built from the lengths, or a pad id
    # written into the code, fails here), and scores that overflow exp() without the max subtraction.
    MasksCase("left_padded_words", "public", 503, 2, 3, 5, 4, 3, 6, 30, 0, (4, 6), True, 1, 1.0,
              "left padding, pad_id = 0: the first queries see no real key"),
    MasksCase("huge_scores", "public", 504, 1, 4, 4, 6, 3, 4, 30, 1, (4,), False, 0, 2000.0,
              "scores large enough that exp() without max-subtraction overflows"),
    MasksCase("one_token", "public", 505, 1, 1, 1, 3, 2, 1, 30, 1, (1,), False, 0, 1.0,
              "B = 1, T = 1: a squeeze() or a shape that assumes T > 1 fails here"),
    MasksCase("fully_masked_rows", "hidden", 601, 3, 5, 5, 4, 6, 6, 30, 1, (6, 2, 4), False, 4, 1.0,
              "four queries with no allowed key: zeros, not NaN"),
    MasksCase("left_padding", "hidden", 602, 2, 3, 7, 5, 3, 7, 30, 1, (4, 7), True, 1, 1.0,
              "left-padded tokens: the first queries see no real key"),
    MasksCase("large_scores", "hidden", 603, 2, 6, 6, 8, 4, 6, 30, 1, (6, 4), False, 0, 2000.0,
              "scores large enough that exp() without max-subtraction overflows"),
    MasksCase("pad_id_zero", "hidden", 604, 4, 2, 3, 3, 5, 9, 12, 0, (9, 1, 5, 7), False, 0, 1.0,
              "pad_id = 0 and a sequence with a single real token"),
    MasksCase("no_padding", "hidden", 605, 2, 4, 4, 2, 2, 4, 30, 1, (4, 4), False, 0, 1.0,
              "no padding: the masked mean is the plain mean"),
    MasksCase("single_step", "hidden", 606, 1, 1, 1, 4, 3, 1, 30, 1, (1,), False, 0, 1.0, "T = 1"),
)


def losses_inputs(c: LossesCase) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(c.seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    Q, K, V = randn(c.T, c.d_k), randn(c.T, c.d_k), randn(c.T, c.d_v)
    if c.logit_scale > 100:
        # Scale Q so that the largest scaled score is +logit_scale: exp() of it overflows.
        scores = (Q @ K.T / math.sqrt(c.d_k)).flatten()
        Q = Q * (c.logit_scale / scores[scores.abs().argmax()])
    i, j = torch.meshgrid(torch.arange(c.T), torch.arange(c.T), indexing="ij")
    blocked = j > i
    if c.window is not None:
        blocked |= j <= i - c.window
    mask = torch.zeros(c.T, c.T, dtype=torch.float64).masked_fill(blocked, float("-inf"))
    logits = randn(c.N, c.V) * c.logit_scale
    z = randn(3, c.N, c.V) * c.logit_scale
    nll_targets = torch.randint(0, c.V, (c.N,), generator=g)
    targets = nll_targets.clone()
    ignored = torch.randperm(c.N, generator=g)[: c.n_ignored]
    targets[ignored] = c.ignore_index
    if c.ignore_index >= 0:
        # A real target equal to ignore_index would be ignored too; keep the count exact.
        keep = torch.ones(c.N, dtype=torch.bool)
        keep[ignored] = False
        targets[keep & (targets == c.ignore_index)] = (c.ignore_index + 1) % c.V
        kept = torch.nonzero(keep).flatten()
        # Valid ids below and above ignore_index, so that no comparison with it can stand in for `!=`.
        if c.ignore_index > 0 and not (targets[kept] < c.ignore_index).any():
            targets[kept[0]] = 0
        if c.ignore_index < c.V - 1 and not (targets[kept] > c.ignore_index).any():
            targets[kept[-1]] = c.V - 1
    arrays = {"Q": Q, "K": K, "V": V, "mask": mask, "logits": logits, "z": z,
              "nll_targets": nll_targets, "targets": targets}
    out = {k: v.numpy() for k, v in arrays.items()}
    out["T"] = np.array(c.T, dtype=np.int64)
    out["ignore_index"] = np.array(c.ignore_index, dtype=np.int64)
    return out


def losses_expected(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    d_k = t["K"].shape[-1]
    scores = t["Q"] @ t["K"].T / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    masked = torch.softmax(scores + t["mask"], dim=-1)
    T = int(x["T"])
    expected = {
        "softmax": torch.softmax(t["z"], dim=-1),
        "attn_weights": weights,
        "attn_output": weights @ t["V"],
        "masked_weights": masked,
        "masked_output": masked @ t["V"],
        "predicted_ids": torch.argmax(t["logits"], dim=-1),
        "token_nll": F.cross_entropy(t["logits"], t["nll_targets"], reduction="none"),
        "cross_entropy_loss": F.cross_entropy(
            t["logits"], t["targets"], ignore_index=int(x["ignore_index"]), reduction="mean"
        ),
        "causal_mask": torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1),
    }
    return {f"expected_{k}": v.numpy() for k, v in expected.items()}


def masks_inputs(c: MasksCase) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(c.seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    X = randn(c.B, c.T, c.D)
    Q, K, V = randn(c.B, c.Tq, c.D), randn(c.B, c.Tk, c.D), randn(c.B, c.Tk, c.Dv)
    if c.score_scale > 100:
        scores = Q @ K.transpose(-2, -1) / math.sqrt(c.D)
        Q = Q * (c.score_scale / scores.abs().max())
    mask = torch.rand(c.B, c.Tq, c.Tk, generator=g) < 0.6
    mask[..., 0] = True  # every row has a key, except the rows emptied below
    flat = mask.view(-1, c.Tk)
    for row in torch.randperm(flat.shape[0], generator=g)[: c.empty_rows]:
        flat[row] = False
    tokens = torch.full((c.B, c.T), c.pad_id, dtype=torch.int64)
    targets = torch.full((c.B, c.T), c.pad_id, dtype=torch.int64)
    real_ids = [i for i in range(c.V) if i != c.pad_id]
    for b, n in enumerate(c.lengths):
        span = slice(c.T - n, c.T) if c.left_padded else slice(0, n)
        pick = torch.randint(0, len(real_ids), (2, n), generator=g)
        tokens[b, span] = torch.tensor(real_ids)[pick[0]]
        targets[b, span] = torch.tensor(real_ids)[pick[1]]
    logits = randn(c.B, c.T, c.V) * 3
    arrays = {"X": X, "Q": Q, "K": K, "V": V, "mask": mask, "tokens": tokens, "targets": targets, "logits": logits}
    out = {k: v.numpy() for k, v in arrays.items()}
    out["T"] = np.array(c.T, dtype=np.int64)
    out["pad_id"] = np.array(c.pad_id, dtype=np.int64)
    return out


def masked_attention_by_rows(Q, K, V, mask):
    """Softmax over each row's allowed keys only, one row at a time; no allowed key -> zeros."""
    B, Tq, _ = Q.shape
    A = torch.zeros(B, Tq, K.shape[1], dtype=Q.dtype)
    for b in range(B):
        for i in range(Tq):
            keys = mask[b, i].nonzero().flatten()
            if len(keys):
                A[b, i, keys] = torch.softmax(Q[b, i] @ K[b, keys].T / math.sqrt(Q.shape[-1]), dim=-1)
    return A, A @ V


def masks_expected(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    X, tokens, pad_id, T = t["X"], t["tokens"], int(x["pad_id"]), int(x["T"])
    uniform = torch.stack([X[:, : s + 1].mean(dim=1) for s in range(X.shape[1])], dim=1)
    A, C = masked_attention_by_rows(t["Q"], t["K"], t["V"], torch.ones_like(t["mask"]))
    A_m, C_m = masked_attention_by_rows(t["Q"], t["K"], t["V"], t["mask"])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    combined = torch.zeros(tokens.shape[0], T, T, dtype=torch.bool)
    for b in range(tokens.shape[0]):
        for i in range(T):
            for j in range(i + 1):
                combined[b, i, j] = bool(tokens[b, j] != pad_id)
    Vsize = t["logits"].shape[-1]
    loss = F.cross_entropy(t["logits"].reshape(-1, Vsize), t["targets"].reshape(-1), ignore_index=pad_id)
    expected = {
        "uniform": uniform, "A": A, "C": C, "A_masked": A_m, "C_masked": C_m,
        "causal_mask": causal, "padding_mask": tokens != pad_id, "combined_mask": combined,
        "masked_mean_loss": loss, "perplexity": torch.exp(loss),
    }
    return {f"expected_{k}": v.numpy() for k, v in expected.items()}


def describe_losses(c: LossesCase) -> str:
    return f"T={c.T}, d_k={c.d_k}, d_v={c.d_v}, N={c.N}, V={c.V}, {c.n_ignored} ignored; {c.why}"


def describe_masks(c: MasksCase) -> str:
    """The shapes of what each function is given or gives back: one header serves every line the case grades."""
    return (f"Q {c.B} x {c.Tq}, K and V {c.B} x {c.Tk}; tokens and X {c.B} x {c.T} (masks {c.T} x {c.T} and "
            f"{c.B} x {c.T} x {c.T}), vocabulary {c.V}, pad_id={c.pad_id}; {c.why}")


def write(out: Path, seed: int | None = None, public_too: bool = False) -> list[Path]:
    """Every case; with `seed`, the hidden ones (and the public ones with public_too) rotated (rotation.py)."""
    rubric_check.check_edges("losses", [(c.name, c.visibility, c.edge) for c in LOSSES_CASES])
    torch.set_num_threads(1)
    written = []
    for vis, folder in npzio.case_folders(out, "notebooks"):
        for stale in folder.glob("*.npz"):
            stale.unlink()
        index = []
        for c in (c for c in LOSSES_CASES if c.visibility == vis):
            c = replace(c, seed=rotated(c.seed, vis, seed, public_too))
            x = losses_inputs(c)
            if c.logit_scale > 100:
                assert np.abs(x["logits"]).max() > EXP_OVERFLOW_FLOAT64, f"{c.name}: logits too small to overflow"
                assert (x["Q"] @ x["K"].T).max() / math.sqrt(c.d_k) > EXP_OVERFLOW_FLOAT64, (
                    f"{c.name}: scores too small"
                )
                log_p = torch.log_softmax(torch.from_numpy(x["logits"]), -1)[
                    torch.arange(c.N), torch.from_numpy(x["nll_targets"])
                ]
                assert float(log_p.min()) < LOG_UNDERFLOW_FLOAT64, f"{c.name}: np.log(softmax(...)) would stay finite"
            npzio.save(folder / f"{c.name}.npz", {**x, **losses_expected(x)})
            index.append({"name": c.name, "problem": "losses", "seed": c.seed, "description": describe_losses(c),
                          **({"edge": c.edge} if c.edge else {})})
        for c in (c for c in MASKS_CASES if c.visibility == vis):
            c = replace(c, seed=rotated(c.seed, vis, seed, public_too))
            x = masks_inputs(c)
            if c.score_scale > 100:  # exp() of the largest allowed score overflows, with and without the mask
                scores = x["Q"] @ x["K"].transpose(0, 2, 1) / math.sqrt(c.D)
                assert np.where(x["mask"], scores, -np.inf).max() > EXP_OVERFLOW_FLOAT64, f"{c.name}: scores too small"
            npzio.save(folder / f"{c.name}.npz", {**x, **masks_expected(x)})
            index.append({"name": c.name, "problem": "masks", "seed": c.seed, "description": describe_masks(c)})
        names = [e["name"] for e in index]
        assert len(set(names)) == len(names), f"case names repeat in {folder}: {names}"
        written += [folder / f"{e['name']}.npz" for e in index]
        written.append(npzio.write_index(folder, index))
        for problem in ("losses", "masks"):
            names = [e["name"] for e in index if e["problem"] == problem]
            print(f"notebooks/{vis}: {len(names)} {problem} cases: {', '.join(names)}")
    return written
