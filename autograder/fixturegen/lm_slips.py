"""The words of notebook 3's checks, with each lm_functions case: every quantity's hint, and the usual slips' results.

For notebook 3's functions, the usual slips (found by `make mutants` and in students' notebooks) are computed here
on each case's inputs, in numpy, from the same independent implementations as the expected values
(lm_building_cases.py, fixed_models.py). A case holds, for a slip `name` of quantity `q`:

    expected_<q>__<name>   what `q` is under the slip (never reaching the submission's process: expected_*)
    expected_slips         JSON text: rows of q, name, what it is (said as "'<q>' <what>."), its fix (the hint)
    expected_hints         JSON text: quantity -> the hint its failures end with (HINTS)

A slip whose result equals the right one on a case is left out there (it cannot be told apart). The grader names
a slip only where the notebook gave exactly its value.
"""

from __future__ import annotations

import json

import numpy as np

from gradelib.lm import fixed_models
from gradelib.lm.vocab import EOS, PAD

_SCALE = "in CausalSelfAttention, divide the scores q @ k^T by sqrt(hs), hs = C // n_heads the head size, before the "
# name -> (what the value is, its fix)
SAID = {
    "eos_padding": ("is padded with <eos> (id 0) where <pad> (id 1) belongs", "fill with PAD: torch.full(..., PAD)."),
    "unshifted": ("holds each piece's first n_b ids, as the inputs do: the targets are not shifted by one",
                  "targets[b, :n_b] = piece_b[1:], the id after each input."),
    "swapped": ("holds the other tensor: inputs and targets are swapped",
                "inputs = piece[:-1] (what the model reads), targets = piece[1:] (what it must predict)."),
    "left_padded": ("is padded on the left", "put each piece at the start of its row and <pad> after it."),
    "pad_mean": ("is the mean over every position, the <pad> targets included",
                 "pass ignore_index=PAD to F.cross_entropy: the mean is over the targets that are not PAD."),
    "summed": ("is the sum over the targets that are not PAD, not their mean",
               "keep F.cross_entropy's default reduction='mean' (with ignore_index=PAD)."),
    "softmax_first": ("is the cross-entropy of softmax(logits): the softmax is taken twice",
                      "give F.cross_entropy the raw logits; it takes the log-softmax itself."),
    "no_log_softmax": ("is the mean of -logits[target]: F.nll_loss was given raw logits",
                       "use F.cross_entropy on the logits (or F.nll_loss of F.log_softmax(logits, -1))."),
    "unscaled": ("is what the model gives without the 1/sqrt(hs) scaling of the attention scores", _SCALE + "softmax."),
    "sqrt_c": ("is what it gives with the scores divided by sqrt(C), C = d_model, instead of sqrt(hs)",
               _SCALE + "softmax: each head's q and k have hs channels, not C."),
    "times_sqrt_hs": ("is what it gives with the scores multiplied by sqrt(hs) where they are divided by it",
                      _SCALE + "softmax."),
    "query_axis": ("is what it gives with the softmax over the queries (dim=-2) instead of the keys",
                   "take F.softmax(att, dim=-1): each query's weights over the keys sum to 1."),
    "no_proj": ("is the heads' output before self.proj", "finish with self.resid_drop(self.proj(y))."),
    "no_embedding_scale": ("is what the model gives without multiplying the embeddings by sqrt(d_model)",
                           "x = F.embedding(inp, weight) * math.sqrt(d_model), then the positions."),
    "no_positions": ("is what the model gives without the positional encoding",
                     "add self.pos_encoder(x) after the scaled embedding."),
    "no_final_norm": ("is what the model gives without the final LayerNorm", "return self.fc(self.ln_f(x))."),
    "probabilities": ("holds probabilities (the softmax of the logits), not the raw logits",
                      "keep model(x)[:, -1] as it is: no softmax."),
    "log_probabilities": ("holds log-probabilities (log_softmax of the logits), not the raw logits",
                          "keep model(x)[:, -1] as it is: no log_softmax."),
    "prompt_only": ("is every step predicted from the prompt alone: the picks are not appended",
                    "after each step, x = torch.cat([x, pick], dim=1), and run the model on that."),
    "last_id_only": ("is each step predicted from the last id alone",
                     "run the model on the whole sequence so far (prompt and picks) and take its last position."),
}


