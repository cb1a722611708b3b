"""Notebook 3's functions and classes, graded on fixed inputs and fixed-weight models, whatever the training: the
lines of problems `prediction` and `generation` that list `quantities` (child/lm_child.py runs them)."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import numpy as np

from ..compare import Check, Observed, check
from ..context import GradeContext
from ..lm import fixed_models
from ..lm.vocab import EOS, GENERATABLE, PAD, VOCAB_SIZE
from ..results import TestResult
from ..rubric_schema import Problem
from ..scoring import HINT, Case, CaseOutcome, follow_upstream, load_cases
from .handin_runs import NOTEBOOK_HARNESS, grade_notebook
from .notebook_functions import Call, NotebookSpec

NOTEBOOK = "03_language_model.ipynb"
CASE_FOLDER = "lm_functions"
HARNESS = (*NOTEBOOK_HARNESS, "lm_child.py")
MODEL, STEPS, UNIT, DIST = "model:m", "int:steps", "float:unit_temperature", "float:dist_temperature"


def _generate(q: str, model: str = MODEL, **kwargs: str) -> Call:
    """The generate() call for quantity q: on the prompts of the case's table model m, or one step of another."""
    args = (model, "tensor:inp", STEPS) if model == MODEL else (model, "tensor:dist_inp", "int:one")
    return Call("generate", args, {q: None}, kwargs=kwargs)


SPEC = NotebookSpec(notebook=NOTEBOOK,
    calls=(
        Call("predict", (MODEL, "tensor:inp", STEPS), {"predict_logits": None}),
        # *_mode: child/lm_child.py calls it in training mode, then eval mode; model.training is kept after each.
        Call("predict", (MODEL, "tensor:inp", STEPS), {"predict_mode": None}),
        _generate("greedy_ids"),
        _generate("generate_mode"),
        _generate("zero_temperature_ids", temperature="float:zero_temperature", top_k="int:top_k", top_p="float:top_p"),
        _generate("top_k1_ids", temperature=UNIT, top_k="int:one"),
        _generate("top_p_tiny_ids", temperature=UNIT, top_p="float:tiny_p"),
        _generate("cold_ids", temperature="float:cold_temperature"),
        _generate("top_k_ids", temperature=UNIT, top_k="int:top_k"),
        _generate("top_p_ids", temperature=UNIT, top_p="float:top_p"),
        _generate("sampled_ids", "model:d", temperature=DIST),
        _generate("sampled_top_k_ids", "model:d", temperature=DIST, top_k="int:top_k"),
        _generate("sampled_top_p_ids", "model:d", temperature=DIST, top_p="float:dist_top_p"),
        _generate("sampled_top_k_tie_ids", "model:t", temperature=UNIT, top_k="int:tie_k"),
        _generate("sampled_top_p_edge_ids", "model:e", temperature=UNIT, top_p="float:edge_p"),
        Call("collate", ("pieces:pieces",), {"collate_inputs": 0, "collate_targets": 1}),
        Call("lm_loss", ("tensor:loss_logits", "tensor:loss_targets"), {"lm_loss": None}),
        # Classes: child/lm_child.py builds them, loads the case's weights and runs them in eval mode.
        Call("CausalSelfAttention", ("tensor:att_x", "tensor:att_x_changed"),
             {"attention_out": 0, "attention_causal": 1}),
        Call("CausalLanguageModel", ("tensor:lm_inp", "tensor:lm_inp_changed"),
             {"model_logits": 0, "model_causal": 1, "weight_tied": 2}),
        Call("embedding_dropout", ("tensor:ed_weight", "float:ed_p", "bool:true"), {"emb_dropout_train": None}),
        Call("embedding_dropout", ("tensor:ed_weight", "float:ed_p", "bool:false"), {"emb_dropout_eval": None})),
    quantities={})
