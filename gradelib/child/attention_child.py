"""Runs the submission's attention.py on each case's inputs (inside the child).

For every case in task.json: build Attention(W_k, W_q, W_v), call forward(X)
and backward(dLdXnew), and record X_new, dLdX and the attributes the contract
says are stored on self. Records which autograd entry points the submission
touched, so the grader can take away the backward points for them: in
meta.json and, out of the submission's reach, as audit events (see boot.py).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from child_common import Recorder, add_submission_to_path, load_task, short_exception

FORWARD_ATTRS = ("Q", "K", "V", "A_w", "A_sig")
BACKWARD_ATTRS = ("dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv")

autograd_calls: set[str] = set()
# Bound before the submission is imported. The audit hook that boot.py installed
# sends each event to the grader at once, so a submission that clears
# autograd_calls (or this module) afterwards does not take the record back.
_audit = sys.audit


def _tripwire(owner, attr: str, label: str) -> None:
    original = getattr(owner, attr, None)
    if original is None:
        return

    def wrapped(*args, **kwargs):
        if label not in autograd_calls:
            _audit("gradelib.autograd", label)
        autograd_calls.add(label)
        return original(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _audited_engine(engine):
    """Stands in for the autograd engine object every backward pass goes through (also when code calls
    it directly rather than through torch.autograd): reports the first use, then delegates. The engine
    is held in a closure, like the tripwires' originals, not in an attribute."""

    class AuditedEngine:
        __slots__ = ()

        def __getattr__(self, name):
            label = f"the autograd engine ({name})"
            if label not in autograd_calls:
                _audit("gradelib.autograd", label)
            autograd_calls.add(label)
            return getattr(engine, name)

    return AuditedEngine()


GRAPH_LABEL = "an autograd graph (tensors that require grad)"


def _graph_recorded(tensor):
    """A saved-tensors hook: torch calls it whenever an operation records itself for a backward pass,
    whatever API runs that pass later. Honest code never records one (no tensor requires grad)."""
    if GRAPH_LABEL not in autograd_calls:
        _audit("gradelib.autograd", GRAPH_LABEL)
    autograd_calls.add(GRAPH_LABEL)
    return tensor


def _unpacked(tensor):
    return tensor


def install_tripwires() -> None:
    """The public hooks of every torch from 2.1 on (saved_tensors_hooks, entered and never left); the engine
    object and the hook's removal, torch's own names, where this torch has them."""
    from torch.autograd.variable import Variable

    torch.autograd.graph.saved_tensors_hooks(_graph_recorded, _unpacked).__enter__()
    _tripwire(getattr(torch._C, "_autograd", None), "_pop_saved_tensors_default_hooks",
              "a call removing the grader's saved-tensors hook")
    if hasattr(Variable, "_execution_engine"):
        Variable._execution_engine = _audited_engine(Variable._execution_engine)
    _tripwire(torch.autograd, "backward", "torch.autograd.backward")
    _tripwire(torch.autograd, "grad", "torch.autograd.grad")
    _tripwire(torch.Tensor, "backward", "Tensor.backward")
    _tripwire(torch.nn.functional, "scaled_dot_product_attention", "scaled_dot_product_attention")
    for name in ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"):
        _tripwire(torch.autograd.functional, name, f"torch.autograd.functional.{name}")
    for name in ("grad", "vjp", "jacrev", "jacfwd", "grad_and_value"):
        _tripwire(getattr(torch, "func", None), name, f"torch.func.{name}")


def to_array(obj):
    if type(obj) is not torch.Tensor:
        return None
    return obj.detach().cpu().numpy()


def run_forward(module, case: dict):
    """Build the Attention of one case and run forward; return (recorder, object, dLdXnew)."""
    rec = Recorder(case["name"])
    with np.load(case["inputs"], allow_pickle=False) as data:
        inputs = {k: torch.from_numpy(np.array(data[k])) for k in data.files}
    try:
        att = module.Attention(inputs["W_k"], inputs["W_q"], inputs["W_v"])
    except BaseException as exc:
        rec.error("init", exc)
        rec.write()
        return rec, None, None
    x_new = None
    try:
        x_new = att.forward(inputs["X"])
    except BaseException as exc:
        rec.error("forward", exc)
    rec.record("X_new", x_new, convert=to_array)
    grad_tracking = False
    for name in FORWARD_ATTRS:
        value = getattr(att, name, None)
        if type(value) is torch.Tensor:
            grad_tracking |= bool(value.requires_grad)
        rec.record(name, value, convert=to_array)
    rec.flag("grad_tracking", grad_tracking)
    rec.flag("autograd_calls", sorted(autograd_calls))
    rec.write()
    return rec, att, inputs["dLdXnew"]


def run_backward(rec: Recorder, att, dLdXnew) -> None:
    # Backward runs even after a failed forward, so its own TODO or error is reported too.
    dldx = None
    try:
        dldx = att.backward(dLdXnew)
    except BaseException as exc:
        rec.error("backward", exc)
    rec.record("dLdX", dldx, convert=to_array)
    for name in BACKWARD_ATTRS:
        rec.record(name, getattr(att, name, None), convert=to_array)
    rec.flag("autograd_calls", sorted(autograd_calls))
    rec.write()


def main() -> None:
    task = load_task()
    torch.set_num_threads(1)
    install_tripwires()
    add_submission_to_path()
    import importlib

    try:
        module = importlib.import_module(task.get("module", "attention"))
    except BaseException as exc:
        for case in task["cases"]:
            rec = Recorder(case["name"])
            rec.error("import", exc)
            rec.write()
        print("import failed:", short_exception(exc))
        return
    # Every forward first, each saved as it finishes: a backward that hangs or
    # kills the process then costs only backward results.
    started = [run_forward(module, case) for case in task["cases"]]
    for rec, att, dLdXnew in started:
        if att is not None:
            run_backward(rec, att, dLdXnew)


if __name__ == "__main__":
    main()
