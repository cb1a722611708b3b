"""Cases for notebook 3's predict() and generate() on fixed-weight models (`make fixtures`).

    python -m autograder.fixturegen [--out fixtures]

writes fixtures/lm_functions/{public,hidden}/<case>.npz and cases.json. A case
holds a fixed model (see gradelib/lm/fixed_models.py; its logits here), prompts and settings,
and the expected outputs, computed by the prediction and generation protocols of
autograder/oracle/metrics.py (greedy_predict, greedy_generate: numpy, independent of
any torch code):

    expected_predict_logits  (B, steps, 30) float32   predict(model, inp, steps)
    expected_greedy_ids      (B, steps) int64          generate(model, inp, steps), and at temperature 0
                                                       whatever top_k and top_p say
    expected_mode            (2,) bool                 model.training after predict()/generate() called
                                                       in training mode, then in eval mode: restored

The rules generate()'s docstring states get one-row models of their own: "t" (the
k-th and (k+1)-th best allowed logits tie: both are kept) and "e" (the nucleus's
last token is the one whose probability carries the sum past top_p: it is kept).

Every case also carries the sampling settings (top_k, top_p, temperature) and a
"d" model for the distribution checks; the grader checks those samples by their
properties (each id inside its top-k set or nucleus, frequencies close to
softmax(logits / temperature), renormalised over what top_k / top_p keep). Tables
are drawn so that no argmax, k-th best logit or nucleus boundary is a near tie, so
float32 and float64 agree. The d model's greedy token holds under half the mass
of every filtered distribution, so a generate() that returns greedy ids when
top_k / top_p are given is far from it.

Every case also carries inputs and expected values for the notebook's building
blocks (collate, lm_loss, CausalSelfAttention, CausalLanguageModel,
embedding_dropout): fixturegen/lm_building_cases.py, from its own random stream so
the predict/generate arrays above do not depend on it; and the values of the usual
slips, with their words, so the grader names one where a notebook gives it
(fixturegen/lm_slips.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gradelib.lm import fixed_models
from gradelib.lm.vocab import EOS, PAD, VOCAB_SIZE

from ..oracle.metrics import greedy_generate, greedy_predict
from ..oracle.npzio import save, write_index
from . import lm_building_cases, lm_slips
from .rotation import rotated

SEED = 785
SPECIAL = [EOS, PAD]
# Sampling settings shared by every case; the grader reads them from the case file.
TOP_K = 3
TOP_P = 0.6
TINY_P = 1e-6
COLD = 0.01
DIST_SAMPLES = 8000
DIST_TEMPERATURE = 2.0
DIST_TOP_P_KEEP = 4  # the nucleus of the d model at DIST_TEMPERATURE: its 4 best allowed tokens
MARGIN = 0.05  # least gap between competing logits, and between a nucleus boundary and top_p


def fixed_logits(kind: str, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """A fixed model's evaluation-mode logits for every position: (B, T) -> (B, T, 30) float32."""
    return np.asarray(table, dtype=np.float32)[fixed_models.keys(kind, ids, table.shape[0])]


def fixed_next_logits(kind: str, table: np.ndarray):
    """ids (B, T) -> (B, 30) logits of the next token: the interface of the course's metrics.greedy_predict."""
    return lambda ids: fixed_logits(kind, table, ids)[:, -1]