# float32 outputs of the building blocks against float64 expectations, unless the rubric's
# [problems.<id>].tolerance says otherwise; float32 rounding through a 3-layer model stays near 1e-6.
DEFAULT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# embedding_dropout's count of dropped rows may be this many binomial standard deviations
# from p * rows: a correct implementation falls outside with probability below 2e-9.
DROPPED_ROWS_SD = 6.0
# What a quantity is computed from, in another function: when that fails, this one says so (follow_upstream).
UPSTREAM = {"model_logits": ("attention_out",), "model_causal": ("attention_causal",)}
VIA = dict.fromkeys(("attention_out", "attention_causal"), ("the model's layers run your CausalSelfAttention",
                                                            "CausalSelfAttention"))


def grade(ctx: GradeContext, problem: Problem) -> list[TestResult]:
    """One TestResult per (function line, visibility) of `problem`; its array lines are left out."""
    problem = replace(problem, groups=tuple(g for g in problem.groups if g.quantities))
    if not problem.groups:
        return []
    wanted = {q for g in problem.groups for q in g.quantities}
    said = (f"{problem.id}: ", "its predict() and generate() are graded from it: add it and submit again.",
            f"{problem.id}: no {CASE_FOLDER} cases under {ctx.case_root}")
    return grade_notebook(ctx, problem, NOTEBOOK, load_cases(ctx.case_root, CASE_FOLDER, ctx.visibilities),
                          [c for c in SPEC.calls if set(c.outputs) & wanted], partial(judge_case, problem), said,
                          child="lm_child.py", harness=HARNESS)


def judge_case(problem: Problem, case: Case, observe, wanted=None) -> CaseOutcome:
    """The checks of `problem`'s quantities (or the `wanted` ones) on one case; observe(q) -> Observed (the child's,
    or grader.check's). One that fails because the quantity it is computed from fails says so (UPSTREAM)."""
    outcome = CaseOutcome.of(case)
    with np.load(case.path, allow_pickle=False) as data:
        outcome.checks.update(_Judge(problem, {k: data[k] for k in data.files}, observe, wanted).checks())
    follow_upstream(outcome, UPSTREAM, VIA)
    return outcome


