"""Problem `attention`: grade attention.py's forward and backward passes, run in a child (child/attention_child.py)."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import runner as sandbox
from .. import safeio, scoring
from ..compare import Observed, check
from ..context import GradeContext
from ..handin_contract import MAX_FILE_BYTES
from ..results import TestResult
from ..rubric_schema import Problem
from ..safeio import SafeReadError, clean_text, quote
from ..scoring import Case, CaseOutcome
from .handin_runs import run_child
from .notebook_diagnoses import softmax

FILENAME = "attention.py"
QUANTITIES = ("Q", "K", "V", "A_w", "A_sig", "X_new", "dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv", "dLdX")
HARNESS = ("child_common.py", "attention_child.py")

HINTS = {"Q": "Q = X W_q with X (B, T, D) and W_q (D, Dk); '@' broadcasts over the batch.",
         "K": "K = X W_k, shape (B, T, Dk).", "V": "V = X W_v, shape (B, T, Dv).",
         "A_w": "A_w is the raw Q K^T (B, T, T): transpose only the last two axes of K, and do not scale or mask it.",
         "A_sig": "A_sig = softmax over the last axis of A_w / sqrt(Dk) with -inf above the diagonal.",
         "X_new": "X_new = A_sig V, shape (B, T, Dv).",
         "dLdV": "dLdV = A_sig^T dLdXnew, transposing the last two axes of A_sig.",
         "dLdQ": "dLdQ = dLdA_w K, where dLdA_w includes the 1/sqrt(Dk) factor and the full softmax Jacobian.",
         "dLdK": "dLdK = dLdA_w^T Q: transpose dLdA_w (last two axes) before multiplying.",
         "dLdWq": "dLdWq = sum over the batch of X_b^T dLdQ_b, shape (D, Dk) like W_q.",
         "dLdWk": "dLdWk = sum over the batch of X_b^T dLdK_b, shape (D, Dk) like W_k.",
         "dLdWv": "dLdWv = sum over the batch of X_b^T dLdV_b, shape (D, Dv) like W_v.",
         "dLdX": "X reaches the output through Q, K and V: dLdX = dLdQ W_q^T + dLdK W_k^T + dLdV W_v^T."}

# A float32 tensor made inside the code (a constant, a mask, a helper's weights) meeting float64 input.
DTYPE_CLASH = re.compile(r"same dtype|expected scalar type|found dtype|dtype \w+ but expected|"
                         r"(double|float) != (double|float)|result type Float can't be cast", re.IGNORECASE)
DTYPE_CLASH_HINT = ("a float32 tensor made inside your code met float64 input: build tensors with dtype=X.dtype "
                    "(torch.ones(T, T, dtype=X.dtype)) or use Python numbers for constants.")
# What backward reads of what forward stored: when forward raised after storing these, backward is judged.
BACKWARD_READS = ("Q", "K", "V", "A_sig")

# What each quantity is computed from: when one of these is wrong, so is it.
UPSTREAM = {"A_w": ("Q", "K"), "A_sig": ("A_w",), "X_new": ("A_sig", "V"), "dLdV": ("A_sig",), "dLdQ": ("A_sig", "K"),
            "dLdK": ("A_sig", "Q"), "dLdWq": ("dLdQ",), "dLdWk": ("dLdK",), "dLdWv": ("dLdV",),
            "dLdX": ("dLdQ", "dLdK", "dLdV")}


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """Grade attention.py on ctx's case sets: a TestResult per (line of `problem`, visibility)."""
    vis = ctx.visibilities
    src = ctx.submission / FILENAME
    if not src.is_file():
        return scoring.all_zero(problem, vis, f"{FILENAME} is missing from the handin; add it and submit again.")
    try:
        source = safeio.read_text(src, MAX_FILE_BYTES)
    except SafeReadError as exc:
        return scoring.all_zero(problem, vis, f"{exc}; hand in attention.py as a plain file.")
    try:
        static_hits = ctx.course.autograd_uses(source)
    except SyntaxError as exc:
        return scoring.all_zero(problem, vis, f"{FILENAME} does not parse: line {exc.lineno}: {exc.msg}. "
                                              "Fix the syntax error and run the local autograder.")
    cases = scoring.load_cases(ctx.case_root, "attention", vis)
    if not cases:
        return scoring.all_zero(problem, vis, f"no attention cases under {ctx.case_root}")

    # reasons: why the backward points are withheld; hidden_hits: the hidden run's records (named to the staff only)
    outcomes, runtime_hits, hidden_hits, reasons, stored = [], set(), set(), [], stored_at(source)

    def run_set(mine: list[Case], limits: sandbox.Limits, hidden: bool) -> sandbox.ChildRun:
        (found, hits), run = run_child(
            ctx, "attention", src=src, name=FILENAME, cases=[(c.name, c.path) for c in mine],
            child="attention_child.py", harness=HARNESS, task={"module": "attention"},
            collect=lambda scratch, run: _collect(problem, mine, scratch, run, stored, ctx.course.said_record),
            limits=limits)
        outcomes.extend(found)
        (recorded := hidden_hits if hidden else runtime_hits).update(hits)
        hits, tampered = ctx.course.attention_records(run, found)  # what only a hostile run records
        recorded.update([*hits, *(tampered if hidden else [])])
        reasons.extend([] if reasons or hidden else tampered)  # the first public run's
        _note_end(ctx, run, hidden)
        return run

    ctx.course.run_sets(ctx, cases, run_set)
    scoring.name_float32(outcomes)
    for outcome in outcomes:
        scoring.follow_upstream(outcome, UPSTREAM)

    if static_hits:
        lines = clean_text("; ".join(static_hits[:5]))
        reasons.append(f"uses automatic differentiation or a built-in attention: {lines}")
    if runtime_hits:
        reasons.append("used " + ", ".join(sorted(runtime_hits)) + " while running")
    if hidden_hits - runtime_hits:  # a hidden run could choose what it records: its words go to the staff only
        reasons.append("used automatic differentiation (or tampered with its record) on the hidden cases")
    if not reasons:
        return scoring.group_results(problem, outcomes, vis)
    msg = (f"Backward points withheld: {FILENAME} " + " and ".join(reasons) + ". This assignment asks for "
           "hand-derived gradients with plain tensor operations; remove torch.autograd, .backward(), "
           "requires_grad and scaled_dot_product_attention.")
    staff = f" On the hidden cases: {', '.join(sorted(hidden_hits))}." if hidden_hits else ""
    ctx.flags["attention_backward_by_autograd"] = msg + staff  # report.html's list for the course staff
    return scoring.group_results(problem, outcomes, vis, {g.id: msg for g in problem.groups if g.backward})


