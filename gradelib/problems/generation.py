"""Problem `generation`: generated.npy's form ("format": it counts only as what model.pt's own greedy generate()
writes, lm_model.py); the "perplexity" line is the course grader's, under its secret oracle."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..context import GradeContext
from ..handin_contract import GENERATION_STEPS as STEPS
from ..lm.vocab import EOS, PAD, VOCAB_SIZE, decode
from ..results import TestResult
from ..rubric_schema import Problem
from . import lm_common, lm_functions, lm_model

FILENAME = "generated.npy"
INPUTS = "lm/generation_test.npz"
REPETITIVE_DISTINCT = 3  # a row of generated ids with this many different characters or fewer repeats itself
REPETITIVE_SHARE = 0.25  # the local grader says so when at least this share of the rows do
# Greedy ids from a model run on another device (a GPU) may differ from the grader's CPU run where two logits nearly
# tie, and the rest of the row with them: this share of the rows checked (at least one) may differ.
ROWS_THAT_MAY_DIFFER = 0.05


def check_ids(arr: np.ndarray) -> str:
    """'' when every id is a generatable character, else what is wrong and where."""
    outside = (arr < 0) | (arr >= VOCAB_SIZE)
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        return (f"generation: {FILENAME} holds {int(outside.sum())} ids outside the vocabulary 0..{VOCAB_SIZE - 1} "
                f"(first {int(arr[where])} at index {where}).")
    for token_id, token in ((EOS, "<eos>"), (PAD, "<pad>")):
        hits = arr == token_id
        if hits.any():
            where = tuple(int(i) for i in np.argwhere(hits)[0])
            return (f"generation: {FILENAME} holds {token} (id {token_id}) {int(hits.sum())} times (first at index "
                    f"{where}); generate must never emit <eos> or <pad>: set their logits to -inf before choosing.")
    return ""


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade generated.npy and generate() on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    what = f"int ids (B, {STEPS}) of generate(inp, {STEPS}) for the {{rows}} prompts of generation_test.npz"
    functions = lm_functions.grade(ctx, problem)  # first: its public run comes before the model's on hidden rows
    return lm_common.grade_array(ctx, problem, INPUTS, FILENAME, (STEPS,), "iu", what,
                                 partial(_judge, ctx, problem)) + functions


def _judge(ctx: GradeContext, problem: Problem, ids: np.ndarray, prompts: np.ndarray) -> tuple[str, str, str] | str:
    """A generated.npy of the right shape judged for lm_common.grade_array."""
    bad = check_ids(ids)
    if bad:
        return bad
    why = generation_mismatch(ctx, lm_model.model_run(ctx, problem.settings), ids)
    quality = lm_common.QUALITY_LINES["generation"]
    if not any(g.id == quality and v in g.visibilities for g in problem.groups for v in ctx.visibilities):
        _local_notes(ctx, problem.settings, prompts, ids)  # a passing line's message is not shown, a note is
    return (f"{FILENAME} is well formed (shape {ids.shape}, every id a character)", why,
            f"{FILENAME}: shape {ids.shape}, dtype {ids.dtype}, every id a character (no <eos>/<pad>), what "
            "model.pt's generate() writes. The perplexity line grades what model.pt generates, after you submit.")


def _local_notes(ctx: GradeContext, settings: dict, prompts: np.ndarray, ids: np.ndarray) -> None:
    """What the local grader, which scores no generation, says of a well-formed generated.npy."""
    full, zero = float(settings["full_credit_perplexity"]), float(settings["zero_credit_perplexity"])
    ctx.note(f"generation: {FILENAME} is well formed. The course grader runs your model.pt's generate() itself and "
             f"computes the perplexity of what it writes under the source of the text (full credit at <= {full:g}, "
             f"none at >= {zero:g}).")
    stuck = repetitive_rows(ids)
    if len(stuck) >= REPETITIVE_SHARE * len(ids):
        r = stuck[0]
        ctx.note(f"generation: {len(stuck)} of the {len(ids)} rows of {FILENAME} repeat {REPETITIVE_DISTINCT} or "
                 f"fewer characters (row {r}: {decode(prompts[r])[-20:]!r} -> {decode(ids[r])!r}). Real text rarely "
                 "does that, so generations like these usually earn little or nothing of the perplexity line: train "
                 "longer (notebook 3 prints the validation NLL each epoch), and check that generate() feeds each "
                 "picked id back as the next input.")


def repetitive_rows(ids: np.ndarray) -> list[int]:
    """Rows of ids (B, STEPS) with REPETITIVE_DISTINCT different ids or fewer ("   ", "e e e"): real text never does."""
    return [r for r in range(len(ids)) if len(np.unique(ids[r])) <= REPETITIVE_DISTINCT]


def generation_mismatch(ctx: GradeContext, run: lm_model.ModelRun, ids: np.ndarray) -> str:
    """'' when generated.npy is what the handed-in model's own greedy generate() gives (all but a few rows of those
    the model generated), else why not. One that differs at all is noted and flagged."""
    head, why = lm_model.handin_head(run, ids, run.generated, "generate")
    if why:
        return why
    same = head.astype(np.int64) == run.generated.astype(np.int64)
    if not same.all():
        rows = "" if len(head) == len(ids) else f" in the first {len(head)} rows"
        share = f": {same.mean() * 100:.1f}% of its ids{rows} equal the model's own greedy generation"
        # A run that had the hidden rows at hand gets no figure: its generations could encode them.
        message = (f"{FILENAME} is not what model.pt generates{'' if run.hidden else share}. The grader scores its "
                   "own run of the model, not the array.")
        ctx.note(f"generation: {message}")
        ctx.flags["generated_does_not_match_model"] = message
    differ = int((~same.all(axis=1)).sum())
    if differ > max(1, int(ROWS_THAT_MAY_DIFFER * len(head))):
        return (f"{FILENAME} is not what model.pt generates: {differ} of the {len(head)} rows the grader had your "
                "model generate differ from its own greedy generation")
    return ""
