"""Notebook 3's predict() and generate(), graded on fixed-weight models.

Problems `prediction` and `generation` each have two kinds of rubric lines:
lines about the arrays the trained model wrote (no `quantities`; graded by
problems/prediction.py and problems/generation.py) and lines about the notebook
functions that wrote them (with `quantities`; graded here, independent of
training quality). The notebook runs in the sandboxed child (child/lm_child.py
on top of child/notebook_child.py; cells tagged skip-grading, such as training, are
skipped) and its functions are called on the table-lookup models of
gradelib/lm/fixed_models.py. The child returns arrays; the judging happens here.
Each problem runs the child once, with only the calls its own lines need.

Cases: <case_root>/lm_functions/<visibility>/ (fixturegen/lm_function_cases.py).
Function lines (rubric.toml), by the quantities they need:

    prediction  predict_function   predict_logits: exact logits, step t after the greedy picks of steps < t
    generation  generate_greedy    greedy_ids: greedy by default, never <eos>/<pad>
    generation  generate_sampling  top_k1_ids, top_p_tiny_ids, cold_ids (each equal to greedy),
                                   top_k_ids, top_p_ids (inside the top-k set / nucleus),
                                   sampled_ids (frequencies close to softmax(logits / temperature))
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import sandbox
from ..compare import Check, Observed, check
from ..context import GradeContext
from ..lm import fixed_models
from ..lm.vocab import EOS, GENERATABLE, PAD, VOCAB_SIZE
from .notebook_functions import Call, NotebookSpec, _note_cells, observed, run_notebook
from ..results import TestResult
from ..rubric import Problem, Setting, fraction
from ..scoring import CaseOutcome, all_zero, group_results, load_meta

NOTEBOOK = "03_language_model.ipynb"
CASE_FOLDER = "lm_functions"
HARNESS = ("child_common.py", "notebook_child.py", "lm_child.py")
# Settings of the problems whose function lines are graded here (rubric.toml). Notebook 3
# imports torch and defines a model in its cells: slower than notebooks 1-2 on a busy grader.
FUNCTION_SETTINGS = {
    "cell_timeout_s": Setting((int, float), 30.0, "Seconds one cell of notebook 3 may run (training cells never run)."),
    "call_timeout_s": Setting((int, float), 10.0, "Seconds one call of predict() or generate() may take."),
}
# A correct sampler stays below this total-variation distance with overwhelming probability at
# 8000 samples (typical 0.01).
SAMPLING_SETTINGS = {
    "sampling_max_tv": Setting((int, float), 0.05, "Largest total-variation distance between the frequencies "
                               "of generate()'s samples and softmax(logits / temperature).", fraction),
}

MODEL = "model:m"
STEPS = "int:steps"
SAMPLE = {"temperature": "float:unit_temperature"}
SPEC = NotebookSpec(
    notebook=NOTEBOOK,
    calls=(
        Call("predict", (MODEL, "tensor:inp", STEPS), {"predict_logits": None}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"greedy_ids": None}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"top_k1_ids": None}, kwargs={**SAMPLE, "top_k": "int:one"}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"top_p_tiny_ids": None}, kwargs={**SAMPLE, "top_p": "float:tiny_p"}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"cold_ids": None}, kwargs={"temperature": "float:cold_temperature"}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"top_k_ids": None}, kwargs={**SAMPLE, "top_k": "int:top_k"}),
        Call("generate", (MODEL, "tensor:inp", STEPS), {"top_p_ids": None}, kwargs={**SAMPLE, "top_p": "float:top_p"}),
        Call("generate", ("model:d", "tensor:dist_inp", "int:one"), {"sampled_ids": None},
             kwargs={"temperature": "float:dist_temperature"}),
    ),
    quantities={},
)
QUANTITIES = frozenset(q for c in SPEC.calls for q in c.outputs)

HINTS = {
    "predict_logits": "step t is model(inp + greedy picks of steps < t)[:, -1]: raw logits (no softmax), the argmax "
    "over all 30 ids appended each step, the model in eval mode, the whole prompt kept.",
    "greedy_ids": "with the default temperature 0, take the argmax after setting the <eos> and <pad> logits to -inf; "
    "append each pick and run the model on the whole sequence again; call model.eval() first.",
    "top_k1_ids": "top_k=1 keeps only the best allowed token, so sampling must return the greedy ids.",
    "top_p_tiny_ids": "a tiny top_p keeps only the most probable allowed token (the nucleus always holds at least one).",
    "cold_ids": "temperature 0.01 divides the logits by 0.01 before the softmax: almost all mass on the greedy token.",
    "top_k_ids": "after excluding <eos>/<pad>, keep the k highest logits and sample among those only.",
    "top_p_ids": "keep the smallest set of most probable allowed tokens whose probabilities sum to at least top_p.",
    "sampled_ids": "sample from softmax(logits / temperature) over the 28 allowed tokens (torch.multinomial), "
    "not the argmax and not softmax(logits).",
}


def load_cases(case_root: Path, visibilities: tuple[str, ...]) -> list[tuple[str, str, str, Path]]:
    """(name, visibility, description, path) of every case."""
    cases = []
    for vis in visibilities:
        index = case_root / CASE_FOLDER / vis / "cases.json"
        if index.exists():
            for entry in json.loads(index.read_text()):
                cases.append((entry["name"], vis, entry["description"], index.parent / f"{entry['name']}.npz"))
    return cases


def split_lines(problem: Problem) -> tuple[Problem, Problem]:
    """(the problem with its array lines only, the problem with its function lines only)."""
    arrays = replace(problem, groups=tuple(g for g in problem.groups if not g.quantities))
    functions = replace(problem, groups=tuple(g for g in problem.groups if g.quantities))
    return arrays, functions


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """One TestResult per (function line, visibility) of `problem`; its array lines are left out."""
    problem = split_lines(problem)[1]
    if not problem.groups:
        return []
    vis = ctx.visibilities
    src = ctx.submission / NOTEBOOK
    if not src.is_file():
        return all_zero(problem, vis, f"{problem.id}: {NOTEBOOK} is missing from the handin; "
                        "its predict() and generate() are graded from it: add it and submit again.")
    cases = load_cases(ctx.case_root, vis)
    if not cases:
        return all_zero(problem, vis, f"{problem.id}: no {CASE_FOLDER} cases under {ctx.case_root}")
    wanted = {q for g in problem.groups for q in g.quantities}
    calls = [c for c in SPEC.calls if set(c.outputs) & wanted]

    def collect(scratch: Path, run: sandbox.ChildRun, report: dict | None) -> list[CaseOutcome]:
        return [_outcome(problem, case, scratch, run, report) for case in cases]

    outcomes, run, report = run_notebook(
        ctx, problem.id, src, NOTEBOOK, [(name, path) for name, _v, _d, path in cases], calls, problem.settings,
        collect, child="lm_child.py", harness=HARNESS,
    )
    _note_cells(ctx, problem, SPEC, run, report)
    return group_results(problem, outcomes, vis)


def _as(got: Observed, kind: str, dtype) -> Observed:
    """Any float (logits) or integer (ids) dtype is accepted: compare in the contract's dtype."""
    if got.array is not None and got.array.dtype.kind in kind:
        return replace(got, array=got.array.astype(dtype))
    return got