def _note_end(ctx: GradeContext, run: sandbox.ChildRun, hidden: bool) -> None:
    """Say how a run that did not end well ended, with what it printed last, each line quoted: indented under the
    grader's words. A run that had hidden inputs at hand: how it ended, by kind alone (its limits say so)."""
    if not (run.timed_out or run.returncode not in (0, None)):
        return
    if hidden:  # never what it printed: it could print a hidden input
        return ctx.note(f"attention: the submission's process on the hidden cases {run.describe()} (its exit code "
                        "and output are not shown: that run had the hidden cases at hand).")
    log = [quote(line, 200) for line in clean_text(run.log_tail).strip().splitlines()[-8:]]
    ctx.note(f"attention: the submission's process {run.describe()}."
             + ("\n  last output:\n    " + "\n    ".join(log) if log else ""))


def stored_at(source: str) -> dict[int, str]:
    """Line number -> the quantity a statement of attention.py stores there (`self.dLdWk = ...`, `return ...` in
    backward for dLdX): a crash on that line is that quantity's."""
    found: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        names = [t.attr for target in targets for t in ast.walk(target)
                 if isinstance(t, ast.Attribute) and t.attr in QUANTITIES]
        if len(names) == 1:
            found.update({n: names[0] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)})
    return found


def _collect(problem: Problem, cases: list[Case], scratch: Path, run: sandbox.ChildRun, stored: dict[int, str],
             said) -> tuple[list[CaseOutcome], set[str]]:
    """Every case's outcome from what the child left in `scratch`, and the autograd calls it recorded, said(label):
    the events that reached the grader as they happened, and meta.json's (the child's own record)."""
    runtime_hits = {said(label) for label in run.event_args("autograd")}
    outcomes = []
    for case in cases:
        case_dir = scratch / "outputs" / case.name
        meta, refused = scoring.load_meta(case_dir / "meta.json", root=scratch)
        flags = meta.get("flags") if meta and isinstance(meta.get("flags"), dict) else {}
        calls = flags.get("autograd_calls", [])
        runtime_hits.update(said(c) for c in (calls if isinstance(calls, list) else []))
        if flags.get("grad_tracking") is True:
            runtime_hits.add("requires_grad tensors in forward")
        with np.load(case.path, allow_pickle=False) as data:
            expected = {q: data[f"expected_{q}"] for q in QUANTITIES}
        outcomes.append(_outcome(problem, case, expected, case_dir, meta, refused, run, scratch, stored))
    return outcomes, runtime_hits


