"""Causal self-attention whose scale is a float32 tensor: torch.tensor(Dk).float().sqrt().

Dividing a float64 tensor by a 0-dimensional float32 tensor keeps float64, so nothing
fails, but sqrt(Dk) has been rounded to float32 first: on float64 inputs the results
are right to float32 precision only. Everything else is the reference computation.
"""

import torch


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values
        self.scale = torch.tensor(weights_keys.shape[1]).float().sqrt()

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        self.A_w = self.Q @ self.K.transpose(1, 2)
        T = X.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = (self.A_w / self.scale).masked_fill(future, float("-inf"))
        e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        self.A_sig = e / e.sum(dim=-1, keepdim=True)
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        dLdA_sig = dLdXnew @ self.V.transpose(1, 2)
        dLdA_w = self.A_sig * (dLdA_sig - (dLdA_sig * self.A_sig).sum(dim=-1, keepdim=True)) / self.scale
        self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew
        self.dLdQ = dLdA_w @ self.K
        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q
        X_t = self.X.transpose(1, 2)
        self.dLdWq = (X_t @ self.dLdQ).sum(dim=0)
        self.dLdWk = (X_t @ self.dLdK).sum(dim=0)
        self.dLdWv = (X_t @ self.dLdV).sum(dim=0)
        return self.dLdQ @ self.W_q.T + self.dLdK @ self.W_k.T + self.dLdV @ self.W_v.T
