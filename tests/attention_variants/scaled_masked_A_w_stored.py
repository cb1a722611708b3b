"""Causal self-attention that stores A_w already scaled by 1/sqrt(Dk) and masked (-inf above the diagonal).

The contract asks for the raw Q K^T in A_w; the softmax, the output and every
gradient are computed correctly from it. At T = 1 nothing is masked, so the same
A_w is finite there: the raw scores times 1/sqrt(Dk), the slip the A_w lines charge.
"""

import math

import torch


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        T = X.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = self.Q @ self.K.transpose(1, 2) / math.sqrt(self.W_k.shape[1])
        self.A_w = scores.masked_fill(future, float("-inf"))
        e = torch.exp(self.A_w - self.A_w.max(dim=-1, keepdim=True).values)
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
        X_t = self.X.transpose(1, 2)
        self.dLdWq = (X_t @ self.dLdQ).sum(dim=0)
        self.dLdWk = (X_t @ self.dLdK).sum(dim=0)
        self.dLdWv = (X_t @ self.dLdV).sum(dim=0)
        return self.dLdQ @ self.W_q.T + self.dLdK @ self.W_k.T + self.dLdV @ self.W_v.T
