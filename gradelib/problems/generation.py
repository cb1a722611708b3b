"""Problem `generation`: the perplexity of what the handed-in model generates, and generated.npy's form.

The grader rebuilds model.pt with the handin's notebook 3 code in the sandbox
(problems/lm_model.py), runs the notebook's generate(model, inp, 30) (greedy)
on every prompt of generation_test.npz, and the course grader scores the result
under its oracle (GradeContext.course; <case_root>/lm/oracle.json names it:
the toy source, exact by the forward algorithm, or an instructor's reference
model). The oracle is secret: with it a student could
write the source's own text without training, so the handout ships neither its
code nor oracle.json, and the local grader never scores text.

- id "format" (public): generated.npy is well formed (shape, integer ids in the
  vocabulary, no <eos>/<pad>) and what the handed-in model generates (its rows
  against the model's own greedy generate(), all but a few equal); full points
  or 0: an array the model did not make earns nothing. Any difference is
  flagged for the course staff.
- id "perplexity" (hidden): full credit at or below settings.full_credit_perplexity,
  none at or above settings.zero_credit_perplexity, linear in log(perplexity)
  in between. settings.smoothing_eps is the oracle's smoothing (the course grader's).
- lines that list quantities (generate_greedy, generate_sampling): notebook 3's
  generate() on fixed-weight models, graded by problems/lm_functions.py (sampling
  is checked by the frequencies of many samples, not only by where they lie).
"""

from __future__ import annotations

import numpy as np

from ..context import GradeContext
from ..handin_contract import GENERATION_STEPS
from ..lm.vocab import EOS, PAD, VOCAB_SIZE, decode
from ..results import TestResult
from ..rubric_schema import Problem, ProblemSchema, Setting, fraction
from ..scoring import Line, all_zero, lines
from . import lm_common, lm_functions, lm_model
from .lm_common import below, course_line, load_npy

FILENAME = "generated.npy"
INPUTS = "lm/generation_test.npz"
STEPS = GENERATION_STEPS

SCHEMA = ProblemSchema(
    settings={
        "smoothing_eps": Setting(
            (int, float),
            None,
            "Weight of the uniform distribution over the 28 characters mixed "
            "into the oracle (and its insertion-channel rate).",
            fraction,
        ),
        "full_credit_perplexity": Setting(
            (int, float), None, "Perplexity at or below which the perplexity line earns all its points."
        ),
        "zero_credit_perplexity": Setting(
            (int, float), None, "Perplexity at or above which it earns nothing (linear in log in between)."
        ),
        **lm_functions.FUNCTION_SETTINGS,
        **lm_functions.SAMPLING_SETTINGS,
    },
    line_ids=frozenset({"format", "perplexity"}),
    quantities=lm_functions.QUANTITIES,
    relations=(below("full_credit_perplexity", "zero_credit_perplexity"),),
)


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
            return (
                f"generation: {FILENAME} holds {token} (id {token_id}) {int(hits.sum())} times "
                f"(first at index {where}); "
                "generate must never emit <eos> or <pad>: set their logits to -inf before choosing."
            )
    return ""


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade generated.npy and generate() on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    arrays = lm_functions.split_lines(problem)[0]
    return _grade_arrays(ctx, arrays) + lm_functions.grade(ctx, problem)


