"""Runs the submission's attention.py on each case's inputs (inside the child).

For every case: build Attention(W_k, W_q, W_v), call forward(X) and backward(dLdXnew), and record X_new, dLdX and
the attributes the contract says are stored on self. Records which autograd entry points the submission touched, so
the grader can take away the backward points for them: in meta.json and, out of the submission's reach, as audit
events that the runner's audit hook sends to the grader as they happen.
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
GRAPH_LABEL = "an autograd graph (tensors that require grad)"
TAKEN_OFF = "a change to the grader's tripwires (anomaly mode or torch.fx.traceback)"

autograd_calls: set[str] = set()
# Bound before the submission is imported: a submission that clears autograd_calls (or this module) afterwards does
# not take back an event already sent.
_audit = sys.audit
_intact: list = []  # the check that the tripwires are in place, asked after every stage


def _hit(label: str) -> None:
    if label not in autograd_calls:
        _audit("gradelib.autograd", label)
    autograd_calls.add(label)


def _tripwire(owner, attr: str, label: str) -> None:
    original = getattr(owner, attr, None)
    if original is None:
        return

    def wrapped(*args, **kwargs):
        _hit(label)
        return original(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _audited_engine(engine):
    """Stands in for the autograd engine object every backward pass goes through (also when code calls it directly):
    reports the first use, then delegates. The engine is held in a closure, not in an attribute."""

    class AuditedEngine:
        __slots__ = ()

        def __getattr__(self, name):
            _hit(f"the autograd engine ({name})")
            return getattr(engine, name)

    return AuditedEngine()


def _graph_recorded(tensor):
    """A saved-tensors hook: torch calls it whenever an operation records itself for a backward pass, whatever API
    runs that pass later. Honest code never records one (no tensor requires grad)."""
    _hit(GRAPH_LABEL)
    return tensor


def _graph_in_any_thread():
    """Anomaly mode, a switch of the whole process (saved-tensors hooks and grad mode are per thread): torch then
    calls torch.fx.traceback.format_stack for every node it records, in any thread. Honest code records none.
    Returns the check that the switch and the patch are still in place."""
    import torch.fx.traceback as fx_traceback

    original, is_on = fx_traceback.format_stack, torch.is_anomaly_enabled

    def format_stack(*args, **kwargs):
        _hit(GRAPH_LABEL)
        return original(*args, **kwargs)

    fx_traceback.format_stack = format_stack
    torch.set_anomaly_enabled(True, False)  # no NaN check: backward is never run for honest code anyway
    for owner in (torch, torch._C, getattr(torch._C, "_autograd", None)):
        for name in ("set_anomaly_enabled", "_set_anomaly_enabled"):
            _tripwire(owner, name, "a call switching the grader's anomaly mode")
    return lambda: is_on() and sys.modules.get("torch.fx.traceback") is fx_traceback and (
        fx_traceback.format_stack is format_stack)


def check_tripwires() -> None:
    """Record TAKEN_OFF when a tripwire a submission could quietly take off is no longer in place."""
    try:
        intact = _intact[0]()
    except BaseException:
        intact = False
    if not intact:
        _hit(TAKEN_OFF)


def install_tripwires() -> None:
    """The public hooks of every torch from 2.1 on (saved_tensors_hooks, entered and never left; anomaly mode); the
    engine object, new engines, pushing or removing a hook, torch's own names, where this torch has them."""
    from torch.autograd.variable import Variable

    # Unpacking follows a pack, which was recorded already.
    torch.autograd.graph.saved_tensors_hooks(_graph_recorded, _graph_recorded).__enter__()
    _intact.append(_graph_in_any_thread())
    autograd = getattr(torch._C, "_autograd", None)
    _tripwire(autograd, "_pop_saved_tensors_default_hooks", "a call removing the grader's saved-tensors hook")
    # A hook over the grader's (never popped) would see the graph in its place; a new engine object is not the
    # audited one. Neither is honest code's business.
    _tripwire(autograd, "_push_saved_tensors_default_hooks", "a saved-tensors hook pushed over the grader's")
    _tripwire(torch.autograd.graph.saved_tensors_hooks, "__enter__", "a saved-tensors hook pushed over the grader's")
    _tripwire(torch._C, "_ImperativeEngine", "a new autograd engine")
    _tripwire(sys.modules.get("torch.autograd.variable"), "ImperativeEngine", "a new autograd engine")
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
    """A torch.Tensor as an ndarray; None for anything else."""
    return obj.detach().cpu().numpy() if type(obj) is torch.Tensor else None


def _stage(rec: Recorder, att, stage: str, args: tuple, result: str, attrs: tuple[str, ...]) -> None:
    """Call att.<stage>(*args), record its result as `result` and the attributes `attrs`, and save the case."""
    value = None
    try:
        value = getattr(att, stage)(*args)
    except BaseException as exc:
        rec.error(stage, exc)
    rec.record(result, value, convert=to_array)
    grad_tracking = False
    for name in attrs:
        value = getattr(att, name, None)
        grad_tracking |= type(value) is torch.Tensor and bool(value.requires_grad)
        rec.record(name, value, convert=to_array)
    if stage == "forward":
        rec.meta["flags"]["grad_tracking"] = grad_tracking
    check_tripwires()
    rec.meta["flags"]["autograd_calls"] = sorted(autograd_calls)
    rec.write()


def main() -> None:
    task = load_task()
    torch.set_num_threads(1)
    install_tripwires()
    sys.path.insert(0, str(SUBMISSION))
    try:
        module = importlib.import_module(task.get("module", "attention"))
    except BaseException as exc:
        for case in task["cases"]:
            rec = Recorder(case["name"])
            rec.error("import", exc)
            rec.write()
        print("import failed:", short_exception(exc))
        return
    # Every forward first, each saved as it finishes: a backward that hangs or kills the process then costs only
    # backward results. Backward runs even after a failed forward, so its own TODO or error is reported too.
    started = []
    for case in task["cases"]:
        rec, inputs = Recorder(case["name"]), {k: torch.from_numpy(v) for k, v in load_arrays(case["inputs"]).items()}
        try:
            att = module.Attention(inputs["W_k"], inputs["W_q"], inputs["W_v"])
        except BaseException as exc:
            rec.error("init", exc)
            rec.write()
            continue
        _stage(rec, att, "forward", (inputs["X"],), "X_new", FORWARD_ATTRS)
        started.append((rec, att, inputs["dLdXnew"]))
    for rec, att, dLdXnew in started:
        _stage(rec, att, "backward", (dLdXnew,), "dLdX", BACKWARD_ATTRS)


if __name__ == "__main__":
    main()
