"""Causal self-attention whose softmax helper sums each row with a float32 column of ones and skips the max
subtraction.

On float32 inputs it is right wherever exp() does not overflow, and NaN where the
scores are large; on float64 inputs the product of the float64 exponentials with the
float32 ones raises (the two dtypes do not multiply), after Q, K, V and A_w are stored.
The gradients are hand-derived and right.
"""

import math

import torch


class Softmax:
    def forward(self, Z):
        e = torch.exp(Z)
        return e / (e @ torch.ones(Z.shape[-1], 1))


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values
        self.softmax = Softmax()

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        self.A_w = self.Q @ self.K.transpose(1, 2)
        T = X.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        self.A_sig = self.softmax.forward((self.A_w / math.sqrt(self.W_k.shape[1])).masked_fill(future, float("-inf")))
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        dLdA_sig = dLdXnew @ self.V.transpose(1, 2)
        row_dot = (dLdA_sig * self.A_sig).sum(dim=-1, keepdim=True)
        dLdA_w = self.A_sig * (dLdA_sig - row_dot) / math.sqrt(self.W_k.shape[1])
        self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew
        self.dLdQ = dLdA_w @ self.K
        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q
        X_t = self.X.transpose(1, 2)
        self.dLdWq, self.dLdWk, self.dLdWv = ((X_t @ g).sum(dim=0) for g in (self.dLdQ, self.dLdK, self.dLdV))
        return self.dLdQ @ self.W_q.T + self.dLdK @ self.W_k.T + self.dLdV @ self.W_v.T
