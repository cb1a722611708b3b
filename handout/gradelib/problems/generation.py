"""Problem `generation`: the perplexity of the handin's generated.npy under the oracle.

No student code runs here. The handin holds the ids its notebook generated after
each prompt of generation_test.npz; this process checks their form and scores
them with the oracle the staff grader supplies (GradeContext.oracle_loader; it reads
<case_root>/lm/oracle.json (the toy source, whose
forward algorithm is exact, or an instructor's reference model)). The oracle is
secret: with it a student could write the source's own text without training,
so the handout ships neither its code nor oracle.json, and the local autograder
checks the format only.

- id "format" (public): well formed (shape, integer ids in the vocabulary, no
  <eos>/<pad>); full points or 0.
- id "perplexity" (hidden): full credit at or below settings.full_credit_perplexity,
  none at or above settings.zero_credit_perplexity, linear in log(perplexity)
  in between. settings.smoothing_eps is the oracle's smoothing (metrics.py).
- lines that list quantities (generate_greedy, generate_sampling): notebook 3's
  generate() on fixed-weight models, graded by problems/lm_functions.py.
"""

from __future__ import annotations

import math
import time

import numpy as np

from . import lm_functions
from ..context import GradeContext
from ..lm.metrics import generation_token_nll
from ..lm.vocab import EOS, PAD, VOCAB_SIZE, decode
from ..results import TestResult
from ..rubric import Problem
from ..scoring import all_zero
from .prediction import credit, load_npy

FILENAME = "generated.npy"
INPUTS = "lm/generation_test.npz"
STEPS = 30


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
            return (f"generation: {FILENAME} holds {token} (id {token_id}) {int(hits.sum())} times (first at index {where}); "
                    "generate must never emit <eos> or <pad>: set their logits to -inf before choosing.")
    return ""


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    arrays = lm_functions.split_lines(problem)[0]
    return _grade_arrays(ctx, arrays) + lm_functions.grade(ctx, problem)


def _grade_arrays(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    vis = ctx.visibilities
    inputs = ctx.case_root / INPUTS
    if not inputs.is_file():
        return all_zero(problem, vis, f"generation: {INPUTS} is missing under {ctx.case_root}; run make fixtures.")
    with np.load(inputs, allow_pickle=False) as data:
        prompts = data["inp"]
    shape = (prompts.shape[0], STEPS)
    what = f"int ids (B, {STEPS}) of generate(inp, {STEPS}) for the {shape[0]} prompts of generation_test.npz"
    ids, message = load_npy("generation", ctx.submission / FILENAME, shape, "iu", what)
    if ids is not None:
        message = check_ids(ids)
        if message:
            ids = None
    settings = problem.settings
    eps = float(settings["smoothing_eps"])
    full, zero = float(settings["full_credit_perplexity"]), float(settings["zero_credit_perplexity"])
    scored = None
    needs_oracle = any(g.id == "perplexity" and v in g.visibilities for g in problem.groups for v in vis)
    if ids is not None and needs_oracle:
        try:
            if ctx.oracle_loader is None:  # the handout's grader has no oracle
                raise ValueError("this grader has no oracle")
            oracle = ctx.oracle_loader(ctx.case_root / "lm", eps)
        except (ImportError, OSError, ValueError, KeyError) as exc:
            oracle = None
            ctx.note(f"generation: the oracle could not be loaded ({exc}); perplexity not computed.")
        if oracle is not None:
            start = time.monotonic()
            tok = generation_token_nll(oracle, prompts, ids.astype(np.int64), eps)  # (B, STEPS)
            scored = (float(np.exp(tok.mean())), tok, time.monotonic() - start)
    elif ids is not None:  # the local grader: a passing line's message is not shown, a note is
        ctx.note(f"generation: {FILENAME} is well formed; its perplexity under the source of the text is computed "
                 f"by the course grader after you submit (full credit at <= {full:g}, none at >= {zero:g}).")
    tests = []
    for group in problem.groups:
        for v in vis:
            if v not in group.visibilities:
                continue
            points = problem.share(group, v)
            name = f"{problem.id}: {group.title} [{v}]"
            if ids is None:
                tests.append(TestResult(problem.id, name, 0.0, points, v, message))
            elif group.id == "format":
                text = (f"{FILENAME}: shape {ids.shape}, dtype {ids.dtype}, every id a character (no <eos>/<pad>). "
                        f"Its perplexity under the source of the text is computed by the course grader after you "
                        f"submit (full credit at <= {full:g}, none at >= {zero:g}).")
                tests.append(TestResult(problem.id, name, points, points, v, text))
            elif group.id == "perplexity":
                if scored is None:
                    tests.append(TestResult(problem.id, name, 0.0, points, v, "generation: the oracle was not available; see the notes."))
                    continue
                tests.append(_perplexity_result(problem, name, points, v, prompts, ids, scored, full, zero))
            else:
                tests.append(TestResult(problem.id, name, 0.0, points, v, f"generation: unknown rubric line '{group.id}'"))
    return tests


def _perplexity_result(problem, name, points, vis, prompts, ids, scored, full, zero) -> TestResult:
    ppl, tok, seconds = scored
    if not math.isfinite(ppl):
        return TestResult(problem.id, name, 0.0, points, vis, (
            f"generation: the perplexity of {FILENAME} is not a finite number ({ppl}), so this line scores 0; "
            "please tell the course staff, since smoothed scores should always be finite."))
    frac = credit(math.log(ppl), math.log(full), math.log(zero))
    worst = np.argsort(-tok.mean(axis=1), kind="stable")[:2]
    lines = [
        f"generation perplexity {ppl:.3f} under the oracle ({tok.size} ids, scored in {seconds:.2f} s); "
        f"full credit at <= {full:g}, none at >= {zero:g} (linear in log perplexity): {frac * points:.2f} of {points:g} points."
    ]
    if frac < 1.0:
        lines.append("Least likely generations (prompt -> generation, mean NLL):")
        for r in worst.tolist():
            lines.append(f"  row {r}: {decode(prompts[r])[-30:]!r} -> {decode(ids[r])!r}, {tok[r].mean():.2f} nats/char")
        lines.append("Hint: greedy decoding from a well-trained model should continue the prompt's sentence grammatically; "
                     "check that generate feeds each picked id back as input for the next step.")
    return TestResult(problem.id, name, frac * points, points, vis, "\n".join(lines))
