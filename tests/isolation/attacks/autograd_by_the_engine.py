# The C++ engine behind the autograd functions, called directly, every name spelled so no source
# check sees it. Followed by autograd_forward.py.

import math
import torch

_AG = getattr(torch, "auto" + "grad")
_ENGINE = _AG.variable.Variable._execution_engine  # what the tripwired functions call internally
_RG = "_darg_seriuqer"[::-1]  # "requires_grad_"


def _leaf(t):
    return getattr(t.detach().clone(), _RG)(True)


def _vjp(out, inputs, g):  # tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable, accumulate_grad
    return _ENGINE.run_backward((out,), (g,), False, False, tuple(inputs), True, False)


def _backward(att, dLdXnew):
    Q, K, V = _leaf(att.Q), _leaf(att.K), _leaf(att.V)
    att.dLdQ, att.dLdK, att.dLdV = _vjp(_attn(Q, K, V)[1] @ V, (Q, K, V), dLdXnew)
    X, Wq, Wk, Wv = _leaf(att.X), _leaf(att.W_q), _leaf(att.W_k), _leaf(att.W_v)
    dX, att.dLdWq, att.dLdWk, att.dLdWv = _vjp(_attn(X @ Wq, X @ Wk, X @ Wv)[1] @ (X @ Wv), (X, Wq, Wk, Wv), dLdXnew)
    return dX
