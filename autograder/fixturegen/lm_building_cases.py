"""Inputs and expected values for notebook 3's building blocks, one set per lm_functions case.

    collate(pieces)                     expected_collate_inputs, expected_collate_targets
    lm_loss(logits, targets)            expected_lm_loss
    CausalSelfAttention, fixed weights  expected_attention_out, expected_attention_causal
    CausalLanguageModel, fixed weights  expected_model_logits, expected_model_causal, expected_weight_tied
    embedding_dropout(weight, p, ...)   checked by its properties in the grader (whole rows, 1/(1-p), identity)

The expected values come from the float64 numpy implementation below, written from
the notebook's markdown (the architecture it asks for), never from the solution
notebook's or the reference model's code. The usual slips' results (without the
1/sqrt(hs) scaling, a loss over the <pad> positions...) come from the same code
(lm_slips.py), so the grader names a slip only when the outputs are exactly that.
`*_changed` inputs equal the originals
before `*_position` and differ after it: a causal model's outputs before that
position must not move. Weights are drawn at a scale where attention is far from
uniform, so a missing mask changes the outputs by much more than float32 rounding.
"""

from __future__ import annotations

import math

import numpy as np

from gradelib.lm.vocab import PAD, VOCAB_SIZE

from . import lm_slips

LN_EPS = 1e-5  # nn.LayerNorm's default, which the notebook's model uses
ED_ROWS, ED_COLS = 1000, 8  # embedding_dropout's test matrix: enough rows to count the dropped ones


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y if b is None else y + b


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + LN_EPS) * w + b


def causal_attention(x: np.ndarray, w: dict[str, np.ndarray], n_heads: int, slip: str = "") -> np.ndarray:
    """(B, T, C) -> (B, T, C): per head softmax(Q K^T / sqrt(hs) + causal mask) V, heads side by side, projected;
    or under a `slip` (lm_slips.py): unscaled, sqrt_c, times_sqrt_hs, query_axis, no_proj."""
    B, T, C = x.shape
    hs = C // n_heads
    qkv = linear(x, w["qkv.weight"], w["qkv.bias"])
    q, k, v = qkv[..., :C], qkv[..., C : 2 * C], qkv[..., 2 * C :]
    later = np.triu(np.ones((T, T), dtype=bool), 1)
    scale = {"unscaled": 1.0, "sqrt_c": 1 / math.sqrt(C), "times_sqrt_hs": math.sqrt(hs)}.get(slip, 1 / math.sqrt(hs))
    axis = -2 if slip == "query_axis" else -1
    heads = []
    for h in range(n_heads):
        s = slice(h * hs, (h + 1) * hs)
        scores = q[..., s] @ np.swapaxes(k[..., s], 1, 2) * scale  # (B, T, T)
        scores = np.where(later, -np.inf, scores)
        weights = np.exp(scores - scores.max(axis, keepdims=True))
        heads.append(weights / weights.sum(axis, keepdims=True) @ v[..., s])
    y = np.concatenate(heads, -1)
    return y if slip == "no_proj" else linear(y, w["proj.weight"], w["proj.bias"])


def sinusoid(T: int, C: int) -> np.ndarray:
    t = np.arange(T)[:, None]
    freq = np.exp(np.arange(0, C, 2) * (-math.log(10000.0) / C))
    pe = np.zeros((T, C))
    pe[:, 0::2] = np.sin(t * freq)
    pe[:, 1::2] = np.cos(t * freq)
    return pe


def lm_forward(
    ids: np.ndarray, state: dict[str, np.ndarray], n_heads: int, n_layers: int, slip: str = ""
) -> np.ndarray:
    """Evaluation-mode logits (B, T, 30): sqrt(C)-scaled embedding + positions, pre-norm layers, LN, tied output;
    or under a `slip` (lm_slips.py): unscaled (its attention's), no_embedding_scale, no_positions, no_final_norm."""
    emb = state["token_embedding.weight"]
    C = emb.shape[1]
    x = emb[ids] * (1.0 if slip == "no_embedding_scale" else math.sqrt(C))
    x = x if slip == "no_positions" else x + sinusoid(ids.shape[1], C)
    for i in range(n_layers):
        p = f"layers.{i}."
        sub = {k[len(p) + 5 :]: v for k, v in state.items() if k.startswith(p + "attn.")}
        x = x + causal_attention(layer_norm(x, state[p + "ln1.weight"], state[p + "ln1.bias"]), sub, n_heads,
                                 "unscaled" if slip == "unscaled" else "")
        h = layer_norm(x, state[p + "ln2.weight"], state[p + "ln2.bias"])
        h = np.maximum(linear(h, state[p + "ffn.net.0.weight"], state[p + "ffn.net.0.bias"]), 0.0)
        x = x + linear(h, state[p + "ffn.net.2.weight"], state[p + "ffn.net.2.bias"])
    return (x if slip == "no_final_norm" else layer_norm(x, state["ln_f.weight"], state["ln_f.bias"])) @ emb.T