class _Judge:
    """The checks of one case: the case's arrays, what the notebook returned, the problem's lines and tolerance."""

    TYPES = ("torch.Tensor", "numpy.ndarray")

    def __init__(self, problem: Problem, case: dict[str, np.ndarray], observe, wanted=None):
        self.problem, self.c, self.observe = problem, case, observe
        self.wanted = wanted or {q for g in problem.groups for q in g.quantities}
        self.tol = problem.tolerance.get("float32", DEFAULT_TOLERANCE)
        # Each quantity's hint, and the slips' words, come with the case (the course's case generator writes them).
        self.hints = json.loads(case["expected_hints"].item()) if "expected_hints" in case else {}

    def got(self, q: str, expected: np.ndarray) -> Observed:
        """What the notebook returned for q: any float or integer dtype, as `expected`'s dtype."""
        got = self.observe(q)
        if got.array is not None and got.array.dtype.kind in ACCEPTED_KINDS[expected.dtype.kind]:
            return replace(got, array=got.array.astype(expected.dtype))
        return got

    def exact(self, q: str, obs: Observed, expected: np.ndarray, tol: dict | None = None) -> Check:
        """q's check against `expected`, exact unless `tol` is given; a tensor or an array is accepted."""
        tol = tol or {"rtol": 0.0, "atol": 0.0}
        expected_type = obs.type_name if obs.type_name in self.TYPES else self.TYPES[0]
        return check(q, obs, expected, rtol=tol["rtol"], atol=tol["atol"], expected_type=expected_type,
                     hint=self.hints.get(q, ""))

    def checks(self) -> dict[str, Check]:
        """The check of each wanted quantity on this case."""
        out = {}
        for out_q, causal_q, position in (("attention_out", "attention_causal", "att_position"),
                                          ("model_logits", "model_causal", "lm_position")):
            out.update(self.block_output(out_q, causal_q, int(self.c[position])))
        out.update({q: self.check(q) for q in sorted(self.wanted - out.keys())})
        return {q: c if c.passed or HINT in c.message or not self.hints.get(q) else  # _wrong's: q's hint added
                replace(c, message=f"{c.message}{HINT}{self.hints[q]}") for q, c in out.items()}

    def check(self, q: str) -> Check:
        """q's check: exact() up to its values stage (present, type, shape, dtype); from there, for ids drawn at
        random and for dropout, the judge of samples."""
        c = self.c
        expected = np.zeros((len(c["dist_inp"]), 1), np.int64) if q in SAMPLED else c[EXPECTED.get(q, f"expected_{q}")]
        obs = self.got(q, expected)
        first = self.exact(q, obs, expected, self.tol if q == "lm_loss" else None)
        if first.stage != "values" and not first.passed:
            return first
        if q in SAMPLED:  # one step of a distribution model per row of dist_inp
            table, temperature = SAMPLED[q]
            tempered = _allowed(c[table][0]) / float(c[temperature])
            return _frequencies(q, obs.array, tempered, self.keep(q, tempered) if q in KEEP else None,
                                float(c[temperature]), float(self.problem.settings["sampling_max_tv"]))
        if q in KEEP:
            return _inside(q, obs.array, c["inp"], fixed_models.KINDS[int(c["m_kind"])], c["m_table"],
                           partial(self.keep, q))
        if q == "emb_dropout_train":
            return _row_dropout(obs.array, c["ed_weight"], float(c["ed_p"]), self.tol)
        if first.passed:
            return first
        if q.endswith("_mode"):
            return _wrong(q, f"'{q}': model.training was {obs.array.tolist()} after calls made in training mode and in "
                             f"eval mode; expected {expected.tolist()} (the mode the model had before the call).")
        if q == "weight_tied":
            return _wrong(q, "'weight_tied': model.fc.weight is not model.token_embedding.weight.")
        # Wrong greedy ids that hold <eos> or <pad> say so first: the usual cause is not masking them.
        found = [f"{name} (id {token}) {int((obs.array == token).sum())} times"
                 for name, token in (("<eos>", EOS), ("<pad>", PAD)) if q in GREEDY and (obs.array == token).any()]
        return replace(first, message=f"'{q}' holds {' and '.join(found)}: generate must never emit them; set their "
                       f"logits to -inf before choosing (filter_logits). {first.message}") if found else self.named(
            q, obs, first)

    def named(self, q: str, obs: Observed, result: Check, said: str = "", out_q: str = "") -> Check:
        """`result`, or where the values of q (or of `out_q`, whose failure a causality probe shows) are exactly those
        of a slip the case holds (expected_<q>__<slip>; expected_slips: JSON rows of the quantity, the slip, what
        it is, its fix), that slip first and its fix."""
        rows = json.loads(self.c["expected_slips"].item()) if "expected_slips" in self.c else []
        for slipped, name, what, fix in (r for r in rows if r[0] == (out_q or q) and result.stage == "values"):
            if self.exact(slipped, obs, self.c[f"expected_{slipped}__{name}"], self.tol).passed:
                return replace(result, message=f"'{slipped}' {what}.{said} {result.message.partition(HINT)[0]}"
                                               f"{HINT}{fix}")
        return result

    def block_output(self, out_q: str, causal_q: str, position: int) -> dict[str, Check]:
        """A module's outputs on fixed weights, and whether those before `position` stay put when later inputs change;
        outputs that are a slip's say so (on both lines: a softmax over the queries is not causal either), and whether
        the mask works."""
        c, out = self.c, {}
        original = self.got(out_q, c[f"expected_{out_q}"])
        if causal_q in self.wanted:
            changed = self.got(causal_q, c[f"expected_{causal_q}"])
            out[causal_q] = self.named(causal_q, original, _causal(
                causal_q, changed, original, position, self.exact(causal_q, changed, c[f"expected_{causal_q}"],
                                                                  self.tol), self.tol), out_q=out_q)
        if out_q in self.wanted:
            works = (f" The causal mask works: no output before position {position} moved when the later inputs "
                     "changed." if causal_q in out and out[causal_q].passed else "")
            out[out_q] = self.named(out_q, original, self.exact(out_q, original, c[f"expected_{out_q}"], self.tol),
                                    works)
        return out

    def keep(self, q: str, row: np.ndarray) -> set[int]:
        """The ids q's rule (KEEP) lets a sampling pick given the logits `row`."""
        rule, param = KEEP[q]
        return rule(row, self.c[param].item())


