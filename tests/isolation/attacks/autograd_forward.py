# The forward the autograd attacks share; each brings its own _backward(att, dLdXnew) (and imports
# math and torch) before this.

def _attn(Q, K, V):
    T, dk = Q.shape[1], K.shape[-1]
    A_w = Q @ K.transpose(1, 2)
    fut = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return A_w, torch.softmax((A_w / math.sqrt(dk)).masked_fill(fut, float("-inf")), dim=-1)


class Attention:
    def __init__(self, wk, wq, wv):
        self.W_k, self.W_q, self.W_v = wk, wq, wv

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        self.A_w, self.A_sig = _attn(self.Q, self.K, self.V)
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        return _backward(self, dLdXnew)