# name -> (visibility, description, kind, K, batch, prompt length, steps, specials favoured, train offset)
CASES = {
    "last_token": (
        "public",
        "the last token decides the logits; 4 prompts of 6 ids, 8 steps",
        "last",
        30,
        4,
        6,
        8,
        False,
        True,
    ),
    "prefix_sum": (
        "public",
        "logits depend on the sum of all earlier ids; 3 prompts of 5, 10 steps",
        "prefix_sum",
        30,
        3,
        5,
        10,
        False,
        True,
    ),
    "eos_favoured": (
        "hidden",
        "<eos> and <pad> score highest in most rows; 4 prompts of 6, 8 steps",
        "last",
        30,
        4,
        6,
        8,
        True,
        True,
    ),
    "position": (
        "hidden",
        "logits depend only on the input's length; 2 prompts of 7, 12 steps",
        "position",
        30,
        2,
        7,
        12,
        False,
        True,
    ),
    "long_prompts": (
        "hidden",
        "generation-sized: 5 prompts of 40 ids, 30 steps, sum of all ids",
        "prefix_sum",
        30,
        5,
        40,
        30,
        True,
        True,
    ),
    "one_step": ("hidden", "a single prompt of one <eos>, one step", "prefix_sum", 30, 1, 1, 1, False, False),
    # Last, so that the cases above keep their random draws.
    "specials_first": (
        "public",
        "<eos> and <pad> score highest in most rows; 3 prompts of 4 ids, 6 steps",
        "last",
        30,
        3,
        4,
        6,
        True,
        True,
    ),
    # A public twin of the hidden one_step (one prompt of one id, one step): a squeeze() that drops the batch or
    # the step axis fails here too.
    "one_id": ("public", "a single prompt of one id, one step", "prefix_sum", 30, 1, 1, 1, False, False),
}
# name -> building blocks' sizes: (d_model, n_heads, n_layers, d_ff, embedding dropout p)
BUILDING = {
    "last_token": (16, 2, 2, 32, 0.3),
    "prefix_sum": (12, 3, 1, 24, 0.5),
    "eos_favoured": (16, 4, 2, 32, 0.2),
    "position": (8, 1, 1, 16, 0.4),
    "long_prompts": (24, 3, 2, 48, 0.1),
    "one_step": (16, 2, 3, 32, 0.6),
    "specials_first": (8, 2, 1, 16, 0.25),
    "one_id": (8, 1, 2, 16, 0.35),
}
# The rules generate()'s docstring states, each on a one-row model (every context reads row 0):
# top-k ties: the k-th and (k+1)-th best allowed logits are equal, and both are kept;
TIE_K = 2
TIE_ROW = {"best": 2.0, "tied": 1.0, "rest": -3.0}
# top-p boundary: the token whose probability carries the cumulative sum past top_p is kept.
EDGE_PROBS = (0.45, 0.35, 0.15)  # the three best allowed tokens; the other 25 share the last 0.05
EDGE_P = 0.5  # 0.45 < 0.5 <= 0.45 + 0.35: the nucleus is the two best tokens
# Mode probes: the model's `training` flag after predict()/generate() called in training, then in eval mode.
EXPECTED_MODE = np.array([True, False])


def separated_table(rng: np.random.Generator, K: int, favour_specials: bool) -> np.ndarray:
    """(K, 30) float32 logits with no near ties among the allowed ids, nucleus edges away from TOP_P."""
    table = np.empty((K, VOCAB_SIZE), dtype=np.float32)
    for k in range(K):
        favour = favour_specials and rng.random() < 0.8
        while True:
            row = (rng.standard_normal(VOCAB_SIZE) * 2.0).astype(np.float32)
            if favour:
                row[EOS] = row.max() + 1.0
                row[PAD] = row[EOS] - 0.5
            if _row_ok(row):
                table[k] = row
                break
    return table


def _row_ok(row: np.ndarray) -> bool:
    allowed = np.sort(np.delete(row, SPECIAL).astype(np.float64))[::-1]
    if np.min(allowed[: TOP_K + 1][:-1] - allowed[1 : TOP_K + 1]) < MARGIN:
        return False
    if abs(row[EOS] - allowed[0]) < MARGIN or abs(np.sort(row)[-1] - np.sort(row)[-2]) < MARGIN:
        return False
    p = np.exp(allowed - allowed.max())
    cum = np.cumsum(p / p.sum())
    return bool(np.min(np.abs(cum - TOP_P)) > MARGIN / 10)


def distribution_table(rng: np.random.Generator) -> np.ndarray:
    """(1, 30): one row for every context, peaked at temperature 1 and flat at DIST_TEMPERATURE."""
    row = np.full(VOCAB_SIZE, -1.0, dtype=np.float32)
    picks = rng.choice(np.arange(2, VOCAB_SIZE), size=4, replace=False)
    row[picks] = [4.0, 3.0, 2.5, 1.0]
    row[EOS], row[PAD] = 6.0, 5.0  # the grader's sample must still hold none of them
    return row[None, :]


def dist_top_p(row: np.ndarray) -> float:
    """A top_p whose nucleus at DIST_TEMPERATURE is the DIST_TOP_P_KEEP best allowed tokens, far from either edge."""
    allowed = np.sort(np.delete(row, SPECIAL).astype(np.float64))[::-1] / DIST_TEMPERATURE
    p = np.exp(allowed - allowed.max())
    cum = np.cumsum(p / p.sum())
    lo, hi = cum[DIST_TOP_P_KEEP - 2], cum[DIST_TOP_P_KEEP - 1]
    assert hi - lo > 2 * MARGIN / 10, "nucleus boundary too close to a tie"
    return float(round((lo + hi) / 2, 4))


def tie_table(rng: np.random.Generator) -> np.ndarray:
    """(1, 30): one best allowed token, two tied for second place (exactly equal in float32), the rest far below."""
    row = np.full(VOCAB_SIZE, TIE_ROW["rest"], dtype=np.float32)
    best, *tied = rng.choice(np.arange(2, VOCAB_SIZE), size=3, replace=False)
    row[best], row[tied] = TIE_ROW["best"], TIE_ROW["tied"]
    row[EOS], row[PAD] = 5.0, 4.0  # excluded before top-k: they must not take a place among the k
    return row[None, :]