def _grade_arrays(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    vis = ctx.visibilities
    prompts = lm_common.prompts(ctx, INPUTS)
    if prompts is None:
        return all_zero(problem, vis, lm_common.missing("generation", ctx, INPUTS))
    shape = (prompts.shape[0], STEPS)
    what = f"int ids (B, {STEPS}) of generate(inp, {STEPS}) for the {shape[0]} prompts of generation_test.npz"
    ids, message = load_npy("generation", ctx.submission / FILENAME, shape, "iu", what,
                            "" if ctx.run_expected else ctx.not_trained(FILENAME))
    if ids is not None:
        message = check_ids(ids)
        if message:
            ids = None
    settings = problem.settings
    full, zero = float(settings["full_credit_perplexity"]), float(settings["zero_credit_perplexity"])
    needs_model = any(g.id == "perplexity" and v in g.visibilities for g in problem.groups for v in vis)
    run = lm_model.model_run(ctx, settings) if ids is not None else None
    if ids is not None:
        _compare(ctx, ids, run)
        if not needs_model:  # the local grader: a passing line's message is not shown, a note is
            ctx.note(f"generation: {FILENAME} is well formed. The course grader runs your model.pt's generate() "
                     f"itself and computes the perplexity of what it writes under the source of the text "
                     f"(full credit at <= {full:g}, none at >= {zero:g}).")
            stuck = repetitive_rows(ids)
            if len(stuck) >= REPETITIVE_SHARE * len(ids):
                r = stuck[0]
                ctx.note(
                    f"generation: {len(stuck)} of the {len(ids)} rows of {FILENAME} repeat {REPETITIVE_DISTINCT} or "
                    f"fewer characters (row {r}: {decode(prompts[r])[-20:]!r} -> {decode(ids[r])!r}). Real "
                    "text rarely does that, so generations like these usually earn little or nothing of the "
                    "perplexity line: train longer (notebook 3 prints the validation NLL each epoch), and check "
                    "that generate() feeds each picked id back as the next input."
                )
    tests = []
    for line in lines(problem, vis):
        group = line.group
        if group.id == "perplexity":
            tests.append(course_line(ctx, problem, line))
        elif ids is None:
            tests.append(line.result(0.0, message))
        elif group.id == "format":
            tests.append(_format_result(line, ids, run))
        else:
            tests.append(line.result(0.0, f"generation: unknown rubric line '{group.id}'"))
    return tests


REPETITIVE_DISTINCT = 3  # a row of generated ids with this many different characters or fewer repeats itself
REPETITIVE_SHARE = 0.25  # the local grader says so when at least this share of the rows do


def repetitive_rows(ids: np.ndarray) -> list[int]:
    """Rows of generated ids (B, STEPS) that hold REPETITIVE_DISTINCT different ids or fewer
    ("          ", "e e e e", ...): a continuation of the toy source's text never does."""
    return [r for r in range(len(ids)) if len(np.unique(ids[r])) <= REPETITIVE_DISTINCT]


# Greedy ids from a model run on another device (a GPU) may differ from the grader's CPU run where two logits are
# within rounding of each other; after such a step the rest of the row differs. So this share of the rows
# checked (and at least one) may differ while generated.npy still counts as what the model generates.
ROWS_THAT_MAY_DIFFER = 0.05


def generation_mismatch(run, ids: np.ndarray) -> str:
    """'' when generated.npy is what the handed-in model's own greedy generate() gives (all but a few rows of those
    the model generated), else why not."""
    if run is None or run.problem:
        return f"there is no model to check it against: {run.said(run.problem) if run is not None else 'no model run'}"
    own = run.generated
    if lm_model.match_fraction(ids, own) is None:
        why = run.call_problems.get("generate", "generate() returned nothing the grader could compare")
        return f"your model's generate() could not be compared with it: {run.said(why)}"
    differ = int(np.any(np.asarray(ids[: len(own)]).astype(np.int64) != np.asarray(own).astype(np.int64), axis=1).sum())
    if differ > max(1, int(ROWS_THAT_MAY_DIFFER * len(own))):
        return (f"{FILENAME} is not what model.pt generates: {differ} of the {len(own)} rows the grader had your model "
                "generate differ from its own greedy generation")
    return ""


def _format_result(line: Line, ids: np.ndarray, run) -> TestResult:
    """Full points for a well-formed generated.npy that the handed-in model made, none for any other."""
    why = generation_mismatch(run, ids)
    if why:
        return line.result(0.0, f"generation: {FILENAME} is well formed (shape {ids.shape}, every id a character), but "
                                f"this line counts only for the arrays your handed-in model makes, and {why}.")
    return line.result(1.0, f"{FILENAME}: shape {ids.shape}, dtype {ids.dtype}, every id a character (no <eos>/<pad>), "
                            "what model.pt's generate() writes. The perplexity line grades what model.pt generates, "
                            "after you submit.")


def _compare(ctx: GradeContext, ids: np.ndarray, run) -> None:
    """Flag a generated.npy that is not what the handed-in model generates."""
    if run is None or run.problem or run.generated is None:
        return
    same = lm_model.match_fraction(ids, run.generated)
    if same is not None and same < 1.0:
        rows = "" if len(run.generated) == len(ids) else f" in the first {len(run.generated)} rows"
        # A run that had the hidden rows at hand gets no figure: its generations could encode them.
        share = "" if run.hidden else f": {same * 100:.1f}% of its ids{rows} equal the model's own greedy generation"
        message = (f"{FILENAME} is not what model.pt generates{share}. The grader scores its own run of the model, "
                   "not the array.")
        ctx.note(f"generation: {message}")
        ctx.flags["generated_does_not_match_model"] = message
