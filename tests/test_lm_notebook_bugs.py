"""Notebook 3's planted bugs: each loses exactly the function lines it should (one grading per bug).

Split from test_lm_notebook.py so `make test` can give the two files to different workers.
"""

from __future__ import annotations

import json

import pytest
from test_notebook_checks import namespace

from gradelib.grade import grade_submission
from gradelib.notebook_check import grade_line
from gradelib.runner.limits import Limits

from notebook_tools import NB3, edited
from support import HANDOUT, SOLUTIONS, function_scores, grade_files

pytestmark = pytest.mark.slow

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


# Notebook 3's usual slips (`make mutants` and students' notebooks), each named on the first case line of its
# check's report: the grader's words come with the slips' values in the case files (autograder/fixturegen/lm_slips.py),
# and a slip is named only where the notebook gives exactly its value. (function, old, new, line, what the first
# failing case says); the check runs on the public cases, in this process, as grader.check runs it.
ATTENTION_SCALE = "        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)        # (B, nh, T, T)"
COLLATE = ("        inputs[b, : len(p) - 1] = p[:-1]   # what the model reads",
           "        targets[b, : len(p) - 1] = p[1:]   # what it must predict: the next id")
LOSS = "F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=PAD)"
PREDICT_PICK = ("        x = torch.cat([x, logits.argmax(dim=-1, keepdim=True)], dim=1)  # (B, T+1): append the "
                "greedy pick")
SLIPS = {
    "collate_pads_with_eos": ("collate", ("), PAD, dtype=torch.long)   # (B, T)",
                                          "), PAD, dtype=torch.long)  # (B, T)"),
                              ("), EOS, dtype=torch.long)", "), EOS, dtype=torch.long)"), "collate_and_loss",
                              "'collate_inputs' is padded with <eos> (id 0) where <pad> (id 1) belongs."),
    "collate_targets_not_shifted": ("collate", COLLATE[1], "        targets[b, : len(p) - 1] = p[:-1]",
                                    "collate_and_loss", "'collate_targets' holds each piece's first n_b ids"),
    "collate_swapped": ("collate", COLLATE, ("        inputs[b, : len(p) - 1] = p[1:]",
                                             "        targets[b, : len(p) - 1] = p[:-1]"),
                        "collate_and_loss", "'collate_inputs' holds the other tensor: inputs and targets are swapped."),
    "collate_pads_on_the_left": ("collate", COLLATE, ("        inputs[b, T - len(p) + 1 :] = p[:-1]",
                                                      "        targets[b, T - len(p) + 1 :] = p[1:]"),
                                 "collate_and_loss", "'collate_inputs' is padded on the left."),
    "loss_over_pad_positions": ("lm_loss", LOSS, "F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))",
                                "collate_and_loss", "'lm_loss' is the mean over every position, the <pad> targets "
                                "included."),
    "loss_summed": ("lm_loss", LOSS, LOSS.replace("ignore_index=PAD)", "ignore_index=PAD, reduction='sum')"),
                    "collate_and_loss", "'lm_loss' is the sum over the targets that are not PAD, not their mean."),
    "loss_of_probabilities": ("lm_loss", LOSS, LOSS.replace("logits.reshape(-1, V)",
                                                            "F.softmax(logits, -1).reshape(-1, V)"),
                              "collate_and_loss", "'lm_loss' is the cross-entropy of softmax(logits)"),
    "nll_of_raw_logits": ("lm_loss", LOSS, LOSS.replace("F.cross_entropy", "F.nll_loss"), "collate_and_loss",
                          "'lm_loss' is the mean of -logits[target]: F.nll_loss was given raw logits."),
    "attention_scaled_by_sqrt_c": ("CausalSelfAttention", ATTENTION_SCALE, "        att = (q @ k.transpose(-2, -1)) / "
                                   "math.sqrt(C)", "causal_attention",
                                   "'attention_out' is what it gives with the scores divided by sqrt(C), C = d_model, "
                                   "instead of sqrt(hs). The causal mask works"),
    "attention_unscaled": ("CausalSelfAttention", ATTENTION_SCALE, "        att = q @ k.transpose(-2, -1)",
                           "causal_attention", "'attention_out' is what the model gives without the 1/sqrt(hs) "
                           "scaling of the attention scores."),
    "attention_times_sqrt_hs": ("CausalSelfAttention", ATTENTION_SCALE, "        att = (q @ k.transpose(-2, -1)) * "
                                "math.sqrt(hs)", "causal_attention", "'attention_out' is what it gives with the scores "
                                "multiplied by sqrt(hs) where they are divided by it."),
    "attention_softmax_over_queries": ("CausalSelfAttention", "F.softmax(att, dim=-1)", "F.softmax(att, dim=-2)",
                                       "causal_attention", "'attention_out' is what it gives with the softmax over the "
                                       "queries (dim=-2) instead of the keys."),
    "attention_without_proj": ("CausalSelfAttention", "return self.resid_drop(self.proj(y))",
                               "return self.resid_drop(y)", "causal_attention",
                               "'attention_out' is the heads' output before self.proj."),
    "model_without_embedding_scale": ("CausalLanguageModel", " * math.sqrt(self.cfg.d_model)", "", "model_building",
                                      "'model_logits' is what the model gives without multiplying the embeddings by "
                                      "sqrt(d_model)."),
    "model_without_positions": ("CausalLanguageModel", "x = self.drop(self.pos_encoder(x))", "x = self.drop(x)",
                                "model_building", "'model_logits' is what the model gives without the positional "
                                "encoding."),
    "model_without_final_norm": ("CausalLanguageModel", "return self.fc(self.ln_f(x))", "return self.fc(x)",
                                 "model_building", "'model_logits' is what the model gives without the final "
                                 "LayerNorm."),
    "predict_returns_probabilities": ("predict", "        steps.append(logits)",
                                      "        steps.append(F.softmax(logits, dim=-1))", "predict_function",
                                      "'predict_logits' holds probabilities (the softmax of the logits)"),
    "predict_returns_log_probabilities": ("predict", "        steps.append(logits)",
                                          "        steps.append(F.log_softmax(logits, dim=-1))", "predict_function",
                                          "'predict_logits' holds log-probabilities (log_softmax of the logits)"),
    "predict_never_appends": ("predict", PREDICT_PICK, "        pass", "predict_function",
                              "'predict_logits' is every step predicted from the prompt alone"),
    "predict_reads_the_last_id": ("predict", "        logits = model(x)[:, -1, :]", "        logits = model(x[:, -1:])"
                                  "[:, -1, :]", "predict_function",
                                  "'predict_logits' is each step predicted from the last id alone."),
    "generate_reads_the_last_id": ("generate", "        logits = model(x)[:, -1, :]", "        logits = model("
                                   "x[:, -1:])[:, -1, :]", "generate_greedy",
                                   "'greedy_ids' is each step predicted from the last id alone."),
    "generate_never_appends": ("generate", "        x = torch.cat([x, next_id.unsqueeze(1)], dim=1)", "        pass",
                               "generate_greedy", "'greedy_ids' is every step predicted from the prompt alone"),
    # The first sampling quantity a forgotten temperature breaks is the cold one, whose hint is the division.
    "sampling_ignores_the_temperature": ("filter_logits", "    logits = logits / temperature\n", "",
                                         "generate_sampling", "temperature 0.01 divides the logits by 0.01 before the "
                                         "softmax"),
}
FUNCTIONS = {"collate_and_loss": ("collate", "lm_loss"), "causal_attention": ("CausalSelfAttention", "ModelConfig"),
             "model_building": ("CausalLanguageModel", "ModelConfig", "embedding_dropout", "CausalSelfAttention"),
             "predict_function": ("predict",), "generate_greedy": ("generate",), "generate_sampling": ("generate",)}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_usual_slip_is_named_on_the_first_line_of_its_checks_report(slip):
    function, old, new, line, said = SLIPS[slip]
    ns = namespace(json.loads(edited(NB3, function, old, new)))
    problem = "generation" if line.startswith("generate") else "prediction"
    result = grade_line(problem, line, {f: ns[f] for f in FUNCTIONS[line]})
    assert not result.passed
    first = next(ln for ln in result.output.splitlines() if ln.startswith("case "))
    assert said in first.split("): ", 1)[1], result.output
    assert "Hint: " in first