def _outcome(problem: Problem, case, scratch: Path, run, report) -> CaseOutcome:
    name, vis, desc, path = case
    case_dir = scratch / "outputs" / name
    meta, refused = load_meta(case_dir / "meta.json", root=scratch)
    outcome = CaseOutcome(name, vis, desc)
    with np.load(path, allow_pickle=False) as data:
        c = {k: data[k] for k in data.files}
    types = ("torch.Tensor", "numpy.ndarray")
    wanted = {q for g in problem.groups for q in g.quantities}

    def got(q: str, kind: str, dtype) -> Observed:
        return _as(observed(q, case_dir, meta, run, report, root=scratch, refused=refused), kind, dtype)

    def exact(q: str, obs: Observed, expected: np.ndarray) -> Check:
        expected_type = obs.type_name if obs.type_name in types else types[0]
        return check(q, obs, expected, rtol=0.0, atol=0.0, expected_type=expected_type, hint=HINTS[q])

    if "predict_logits" in wanted:
        outcome.checks["predict_logits"] = exact("predict_logits", got("predict_logits", "f", np.float32), c["expected_predict_logits"])
    for q in ("greedy_ids", "top_k1_ids", "top_p_tiny_ids", "cold_ids"):
        if q in wanted:
            outcome.checks[q] = exact(q, got(q, "iu", np.int64), c["expected_greedy_ids"])
    kind = fixed_models.KINDS[int(c["m_kind"])]
    for q, keep in (("top_k_ids", lambda row: _top_k(row, int(c["top_k"]))), ("top_p_ids", lambda row: _nucleus(row, float(c["top_p"])))):
        if q in wanted:
            obs = got(q, "iu", np.int64)
            first = exact(q, obs, c["expected_greedy_ids"])  # present/type/shape/dtype stages only
            outcome.checks[q] = first if first.stage != "values" and not first.passed else _inside(q, obs.array, c["inp"], kind, c["m_table"], keep)
    if "sampled_ids" in wanted:
        obs = got("sampled_ids", "iu", np.int64)
        shape_ref = np.zeros((c["dist_inp"].shape[0], 1), np.int64)
        first = exact("sampled_ids", obs, shape_ref)
        outcome.checks["sampled_ids"] = (
            first if first.stage != "values" and not first.passed
            else _frequencies(obs.array, c["d_table"][0], float(c["dist_temperature"]), float(problem.settings["sampling_max_tv"]))
        )
    return outcome


