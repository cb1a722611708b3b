"""`make mutants`, notebook 3's model, predict() and generate(): the oracle's references and calls for them.

Written from the notebook's documented contract alone, in float64 torch, never from the solution, the grader's
code or the case files' expected values: the model is embedding * sqrt(d_model) + the sinusoidal positions,
pre-norm blocks (causal F.scaled_dot_product_attention, a ReLU feed-forward), ln_f and the tied output layer;
predict and generate run on table-lookup models written here (logits[b, t] = table[key(inp[b, :t+1])], plus an
offset in training mode); samples are judged by the rubric's total-variation rule against a softmax renormalised
over the top-k set / nucleus computed here. mutants_notebooks.py uses it; a quantity's reference is a tensor
(compared there) or a function of the returned value giving '' (right) or how it fails.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

EOS, PAD, V = 0, 1, 30  # the notebook's <eos> and <pad> ids and vocabulary size
KINDS = ("last", "prefix_sum", "position")  # a case's <key>_kind code
DROPOUT = 0.1  # the ModelConfig's dropouts: eval mode must switch them off
DROPPED_ROWS_SD = 6.0  # the rubric's rule for embedding_dropout's count of dropped rows
MAX_TV = 0.05  # rubric.toml's sampling_max_tv


def _t(x: dict, k: str) -> torch.Tensor:
    return torch.from_numpy(np.array(x[k]))


def keys(kind: int, ids: torch.Tensor, rows: int) -> torch.Tensor:
    ids = ids.long()
    if KINDS[kind] == "last":
        return ids % rows
    if KINDS[kind] == "prefix_sum":
        return ids.cumsum(dim=1) % rows
    return (torch.arange(ids.shape[1]) % rows).expand(ids.shape)


class TableModel(torch.nn.Module):
    """The argument model:<key> of a call: a table lookup that is an nn.Module (eval(), train(), no_grad work)."""

    def __init__(self, table, kind: int, offset):
        super().__init__()
        self.table = torch.nn.Parameter(torch.as_tensor(np.array(table), dtype=torch.float32), requires_grad=False)
        self.kind, self.offset = kind, torch.as_tensor(np.array(offset), dtype=torch.float32)

    def forward(self, inp):
        out = self.table[keys(self.kind, torch.as_tensor(inp), self.table.shape[0])]
        return out + self.offset if self.training else out


def argument(kind: str, key: str, x: dict):
    if kind == "model":
        torch.manual_seed(int(x["seed"]))
        return TableModel(x[f"{key}_table"], int(x[f"{key}_kind"]), x[f"{key}_train_offset"]).train()
    return float(x[key]) if kind == "float" else bool(x[key])


def mode_after(function):
    """The function called on its model in training mode, then in eval mode: model.training after each call."""
    def run(model, *args, **kwargs):
        after = []
        for training in (True, False):
            model.train(training)
            function(model, *args, **kwargs)
            after.append(bool(model.training))
        return torch.tensor(after)
    return run


def language_model(namespace: dict, x: dict):
    """The notebook's model built on the case's sizes, loaded with its weights, in eval mode, on both inputs; and
    whether its output layer's weight is the embedding's."""
    d_model, n_heads, n_layers, d_ff, max_len = (int(v) for v in x["lm_cfg"])
    cfg = namespace["ModelConfig"](vocab_size=V, max_len=max_len, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                                   d_ff=d_ff, dropout=DROPOUT, emb_dropout=DROPOUT)
    model = namespace["CausalLanguageModel"](cfg)
    tied = getattr(getattr(model, "fc", None), "weight", None) is getattr(getattr(model, "token_embedding", None),
                                                                        "weight", 0)
    model.load_state_dict({k.removeprefix("lmw."): _t(x, k) for k in x if k.startswith("lmw.")}, strict=False)
    model.eval()
    with torch.no_grad():
        return model(_t(x, "lm_inp")), model(_t(x, "lm_inp_changed")), np.asarray(bool(tied))


# --- the references -------------------------------------------------------------------------------------------

def model_logits(x: dict, inp: torch.Tensor) -> torch.Tensor:
    C, H, L = (int(v) for v in x["lm_cfg"][:3])
    w = {k.removeprefix("lmw."): _t(x, k).double() for k in x if k.startswith("lmw.")}
    T = inp.shape[1]
    angle = torch.arange(T, dtype=torch.float64)[:, None] / 10000.0 ** (torch.arange(0, C, 2, dtype=torch.float64) / C)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, C)  # sin on even channels, cos on odd ones
    h = w["token_embedding.weight"][inp.long()] * math.sqrt(C) + pe

    def norm(v, name):
        return F.layer_norm(v, (C,), w[f"{name}.weight"], w[f"{name}.bias"])

    for layer in range(L):
        p = f"layers.{layer}."
        q, k, v = F.linear(norm(h, p + "ln1"), w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"]).split(C, dim=-1)
        q, k, v = (t.reshape(*t.shape[:2], H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(h.shape)
        h = h + F.linear(y, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"])
        f = F.relu(F.linear(norm(h, p + "ln2"), w[p + "ffn.net.0.weight"], w[p + "ffn.net.0.bias"]))
        h = h + F.linear(f, w[p + "ffn.net.2.weight"], w[p + "ffn.net.2.bias"])
    return F.linear(norm(h, "ln_f"), w["token_embedding.weight"])


def _eval_logits(x: dict, key: str, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, V) float64: model:<key>'s logits in eval mode."""
    table = _t(x, f"{key}_table").double()
    return table[keys(int(x[f"{key}_kind"]), ids, table.shape[0])]


