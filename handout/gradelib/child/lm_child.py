"""Runs notebook 3 and calls its predict() and generate() on fixed-weight models (inside the child).

The notebook is executed by notebook_child.py's machinery (cells tagged
skip-grading, such as training, are skipped). This file adds the arguments
notebook 3's functions take besides arrays:

    model:<key>   a FixedModel built from the case's <key>_table, <key>_kind, <key>_train_offset
    float:<key>   a Python float

FixedModel is the torch twin of gradelib/lm/fixed_models.py: a table lookup
that is an nn.Module, so a student's model.eval(), model.parameters() and
torch.no_grad() work on it as on their own model. It knows no expected value.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import notebook_child  # noqa: E402
import torch  # noqa: E402

KINDS = ("last", "prefix_sum", "position")  # index = the <key>_kind code in a case file


class FixedModel(torch.nn.Module):
    """logits[b, t] = table[key(inp[b, :t+1])] (+ train_offset in training mode); see fixed_models.py."""

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
        if self.training:
            out = out + self.train_offset
        return out


def argument(spec: str, inputs: dict):
    kind, key = spec.split(":", 1)
    if kind == "model":
        # Sampling draws from torch's global generator unless the notebook passes its own.
        torch.manual_seed(int(inputs.get("seed", 0)))
        return FixedModel(
            inputs[f"{key}_table"], KINDS[int(inputs[f"{key}_kind"])], inputs[f"{key}_train_offset"]
        ).train()
    if kind == "float":
        return float(inputs[key])
    return base_argument(spec, inputs)


base_argument = notebook_child.argument
notebook_child.argument = argument

if __name__ == "__main__":
    notebook_child.main()