def _outcome(problem: Problem, case: Case, expected: dict[str, np.ndarray], case_dir: Path, meta: dict | None,
             refused: str, run: sandbox.ChildRun, scratch: Path, stored: dict[int, str]) -> CaseOutcome:
    """Every quantity of one case, checked. A crash on a line that stores one quantity (`stored`) is said on that
    quantity; the quantities left unstored after it point there. Backward is judged after a failed forward when
    forward stored all it reads."""
    outcome = CaseOutcome.of(case)
    tol = problem.tolerance.get(case.dtype, {"rtol": 1e-6, "atol": 1e-8})
    if meta is None:
        why = (f"no result for this case: {refused}" if refused
               else f"no result for this case: the submission's process {run.describe()} before finishing it")
        for q in QUANTITIES:
            outcome.checks[q] = check(q, Observed(False, note=why), expected[q], rtol=tol["rtol"], atol=tol["atol"])
        return outcome
    errors = meta.get("errors") if isinstance(meta.get("errors"), dict) else {}
    quantities = meta.get("quantities") if isinstance(meta.get("quantities"), dict) else {}
    fed = all(isinstance(quantities.get(q), dict) and quantities[q].get("present") for q in BACKWARD_READS)
    crashed = {step: stored.get(int(m.group(1))) for step in ("forward", "backward")
               if (m := re.search(r"\(in attention\.py, line (\d+)", str(errors.get(step, ""))))}
    for q in QUANTITIES:
        stage = "backward" if q.startswith("dLd") else "forward"
        step = next((s for s in ("import", "init", stage) if s in errors), None)  # the first stage that raised
        said = quote(errors[step], 600) if step else ""
        hint = DTYPE_CLASH_HINT if DTYPE_CLASH.search(said) else HINTS[q]
        culprit = crashed.get(step) if step == stage else None
        if culprit and culprit != q:
            note = f"{step} stopped before storing it: it raised while computing '{culprit}' (see that line)"
        elif step:
            note = f"{step} raised {said}"
        elif q not in quantities:
            note = f"{stage} never finished: the submission's process {run.describe()}"
        else:
            note = f"{stage} did not store it on self" if q not in ("X_new", "dLdX") else f"{stage} returned None"
        if step == "backward" and "forward" in errors:
            note += "; forward had failed first"
        # A wrong shape is reported as such; one far larger than expected is not even read.
        obs = scoring.observed_from_child(case_dir, meta, q, note, root=scratch,
                                          max_elements=64 * expected[q].size + 64)
        # Backward ran on what a failed forward left unstored (unless it is the handout's NotImplementedError):
        # nothing it returned can be judged.
        if stage == "backward" and "forward" in errors and not fed and not str(errors.get("backward")).startswith(
                "NotImplementedError"):
            obs = replace(obs, unchecked=f"forward raised {quote(errors['forward'], 600)} (see the forward lines)")
        if q == "A_sig" and obs.array is not None and obs.array.shape == expected[q].shape:
            hint = (diagnose_softmax(obs.array, case.edge == "large_scores") or diagnose_scaling(obs.array, expected)
                    or hint)
        c = check(q, obs, expected[q], rtol=tol["rtol"], atol=tol["atol"], hint=hint)
        if c.stage == "values" and c.ratio is None and expected[q].size == 1 and expected[q].item():  # B = T = 1's A_w
            c = replace(c, ratio=float(obs.array.item()) / float(expected[q].item()))  # for name_factor alone
        outcome.checks[q] = c
    name_factor(outcome, expected["Q"].shape[-1], expected["Q"].shape[0])
    return outcome


def name_factor(outcome: CaseOutcome, dk: int, batch: int) -> None:
    """Name a constant factor (the slip of the edge rule): sqrt(Dk) (or its inverse) is the scores' scaling done
    wrong; 1/B or B on a weight gradient is a mean over the batch (or a sum repeated) where a sum belongs."""
    for q, c in outcome.checks.items():
        if c.ratio is None:
            continue
        causes = []
        if q in ("dLdWq", "dLdWk", "dLdWv") and batch > 1:
            for value, what in ((1 / batch, "1/B"), (float(batch), "B")):
                if abs(c.ratio - value) <= 1e-3 * value:
                    causes.append(f"{what} (B = {batch}): the weight gradient must be summed over the batch, "
                                  "not averaged (or summed more than once)")
        for value, what in ((math.sqrt(dk), "sqrt(Dk)"), (1 / math.sqrt(dk), "1/sqrt(Dk)"), (float(dk), "Dk"),
                            (1 / dk, "1/Dk")):
            if abs(c.ratio - value) <= 1e-3 * value:
                causes.append(f"{what} (Dk = {dk}): the 1/sqrt(Dk) scaling of the scores is missing, applied twice "
                              "or applied in the wrong place")
                break
        if causes:  # the slip by its name: "1/sqrt(Dk)" is one mistake whatever Dk a case has
            outcome.checks[q] = replace(c, slip=causes[0].partition(" (")[0], message=c.message.replace(
                "a constant factor is off.", "that is " + "; or it is ".join(causes) + "."))


