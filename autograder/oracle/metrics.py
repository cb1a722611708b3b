"""Generation perplexity under the oracle, and the oracle's own (Bayes-optimal) scores (the course grader's).

Prediction (the predict contract, README): logits (B, T, 30) for T steps after each prompt; step t
conditions on the prompt plus the model's greedy picks for steps < t, and is
scored against the true continuation by the kit's NLL (gradelib/lm/nll.py, imported here):

    NLL = mean over b, t of -log_softmax(logits[b, t])[target[b, t]]

Generation: ids (B, T) after each prompt, never <eos>/<pad>. Each id is scored by
the oracle given the prompt and the ids generated before it. A generator may not
end a sentence, so the oracle's distribution is conditioned on that rule
(renormalised over the 28 generatable ids) and smoothed so impossible text has a
finite cost:

    q(c) = (1 - eps) * p(c) / sum_{c' generatable} p(c') + eps / 28
    perplexity = exp(mean over b, t of -log q(generated[b, t]))

Prediction is graded on the on-track steps only (see prediction_report).

Bayes-optimal figures under the same protocols: for prediction, the oracle's own
log-probabilities as logits, conditioned on its own greedy picks (eps = 0: an
on-track step never meets a character the source rules out); for generation,
greedy decoding under the oracle.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gradelib.lm.nll import prediction_nll, prediction_token_nll  # noqa: F401 (the kit's, read here too)
from gradelib.lm.vocab import EOS, GENERATABLE, PAD, VOCAB_SIZE

from .text import N_GENERATABLE


class Oracle(Protocol):
    """What scores text: any object with this method. The course grader has one with the hidden cases
    (oracles.load_oracle); the handout has none, so the local grader never scores text."""

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        """ids (B, T) int64 -> (B, T, 30) float64: row b, step t is P(next id | ids[b, :t+1])."""


def generation_distribution(probs: np.ndarray, eps: float) -> np.ndarray:
    """q over the 30 ids (zero for <eos>/<pad>) from oracle probabilities (..., 30)."""
    gen = probs[..., GENERATABLE]
    total = gen.sum(axis=-1, keepdims=True)
    # A row the oracle finds impossible (no mass on any character) is scored uniformly.
    gen = np.divide(gen, total, out=np.full_like(gen, 1.0 / N_GENERATABLE), where=total > 0)
    q = np.zeros(probs.shape)
    q[..., GENERATABLE] = (1.0 - eps) * gen + eps / N_GENERATABLE
    return q


def generation_token_nll(oracle: Oracle, prompts: np.ndarray, generated: np.ndarray, eps: float) -> np.ndarray:
    """-log q(generated[b, t] | prompt, generated[b, :t]). prompts (B, Tp), generated (B, Tg) -> (B, Tg)."""
    prompts = np.asarray(prompts, dtype=np.int64)
    generated = np.asarray(generated, dtype=np.int64)
    Tp = prompts.shape[1]
    ids = np.concatenate([prompts, generated[:, :-1]], axis=1)  # (B, Tp + Tg - 1)
    probs = oracle.next_id_probs(ids)[:, Tp - 1 :]  # (B, Tg, 30)
    q = generation_distribution(probs, eps)
    return -np.log(np.take_along_axis(q, generated[..., None], axis=-1)[..., 0])


def generation_perplexity(oracle: Oracle, prompts: np.ndarray, generated: np.ndarray, eps: float) -> float:
    """exp of the mean generation_token_nll: the generations' perplexity under the smoothed oracle."""
    return float(np.exp(generation_token_nll(oracle, prompts, generated, eps).mean()))


def smoothed_logits(probs: np.ndarray, eps: float) -> np.ndarray:
    """Logits of (1 - eps) p + eps * uniform over the 28 generatable ids; <pad> gets a finite floor."""
    u = np.zeros(VOCAB_SIZE)
    u[GENERATABLE] = 1.0 / N_GENERATABLE
    return np.log(np.maximum((1.0 - eps) * probs + eps * u, 1e-300))


def greedy_predict(next_probs, inp: np.ndarray, timesteps: int) -> np.ndarray:
    """The prediction protocol for any next_probs(ids (B, T)) -> (B, 30) probabilities or logits.

    Returns (B, timesteps, 30): step t is next_probs(inp + greedy picks of steps < t).
    """
    x = np.asarray(inp, dtype=np.int64)
    steps = []
    for _ in range(timesteps):
        s = next_probs(x)
        steps.append(s)
        x = np.concatenate([x, s.argmax(axis=-1)[:, None]], axis=1)
    return np.stack(steps, axis=1)


def oracle_prediction_logits(oracle: Oracle, inp: np.ndarray, timesteps: int, eps: float) -> np.ndarray:
    """The Bayes-optimal predictor's logits (B, timesteps, 30) under the prediction protocol."""
    return greedy_predict(lambda x: smoothed_logits(oracle.next_id_probs(x)[:, -1], eps), inp, timesteps)


def greedy_generate(next_probs, inp: np.ndarray, timesteps: int) -> np.ndarray:
    """Greedy generation (argmax over the 28 generatable ids) for any next_probs(ids) -> (B, 30)."""
    x = np.asarray(inp, dtype=np.int64)
    start = x.shape[1]
    for _ in range(timesteps):
        s = np.array(next_probs(x), dtype=np.float64)
        s[:, [EOS, PAD]] = -np.inf
        x = np.concatenate([x, s.argmax(axis=-1)[:, None]], axis=1)
    return x[:, start:]


def oracle_greedy_generation(oracle: Oracle, inp: np.ndarray, timesteps: int) -> np.ndarray:
    """Greedy decoding under the oracle: the Bayes-optimal figure for generation. (B, timesteps)"""
    return greedy_generate(lambda x: oracle.next_id_probs(x)[:, -1], inp, timesteps)


def on_track(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Steps whose conditioning is the true text: step 0, and step t while the greedy picks
    argmax(logits[:, s]) equalled targets[:, s] for every s < t. (B, T) bool."""
    hits = np.asarray(logits).argmax(axis=-1) == np.asarray(targets)  # (B, T)
    first = np.ones((hits.shape[0], 1), dtype=bool)
    return np.cumprod(np.concatenate([first, hits[:, :-1]], axis=1), axis=1).astype(bool)


def prediction_report(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """The graded on-track NLL and, for information, the NLL of step 0 and of all steps.

    After a greedy pick that differs from the true next character, a step conditions
    on text that is not the target's context; scoring such steps would reward a
    vague model over a sharp one (the source itself scores worse than a bigram
    there). So the graded NLL averages -log_softmax(logits)[target] over the
    on-track steps only; it is the teacher-forced NLL of those steps.
    """
    tok = prediction_token_nll(logits, targets)
    mask = on_track(logits, targets)
    return {
        "on_track_nll": float(tok[mask].mean()),
        "on_track_steps": int(mask.sum()),
        "step0_nll": float(tok[:, 0].mean()),
        "all_steps_nll": float(tok.mean()),
    }
