"""The reference language model (autograder/reference/model.py): masks, loader, predict and generate contracts.

Expected values come from loops written here (stepping the model by hand) or
from the numpy protocols of autograder/oracle/metrics.py, never from the function
under test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autograder.fixturegen.lm_function_cases import fixed_logits, fixed_next_logits
from autograder.oracle.metrics import greedy_generate, greedy_predict
from autograder.reference.model import (
    EOS,
    PAD,
    CausalLanguageModel,
    LMDataLoader,
    ModelConfig,
    collate,
    embedding_dropout,
    filter_logits,
    generate,
    predict,
)
from gradelib.lm import fixed_models

from support import child_module

pytestmark = pytest.mark.slow

SMALL = ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=64)


def small_model(seed: int = 0) -> CausalLanguageModel:
    torch.manual_seed(seed)
    return CausalLanguageModel(SMALL).eval()


def load_harness_model():
    """The torch twin of fixed_models that runs in the grader's child process."""
    return child_module("lm_child").FixedModel


def test_causal_mask_blocks_future():
    model = small_model()
    a = torch.randint(2, 30, (3, 12))
    b = a.clone()
    b[:, 7:] = torch.randint(2, 30, (3, 5))
    with torch.no_grad():
        la, lb = model(a), model(b)
    assert torch.allclose(la[:, :7], lb[:, :7], atol=1e-6), "positions 0..6 changed when only tokens 7.. did"
    assert not torch.allclose(la[:, 7:], lb[:, 7:]), "positions 7.. must see their own (changed) tokens"


def test_weight_tying_shares_one_parameter():
    model = small_model()
    assert model.fc.weight is model.token_embedding.weight
    names = [n for n, _ in model.named_parameters()]
    assert "fc.weight" not in names and "token_embedding.weight" in names


def test_embedding_dropout_drops_whole_rows_and_rescales():
    torch.manual_seed(0)
    w = torch.ones(2000, 8)
    d = embedding_dropout(w, 0.25, training=True)
    row_values = d[:, 0]
    assert torch.equal(d, row_values[:, None].expand_as(d)), "a token's row is dropped or kept as a whole"
    assert torch.unique(row_values).tolist() == pytest.approx([0.0, 1 / 0.75])
    assert 0.2 < float((row_values == 0).float().mean()) < 0.3
    assert embedding_dropout(w, 0.25, training=False) is w


def test_collate_shifts_by_one_and_pads_right():
    x, y = collate([torch.tensor([0, 5, 6, 7]), torch.tensor([9, 8])])
    assert x.tolist() == [[0, 5, 6], [9, PAD, PAD]]
    assert y.tolist() == [[5, 6, 7], [8, PAD, PAD]]


def test_loader_makes_every_id_after_the_offset_a_target_once_per_epoch():
    stream = torch.arange(1000) % 28 + 2
    stream[0] = EOS
    loader = LMDataLoader(stream, batch_size=7, seq_len=16, seed=3)
    for _epoch in range(2):
        offset = loader.offset
        batches = list(loader)
        assert len(batches) == len(range(offset, 999, 16)) // 7 + (len(range(offset, 999, 16)) % 7 > 0)
        positions = []
        for x, y in batches:
            assert x.shape == y.shape and x.shape[1] <= 16
            real = y != PAD
            assert torch.equal(x[:, 1:][real[:, 1:]], y[:, :-1][real[:, 1:]]), "targets are the inputs shifted by one"
            positions += y[real].tolist()
        assert sorted(positions) == sorted(stream[offset + 1 :].tolist())