def _wrong(q: str, message: str, error: float | None = None) -> Check:
    """A failed check of q's values: `message` (_Judge.checks adds q's hint)."""
    return Check(q, False, "values", message, error)


def _causal(q: str, changed: Observed, original: Observed, position: int, values: Check, tol: dict) -> Check:
    """Causality: before `position`, the outputs for the changed input must equal those for the original one.
    `values` (the changed input's outputs against the expected ones) decides only where that cannot be probed;
    wrong values with a causal model are the outputs' line's to report, not a fault of the mask."""
    if (values.passed or values.stage != "values" or original.array is None
            or original.array.shape != changed.array.shape):
        return values
    before, before_orig = (changed.array[:, :position].astype(np.float64),
                           original.array[:, :position].astype(np.float64))
    scale = max(1.0, float(np.abs(before_orig).max(initial=0.0)))
    moved = np.abs(before - before_orig) > tol["atol"] * scale + tol["rtol"] * np.abs(before_orig)
    if moved.any():
        b, t = (int(i) for i in np.argwhere(moved)[0][:2])
        return _wrong(q, f"'{q}': changing only the inputs at positions {position} and after changed the output at "
                         f"position {t} (row {b}): a position saw later ones.", float("inf"))
    return Check(q, True, "ok", f"'{q}': no output before position {position} moved when the later inputs changed.",
                 0.0)


def _row_dropout(got: np.ndarray, weight: np.ndarray, p: float, tol: dict) -> Check:
    q = "emb_dropout_train"
    got64, scaled = got.astype(np.float64), weight.astype(np.float64) / (1.0 - p)
    dropped = (got64 == 0).all(axis=1)
    bound = tol["atol"] * max(1.0, float(np.abs(scaled).max())) + tol["rtol"] * np.abs(scaled)
    kept = (np.abs(got64 - scaled) <= bound).all(axis=1)
    odd = ~(dropped | kept)
    if odd.any():
        r = int(np.argmax(odd))
        return _wrong(q, f"'{q}' (p = {p:g}, training): {int(odd.sum())} of {len(odd)} rows are neither all zero nor "
                         f"the weight's row times 1/(1-p) = {1 / (1 - p):g}, e.g. row {r}: got "
                         f"{np.round(got64[r, :3], 4).tolist()}..., weight "
                         f"{np.round(weight[r, :3].astype(np.float64), 4).tolist()}....", float("inf"))
    n, rows = int(dropped.sum()), len(dropped)
    spread = DROPPED_ROWS_SD * float(np.sqrt(rows * p * (1 - p)))
    if abs(n - p * rows) > spread:
        return _wrong(q, f"'{q}' (p = {p:g}, training) dropped {n} of {rows} rows; about {p * rows:.0f} expected "
                         f"(between {p * rows - spread:.0f} and {p * rows + spread:.0f}).", float("inf"))
    return Check(q, True, "ok", f"'{q}': whole rows dropped ({n} of {rows}), the rest scaled by 1/(1-p).", 0.0)


def _allowed(row: np.ndarray) -> np.ndarray:
    out = row.astype(np.float64).copy()
    out[[EOS, PAD]] = -np.inf
    return out


def _top_k(row: np.ndarray, k: int) -> set[int]:
    """The allowed ids whose logit is at least the k-th best allowed logit: ties with the k-th are all kept."""
    logits = _allowed(row)
    kth = np.sort(logits)[::-1][k - 1]
    return set(np.flatnonzero(logits >= kth).tolist())


def _nucleus(row: np.ndarray, p: float) -> set[int]:
    logits = _allowed(row)
    order = np.argsort(-logits)
    probs = np.exp(logits[order] - logits[order[0]])
    probs /= probs.sum()
    before = np.cumsum(probs) - probs
    return set(order[before < p].tolist())


# The ids that must be the greedy ones (expected_greedy_ids); the rule that keeps the ids a sampling may pick and
# the case's parameter for it (q -> rule, parameter); one step of a distribution model (q -> its table, temperature).
GREEDY = ("greedy_ids", "top_k1_ids", "top_p_tiny_ids", "cold_ids", "zero_temperature_ids")
KEEP = {"top_k_ids": (_top_k, "top_k"), "top_p_ids": (_nucleus, "top_p"), "sampled_top_k_ids": (_top_k, "top_k"),
        "sampled_top_p_ids": (_nucleus, "dist_top_p"), "sampled_top_k_tie_ids": (_top_k, "tie_k"),
        "sampled_top_p_edge_ids": (_nucleus, "edge_p")}