def _allowed(row: np.ndarray) -> np.ndarray:
    out = row.astype(np.float64).copy()
    out[[EOS, PAD]] = -np.inf
    return out


def _top_k(row: np.ndarray, k: int) -> set[int]:
    return set(np.argsort(-_allowed(row))[:k].tolist())


def _nucleus(row: np.ndarray, p: float) -> set[int]:
    logits = _allowed(row)
    order = np.argsort(-logits)
    probs = np.exp(logits[order] - logits[order[0]])
    probs /= probs.sum()
    before = np.cumsum(probs) - probs
    return set(order[before < p].tolist())


def _inside(q: str, ids: np.ndarray, inp: np.ndarray, kind: str, table: np.ndarray, keep) -> Check:
    """Every sampled id lies in the set `keep` allows for its context (the prompt + the ids before it)."""
    context = np.concatenate([inp, ids[:, :-1]], axis=1)  # (B, T + steps - 1)
    rows = fixed_models.keys(kind, context, table.shape[0])[:, inp.shape[1] - 1 :]  # (B, steps)
    for b, t in np.ndindex(ids.shape):
        allowed = keep(table[rows[b, t]])
        if int(ids[b, t]) not in allowed:
            return Check(
                q, False, "values",
                f"'{q}' has id {int(ids[b, t])} at index ({b}, {t}), outside the allowed set {sorted(allowed)} for "
                f"that step (logits of the fixed model given the prompt and your earlier ids). Hint: {HINTS[q]}",
            )
    return Check(q, True, "ok", f"'{q}': every id lies in its allowed set.", 0.0)


def _frequencies(ids: np.ndarray, row: np.ndarray, temperature: float, max_tv: float) -> Check:
    q = "sampled_ids"
    flat = ids.reshape(-1)
    special = np.isin(flat, [EOS, PAD]) | (flat < 0) | (flat >= VOCAB_SIZE)
    if special.any():
        return Check(q, False, "values", f"'{q}' holds {int(special.sum())} ids that are <eos>, <pad> or outside 0..29. Hint: {HINTS[q]}")
    logits = _allowed(row) / temperature
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    freq = np.bincount(flat, minlength=VOCAB_SIZE) / flat.size
    tv = 0.5 * float(np.abs(freq - expected)[GENERATABLE].sum())
    top = int(np.argmax(expected))
    if tv > max_tv:
        return Check(
            q, False, "values",
            f"'{q}': the frequencies of {flat.size} samples at temperature {temperature:g} are {tv:.3f} (total "
            f"variation) from softmax(logits / temperature), more than {max_tv:g}; e.g. id {top}: sampled "
            f"{freq[top]:.3f}, expected {expected[top]:.3f}. Hint: {HINTS[q]}",
            tv,
        )
    return Check(q, True, "ok", f"'{q}': frequencies within {tv:.3f} of softmax(logits / temperature).", tv)