def edge_table(rng: np.random.Generator) -> np.ndarray:
    """(1, 30) log-probabilities: EDGE_PROBS on three allowed tokens, the rest of the mass spread evenly."""
    allowed = rng.permutation(np.arange(2, VOCAB_SIZE))
    probs = np.full(VOCAB_SIZE, (1.0 - sum(EDGE_PROBS)) / (VOCAB_SIZE - 2 - len(EDGE_PROBS)))
    probs[allowed[: len(EDGE_PROBS)]] = EDGE_PROBS
    row = np.log(probs).astype(np.float32)
    row[EOS], row[PAD] = 3.0, 3.0
    return row[None, :]


def make_case(rng: np.random.Generator, spec) -> dict[str, np.ndarray]:
    _vis, _desc, kind, K, B, T, steps, favour, offset = spec
    table = separated_table(rng, K, favour)
    inp = rng.integers(2, VOCAB_SIZE, size=(B, T))
    inp[:, 0] = EOS
    train_offset = (
        (rng.standard_normal(VOCAB_SIZE) * 5.0).astype(np.float32) if offset else np.zeros(VOCAB_SIZE, np.float32)
    )
    next_logits = fixed_next_logits(kind, table)
    d_table = distribution_table(rng)
    return {
        "m_table": table,
        "m_kind": np.int64(fixed_models.KINDS.index(kind)),
        "m_train_offset": train_offset,
        "d_table": d_table,
        "d_kind": np.int64(fixed_models.KINDS.index("last")),
        "d_train_offset": np.zeros(VOCAB_SIZE, np.float32),
        "inp": inp.astype(np.int64),
        "steps": np.int64(steps),
        "dist_inp": np.zeros((DIST_SAMPLES, 1), dtype=np.int64),
        "one": np.int64(1),
        "unit_temperature": np.float64(1.0),
        "cold_temperature": np.float64(COLD),
        "dist_temperature": np.float64(DIST_TEMPERATURE),
        "top_k": np.int64(TOP_K),
        "top_p": np.float64(TOP_P),
        "dist_top_p": np.float64(dist_top_p(d_table[0])),
        "tiny_p": np.float64(TINY_P),
        "seed": np.int64(rng.integers(1 << 30)),
        "zero_temperature": np.float64(0.0),
        "tie_k": np.int64(TIE_K),
        "edge_p": np.float64(EDGE_P),
        "expected_mode": EXPECTED_MODE,
        "expected_predict_logits": greedy_predict(next_logits, inp, steps).astype(np.float32),
        "expected_greedy_ids": greedy_generate(next_logits, inp, steps).astype(np.int64),
    }


def rule_models(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The one-row models of the top-k tie and top-p boundary rules (a "t" and an "e" model)."""
    arrays = {}
    for key, table in (("t", tie_table(rng)), ("e", edge_table(rng))):
        arrays[f"{key}_table"] = table
        arrays[f"{key}_kind"] = np.int64(fixed_models.KINDS.index("last"))
        arrays[f"{key}_train_offset"] = np.zeros(VOCAB_SIZE, np.float32)
    return arrays


def build(out: Path, seed: int | None = None, public_too: bool = False) -> list[Path]:
    """Every case; with `seed`, the hidden ones (and the public ones with public_too) rotated (rotation.py)."""
    rng = np.random.default_rng(SEED)
    written = []
    index: dict[str, list] = {"public": [], "hidden": []}
    for i, (name, spec) in enumerate(CASES.items()):
        arrays = make_case(rng, spec)  # drawn whatever the term, so the shared stream (the other cases) stays the same
        own = rotated(SEED, spec[0], seed, public_too)
        if own != SEED:
            arrays = make_case(np.random.default_rng([own, i]), spec)
        building, slips = lm_building_cases.make(np.random.default_rng([own, i]), *BUILDING[name])
        arrays.update(building)
        slips.update(lm_slips.fixed(fixed_models.KINDS[int(arrays["m_kind"])], arrays["m_table"], arrays["inp"],
                                    int(arrays["steps"])))
        arrays.update(lm_slips.table(slips, {q: arrays[f"expected_{q}"] for q in slips}))
        # Their own stream: the draws above do not move.
        arrays.update(rule_models(np.random.default_rng([own, i, 1])))
        folder = out / "lm_functions" / spec[0]
        save(folder / f"{name}.npz", arrays)
        written.append(folder / f"{name}.npz")
        d_model, heads, layers, _, _ = BUILDING[name]  # the header names what each line grades: the modules too
        modules = f"modules of width {d_model}, {heads} head{'s' * (heads > 1)}, {layers} layer{'s' * (layers > 1)}"
        index[spec[0]].append({"name": name, "description": f"{spec[1]}; {modules}"})
    for vis, entries in index.items():
        keep = {f"{e['name']}.npz" for e in entries} | {"cases.json"}
        for stale in (out / "lm_functions" / vis).iterdir():
            if stale.name not in keep:  # a case renamed or removed since the last run
                stale.unlink()
        written.append(write_index(out / "lm_functions" / vis, entries))
    return written
