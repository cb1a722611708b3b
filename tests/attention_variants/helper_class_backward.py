"""Causal self-attention with a softmax helper class of the file's own, as many students write it.

The helper keeps what its forward computed and has a hand-written backward; Attention
holds one on self and calls self.softmax.backward(...) in its own backward. Nothing
here is autograd: every gradient is written out.
"""

import math

import torch


class CausalSoftmax:
    """Row softmax over the last axis with -inf above the diagonal, and its vector-Jacobian product."""

    def forward(self, scores):
        T = scores.shape[-1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        scores = scores - scores.max(dim=-1, keepdim=True).values
        e = torch.exp(scores)
        self.A = e / e.sum(dim=-1, keepdim=True)
        return self.A

    def backward(self, dLdA):
        return self.A * (dLdA - (dLdA * self.A).sum(dim=-1, keepdim=True))


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values
        self.softmax = CausalSoftmax()

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        self.A_w = self.Q @ self.K.transpose(1, 2)
        self.A_sig = self.softmax.forward(self.A_w / math.sqrt(self.W_k.shape[1]))
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        dLdA_w = self.softmax.backward(dLdXnew @ self.V.transpose(1, 2)) / math.sqrt(self.W_k.shape[1])
        self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew
        self.dLdQ = dLdA_w @ self.K
        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q
        X_t = self.X.transpose(1, 2)
        self.dLdWq = (X_t @ self.dLdQ).sum(dim=0)
        self.dLdWk = (X_t @ self.dLdK).sum(dim=0)
        self.dLdWv = (X_t @ self.dLdV).sum(dim=0)
        return self.dLdQ @ self.W_q.T + self.dLdK @ self.W_k.T + self.dLdV @ self.W_v.T
