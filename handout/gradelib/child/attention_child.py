"""Runs the submission's attention.py on each case's inputs (inside the child): Attention(W_k, W_q, W_v), forward(X),
backward(dLdXnew), recording X_new, dLdX, the attributes the contract stores on self, and which autograd entry points
it touched (in meta.json, and as audit events the runner's hook sends as they happen), which cost the backward points.
"""

from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from child_common import SUBMISSION, Recorder, load_arrays, load_task, short_exception  # noqa: E402

FORWARD_ATTRS = ("Q", "K", "V", "A_w", "A_sig")
BACKWARD_ATTRS = ("dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv")
# Raised with (_hit, _tripwire, after_stage) once these tripwires are set: the course grader's child boot then adds
# its own against a submission that dodges them, and checks, called after every stage, that they are still in place.
TRIPWIRES_EVENT = "grader.tripwires"

autograd_calls: set[str] = set()
after_stage: list = []
# Bound before the submission is imported: a submission that clears autograd_calls (or this module) afterwards does
# not take back an event already sent.
_audit = sys.audit


def _hit(label: str) -> None:
    if label not in autograd_calls:
        _audit("gradelib.autograd", label)
    autograd_calls.add(label)


def _tripwire(owner, attr: str, label: str) -> None:
    """Make owner.attr (when it has one) record `label` at each call."""
    original = getattr(owner, attr, None)
    if original is None:
        return

    def wrapped(*args, **kwargs):
        _hit(label)
        return original(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _graph_recorded(tensor):
    """A saved-tensors hook: torch calls it whenever an operation records itself for a backward pass, whatever API
    runs that pass later. Honest code never records one (no tensor requires grad)."""
    _hit("an autograd graph (tensors that require grad)")
    return tensor


def install_tripwires() -> None:
    """A saved-tensors hook (entered and never left) and tripwires on torch's autograd entry points."""
    # Unpacking follows a pack, which was recorded already.
    torch.autograd.graph.saved_tensors_hooks(_graph_recorded, _graph_recorded).__enter__()
    _tripwire(torch.autograd, "backward", "torch.autograd.backward")
    _tripwire(torch.autograd, "grad", "torch.autograd.grad")
    _tripwire(torch.Tensor, "backward", "Tensor.backward")
    _tripwire(torch.nn.functional, "scaled_dot_product_attention", "scaled_dot_product_attention")
    for name in ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"):
        _tripwire(torch.autograd.functional, name, f"torch.autograd.functional.{name}")
    for name in ("grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap", "linearize", "grad_and_value"):
        _tripwire(getattr(torch, "func", None), name, f"torch.func.{name}")
    for name in ("enter_dual_level", "make_dual", "unpack_dual"):  # forward mode
        _tripwire(torch.autograd.forward_ad, name, f"torch.autograd.forward_ad.{name}")
    sys.audit(TRIPWIRES_EVENT, _hit, _tripwire, after_stage)


def to_array(obj):
    """A torch.Tensor as an ndarray; None for anything else."""
    return obj.detach().cpu().numpy() if type(obj) is torch.Tensor else None


def _stage(rec: Recorder, att, stage: str, args: tuple, result: str, attrs: tuple[str, ...]) -> None:
    """Call att.<stage>(*args), record its result as `result` and the attributes `attrs`, and save the case."""
    value = None
    try:
        value = getattr(att, stage)(*args)
    except BaseException as exc:
        rec.meta["errors"][stage] = short_exception(exc)
    rec.record(result, value, convert=to_array)
    grad_tracking = False
    for name in attrs:
        value = getattr(att, name, None)
        grad_tracking |= type(value) is torch.Tensor and bool(value.requires_grad)
        rec.record(name, value, convert=to_array)
    if stage == "forward":
        rec.meta["flags"]["grad_tracking"] = grad_tracking
    for check in after_stage:
        check()
    rec.meta["flags"]["autograd_calls"] = sorted(autograd_calls)
    rec.write()


def main() -> None:
    task = load_task()
    install_tripwires()
    sys.path.insert(0, str(SUBMISSION))
    try:
        module = importlib.import_module(task.get("module", "attention"))
    except BaseException as exc:
        for case in task["cases"]:
            rec = Recorder(case["name"])
            rec.meta["errors"]["import"] = short_exception(exc)
            rec.write()
        return
    # Every forward first, each saved as it finishes: a backward that hangs or kills the process then costs only
    # backward results. Backward runs even after a failed forward, so its own TODO or error is reported too.
    started = []
    for case in task["cases"]:
        rec, inputs = Recorder(case["name"]), {k: torch.from_numpy(v) for k, v in load_arrays(case["inputs"]).items()}
        try:
            att = module.Attention(inputs["W_k"], inputs["W_q"], inputs["W_v"])
        except BaseException as exc:
            rec.meta["errors"]["init"] = short_exception(exc)
            rec.write()
            continue
        _stage(rec, att, "forward", (inputs["X"],), "X_new", FORWARD_ATTRS)
        started.append((rec, att, inputs["dLdXnew"]))
    for rec, att, dLdXnew in started:
        _stage(rec, att, "backward", (dLdXnew,), "dLdX", BACKWARD_ATTRS)


if __name__ == "__main__":
    main()
