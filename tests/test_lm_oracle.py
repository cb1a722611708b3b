"""The toy source's oracle: exact probabilities, checked against brute force, the word-level
process, samples, and the Monte Carlo entropy rate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autograder.oracle import automaton as automaton_mod
from autograder.oracle.automaton import Automaton
from autograder.oracle.ngram import NGramModel
from autograder.oracle.oracles import toy_source
from autograder.oracle.text import N_GENERATABLE, encode, stream, windows
from gradelib.lm.vocab import EOS, VOCAB_SIZE

A, B = encode("A")[0], encode("B")[0]


@pytest.fixture(scope="module")
def source():
    return toy_source(0)


@pytest.fixture(scope="module")
def sample_rows(source):
    """(2000, 60) windows of a stream of sampled sentences, each starting at an <eos>."""
    ids = stream(source.sample_sentences(6000, np.random.default_rng(123)))
    return windows(ids, 60, 2000)


def tiny_ambiguous() -> Automaton:
    """Three states; 'A' from the start may go to state 1 or 2, so a text has several paths."""
    edges = [
        (0, A, 1, 0.5), (0, A, 2, 0.3), (0, B, 2, 0.2),
        (1, A, 1, 0.3), (1, B, 2, 0.3), (1, EOS, 0, 0.4),
        (2, A, 1, 0.1), (2, B, 2, 0.5), (2, EOS, 0, 0.4),
    ]
    src, char, dst, w = zip(*edges)
    return Automaton(3, 0, src, char, dst, w)


def brute_force_prob(auto: Automaton, text: list[int], eps: float) -> float:
    """P(<eos> + text) summed over every state path and every choice of inserted characters."""
    edges = list(zip(auto.src.tolist(), auto.char.tolist(), auto.dst.tolist(), auto.w.tolist()))
    total = 0.0
    for inserted in itertools.product([False, True], repeat=len(text)):
        if eps == 0 and any(inserted):
            continue
        states = {auto.start: 1.0}
        for c, ins in zip(text, inserted):
            nxt: dict[int, float] = {}
            for s, p in states.items():
                if ins:
                    if c != EOS:
                        nxt[s] = nxt.get(s, 0.0) + p * eps / N_GENERATABLE
                    continue
                for s0, ch, d, w in edges:
                    if s0 == s and ch == c:
                        nxt[d] = nxt.get(d, 0.0) + p * w * (1 - eps)
            states = nxt
        total += sum(states.values())
    return total


@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_forward_matches_brute_force_sum_over_paths_on_ambiguous_automaton(eps):
    auto = tiny_ambiguous()
    rng = np.random.default_rng(0)
    for length in (1, 3, 6, 8):
        for _ in range(5):
            text = rng.choice([A, B, EOS], size=length, p=[0.45, 0.45, 0.1]).tolist()
            ids = np.array([[EOS, *text]])
            probs = auto.next_id_probs(ids[:, :-1], eps=eps)[0]  # (length, 30)
            smoothed = (1 - eps) * probs + np.where(np.arange(VOCAB_SIZE) >= 2, eps / N_GENERATABLE, 0.0)
            product = float(np.prod(smoothed[np.arange(length), text]))
            assert product == pytest.approx(brute_force_prob(auto, text, eps), rel=1e-12, abs=1e-300)


def test_toy_automaton_is_deterministic_so_its_entropy_rate_is_exact(source):
    auto = source.automaton
    pairs = auto.src * VOCAB_SIZE + auto.char
    assert len(np.unique(pairs)) == len(pairs), "two edges share (state, character): the text would not fix the path"


def test_next_id_probs_sum_to_one(source, sample_rows):
    auto = source.automaton
    rows = sample_rows[:200]
    for eps in (0.0, 1e-3):
        probs = auto.next_id_probs(rows, eps=eps)
        np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=0, atol=1e-12)
    gibberish = np.random.default_rng(1).integers(2, VOCAB_SIZE, size=(50, 40))
    gibberish[:, 0] = EOS
    np.testing.assert_allclose(auto.next_id_probs(gibberish, eps=1e-3).sum(-1), 1.0, atol=1e-12)


def test_sentence_probability_equals_word_level_process(source):
    sentences = source.sample_sentences(300, np.random.default_rng(5))
    auto = source.automaton
    for s in sentences:
        ids = stream([s])[None, :]
        probs = auto.next_id_probs(ids[:, :-1])[0]
        char_level = float(np.log(probs[np.arange(ids.shape[1] - 1), ids[0, 1:]]).sum())
        assert char_level == pytest.approx(source.sentence_logprob(s), abs=1e-9), s


def z_scores(probs: np.ndarray, ids: np.ndarray, start: int) -> np.ndarray:
    """Per (position bucket, id): (observed count - sum of predicted probabilities) / its std.

    If probs[b, t] is the true law of ids[b, t + 1] given ids[b, :t + 1], each count minus the
    sum of its predictions is a martingale sum with variance sum p(1 - p), so z is ~N(0, 1).
    """
    p = probs[:, start:-1]  # (B, T', 30) predictions for ids[:, start+1:]
    y = np.eye(VOCAB_SIZE)[ids[:, start + 1 :]]  # (B, T', 30) one-hot observations
    buckets = np.array_split(np.arange(p.shape[1]), 4)
    out = []
    for b in buckets:
        obs, exp, var = y[:, b].sum((0, 1)), p[:, b].sum((0, 1)), (p[:, b] * (1 - p[:, b])).sum((0, 1))
        keep = var > 5
        out.append((obs[keep] - exp[keep]) / np.sqrt(var[keep]))
    return np.concatenate(out)


def test_oracle_matches_empirical_frequencies_of_samples(source, sample_rows):
    """~100 z-scores; |z| < 5 has false-alarm probability below 1e-4 for all of them together."""
    probs = source.automaton.next_id_probs(sample_rows)
    z = z_scores(probs, sample_rows, start=0)
    assert len(z) > 60
    assert np.abs(z).max() < 5.0, np.round(z, 1)
    # The same statistic rejects a model that is good but not the source: a 4-gram fitted to 20k sentences.
    four = NGramModel.fit(source.sample_sentences(20000, np.random.default_rng(7)), 4)
    assert np.abs(z_scores(four.next_id_probs(sample_rows), sample_rows, start=0)).max() > 8.0


def test_entropy_rate_matches_monte_carlo(source):
    exact = source.automaton.entropy_rate()
    sentences = source.sample_sentences(20000, np.random.default_rng(11))
    logp = np.array([source.sentence_logprob(s) for s in sentences])
    n = np.array([len(s) + 1 for s in sentences])  # characters + the closing <eos>
    estimate = -logp.sum() / n.sum()
    # Standard error of a ratio estimator (delta method).
    se = np.std(-logp - estimate * n) / np.sqrt(len(n)) / n.mean()
    assert se < 0.005
    assert abs(estimate - exact) < 4 * se, (estimate, exact, se)
    assert source.automaton.mean_sentence_length() == pytest.approx(
        n.mean(), rel=4 * np.std(n) / np.sqrt(len(n)) / n.mean()
    )


def test_dropping_negligible_hypotheses_changes_nothing(source, sample_rows, monkeypatch):
    auto = source.automaton
    gibberish = np.random.default_rng(3).integers(2, VOCAB_SIZE, size=(64, 60))
    gibberish[:, 0] = EOS
    rows = np.concatenate([sample_rows[:64], gibberish])
    kept = auto.next_id_probs(rows, eps=1e-3)
    monkeypatch.setattr(automaton_mod, "DROP_BELOW", 0.0)
    exact = auto.next_id_probs(rows, eps=1e-3)
    np.testing.assert_allclose(kept, exact, rtol=0, atol=1e-14)


def test_prefix_without_eos_starts_from_stationary_distribution(source):
    auto = source.automaton
    pi = auto.stationary()
    assert pi.sum() == pytest.approx(1.0) and pi.min() >= 0
    t = encode("T")[0]
    # Reading 'T' from the stationary distribution, by a dense scatter over all 'T' edges.
    sel = auto.char == t
    after = np.bincount(auto.dst[sel], weights=pi[auto.src[sel]] * auto.w[sel], minlength=auto.n_states)
    expected = (after / after.sum()) @ auto.emission
    np.testing.assert_allclose(auto.next_id_probs(np.array([[t]]))[0, 0], expected, atol=1e-12)
    # A row that opens with <eos> is at a sentence start instead.
    at_start = auto.next_id_probs(np.array([[EOS, t]]))[0, 1]
    assert np.abs(at_start - expected).max() > 0.05
