"""A probabilistic automaton over the 30-token vocabulary: exact next-character probabilities.

An automaton has N states and weighted edges (src, char, dst, w): from state src
it emits `char` and moves to dst with probability w; the weights leaving each
state sum to 1. <eos> edges lead back to the start state, so the text is a
sequence of independent sentences (a renewal process).

The forward algorithm keeps, for every row of a batch, the belief b (B, N): the
probability of each state given the prefix read so far. Reading character c:

    b'(j) ∝ (1 - eps) * sum_i b(i) T_c(i, j) + eps/28 * b(j)     (c one of the 28 generatable ids)

which is exact for the source seen through a noisy channel that, with
probability eps, inserts a uniformly drawn generatable character and leaves the
state unchanged. With eps > 0 any text has a belief, so impossible text is
scored instead of breaking the recursion; with eps = 0 the belief is the exact
posterior of the source itself. The next-character distribution given a belief
is b @ E with E[i, c] = sum_j T_c(i, j).

Prefix convention: a row whose first id is <eos> starts at a sentence start (the
start state); any other row starts at a uniformly random position of the
stationary text (the stationary state distribution). <eos> is a synchronisation
point: after it the state is the start state.
"""

from __future__ import annotations

import numpy as np

from gradelib.lm.vocab import EOS, PAD, VOCAB_SIZE

from .text import N_GENERATABLE

# A belief is sparse: parallel arrays (rows, states, weights) sorted by row, each row's weights summing to 1.
Belief = tuple[np.ndarray, np.ndarray, np.ndarray]
# Hypotheses this much less likely than the whole row are dropped, which keeps beliefs small. A dropped
# hypothesis would have to gain 1e44 on the others before the last digit of a probability moved;
# tests/test_lm_oracle.py checks the result against the recursion that drops nothing.
DROP_BELOW = 1e-60