# The hint a failure of each quantity ends with (the grader adds it to its own words).
HINTS = {
    "predict_logits": "step t is model(inp + greedy picks of steps < t)[:, -1]: raw logits (no softmax), the argmax "
    "over all 30 ids appended each step, the model in eval mode, the whole prompt kept.",
    "greedy_ids": "with the default temperature 0, take the argmax after setting the <eos> and <pad> logits to -inf; "
    "append each pick and run the model on the whole sequence again; call model.eval() first.",
    **{f"{f}_mode": f"{f}() runs the model in eval mode and then restores the mode it found: `was = model.training; "
       "model.eval(); ...; model.train(was)`." for f in ("predict", "generate")},
    "zero_temperature_ids": "temperature 0 is greedy whatever top_k and top_p say: the argmax of the allowed logits, "
    "no sampling and no division by 0.",
    "sampled_top_k_tie_ids": "top_k keeps every allowed token whose logit is at least the k-th best one: tokens tied "
    "with the k-th are all kept (e.g. logits < torch.topk(logits, k).values[:, -1:] set to -inf).",
    "sampled_top_p_edge_ids": "the nucleus is the smallest set of most probable tokens whose probabilities reach "
    "top_p: the token that carries the sum past top_p is kept "
    "(drop a token when the mass ranked above it is >= top_p).",
    "top_k1_ids": "top_k=1 keeps only the best allowed token, so sampling must return the greedy ids.",
    "top_p_tiny_ids": "a tiny top_p keeps only the most probable allowed token "
    "(the nucleus always holds at least one).",
    "cold_ids": "temperature 0.01 divides the logits by 0.01 before the softmax: almost all mass on the greedy token.",
    "top_k_ids": "after excluding <eos>/<pad>, keep the k highest logits and sample among those only.",
    "top_p_ids": "keep the smallest set of most probable allowed tokens whose probabilities sum to at least top_p.",
    "sampled_ids": "sample from softmax(logits / temperature) over the 28 allowed tokens (torch.multinomial).",
    "sampled_top_k_ids": "with temperature > 0 and top_k, sample (torch.multinomial) from the softmax of the k best "
    "allowed logits divided by the temperature.",
    "sampled_top_p_ids": "with temperature > 0 and top_p, sample (torch.multinomial) from the softmax, renormalised, "
    "of the nucleus computed on logits / temperature.",
    "collate_inputs": "row b is piece_b[:-1] followed by PAD (id 1) up to T = the longest piece's length - 1, int64.",
    "collate_targets": "row b is piece_b[1:] followed by PAD (id 1), int64: the inputs shifted by one.",
    "lm_loss": "the mean of -log softmax(logits)[target] over the positions whose target is not PAD "
    "(F.cross_entropy on flattened (N, V) logits with ignore_index=PAD), a scalar.",
    "attention_out": "per head softmax(Q K^T / sqrt(hs)) V with the causal mask, heads side by side, then self.proj; "
    "q, k, v are the three C-wide thirds of self.qkv(x) in that order, head h is channels h*hs..(h+1)*hs.",
    "attention_causal": "position t must not see later positions: mask the scores where self.causal is False "
    "(with -inf) before the softmax.",
    "model_logits": "embedding (through embedding_dropout) times sqrt(d_model), + positional encoding, dropout, the "
    "layers, ln_f, then fc; the grader loads fixed weights with load_state_dict and calls model.eval().",
    "model_causal": "logits at position t must not depend on tokens after t: every layer's attention must be causal.",
    "weight_tied": "in __init__, assign self.fc.weight = self.token_embedding.weight (the same Parameter, not a copy).",
    "emb_dropout_train": "in training, zero whole rows of the (V, C) weight, each with probability p, and multiply "
    "the others by 1/(1-p): one coin per row, e.g. a (V, 1) bernoulli mask.",
    "emb_dropout_eval": "when training is False (or p == 0), return the weight unchanged.",
}