def collate(pieces: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    T = max(len(p) for p in pieces) - 1
    inputs = np.full((len(pieces), T), PAD, dtype=np.int64)
    targets = np.full((len(pieces), T), PAD, dtype=np.int64)
    for b, p in enumerate(pieces):
        inputs[b, : len(p) - 1], targets[b, : len(p) - 1] = p[:-1], p[1:]
    return inputs, targets


def lm_loss(logits: np.ndarray, targets: np.ndarray) -> float:
    z = logits.astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    real = targets != PAD
    return float(-np.take_along_axis(logp, targets[..., None], -1)[..., 0][real].mean())


def _linear_weights(rng, prefix: str, n_in: int, n_out: int) -> dict[str, np.ndarray]:
    return {
        f"{prefix}weight": rng.standard_normal((n_out, n_in)) / math.sqrt(n_in),
        f"{prefix}bias": rng.standard_normal(n_out) * 0.1,
    }


def _ln_weights(rng, prefix: str, C: int) -> dict[str, np.ndarray]:
    return {f"{prefix}weight": 1.0 + 0.1 * rng.standard_normal(C), f"{prefix}bias": 0.1 * rng.standard_normal(C)}


def _attention_weights(rng, prefix: str, C: int) -> dict[str, np.ndarray]:
    # Queries and keys twice the usual scale: sharp attention, so what a head may see matters.
    w = _linear_weights(rng, prefix + "qkv.", C, 3 * C)
    w[prefix + "qkv.weight"][: 2 * C] *= 2.0
    return {**w, **_linear_weights(rng, prefix + "proj.", C, C)}


def _f32(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float32) for k, v in d.items()}


def _collate_case(rng: np.random.Generator, out: dict[str, np.ndarray]) -> dict:
    """collate: pieces of the stream (never <pad>), of different lengths, so some rows are padded; its slips."""
    lengths = rng.choice(np.arange(2, 12), size=int(rng.integers(3, 6)), replace=False)
    pieces = [rng.integers(0, VOCAB_SIZE - 1, size=n) for n in lengths]
    pieces = [np.where(p == PAD, VOCAB_SIZE - 1, p).astype(np.int64) for p in pieces]
    out["pieces_flat"] = np.concatenate(pieces)
    out["pieces_lengths"] = lengths.astype(np.int64)
    out["expected_collate_inputs"], out["expected_collate_targets"] = collate(pieces)
    return lm_slips.collate(pieces)


def _loss_case(rng: np.random.Generator, out: dict[str, np.ndarray], slips: dict) -> None:
    """lm_loss: padded targets on the right of some rows, as collate makes them."""
    B, T = int(rng.integers(2, 5)), int(rng.integers(4, 9))
    logits = (rng.standard_normal((B, T, VOCAB_SIZE)) * 2.0).astype(np.float32)
    targets = rng.integers(2, VOCAB_SIZE, size=(B, T))
    for b in range(B):
        targets[b, int(rng.integers(1, T)) if b % 2 == 0 else T :] = PAD
    out["loss_logits"], out["loss_targets"] = logits, targets.astype(np.int64)
    out["expected_lm_loss"] = np.asarray(lm_loss(logits, targets), dtype=np.float32)
    slips.update(lm_slips.lm_loss(logits, targets))