def _allowed(logits: torch.Tensor) -> torch.Tensor:
    out = logits.clone()
    out[..., [EOS, PAD]] = -math.inf
    return out


def _rolled(x: dict, allowed: bool):
    """(the ids of `steps` greedy steps on model:m from inp, the logits of each step); `allowed`: <eos>/<pad> never."""
    ids, logits = _t(x, "inp").long(), []
    for _ in range(int(x["steps"])):
        step = _eval_logits(x, "m", ids)[:, -1]
        logits.append(step)
        ids = torch.cat([ids, (_allowed(step) if allowed else step).argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, _t(x, "inp").shape[1]:], torch.stack(logits, dim=1)


def kept(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """(..., V) bool: the allowed ids at least as high as the k-th best allowed logit (ties kept), or those of the
    nucleus: ranked by probability, an id is kept while the mass ranked above it is below top_p."""
    logits = _allowed(logits)
    if top_k is None and top_p is None:
        return logits > -math.inf
    if top_k is not None:
        return logits >= logits.sort(dim=-1, descending=True).values[..., top_k - 1: top_k]
    probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
    keep = (probs.cumsum(dim=-1) - probs) < top_p
    return torch.zeros_like(keep).scatter(-1, order, keep) & (logits > -math.inf)


def _ids(value, shape) -> torch.Tensor | None:
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype == torch.bool \
            or tuple(value.shape) != tuple(shape):
        return None
    return value.long()


def _inside(x: dict, rule):
    """Each id of a (B, steps) answer in the set `rule` keeps from its step's logits (the context: the prompt and
    the answer's earlier ids)."""
    def check(value) -> str:
        inp = _t(x, "inp").long()
        ids = _ids(value, (inp.shape[0], int(x["steps"])))
        if ids is None:
            return "wrong"
        logits = _eval_logits(x, "m", torch.cat([inp, ids[:, :-1]], dim=1))[:, inp.shape[1] - 1:]
        return "" if rule(logits).gather(-1, ids[..., None]).all() else "wrong"
    return check


def _sampled(x: dict, key: str, temperature: float, top_k=None, top_p=None):
    """One step sampled for each of the dist_inp rows: none outside the kept set, frequencies within MAX_TV (total
    variation) of the softmax of logits / temperature renormalised over it."""
    def check(value) -> str:
        inp = _t(x, "dist_inp").long()
        ids = _ids(value, (inp.shape[0], 1))
        if ids is None or ((ids < 0) | (ids >= V)).any():
            return "wrong"
        tempered = _eval_logits(x, key, inp)[:, -1] / temperature
        keep = kept(tempered, top_k, top_p)
        if not keep.gather(-1, ids).all():
            return "wrong"
        want = tempered.masked_fill(~keep, -math.inf).softmax(dim=-1).mean(dim=0)
        freq = torch.bincount(ids[:, 0], minlength=V).double() / ids.shape[0]
        return "" if 0.5 * float((freq - want).abs().sum()) <= MAX_TV else "wrong"
    return check


def _row_dropout(x: dict):
    """Training: every row of the (V, C) weight all zero or the weight's row / (1-p); the count of zero rows within
    DROPPED_ROWS_SD binomial standard deviations of p * rows."""
    def check(value) -> str:
        w, p = _t(x, "ed_weight").double(), float(x["ed_p"])
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point or value.shape != w.shape:
            return "wrong"
        got, scaled = value.detach().double(), w / (1 - p)
        dropped = (got == 0).all(dim=1)
        right = ((got - scaled).abs() <= 1e-5 * max(1.0, float(scaled.abs().max())) + 1e-4 * scaled.abs()).all(dim=1)
        n = int(dropped.sum())
        ok = bool((dropped | right).all()) and abs(n - p * len(w)) <= DROPPED_ROWS_SD * math.sqrt(len(w) * p * (1 - p))
        return "" if ok else "wrong"
    return check


def reference_prediction(x: dict) -> dict:
    """model_building's and predict_function's quantities."""
    return {
        "model_logits": model_logits(x, _t(x, "lm_inp")),
        "model_causal": model_logits(x, _t(x, "lm_inp_changed")),
        "weight_tied": torch.tensor(True),
        "emb_dropout_eval": _t(x, "ed_weight").double(),
        "emb_dropout_train": _row_dropout(x),
        "predict_logits": _rolled(x, allowed=False)[1],
        "predict_mode": torch.tensor([True, False]),
    }


def reference_generation(x: dict) -> dict:
    greedy = _rolled(x, allowed=True)[0]
    t, k, p = float(x["dist_temperature"]), int(x["top_k"]), float(x["dist_top_p"])
    return {
        **{q: greedy for q in ("greedy_ids", "zero_temperature_ids", "top_k1_ids", "top_p_tiny_ids", "cold_ids")},
        "generate_mode": torch.tensor([True, False]),
        "top_k_ids": _inside(x, lambda logits: kept(logits, top_k=k)),
        "top_p_ids": _inside(x, lambda logits: kept(logits, top_p=float(x["top_p"]))),
        "sampled_ids": _sampled(x, "d", t),
        "sampled_top_k_ids": _sampled(x, "d", t, top_k=k),
        "sampled_top_p_ids": _sampled(x, "d", t, top_p=p),
        "sampled_top_k_tie_ids": _sampled(x, "t", float(x["unit_temperature"]), top_k=int(x["tie_k"])),
        "sampled_top_p_edge_ids": _sampled(x, "e", float(x["unit_temperature"]), top_p=float(x["edge_p"])),
    }
