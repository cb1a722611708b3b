"""Problem `generation`: the perplexity of what the handed-in model generates, and generated.npy's form.

The "perplexity" line (hidden) is scored by the course grader under its secret oracle (GradeContext.course): with
the oracle a student could write the source's own text without training, so the handout holds neither it nor
oracle.json. "format" counts generated.npy only when it is what model.pt's own greedy generate() writes
(problems/lm_model.py). Function lines (generate_greedy, generate_sampling): lm_functions.py.
"""

from __future__ import annotations

import numpy as np

from ..context import GradeContext
from ..handin_contract import GENERATION_STEPS as STEPS
from ..lm.vocab import EOS, PAD, VOCAB_SIZE, decode
from ..results import TestResult
from ..rubric_schema import Problem
from ..scoring import all_zero
from . import lm_common, lm_functions, lm_model
from .lm_common import load_npy

FILENAME = "generated.npy"
INPUTS = "lm/generation_test.npz"
REPETITIVE_DISTINCT = 3  # a row of generated ids with this many different characters or fewer repeats itself
REPETITIVE_SHARE = 0.25  # the local grader says so when at least this share of the rows do
# Greedy ids from a model run on another device (a GPU) may differ from the grader's CPU run where two logits are
# within rounding of each other; after such a step the rest of the row differs. So this share of the rows
# checked (and at least one) may differ while generated.npy still counts as what the model generates.
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
    arrays = lm_functions.split_lines(problem)[0]
    return _grade_arrays(ctx, arrays) + lm_functions.grade(ctx, problem)


def _grade_arrays(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    prompts = lm_common.prompts(ctx, INPUTS)
    if prompts is None:
        return all_zero(problem, ctx.visibilities, lm_common.missing("generation", ctx, INPUTS))
    rows = prompts.shape[0]
    what = f"int ids (B, {STEPS}) of generate(inp, {STEPS}) for the {rows} prompts of generation_test.npz"
    ids, message = load_npy("generation", ctx.submission / FILENAME, (rows, STEPS), "iu", what,
                            "" if ctx.run_expected else ctx.not_trained(FILENAME))
    if ids is not None:
        message = check_ids(ids)
        ids = None if message else ids
    verdict = None
    if ids is not None:
        run = lm_model.model_run(ctx, problem.settings)
        _compare(ctx, ids, run)
        if not any(g.id == "perplexity" and v in g.visibilities for g in problem.groups for v in ctx.visibilities):
            _local_notes(ctx, problem.settings, prompts, ids)  # a passing line's message is not shown, a note is
        verdict = lm_common.format_verdict(
            "generation", f"{FILENAME} is well formed (shape {ids.shape}, every id a character)",
            generation_mismatch(run, ids),
            f"{FILENAME}: shape {ids.shape}, dtype {ids.dtype}, every id a character (no <eos>/<pad>), what "
            "model.pt's generate() writes. The perplexity line grades what model.pt generates, after you submit.")
    return lm_common.array_results(ctx, problem, "perplexity", verdict, message)


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
    """Rows of generated ids (B, STEPS) that hold REPETITIVE_DISTINCT different ids or fewer
    ("          ", "e e e e", ...): a continuation of the toy source's text never does."""
    return [r for r in range(len(ids)) if len(np.unique(ids[r])) <= REPETITIVE_DISTINCT]


def generation_mismatch(run: lm_model.ModelRun, ids: np.ndarray) -> str:
    """'' when generated.npy is what the handed-in model's own greedy generate() gives (all but a few rows of those
    the model generated), else why not."""
    head, why = lm_model.handin_head(run, ids, run.generated, "generate")
    if why:
        return why
    differ = int(np.any(head.astype(np.int64) != run.generated.astype(np.int64), axis=1).sum())
    if differ > max(1, int(ROWS_THAT_MAY_DIFFER * len(head))):
        return (f"{FILENAME} is not what model.pt generates: {differ} of the {len(head)} rows the grader had your "
                "model generate differ from its own greedy generation")
    return ""


def _compare(ctx: GradeContext, ids: np.ndarray, run: lm_model.ModelRun) -> None:
    """Flag a generated.npy that is not what the handed-in model generates."""
    head = lm_model.handin_head(run, ids, run.generated, "generate")[0]
    same = 1.0 if head is None else float(np.mean(head.astype(np.int64) == run.generated.astype(np.int64)))
    if same < 1.0:
        rows = "" if len(head) == len(ids) else f" in the first {len(head)} rows"
        # A run that had the hidden rows at hand gets no figure: its generations could encode them.
        share = "" if run.hidden else f": {same * 100:.1f}% of its ids{rows} equal the model's own greedy generation"
        message = (f"{FILENAME} is not what model.pt generates{share}. The grader scores its own run of the model, "
                   "not the array.")
        ctx.note(f"generation: {message}")
        ctx.flags["generated_does_not_match_model"] = message
