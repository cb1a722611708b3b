"""Notebook 3's planted bugs: each loses exactly the function lines it should (one grading per bug).

Split from test_lm_notebook.py so `make test` can give the two files to different workers.
"""

from __future__ import annotations

import json

import pytest

from support import SOLUTIONS, function_scores, grade_files

NOTEBOOK = "03_language_model.ipynb"
LM_PROBLEMS = ["prediction", "generation"]

BUGS = {
    "predict_in_training_mode_and_sampling_ignores_temperature": (
        [
            (
                "    model.eval()\n    x = torch.as_tensor(inp, dtype=torch.long)                        # (B, T)\n"
                "    steps = []",
                "    x = torch.as_tensor(inp, dtype=torch.long)                        # (B, T)\n    steps = []",
            ),
            ("    logits = logits / temperature\n", ""),
        ],
        {("predict", "public"), ("predict", "hidden"), ("sampling", "public"), ("sampling", "hidden")},
    ),
    "eos_and_pad_not_excluded": (
        [('    logits[:, [EOS, PAD]] = float("-inf")                        # never generated\n', "")],
        # Public greedy fails on the public case whose rows favour <eos>/<pad>; sampling too: its distribution
        # check uses a model where <eos> scores highest.
        {("greedy", "public"), ("greedy", "hidden"), ("sampling", "public"), ("sampling", "hidden")},
    ),
    "generate_feeds_only_the_last_token": (
        [
            (
                "        logits = model(x)[:, -1, :]                                   # (B, V)\n"
                "        if temperature == 0:",
                "        logits = model(x[:, -1:])[:, -1, :]\n        if temperature == 0:",
            )
        ],
        {("greedy", "public"), ("greedy", "hidden"), ("sampling", "public"), ("sampling", "hidden")},
    ),
    # Greedy ids always lie inside the top-k set and the nucleus: only their frequencies give them away.
    "generate_returns_greedy_ids_when_filtering": (
        [
            (
                "        if temperature == 0:\n            next_id = filter_logits",
                "        if temperature == 0 or top_k is not None or top_p is not None:\n"
                "            next_id = filter_logits",
            )
        ],
        {("sampling", "public"), ("sampling", "hidden")},
    ),
    "generate_leaves_the_model_in_eval_mode": (
        [
            (
                "    model.train(was_training)                                         # the caller's mode, restored\n"
                "    return torch.stack(out, dim=1)",
                "    return torch.stack(out, dim=1)",
            )
        ],
        {("greedy", "public"), ("greedy", "hidden")},
    ),
    # torch.topk picks one of two tied logits: the other, kept by the rule, is never sampled.
    "top_k_keeps_exactly_k_despite_a_tie": (
        [
            (
                '        logits = logits.masked_fill(logits < kth, float("-inf"))',
                "        keep = torch.topk(logits, k, dim=-1).indices\n"
                '        logits = torch.full_like(logits, float("-inf")).scatter(-1, keep, logits.gather(-1, keep))',
            )
        ],
        {("sampling", "public"), ("sampling", "hidden")},
    ),
    "top_p_drops_the_token_that_crosses_it": (
        [
            (
                "        drop_sorted = mass_before >= top_p                       # the top token always stays",
                "        drop_sorted = (mass_before + probs > top_p) & (mass_before > 0)",
            )
        ],
        {("sampling", "public"), ("sampling", "hidden")},
    ),
    # Trains to a low loss (it reads the answer), and predict/generate on fixed models cannot tell.
    "no_causal_mask_in_attention": (
        [('        att = att.masked_fill(~self.causal[:T, :T], float("-inf"))  # no peeking at later positions\n', "")],
        {("attention", "public"), ("attention", "hidden"), ("model", "public"), ("model", "hidden")},
    ),
    # Without 1/sqrt(hs) the outputs are wrong but still causal: the mask keeps its points' reason out of it.
    "attention_without_the_scale": (
        [
            (
                "        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)        # (B, nh, T, T)\n",
                "        att = q @ k.transpose(-2, -1)\n",
            )
        ],
        {("attention", "public"), ("attention", "hidden"), ("model", "public"), ("model", "hidden")},
    ),
    # The notebook forbids the built-in attention; an alias does not hide it from the grader.
    "builtin_attention": (
        [
            (
                "        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)        # (B, nh, T, T)\n"
                '        att = att.masked_fill(~self.causal[:T, :T], float("-inf"))  # no peeking at later positions\n'
                "        att = self.attn_drop(F.softmax(att, dim=-1))\n"
                "        y = att @ v                                            # (B, nh, T, hs)\n",
                "        from torch.nn.functional import scaled_dot_product_attention as mix\n"
                "        y = mix(q, k, v, is_causal=True)\n",
            )
        ],
        {("attention", "public"), ("attention", "hidden"), ("model", "public"), ("model", "hidden")},
    ),
    "collate_pads_with_the_wrong_id": (
        [
            (
                "    inputs = torch.full((len(pieces), T), PAD, dtype=torch.long)   # (B, T)\n"
                "    targets = torch.full((len(pieces), T), PAD, dtype=torch.long)  # (B, T)\n",
                "    inputs = torch.full((len(pieces), T), EOS, dtype=torch.long)\n"
                "    targets = torch.full((len(pieces), T), EOS, dtype=torch.long)\n",
            )
        ],
        {("collate_loss", "public"), ("collate_loss", "hidden")},
    ),
    "lm_loss_averages_over_padding": (
        [
            (
                "F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=PAD)",
                "F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))",
            )
        ],
        {("collate_loss", "public"), ("collate_loss", "hidden")},
    ),
    "fc_weight_not_tied": (
        [("        self.fc.weight = self.token_embedding.weight   # weight tying: one (V, C) parameter\n", "")],
        {("model", "public"), ("model", "hidden")},
    ),
    "embedding_dropout_drops_single_entries": (
        [
            (
                "    keep = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)",
                "    keep = torch.empty_like(weight).bernoulli_(1 - p) / (1 - p)",
            )
        ],
        {("model", "public"), ("model", "hidden")},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_fails_exactly_its_lines(tmp_path, bug):
    edits, failing = BUGS[bug]
    text = (SOLUTIONS / NOTEBOOK).read_text()
    nb = json.loads(text)
    for old, new in edits:
        hits = [c for c in nb["cells"] if old in "".join(c["source"])]
        assert len(hits) == 1, f"the master no longer holds {old!r}"
        hits[0]["source"] = "".join(hits[0]["source"]).replace(old, new)
    result = grade_files(tmp_path, {NOTEBOOK: json.dumps(nb)}, only=LM_PROBLEMS, timeout_s=90)
    scores = function_scores(result)
    assert {k for k, v in scores.items() if v < 1.0} == failing, scores
    if bug == "builtin_attention":
        said = [t.output for t in result.tests if t.line == "causal_attention" and not t.passed]
        assert said and all("F.scaled_dot_product_attention is not allowed in notebook 3" in o for o in said), said
    if bug in ("attention_without_the_scale", "no_causal_mask_in_attention"):  # told apart by the causality probe
        for line in ("causal_attention", "model_building"):
            said = [t.output for t in result.tests if t.line == line and not t.passed]
            scale = [o for o in said if "without the 1/sqrt(hs) scaling" in o and "The causal mask works" in o]
            mask = [o for o in said if "a position saw later ones" in o and "1/sqrt(hs)" not in o]
            assert said and (scale if bug == "attention_without_the_scale" else mask) == said, said
    if bug == "eos_and_pad_not_excluded":  # the ids are named for what they are, not as a constant factor
        greedy = [t.output for t in result.tests if t.line == "generate_greedy" and not t.passed]
        assert greedy and all("generate must never emit them" in o and "constant factor" not in o for o in greedy), (
            greedy
        )