def table(slips: dict[str, dict[str, np.ndarray]], right: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """quantity -> {slip name -> its value} as case arrays: expected_<q>__<name> and the words' table; a slip whose
    value is the right one (right[q]) is left out."""
    out, rows = {}, []
    for q, found in slips.items():
        for name, value in found.items():
            value = np.asarray(value, dtype=right[q].dtype)
            if value.shape == right[q].shape and np.array_equal(value, right[q]):
                continue
            out[f"expected_{q}__{name}"] = value
            rows.append([q, name, *SAID[name]])
    # Text, not numbers: words every case shares (the same in the handout's public cases), never a hidden value.
    out["expected_slips"], out["expected_hints"] = np.array(json.dumps(rows)), np.array(json.dumps(HINTS))
    return out


def collate(pieces: list[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """collate's slips: <eos> padding, targets not shifted, inputs and targets swapped, padding on the left."""
    T = max(len(p) for p in pieces) - 1
    rows = {k: np.full((len(pieces), T), PAD, dtype=np.int64) for k in ("inp", "tgt", "eos_inp", "eos_tgt", "l_inp",
                                                                          "l_tgt")}
    rows["eos_inp"][:], rows["eos_tgt"][:] = EOS, EOS
    for b, p in enumerate(pieces):
        n = len(p) - 1
        rows["inp"][b, :n] = rows["eos_inp"][b, :n] = rows["l_inp"][b, T - n:] = p[:-1]
        rows["tgt"][b, :n] = rows["eos_tgt"][b, :n] = rows["l_tgt"][b, T - n:] = p[1:]
    inputs, targets = rows["inp"], rows["tgt"]
    return {"collate_inputs": {"eos_padding": rows["eos_inp"], "swapped": targets, "left_padded": rows["l_inp"]},
            "collate_targets": {"eos_padding": rows["eos_tgt"], "unshifted": inputs, "swapped": inputs,
                                "left_padded": rows["l_tgt"]}}


def lm_loss(logits: np.ndarray, targets: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """lm_loss's slips: <pad> positions in the mean, the sum for the mean, a softmax before the loss, no log-softmax."""
    z = logits.astype(np.float64)

    def nll(z: np.ndarray) -> np.ndarray:
        logp = z - z.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        return -np.take_along_axis(logp, targets[..., None], -1)[..., 0]

    real = targets != PAD
    e = np.exp(z - z.max(-1, keepdims=True))
    return {"lm_loss": {"pad_mean": nll(z).mean(), "summed": nll(z)[real].sum(),
                        "softmax_first": nll(e / e.sum(-1, keepdims=True))[real].mean(),
                        "no_log_softmax": -np.take_along_axis(z, targets[..., None], -1)[..., 0][real].mean()}}


def fixed(kind: str, table_: np.ndarray, inp: np.ndarray, steps: int) -> dict[str, dict[str, np.ndarray]]:
    """predict's and greedy generate's slips on a fixed-weight model: probabilities or log-probabilities for the
    logits, every step from the prompt alone, or from the last id alone."""
    def logits(ids: np.ndarray) -> np.ndarray:  # the next id's logits (B, 30)
        return np.asarray(table_, np.float64)[fixed_models.keys(kind, ids, table_.shape[0])][:, -1]

    def run(context, allowed: bool) -> tuple[np.ndarray, np.ndarray]:
        x, out, ids = np.asarray(inp, np.int64), [], []
        for _ in range(steps):
            s = logits(context(x))
            pick = np.where(np.isin(np.arange(s.shape[-1]), [EOS, PAD]), -np.inf, s).argmax(-1) if allowed \
                else s.argmax(-1)
            out.append(s)
            ids.append(pick)
            x = np.concatenate([x, pick[:, None]], axis=1)
        return np.stack(out, 1), np.stack(ids, 1)

    right = run(lambda x: x, False)[0]
    e = np.exp(right - right.max(-1, keepdims=True))
    prompt_only = lambda x: x[:, : inp.shape[1]]  # noqa: E731
    last_only = lambda x: x[:, -1:]  # noqa: E731
    return {"predict_logits": {"probabilities": e / e.sum(-1, keepdims=True),
                               "log_probabilities": np.log(e / e.sum(-1, keepdims=True)),
                               "prompt_only": run(prompt_only, False)[0], "last_id_only": run(last_only, False)[0]},
            "greedy_ids": {"prompt_only": run(prompt_only, True)[1], "last_id_only": run(last_only, True)[1]}}
