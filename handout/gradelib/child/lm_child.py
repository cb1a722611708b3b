"""Runs notebook 3 (through notebook_child.py) and calls its functions and classes on fixed inputs and weights, with
the argument kinds model, float, bool and pieces, the *_mode quantities and the classes run like functions."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import notebook_child  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

KINDS = ("last", "prefix_sum", "position")  # index = the <key>_kind code in a case file
# Dropout probabilities of the ModelConfig the modules are built with: in eval mode dropout must do nothing.
DROPOUT = 0.1
# Notebook 3 asks for the masked softmax by hand: the built-in attentions do it for you.
BUILTIN_ATTENTION = {"scaled_dot_product_attention": "F.scaled_dot_product_attention",
                     "multi_head_attention_forward": "nn.MultiheadAttention"}
# The classes run like functions -> the case's array of their sizes, the ModelConfig fields it holds, their weights.
CLASSES = {"CausalSelfAttention": ("att_cfg", ("d_model", "n_heads", "max_len"), "attw."),
           "CausalLanguageModel": ("lm_cfg", ("d_model", "n_heads", "n_layers", "d_ff", "max_len"), "lmw.")}


class FixedModel(torch.nn.Module):
    """The torch twin of gradelib/lm/fixed_models.py, an nn.Module so that model.eval(), model.parameters() and
    torch.no_grad() work on it: logits[b, t] = table[key(inp[b, :t+1])] (+ train_offset in training mode)."""

    def __init__(self, table, kind: str, train_offset):
        super().__init__()
        self.table = torch.nn.Parameter(torch.as_tensor(table, dtype=torch.float32), requires_grad=False)  # (K, 30)
        self.kind = kind
        self.register_buffer("train_offset", torch.as_tensor(train_offset, dtype=torch.float32))  # (30,)

    def forward(self, inp):
        ids = torch.as_tensor(inp).long()  # (B, T)
        K = self.table.shape[0]
        if self.kind == "last":
            key = ids % K
        elif self.kind == "prefix_sum":
            key = ids.cumsum(dim=1) % K
        else:
            key = (torch.arange(ids.shape[1]) % K).expand(ids.shape)
        out = self.table[key]  # (B, T, 30)
        return out + self.train_offset if self.training else out


class WeightsDoNotFit(Exception):
    """The module has no parameter of a name the handout's __init__ defines."""


class BuiltinAttentionUsed(RuntimeError):
    """The notebook's module called a built-in attention."""


class _NoBuiltinAttention(TorchFunctionMode):
    """While the notebook's modules run on the grader's weights, a built-in attention (however named) raises."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in BUILTIN_ATTENTION:
            raise BuiltinAttentionUsed(
                f"{BUILTIN_ATTENTION[name]} is not allowed in notebook 3: compute the per-head masked "
                "softmax(Q K^T / sqrt(hs)) V with plain tensor operations, as the notebook asks")
        return func(*args, **(kwargs or {}))


def _load(module, inputs: dict, prefix: str, what: str) -> None:
    """Load the case's weights named `prefix`* into `module` (not strict: a mask buffer or a tied fc.weight is no
    fault); WeightsDoNotFit when it has no parameter of such a name."""
    state = {k[len(prefix):]: torch.from_numpy(v.copy()) for k, v in inputs.items() if k.startswith(prefix)}
    unexpected = module.load_state_dict(state, strict=False).unexpected_keys
    if unexpected:
        raise WeightsDoNotFit(
            f"{what} has no parameter {', '.join(sorted(unexpected)[:4])}: keep the names the handout's "
            "__init__ gives (the grader loads fixed weights into them with load_state_dict)")


def _driver(namespace: dict, inputs: dict, name: str):
    """The notebook's class `name` as a function of two inputs: built with the case's sizes and weights, run in eval
    mode on both (and, for the language model, whether its weights are tied)."""

    def run(x, x_changed):
        ModelConfig = namespace.get("ModelConfig")
        if not callable(ModelConfig):
            raise NameError("`ModelConfig` is not defined after running notebook 3 (it is given in the handout)")
        key, fields, prefix = CLASSES[name]
        sizes = dict(zip(fields, map(int, inputs[key])))
        model = namespace[name](ModelConfig(vocab_size=30, **sizes, dropout=DROPOUT, emb_dropout=DROPOUT))
        fc, emb = getattr(model, "fc", None), getattr(model, "token_embedding", None)
        tied = fc is not None and emb is not None and getattr(fc, "weight", None) is getattr(emb, "weight", 0)
        _load(model, inputs, prefix, name)
        model.eval()
        with torch.no_grad(), _NoBuiltinAttention():
            out = model(x), model(x_changed)
        return out if name == "CausalSelfAttention" else (*out, np.asarray(bool(tied)))

    return run


def _mode_after(function):
    """The function called on its model in training mode, then in eval mode: model.training after each call."""

    def run(model, *args, **kwargs):
        after = []
        for training in (True, False):
            model.train(training)
            function(model, *args, **kwargs)
            after.append(bool(model.training))
        return np.asarray(after)

    return run


def seed_cpu(seed: int) -> None:
    """torch.manual_seed for the CPU generator only (it also queues a seed for CUDA: 1.5 ms a call here)."""
    torch.default_generator.manual_seed(seed)


def call_and_record(rec, call: dict, inputs: dict, namespace: dict, report: dict, timeout_s: float,
                    wall_s: float | None = None) -> None:
    """notebook_child.call_and_record, each call from the case's seed, with the classes and *_mode wrapped."""
    seed_cpu(int(inputs.get("seed", 0)))
    name = call["function"]
    if name in CLASSES and callable(namespace.get(name)):
        namespace = {**namespace, name: _driver(namespace, inputs, name)}
    elif any(q.endswith("_mode") for q in call["outputs"]) and callable(namespace.get(name)):
        namespace = {**namespace, name: _mode_after(namespace[name])}
    base_call_and_record(rec, call, inputs, namespace, report, timeout_s, wall_s)


def argument(spec: str, inputs: dict):
    """notebook_child.argument, with the kinds model, float, bool and pieces."""
    kind, key = spec.split(":", 1)
    if kind == "model":
        seed_cpu(int(inputs.get("seed", 0)))  # sampling draws from torch's global generator
        table, train_offset = inputs[f"{key}_table"], inputs[f"{key}_train_offset"]
        return FixedModel(table, KINDS[int(inputs[f"{key}_kind"])], train_offset).train()
    if kind == "float":
        return float(inputs[key])
    if kind == "bool":
        return bool(inputs[key])
    if kind == "pieces":
        flat, lengths = inputs[f"{key}_flat"], inputs[f"{key}_lengths"]
        ends = np.cumsum(lengths)
        return [torch.from_numpy(flat[end - n : end].copy()) for n, end in zip(lengths.tolist(), ends.tolist())]
    return base_argument(spec, inputs)


base_argument, notebook_child.argument = notebook_child.argument, argument
base_call_and_record, notebook_child.call_and_record = notebook_child.call_and_record, call_and_record

if __name__ == "__main__":
    notebook_child.main()