def diagnose_softmax(a_sig: np.ndarray, large_scores: bool = False) -> str:
    """Name the usual mistake behind a wrong A_sig (B, T, T), or '' when none is evident. NaN or inf is put
    down to exp() overflowing only on a case whose scores are large enough for that (`large_scores`)."""
    a = a_sig.astype(np.float64)
    if not np.isfinite(a).all():
        return ("A_sig has NaN or inf where the scores are large: exp() overflowed; subtract each row's maximum "
                "before exp (softmax(s) = softmax(s - max s)).") if large_scores else ""
    T = a.shape[-1]
    above = np.triu(np.ones((T, T), dtype=bool), k=1)
    below = np.tril(np.ones((T, T), dtype=bool), k=-1)
    rows, cols = a.sum(axis=-1), a.sum(axis=-2)
    if a.min() < -1e-6 or a.max() > 1 + 1e-6:  # not probabilities at all: the normalisation, not the mask
        return (f"A_sig has entries outside [0, 1] (from {a.min():.4g} to {a.max():.4g}), so its rows are not "
                "probabilities: divide each row's exponentials by their sum (e / e.sum(dim=-1, keepdim=True)).")
    if T > 1 and np.abs(a[:, above]).max() > 1e-6:
        if np.abs(a[:, below]).max() <= 1e-6:
            return ("A_sig is zero below the diagonal and nonzero above it: the mask is on the wrong side of the "
                    "diagonal. Position i may attend to j <= i: set the scores with j > i (torch.triu(..., "
                    "diagonal=1)) to -inf.")
        return ("A_sig is nonzero above the diagonal, so position i attends to later positions j > i: "
                "set scores above the diagonal to -inf before the softmax (the causal mask).")
    if not np.allclose(rows, 1.0, atol=1e-4) and np.allclose(cols, 1.0, atol=1e-4):
        return "A_sig's columns sum to 1, not its rows: take the softmax over the last axis (dim=-1)."
    if not np.allclose(rows, 1.0, atol=1e-4):
        return "A_sig's rows do not sum to 1: normalise each row by its own sum of exponentials."
    return ""


def diagnose_scaling(a_sig: np.ndarray, expected: dict[str, np.ndarray]) -> str:
    """Name a wrong scale when A_sig is the causal softmax of A_w times another factor than 1/sqrt(Dk) ('' if none),
    from the grader's own A_w: named whatever the submission stored as A_w."""
    a_w = expected["A_w"].astype(np.float64)
    d, dk, dv = expected["dLdX"].shape[-1], expected["Q"].shape[-1], expected["V"].shape[-1]
    candidates = [(1.0, f"A_sig is the causal softmax of the raw scores A_w: the 1/sqrt(Dk) scaling is missing "
                        f"(divide the scores by sqrt(Dk) = {math.sqrt(dk):.4g} before the softmax)."),
                  (1 / dk, f"A_sig is the causal softmax of A_w / Dk: the scores are divided by Dk = {dk} where "
                           f"sqrt(Dk) = {math.sqrt(dk):.4g} belongs."),
                  (math.sqrt(dk), "A_sig is the causal softmax of A_w * sqrt(Dk): the scores are multiplied by "
                                  "sqrt(Dk) where they must be divided by it.")]
    if dv != dk:
        candidates.append((1 / math.sqrt(dv), "A_sig is the causal softmax of A_w / sqrt(Dv): the scale uses the value "
                                              f"width Dv = {dv}; it is the key/query width Dk = {dk} (W_k's columns)."))
    if d not in (dk, dv):
        candidates.append((1 / math.sqrt(d), f"A_sig is the causal softmax of A_w / sqrt(D): the scale uses the "
                                             f"input width D = {d}; it is the key/query width Dk = {dk}."))
    above = np.triu(np.ones(a_w.shape[-2:], dtype=bool), k=1)
    return next((said for factor, said in candidates if np.allclose(
        a_sig.astype(np.float64), softmax(np.where(above, -np.inf, a_w * factor)), rtol=1e-4, atol=1e-5)), "")