def test_predict_equals_stepping_the_model_by_hand():
    model = small_model(1)
    inp = torch.randint(2, 30, (4, 9))
    got = predict(model, inp, 6)
    x, expected = inp.clone(), []
    with torch.no_grad():
        for _ in range(6):
            step = model(x)[:, -1]
            expected.append(step)
            x = torch.cat([x, step.argmax(-1, keepdim=True)], 1)
    assert got.shape == (4, 6, 30) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.stack(expected, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", fixed_models.KINDS)
def test_predict_and_generate_follow_the_numpy_protocols_on_fixed_models(kind):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((30, 30)).astype(np.float32)
    table[:, EOS] += 3.0  # greedy generation must skip <eos> even where it wins
    inp = rng.integers(2, 30, (5, 7))
    model = load_harness_model()(table, kind, np.zeros(30, np.float32))
    expected_logits = greedy_predict(fixed_next_logits(kind, table), inp, 9)
    np.testing.assert_array_equal(predict(model, torch.from_numpy(inp), 9).numpy(), expected_logits)
    expected_ids = greedy_generate(fixed_next_logits(kind, table), inp, 9)
    np.testing.assert_array_equal(generate(model, torch.from_numpy(inp), 9).numpy(), expected_ids)


def test_harness_model_equals_numpy_fixed_model_in_eval_mode_only():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((7, 30)).astype(np.float32)
    offset = rng.standard_normal(30).astype(np.float32)
    ids = rng.integers(0, 30, (3, 11))
    for kind in fixed_models.KINDS:
        model = load_harness_model()(table, kind, offset)
        with torch.no_grad():
            np.testing.assert_array_equal(
                model.eval()(torch.from_numpy(ids)).numpy(), fixed_logits(kind, table, ids)
            )
            assert not np.array_equal(
                model.train()(torch.from_numpy(ids)).numpy(), fixed_logits(kind, table, ids)
            )


class FavoursSpecials(torch.nn.Module):
    """<eos> and <pad> always score highest; among characters, token i prefers i + 1."""

    def forward(self, inp):
        nxt = torch.where(inp + 1 > 29, torch.full_like(inp, 2), inp + 1)
        logits = torch.nn.functional.one_hot(nxt, 30).float() * 3.0
        logits[..., EOS] = 10.0
        logits[..., PAD] = 9.0
        return logits


def test_generate_never_emits_eos_or_pad_even_when_they_score_highest():
    inp = torch.tensor([[EOS, 2], [EOS, 29]])
    assert generate(FavoursSpecials(), inp, 4).tolist() == [[3, 4, 5, 6], [2, 3, 4, 5]]
    sampled = generate(
        FavoursSpecials(), inp.repeat(50, 1), 4, temperature=5.0, generator=torch.Generator().manual_seed(0)
    )
    assert not torch.isin(sampled, torch.tensor([EOS, PAD])).any()
    # predict's greedy picks range over all 30 ids: <eos> wins there.
    assert predict(FavoursSpecials(), inp, 2).argmax(-1).tolist() == [[EOS, EOS], [EOS, EOS]]


def test_top_k_one_and_tiny_top_p_equal_greedy():
    model = small_model(2)
    inp = torch.randint(2, 30, (6, 5))
    greedy = generate(model, inp, 8)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(model, inp, 8, temperature=1.0, top_k=1, generator=g), greedy)
    assert torch.equal(generate(model, inp, 8, temperature=1.0, top_p=1e-9, generator=g), greedy)


def test_filter_logits_keeps_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([[0.0, 0.0, 0.5, 0.3, 0.15, 0.05] + [1e-9] * 24]))
    kept = torch.isfinite(filter_logits(logits, 1.0, 2, None))[0].nonzero().flatten().tolist()
    assert kept == [2, 3]
    kept = torch.isfinite(filter_logits(logits, 1.0, None, 0.75))[0].nonzero().flatten().tolist()
    assert kept == [2, 3], "0.5 < 0.75 <= 0.5 + 0.3: the nucleus is the two most probable"
    kept = torch.isfinite(filter_logits(logits, 1.0, None, 0.8001))[0].nonzero().flatten().tolist()
    assert kept == [2, 3, 4]


def test_sampling_frequencies_follow_softmax_over_temperature():
    row = torch.full((30,), -2.0)
    row[[5, 6, 7]] = torch.tensor([3.0, 2.0, 1.0])
    row[EOS] = 8.0

    class Constant(torch.nn.Module):
        def forward(self, inp):
            return row.expand(inp.shape[0], inp.shape[1], 30)

    n, temperature = 20000, 2.0
    ids = generate(Constant(), torch.zeros((n, 1), dtype=torch.long), 1, temperature=temperature,
                   generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(ids.flatten(), minlength=30).double() / n
    masked = row.double().clone()
    masked[[EOS, PAD]] = float("-inf")
    expected = torch.softmax(masked / temperature, -1)
    assert float((freq - expected).abs().sum()) / 2 < 0.02
