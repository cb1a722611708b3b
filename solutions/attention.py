"""Causal scaled dot-product self-attention, forward and backward by hand.

Shapes (B batch, T time steps, D input features, Dk key/query features,
Dv value features):

    W_k, W_q : (D, Dk)        W_v : (D, Dv)
    X        : (B, T, D)

Forward:

    K = X W_k,  Q = X W_q,  V = X W_v                       (B, T, Dk|Dk|Dv)
    A_w   = Q K^T                                            (B, T, T)  raw scores
    A_sig = softmax_row( causal( A_w / sqrt(Dk) ) )          (B, T, T)
    X_new = A_sig V                                          (B, T, Dv)

where causal(S)[b, i, j] = S[b, i, j] if j <= i else -inf, so position i
attends only to itself and earlier positions.

Backward, given dL/dX_new (B, T, Dv):

    dL/dA_sig = dL/dX_new V^T                                (B, T, T)
    dL/dA_w   = (1/sqrt(Dk)) * A_sig * (dL/dA_sig - rowsum(dL/dA_sig * A_sig))
    dL/dV     = A_sig^T dL/dX_new                            (B, T, Dv)
    dL/dK     = (dL/dA_w)^T Q                                (B, T, Dk)
    dL/dQ     = dL/dA_w K                                    (B, T, Dk)
    dL/dW_q   = sum_b X_b^T dL/dQ_b                          (D, Dk)
    dL/dW_k   = sum_b X_b^T dL/dK_b                          (D, Dk)
    dL/dW_v   = sum_b X_b^T dL/dV_b                          (D, Dv)
    dL/dX     = dL/dQ W_q^T + dL/dK W_k^T + dL/dV W_v^T      (B, T, D)

Masked entries of A_sig are exactly 0, so they pass no gradient and need no
special case in the backward pass. Use plain tensor operations only:
torch.autograd and torch.nn.functional.scaled_dot_product_attention are not
allowed, because the point is to derive the gradients yourself.
"""

import math

import torch


class Attention:
    """Single-head causal self-attention with hand-written gradients."""

    def __init__(self, weights_keys, weights_queries, weights_values):
        """Store the projection weights.

        weights_keys    : (D, Dk) tensor, W_k
        weights_queries : (D, Dk) tensor, W_q
        weights_values  : (D, Dv) tensor, W_v
        """
        self.W_k = weights_keys
        self.W_q = weights_queries
        self.W_v = weights_values

    def forward(self, X):
        """Return X_new = A_sig V for X of shape (B, T, D); X_new is (B, T, Dv).

        Stores X, Q, K, V, A_w (raw Q K^T, unscaled and unmasked) and A_sig
        (the causal row-softmax of A_w / sqrt(Dk)) on self for backward.
        """
        self.X = X

        # BEGIN SOLUTION task="1.1 forward: projections, scores, causal softmax, context"
        self.Q = X @ self.W_q  # (B, T, Dk)
        self.K = X @ self.W_k  # (B, T, Dk)
        self.V = X @ self.W_v  # (B, T, Dv)

        self.A_w = self.Q @ self.K.transpose(1, 2)  # (B, T, T)

        T = X.shape[1]
        d_k = self.W_k.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=X.device), diagonal=1)
        scores = (self.A_w / math.sqrt(d_k)).masked_fill(future, float("-inf"))  # (B, T, T)
        # Subtracting the row maximum keeps exp() finite for large scores; the
        # diagonal is never masked, so every row has a finite maximum.
        scores = scores - scores.max(dim=-1, keepdim=True).values
        weights = torch.exp(scores)
        self.A_sig = weights / weights.sum(dim=-1, keepdim=True)  # (B, T, T)

        X_new = self.A_sig @ self.V  # (B, T, Dv)
        # END SOLUTION
        return X_new

    def backward(self, dLdXnew):
        """Return dL/dX (B, T, D) given dL/dX_new (B, T, Dv).

        Stores dLdQ, dLdK, dLdV (shapes of Q, K, V) and dLdWq, dLdWk, dLdWv
        (shapes of the weights, summed over the batch) on self.
        """
        # BEGIN SOLUTION task="1.1 backward: gradients of V, scores, Q, K, weights and X"
        d_k = self.W_k.shape[1]

        dLdA_sig = dLdXnew @ self.V.transpose(1, 2)  # (B, T, T)
        # Softmax Jacobian applied row by row: a_i * (g_i - sum_j g_j a_j).
        row_dot = (dLdA_sig * self.A_sig).sum(dim=-1, keepdim=True)  # (B, T, 1)
        dLdA_w = self.A_sig * (dLdA_sig - row_dot) / math.sqrt(d_k)  # (B, T, T)

        self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew  # (B, T, Dv)
        self.dLdK = dLdA_w.transpose(1, 2) @ self.Q  # (B, T, Dk)
        self.dLdQ = dLdA_w @ self.K  # (B, T, Dk)

        X_t = self.X.transpose(1, 2)  # (B, D, T)
        self.dLdWq = (X_t @ self.dLdQ).sum(dim=0)  # (D, Dk)
        self.dLdWk = (X_t @ self.dLdK).sum(dim=0)  # (D, Dk)
        self.dLdWv = (X_t @ self.dLdV).sum(dim=0)  # (D, Dv)

        dLdX = (
            self.dLdQ @ self.W_q.T + self.dLdK @ self.W_k.T + self.dLdV @ self.W_v.T
        )  # (B, T, D)
        # END SOLUTION
        return dLdX