SAMPLED = {**dict.fromkeys(("sampled_ids", "sampled_top_k_ids", "sampled_top_p_ids"), ("d_table", "dist_temperature")),
           "sampled_top_k_tie_ids": ("t_table", "unit_temperature"),
           "sampled_top_p_edge_ids": ("e_table", "unit_temperature")}
# The case's array a quantity is checked against where it is not expected_<q> (only up to the values stage for ids
# that need not be the greedy ones).
EXPECTED = {**dict.fromkeys((*GREEDY, "top_k_ids", "top_p_ids"), "expected_greedy_ids"),
            **dict.fromkeys(("emb_dropout_eval", "emb_dropout_train"), "ed_weight"),
            **dict.fromkeys(("predict_mode", "generate_mode"), "expected_mode")}
ACCEPTED_KINDS = {"f": "f", "i": "iu", "b": "b"}  # dtype kinds got() converts to the expected dtype


def _inside(q: str, ids: np.ndarray, inp: np.ndarray, kind: str, table: np.ndarray, keep) -> Check:
    """Every sampled id lies in the set `keep` allows for its context (the prompt + the ids before it)."""
    context = np.concatenate([inp, ids[:, :-1]], axis=1)  # (B, T + steps - 1)
    rows = fixed_models.keys(kind, context, table.shape[0])[:, inp.shape[1] - 1 :]  # (B, steps)
    for b, t in np.ndindex(ids.shape):
        allowed = keep(table[rows[b, t]])
        if int(ids[b, t]) not in allowed:
            return _wrong(q, f"'{q}' has id {int(ids[b, t])} at index ({b}, {t}), outside the allowed set "
                             f"{sorted(allowed)} for that step (logits of the fixed model given the prompt and your "
                             "earlier ids).")
    return Check(q, True, "ok", f"'{q}': every id lies in its allowed set.", 0.0)


def _frequencies(q: str, ids: np.ndarray, tempered: np.ndarray, keep: set[int] | None, temperature: float,
                 max_tv: float) -> Check:
    """Samples of one step: none outside `keep` (None: all allowed ids), frequencies close to the softmax over it."""
    flat = ids.reshape(-1)
    special = np.isin(flat, [EOS, PAD]) | (flat < 0) | (flat >= VOCAB_SIZE)
    if special.any():
        return _wrong(q, f"'{q}' holds {int(special.sum())} ids that are <eos>, <pad> or outside 0..29.")
    logits = tempered.copy()
    what = "softmax(logits / temperature)"
    if keep is not None:
        logits[[i for i in range(VOCAB_SIZE) if i not in keep]] = -np.inf
        what = f"softmax(logits / temperature) renormalised over the ids {sorted(keep)}"
        outside = ~np.isin(flat, sorted(keep))
        if outside.any():
            return _wrong(q, f"'{q}': {int(outside.sum())} of {flat.size} samples at temperature {temperature:g} are "
                             f"outside the allowed ids {sorted(keep)} (e.g. id {int(flat[np.argmax(outside)])}).")
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    freq = np.bincount(flat, minlength=VOCAB_SIZE) / flat.size
    tv = 0.5 * float(np.abs(freq - expected)[GENERATABLE].sum())
    top = int(np.argmax(expected))
    if tv > max_tv:
        greedy = (" Every sample is that most likely id: generate returned the argmax instead of sampling."
                  if np.all(flat == top) else "")
        return _wrong(q, f"'{q}': the frequencies of {flat.size} samples at temperature {temperature:g} are {tv:.3f} "
                         f"(total variation) from {what}, more than {max_tv:g}; e.g. id {top}: sampled "
                         f"{freq[top]:.3f}, expected {expected[top]:.3f}.{greedy}", tv)
    return Check(q, True, "ok", f"'{q}': frequencies within {tv:.3f} of {what}.", tv)
