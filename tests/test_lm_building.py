"""Notebook 3's building-block lines and the sampling line, checked piece by piece (fast, no sandbox).

The fixture generator's numpy implementation (autograder/fixturegen/lm_building_cases.py) is
compared with torch's own attention and with the reference model; the grader's judging
functions (gradelib/problems/lm_functions.py) are fed right and wrong outputs made here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autograder.reference import model as ref
from gradelib.compare import Observed, check
from gradelib.lm.vocab import EOS, PAD
from gradelib.problems import lm_functions

from support import FIXTURES, child_module

CASES = sorted((FIXTURES / "lm_functions").glob("*/*.npz"))
TOL = lm_functions.DEFAULT_TOLERANCE


def case(path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_expected_attention_equals_torch_scaled_dot_product_attention(path):
    c = case(path)
    C, n_heads = int(c["att_cfg"][0]), int(c["att_cfg"][1])
    w = {k[5:]: torch.from_numpy(v).double() for k, v in c.items() if k.startswith("attw.")}
    for x_key, q in (("att_x", "attention_out"), ("att_x_changed", "attention_causal")):
        x = torch.from_numpy(c[x_key]).double()
        B, T, _ = x.shape
        qkv = F.linear(x, w["qkv.weight"], w["qkv.bias"])
        heads = [t.view(B, T, n_heads, C // n_heads).transpose(1, 2) for t in qkv.split(C, -1)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(B, T, C)
        y = F.linear(y, w["proj.weight"], w["proj.bias"])
        np.testing.assert_allclose(c[f"expected_{q}"], y.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_expected_model_logits_equal_the_reference_model_in_float64(path):
    c = case(path)
    d, h, n_layers, d_ff, max_len = (int(v) for v in c["lm_cfg"])
    model = ref.CausalLanguageModel(
        ref.ModelConfig(d_model=d, n_heads=h, n_layers=n_layers, d_ff=d_ff, max_len=max_len)
    )
    missing = model.load_state_dict(
        {k[4:]: torch.from_numpy(v) for k, v in c.items() if k.startswith("lmw.")}, strict=False
    )
    assert missing.unexpected_keys == [] and missing.missing_keys == ["fc.weight"]
    model = model.double().eval()
    with torch.no_grad():
        for inp, q in (("lm_inp", "model_logits"), ("lm_inp_changed", "model_causal")):
            np.testing.assert_allclose(
                c[f"expected_{q}"], model(torch.from_numpy(c[inp])).numpy(), rtol=1e-5, atol=1e-5
            )
    # The changed inputs do change the later logits, by far more than the tolerance.
    p = int(c["lm_position"])
    assert np.abs(c["expected_model_causal"][:, p:] - c["expected_model_logits"][:, p:]).max() > 0.5
    np.testing.assert_array_equal(c["expected_model_causal"][:, :p], c["expected_model_logits"][:, :p])


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_expected_collate_and_loss_equal_torch(path):
    c = case(path)
    ends = np.cumsum(c["pieces_lengths"])
    pieces = [torch.from_numpy(c["pieces_flat"][e - n : e]) for n, e in zip(c["pieces_lengths"], ends)]
    x, y = ref.collate(pieces)
    np.testing.assert_array_equal(c["expected_collate_inputs"], x.numpy())
    np.testing.assert_array_equal(c["expected_collate_targets"], y.numpy())
    assert (c["expected_collate_inputs"] == PAD).any(), "some row must be padded, or a wrong pad id goes unseen"
    logits, targets = torch.from_numpy(c["loss_logits"]).double(), torch.from_numpy(c["loss_targets"])
    assert (targets == PAD).any() and (targets != PAD).any()
    loss = F.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1), ignore_index=PAD)
    assert abs(float(c["expected_lm_loss"]) - float(loss)) < 1e-5
    with_padding = F.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1))
    assert abs(float(with_padding) - float(loss)) > 100 * TOL["rtol"] * float(loss)


# --- sampling: frequencies, not only where the samples lie ------------------------------------

def sampling_setup(path):
    c = case(path)
    temperature = float(c["dist_temperature"])
    tempered = lm_functions._allowed(c["d_table"][0]) / temperature
    keeps = {
        "sampled_ids": None,
        "sampled_top_k_ids": lm_functions._top_k(tempered, int(c["top_k"])),
        "sampled_top_p_ids": lm_functions._nucleus(tempered, float(c["dist_top_p"])),
    }
    return c, temperature, tempered, keeps


def renormalised(tempered, keep):
    z = tempered.copy()
    if keep is not None:
        z[[i for i in range(30) if i not in keep]] = -np.inf
    p = np.exp(z - z.max())
    return p / p.sum()


@pytest.mark.parametrize("q", ["sampled_ids", "sampled_top_k_ids", "sampled_top_p_ids"])
def test_sampling_check_passes_true_samples_and_fails_greedy_ones(q):
    c, temperature, tempered, keeps = sampling_setup(CASES[0])
    keep = keeps[q]
    n = c["dist_inp"].shape[0]
    max_tv = 0.05
    probs = renormalised(tempered, keep)
    assert probs.max() < 0.5, "the greedy token must hold under half the mass, or greedy ids pass"
    for seed in range(20):
        ids = np.random.default_rng(seed).choice(30, size=(n, 1), p=probs)
        assert lm_functions._frequencies(q, ids, tempered, keep, temperature, max_tv).passed, seed
    greedy = np.full((n, 1), int(np.argmax(tempered)))
    verdict = lm_functions._frequencies(q, greedy, tempered, keep, temperature, max_tv)
    assert not verdict.passed and "total variation" in verdict.message, verdict.message
    # Sampling from the unfiltered softmax puts ids outside the kept set.
    if keep is not None:
        wide = np.random.default_rng(0).choice(30, size=(n, 1), p=renormalised(tempered, None))
        verdict = lm_functions._frequencies(q, wide, tempered, keep, temperature, max_tv)
        assert not verdict.passed and "outside the allowed ids" in verdict.message, verdict.message


def test_nucleus_and_top_k_of_the_distribution_model_differ():
    _c, _t, _tempered, keeps = sampling_setup(CASES[0])
    assert len(keeps["sampled_top_k_ids"]) == 3 and len(keeps["sampled_top_p_ids"]) == 4
    assert not ({EOS, PAD} & (keeps["sampled_top_k_ids"] | keeps["sampled_top_p_ids"]))


# --- embedding_dropout and causality judged here ----------------------------------------------

@pytest.mark.parametrize("p", [0.1, 0.5])
def test_row_dropout_check(p):
    rng = np.random.default_rng(0)
    w = (rng.uniform(0.5, 1.5, (1000, 8)) * rng.choice([-1, 1], (1000, 8))).astype(np.float32)
    rows = rng.random(1000) < p
    good = np.where(rows[:, None], 0.0, w / (1 - p)).astype(np.float32)
    assert lm_functions._row_dropout(good, w, p, TOL).passed
    entries = np.where(rng.random(w.shape) < p, 0.0, w / (1 - p)).astype(np.float32)
    assert "neither all zero" in lm_functions._row_dropout(entries, w, p, TOL).message
    unscaled = np.where(rows[:, None], 0.0, w).astype(np.float32)
    assert not lm_functions._row_dropout(unscaled, w, p, TOL).passed
    assert not lm_functions._row_dropout(w.copy(), w, p, TOL).passed
    too_many = np.where((rng.random(1000) < min(0.95, 2 * p))[:, None], 0.0, w / (1 - p)).astype(np.float32)
    assert "dropped" in lm_functions._row_dropout(too_many, w, p, TOL).message


def test_causal_check_names_the_position_that_saw_the_future():
    rng = np.random.default_rng(0)
    out = rng.standard_normal((2, 6, 4)).astype(np.float32)
    expected_changed = out.copy()
    expected_changed[:, 3:] += 1.0
    leaky = expected_changed.copy()
    leaky[:, 1] += 0.5
    obs = lambda a: Observed(True, "torch.Tensor", a)  # noqa: E731
    values = check("attention_causal", obs(leaky), expected_changed, rtol=1e-4, atol=1e-5)
    verdict = lm_functions._causal("attention_causal", obs(leaky), obs(out), 3, values, TOL)
    assert not verdict.passed and "position 1" in verdict.message and "positions 3 and after" in verdict.message
    right = check("attention_causal", obs(expected_changed), expected_changed, rtol=1e-4, atol=1e-5)
    assert lm_functions._causal("attention_causal", obs(expected_changed), obs(out), 3, right, TOL).passed


def test_harness_refuses_weights_a_renamed_module_cannot_hold():
    module = child_module("lm_child")

    class Renamed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.to_qkv = torch.nn.Linear(4, 12)

    inputs = {"attw.qkv.weight": np.zeros((12, 4), np.float32)}
    with pytest.raises(module.WeightsDoNotFit, match="no parameter qkv.weight"):
        module._load(Renamed(), inputs, "attw.", "CausalSelfAttention")
