"""Causal self-attention built on a float32-only helper, with a hand-written backward held on self.

The Linear helper keeps its weight as float32 (as a course's own small library might):
on float32 inputs everything is right, on float64 inputs `X @ W` raises (the two
dtypes do not multiply), so forward fails there and backward cannot be checked.
"""

import math

import torch


class Linear:
    def __init__(self, W):
        self.W = W.float()

    def forward(self, X):
        self.X = X
        return X @ self.W

    def backward(self, dLdY):
        self.dLdW = (self.X.transpose(1, 2) @ dLdY).sum(dim=0)
        return dLdY @ self.W.T


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values
        self.q_proj, self.k_proj, self.v_proj = Linear(weights_queries), Linear(weights_keys), Linear(weights_values)

    def forward(self, X):
        self.Q, self.K, self.V = self.q_proj.forward(X), self.k_proj.forward(X), self.v_proj.forward(X)
        self.A_w = self.Q @ self.K.transpose(1, 2)
        T = X.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = (self.A_w / math.sqrt(self.W_k.shape[1])).masked_fill(future, float("-inf"))
        e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        self.A_sig = e / e.sum(dim=-1, keepdim=True)
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        dLdA_sig = dLdXnew @ self.V.transpose(1, 2)
        dLdA_w = (
            self.A_sig * (dLdA_sig - (dLdA_sig * self.A_sig).sum(dim=-1, keepdim=True)) / math.sqrt(self.W_k.shape[1])
        )
        self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew
        self.dLdQ = dLdA_w @ self.K
        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q
        dLdX = self.q_proj.backward(self.dLdQ) + self.k_proj.backward(self.dLdK) + self.v_proj.backward(self.dLdV)
        self.dLdWq, self.dLdWk, self.dLdWv = self.q_proj.dLdW, self.k_proj.dLdW, self.v_proj.dLdW
        return dLdX