def _attention_case(rng: np.random.Generator, out: dict[str, np.ndarray], slips: dict, d_model: int,
                    n_heads: int) -> None:
    """CausalSelfAttention on fixed weights."""
    B, T = 3, int(rng.integers(5, 9))
    position = T // 2
    att = _f32(_attention_weights(rng, "", d_model))
    x = rng.standard_normal((B, T, d_model)).astype(np.float32)
    x_changed = x.copy()
    x_changed[:, position:] = rng.standard_normal((B, T - position, d_model))
    out.update({f"attw.{k}": v for k, v in att.items()})
    out["att_cfg"] = np.array([d_model, n_heads, 16], dtype=np.int64)  # d_model, n_heads, max_len
    out["att_x"], out["att_x_changed"], out["att_position"] = x, x_changed, np.int64(position)
    w64 = {k: v.astype(np.float64) for k, v in att.items()}
    out["expected_attention_out"] = causal_attention(x.astype(np.float64), w64, n_heads).astype(np.float32)
    out["expected_attention_causal"] = causal_attention(x_changed.astype(np.float64), w64, n_heads).astype(np.float32)
    slips["attention_out"] = {slip: causal_attention(x.astype(np.float64), w64, n_heads, slip)
                              for slip in ("unscaled", "sqrt_c", "times_sqrt_hs", "query_axis", "no_proj")}


def _model_case(rng: np.random.Generator, out: dict[str, np.ndarray], slips: dict, d_model: int, n_heads: int,
                n_layers: int, d_ff: int) -> None:
    """CausalLanguageModel on fixed weights (fc.weight is not given: it must be the embedding's)."""
    state = {"token_embedding.weight": rng.standard_normal((VOCAB_SIZE, d_model)) / math.sqrt(d_model)}
    for i in range(n_layers):
        p = f"layers.{i}."
        state.update(_ln_weights(rng, p + "ln1.", d_model))
        state.update(_attention_weights(rng, p + "attn.", d_model))
        state.update(_ln_weights(rng, p + "ln2.", d_model))
        state.update(_linear_weights(rng, p + "ffn.net.0.", d_model, d_ff))
        state.update(_linear_weights(rng, p + "ffn.net.2.", d_ff, d_model))
    state.update(_ln_weights(rng, "ln_f.", d_model))
    state = _f32(state)
    B, T = 3, int(rng.integers(6, 11))
    position = T // 2
    inp = rng.integers(2, VOCAB_SIZE, size=(B, T))
    inp[:, 0] = 0
    changed = inp.copy()
    changed[:, position:] = (inp[:, position:] - 2 + rng.integers(1, VOCAB_SIZE - 2, size=(B, T - position))) % (
        VOCAB_SIZE - 2
    ) + 2
    out.update({f"lmw.{k}": v for k, v in state.items()})
    out["lm_cfg"] = np.array([d_model, n_heads, n_layers, d_ff, 32], dtype=np.int64)  # ..., max_len
    out["lm_inp"], out["lm_inp_changed"], out["lm_position"] = (
        inp.astype(np.int64),
        changed.astype(np.int64),
        np.int64(position),
    )
    s64 = {k: v.astype(np.float64) for k, v in state.items()}
    out["expected_model_logits"] = lm_forward(inp, s64, n_heads, n_layers).astype(np.float32)
    out["expected_model_causal"] = lm_forward(changed, s64, n_heads, n_layers).astype(np.float32)
    slips["model_logits"] = {slip: lm_forward(inp, s64, n_heads, n_layers, slip)
                             for slip in ("unscaled", "no_embedding_scale", "no_positions", "no_final_norm")}
    out["expected_weight_tied"] = np.asarray(True)


def make(
    rng: np.random.Generator, d_model: int, n_heads: int, n_layers: int, d_ff: int, p_drop: float
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Every building-block input and expected value of one case, and the usual slips' values (for lm_slips.table)."""
    out: dict[str, np.ndarray] = {}
    slips = _collate_case(rng, out)
    _loss_case(rng, out, slips)
    _attention_case(rng, out, slips, d_model, n_heads)
    _model_case(rng, out, slips, d_model, n_heads, n_layers, d_ff)

    # embedding_dropout: no zero entry, so a dropped row is told apart from a kept one.
    magnitude = rng.uniform(0.5, 1.5, size=(ED_ROWS, ED_COLS))
    out["ed_weight"] = (magnitude * rng.choice([-1.0, 1.0], size=magnitude.shape)).astype(np.float32)
    out["ed_p"] = np.float64(p_drop)
    out["true"], out["false"] = np.bool_(True), np.bool_(False)
    return out, slips