def test_a_right_model_on_a_wrong_attention_names_the_attention_first(tmp_path):
    """CausalSelfAttention scaled by sqrt(C), the model itself right: the model's line says first that it fails
    because the attention does, and fixes that; the attention line comes first in the report, and in the checks."""
    function, old, new, _, _ = SLIPS["attention_scaled_by_sqrt_c"]
    text = edited(NB3, function, old, new)
    ns = namespace(json.loads(text))
    checked = grade_line("prediction", "model_building", {f: ns[f] for f in FUNCTIONS["model_building"]})
    first = next(ln for ln in checked.output.splitlines() if ln.startswith("case ")).split("): ", 1)[1]
    assert first.startswith("'model_logits' is wrong, which probably follows from the 'attention_out' failure (the "
                            "model's layers run your CausalSelfAttention).") and first.endswith(
        "Hint: fix CausalSelfAttention first."), first
    sub = tmp_path / "handin"
    sub.mkdir()
    (sub / NB3).write_text(text)
    result = grade_submission(sub, case_root=HANDOUT / "tests", visibilities=("public",), only=["prediction"],
                              limits=Limits(timeout_s=60))
    words = " ".join(result.table().split())  # wrapped at 100 columns: phrases may run over two lines
    attention = words.index("FAIL 0.00 / 1.00 CausalSelfAttention: masked multi-head attention")
    model = words.index("FAIL 0.00 / 1.00 CausalLanguageModel on fixed weights")
    assert attention < model < words.index("'model_logits' is wrong, which probably follows from the 'attention_out' "
                                           "failure"), words
