"""The model-quality lines only the course grader scores: what the handout does not hold decides them.

prediction's "nll" line: the handed-in model's teacher-forced NLL on the hidden continuations of
prediction_test.npz, revealed one step at a time (gradelib/problems/lm_model.py); generation's
"perplexity" line: what the model generates, scored under the secret oracle
(autograder/oracle/). The kit grades every other line and hands these to `score_line`, its
`course_lines` (gradelib/problems/lm_common.course_line); the local grader has none.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from gradelib.context import GradeContext
from gradelib.lm.nll import prediction_nll
from gradelib.lm.vocab import decode
from gradelib.problems import generation, lm_common, lm_model
from gradelib.problems.generation import FILENAME, STEPS, check_ids
from gradelib.problems.lm_common import credit
from gradelib.results import TestResult
from gradelib.rubric_schema import Problem
from gradelib.scoring import Line

from ..oracle.metrics import generation_token_nll
from ..oracle.oracles import load_oracle


def score_line(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """The course grader's `course_lines`: the TestResult of a line the kit leaves to it."""
    if (problem.id, line.group.id) == ("prediction", "nll"):
        return _score_nll(ctx, problem, line)
    if (problem.id, line.group.id) == ("generation", "perplexity"):
        return _perplexity(ctx, problem, line)
    return line.result(0.0, f"{problem.id}: unknown rubric line '{line.group.id}'")


def _perplexity(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """The perplexity under the oracle of what the handed-in model generates for generation_test.npz."""
    prompts = lm_common.prompts(ctx, generation.INPUTS)
    if prompts is None:
        return line.result(0.0, lm_common.missing("generation", ctx, generation.INPUTS))
    own, why = model_generation(ctx, problem, (prompts.shape[0], STEPS))
    scored = None
    if own is not None:
        scored, why = _score(ctx.case_root / "lm", problem.settings, prompts, own)
    if scored is None:
        return line.result(0.0, f"generation: {why}")
    full, zero = float(problem.settings["full_credit_perplexity"]), float(problem.settings["zero_credit_perplexity"])
    return _perplexity_result(line, prompts, own, scored, full, zero)


def model_generation(ctx: GradeContext, problem: Problem, shape: tuple[int, int]) -> tuple[np.ndarray | None, str]:
    """(the ids the handed-in model generates greedily with the notebook's generate(), '') or (None, why not)."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        return None, run.problem
    if run.generated is None:
        why = run.call_problems.get("generate", "generate() returned nothing the grader could read")
        return None, f"running your generate(model, inp, {STEPS}) on generation_test.npz: {why}"
    own = run.generated
    if own.shape != shape or own.dtype.kind not in "iu":
        return None, (f"your generate(model, inp, {STEPS}) returned shape {own.shape} and dtype {own.dtype}; "
                      f"expected {shape} integer ids")
    bad = check_ids(own)
    if bad:
        return None, "what your model generates: " + bad.replace(f"generation: {FILENAME} holds", "it holds")
    return own.astype(np.int64), ""


def _score(lm_dir: Path, settings: dict, prompts: np.ndarray, ids: np.ndarray):
    """((perplexity, per-token NLL, seconds), '') or (None, why the oracle could not score)."""
    eps = float(settings["smoothing_eps"])
    try:
        oracle = load_oracle(lm_dir, eps)
    except (ImportError, OSError, ValueError, KeyError) as exc:
        return None, f"the oracle could not be loaded ({exc}); perplexity not computed."
    start = time.monotonic()
    tok = generation_token_nll(oracle, prompts, ids, eps)  # (B, STEPS)
    ppl = float(np.exp(tok.mean()))
    if not math.isfinite(ppl):
        return None, "the perplexity of your model's generations is not a finite number."
    return (ppl, tok, time.monotonic() - start), ""


def _perplexity_result(line: Line, prompts, ids, scored, full, zero) -> TestResult:
    ppl, tok, seconds = scored
    if not math.isfinite(ppl):
        return line.result(0.0, (
            f"generation: the perplexity of your model's generations is not a finite number ({ppl}), so this line scores 0; "
            "please tell the course staff, since smoothed scores should always be finite."))
    frac = credit(math.log(ppl), math.log(full), math.log(zero))
    worst = np.argsort(-tok.mean(axis=1), kind="stable")[:2]
    said = [
        f"generation perplexity {ppl:.3f} under the oracle ({tok.size} ids, scored in {seconds:.2f} s); "
        f"full credit at <= {full:g}, none at >= {zero:g} (linear in log perplexity): "
        f"{frac * line.points:.2f} of {line.points:g} points."
    ]
    if frac < 1.0:
        said.append("Least likely generations (prompt -> generation, mean NLL):")
        for r in worst.tolist():
            said.append(f"  row {r}: {decode(prompts[r])[-30:]!r} -> {decode(ids[r])!r}, {tok[r].mean():.2f} nats/char")
        said.append("Hint: greedy decoding from a well-trained model should continue the prompt's sentence grammatically; "
                     "check that generate feeds each picked id back as input for the next step.")
    return line.result(frac, "\n".join(said), {"generation_perplexity": ppl})


def _score_nll(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """Teacher-forced NLL of the handed-in model on the hidden continuations of prediction_test.npz."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        return line.result(0.0, f"prediction: {run.problem}")
    if "test" not in run.teacher_forced:
        why = run.set_problems.get("test", "the model was not run on the test rows")
        return line.result(0.0, f"prediction: {why}")
    logits, targets = run.teacher_forced["test"], run.targets["test"]
    if not np.isfinite(logits).all():
        return line.result(0.0,
                          "prediction: your model's logits hold NaN or infinite values; they must be finite.")
    nll = prediction_nll(logits, targets)
    if not math.isfinite(nll):
        return line.result(0.0, (
            f"prediction: your model's NLL is {nll}, not a finite number, so this line scores 0: its logits are "
            "finite but so far apart that their softmax gives a true character probability 0 in float64."))
    full, zero = float(problem.settings["full_credit_nll"]), float(problem.settings["zero_credit_nll"])
    frac = credit(nll, full, zero)
    text = (
        f"prediction NLL {nll:.4f} nats/char: your model.pt, rebuilt with your notebook's code, predicted each of the "
        f"{targets.size} hidden characters from the prompt and the true characters before it (teacher forcing); "
        f"full credit at <= {full:g}, none at >= {zero:g}: {frac * line.points:.2f} of {line.points:g} points."
    )
    note = lm_model.causal_note(run)
    if frac < 1.0:
        text += "\n" + (note or "Hint: the notebook prints the same figure on prediction.npz for each epoch; hand in "
                         "the checkpoint of the epoch with the lowest validation NLL.")
    return line.result(frac, text, {"prediction_nll": nll})
