"""Notebook 3's function lines (lm_functions.py): the hint a failure of each quantity gives."""

HINTS = {
    "predict_logits": "step t is model(inp + greedy picks of steps < t)[:, -1]: raw logits (no softmax), the argmax "
    "over all 30 ids appended each step, the model in eval mode, the whole prompt kept.",
    "greedy_ids": "with the default temperature 0, take the argmax after setting the <eos> and <pad> logits to -inf; "
    "append each pick and run the model on the whole sequence again; call model.eval() first.",
    "predict_mode": "predict() runs the model in eval mode and then restores the mode it found: `was = model.training; "
    "model.eval(); ...; model.train(was)`.",
    "generate_mode": "generate() runs the model in eval mode and then restores the mode it found: "
    "`was = model.training; model.eval(); ...; model.train(was)`.",
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
    "attention_out_unscaled": "divide the scores q @ k^T by sqrt(hs) (hs = the head size, C // n_heads) before the "
    "softmax.",
    "model_logits": "embedding (through embedding_dropout) times sqrt(d_model), + positional encoding, dropout, the "
    "layers, ln_f, then fc; the grader loads fixed weights with load_state_dict and calls model.eval().",
    "model_causal": "logits at position t must not depend on tokens after t: every layer's attention must be causal.",
    "model_logits_unscaled": "in CausalSelfAttention, divide the scores q @ k^T by sqrt(hs) (hs = the head size) "
    "before the softmax.",
    "weight_tied": "in __init__, assign self.fc.weight = self.token_embedding.weight (the same Parameter, not a copy).",
    "emb_dropout_train": "in training, zero whole rows of the (V, C) weight, each with probability p, and multiply "
    "the others by 1/(1-p): one coin per row, e.g. a (V, 1) bernoulli mask.",
    "emb_dropout_eval": "when training is False (or p == 0), return the weight unchanged.",
}