class Automaton:
    """Exact next-character probabilities of a probabilistic automaton by the forward algorithm."""

    def __init__(self, n_states: int, start: int, src, char, dst, w, *, check: bool = True):
        self.n_states = int(n_states)
        self.start = int(start)
        self.src = np.asarray(src, dtype=np.int64)
        self.char = np.asarray(char, dtype=np.int64)
        self.dst = np.asarray(dst, dtype=np.int64)
        self.w = np.asarray(w, dtype=np.float64)
        # emission[i, c] = P(next char = c | state i)                       (N, 30)
        self.emission = np.zeros((self.n_states, VOCAB_SIZE))
        np.add.at(self.emission, (self.src, self.char), self.w)
        if check:
            out = self.emission.sum(axis=1)
            bad = np.nonzero(np.abs(out - 1.0) > 1e-9)[0]
            if len(bad):
                raise ValueError(f"state {bad[0]}: outgoing weights sum to {out[bad[0]]}, not 1")
            if np.any(self.char == PAD):
                raise ValueError("an automaton never emits <pad>")
        # Edges sorted by (src, char): those of (i, c) are _dst[_off[k]:_off[k+1]] with k = i*30 + c.
        order = np.lexsort((self.char, self.src))
        self._dst, self._w = self.dst[order], self.w[order]
        keys = self.src[order] * VOCAB_SIZE + self.char[order]
        self._off = np.searchsorted(keys, np.arange(self.n_states * VOCAB_SIZE + 1))
        self._visits: np.ndarray | None = None

    # ------------------------------------------------------------ exact statistics

    def sentence_visits(self, tol: float = 1e-15, max_iter: int = 200_000) -> np.ndarray:
        """Expected number of visits to each state during one sentence, v = e_start + Qᵀ v.

        Q holds the non-<eos> edges (a sentence ends on its <eos> edge). Solved by
        fixed-point iteration to `tol` relative change: deterministic arithmetic,
        no sampling. (N,) float64.
        """
        if self._visits is None:
            keep = self.char != EOS
            src, dst, w = self.src[keep], self.dst[keep], self.w[keep]
            e = np.zeros(self.n_states)
            e[self.start] = 1.0
            v = e.copy()
            for _ in range(max_iter):
                nxt = e + np.bincount(dst, weights=v[src] * w, minlength=self.n_states)
                change = np.abs(nxt - v).max() / nxt.max()
                v = nxt
                if change < tol:
                    break
            else:
                raise RuntimeError("sentence visit counts did not converge: can a sentence fail to end?")
            self._visits = v
        return self._visits

    def stationary(self) -> np.ndarray:
        """Stationary state distribution of the endless text, pi = v / sum(v). (N,)"""
        v = self.sentence_visits()
        return v / v.sum()

    def state_entropy(self) -> np.ndarray:
        """Entropy in nats of each state's outgoing (char, destination) choice. (N,)"""
        h = np.zeros(self.n_states)
        np.add.at(h, self.src, -self.w * np.log(self.w))
        return h

    def entropy_rate(self) -> float:
        """Exact entropy rate of the text in nats per character (<eos> counts as a character).

        h = sum_i pi_i H_i, the entropy of the state sequence per step. It equals the
        entropy rate of the characters when the text determines the path (each
        sentence has one path through the automaton), as for the toy source.
        """
        return float(self.stationary() @ self.state_entropy())

    def mean_sentence_length(self) -> float:
        """Expected characters per sentence including its closing <eos>."""
        return float(self.sentence_visits().sum())

    # ------------------------------------------------------------ forward algorithm

    def update(self, belief: Belief, chars: np.ndarray, eps: float) -> Belief:
        """Belief after reading chars (B,); the noisy-channel step of the module doc."""
        rows, states, w = belief
        c = chars[rows]
        lo = self._off[states * VOCAB_SIZE + c]
        n = self._off[states * VOCAB_SIZE + c + 1] - lo
        first = np.cumsum(n) - n
        edge = np.arange(n.sum()) - np.repeat(first, n) + np.repeat(lo, n)
        scale = np.where(c >= 2, 1.0 - eps, 1.0)
        stay = c >= 2 if eps > 0 else np.zeros(len(c), dtype=bool)
        all_rows = np.concatenate([np.repeat(rows, n), rows[stay]])
        all_states = np.concatenate([self._dst[edge], states[stay]])
        all_w = np.concatenate([np.repeat(w * scale, n) * self._w[edge], w[stay] * (eps / N_GENERATABLE)])
        keys, inverse = np.unique(all_rows * self.n_states + all_states, return_inverse=True)
        new_w = np.bincount(inverse, weights=all_w, minlength=len(keys))
        new_rows, new_states = keys // self.n_states, keys % self.n_states
        total = np.bincount(new_rows, weights=new_w, minlength=len(chars))
        # <eos> that the belief ruled out still synchronises: a new sentence starts.
        resync = np.nonzero((total <= 0) & (chars == EOS))[0]
        new_w = new_w / np.where(total > 0, total, 1.0)[new_rows]
        keep = new_w > DROP_BELOW
        new_rows, new_states, new_w = new_rows[keep], new_states[keep], new_w[keep]
        if len(resync):
            new_rows = np.concatenate([new_rows, resync])
            new_states = np.concatenate([new_states, np.full(len(resync), self.start)])
            new_w = np.concatenate([new_w, np.ones(len(resync))])
            order = np.argsort(new_rows, kind="stable")
            new_rows, new_states, new_w = new_rows[order], new_states[order], new_w[order]
        return new_rows, new_states, new_w

    def probs(self, belief: Belief, batch: int) -> np.ndarray:
        """Next-id distribution of each row given its belief, (B, 30); zeros for a row with no belief."""
        rows, states, w = belief
        out = np.zeros((batch, VOCAB_SIZE))
        if len(rows):
            starts = np.concatenate([[0], np.nonzero(np.diff(rows))[0] + 1])
            out[rows[starts]] = np.add.reduceat(self.emission[states] * w[:, None], starts, axis=0)
        return out

    def next_id_probs(self, ids: np.ndarray, eps: float = 0.0) -> np.ndarray:
        """P(next id | ids[:, :t+1]) for every t, by the forward algorithm. ids (B, T) -> (B, T, 30).

        eps is the noisy-channel rate used to update beliefs; the returned
        distributions are the source's own (unsmoothed) next-id probabilities
        given that belief. A row whose belief died (eps = 0 and impossible text)
        gets all-zero distributions from then on.
        """
        ids = np.asarray(ids)
        if ids.ndim != 2:
            raise ValueError(f"ids must be (B, T), got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE or np.any(ids == PAD)):
            raise ValueError("ids must be vocabulary ids 0..29 other than <pad> (1)")
        B, T = ids.shape
        out = np.zeros((B, T, VOCAB_SIZE))
        if T == 0:
            return out
        # Before the first id: rows that open with <eos> are at the start state once they read it;
        # the others start from the stationary distribution and read their first id.
        at_start = ids[:, 0] == EOS
        pi = self.stationary()
        support = np.nonzero(pi > 0)[0]
        mid = np.nonzero(~at_start)[0]
        rows = np.concatenate([np.nonzero(at_start)[0], np.repeat(mid, len(support))])
        states = np.concatenate([np.full(at_start.sum(), self.start), np.tile(support, len(mid))])
        w = np.concatenate([np.ones(at_start.sum()), np.tile(pi[support], len(mid))])
        order = np.argsort(rows, kind="stable")
        belief: Belief = (rows[order], states[order], w[order])
        if len(mid):
            first = np.where(at_start, EOS, ids[:, 0])
            reading = self.update(belief, first, eps)
            keep_start = at_start[belief[0]]
            moved = ~at_start[reading[0]]
            belief = tuple(np.concatenate([b[keep_start], r[moved]]) for b, r in zip(belief, reading))
            order = np.argsort(belief[0], kind="stable")
            belief = tuple(x[order] for x in belief)
        out[:, 0] = self.probs(belief, B)
        for t in range(1, T):
            belief = self.update(belief, ids[:, t], eps)
            out[:, t] = self.probs(belief, B)
        return out
