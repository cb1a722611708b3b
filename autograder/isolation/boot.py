"""First code of every sandboxed child: confine it, then run the harness.

    python -I -B boot.py HARNESS.py [ARGS...]   (configuration in $GRADER_BOOT)

Runs before any line of the submission, with nothing but the standard library
and the files beside it, kernel.py (the Linux interfaces), forkserver.py (a
template's loop) and the student kit's start.py (the event reporter and the
way to run a harness, shared by both kits), which the grader mounts or copies
with it and nothing else:

- applies Landlock (when the grader asks: inside bubblewrap the mounts are made
  first, and a Landlock-confined process could no longer mount);
- installs an audit hook that forwards the harness's `gradelib.*` events (such
  as an autograd entry point being called) at once over a pipe the grader
  opened. The record leaves the process when the event happens, so clearing
  or patching Python state afterwards cannot take it back, and Python offers
  no way to remove an audit hook;
- installs the seccomp filter (Linux levels);
- installs an audit hook of its own (`guard`) that refuses every way Python has
  to start another program (a fresh interpreter has none of the harness's
  tripwires), records a SIGKILL the run sends itself or its parent (so that
  the grader does not take the end it chose for a fault: the one record it
  believes, since it can only cost the run), and adds the course's tripwires to
  the attention harness's own when it asks (`tripwires`).

    python -I -B boot.py                          (a template process, when $GRADER_BOOT holds "template")

A template process (template.py's Session, one per submission, on Linux) is
confined the same way and then runs forkserver.py's loop.
"""

from __future__ import annotations

import json
import os
import signal
import sys

BOOT_ENV = "GRADER_BOOT"  # the grader's launch.py sets it
EVENT_PREFIX = "gradelib."  # what start.py's reporter forwards
# Audit events of a process about to start another program: refused while a harness runs.
PROGRAM_EVENTS = frozenset(("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
                            "_winapi.CreateProcess"))
TRIPWIRES_EVENT = "grader.tripwires"  # raised by the kit's attention_child.py once its own tripwires are set
GRAPH_LABEL = "an autograd graph (tensors that require grad)"
TAKEN_OFF = "a change to the grader's tripwires (anomaly mode or torch.fx.traceback)"

_siblings: dict = {}


def sibling(name: str):
    """kernel.py, forkserver.py or start.py from this file's own folder (not importable by name: -I leaves the folder
    off sys.path, and a submission's own module of that name must not be shadowed)."""
    if name not in _siblings:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"_gradelib_sandbox_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _siblings[name] = module
    return _siblings[name]


def kernel():
    return sibling("kernel")


def start():
    """The student kit's start.py, copied beside this file: its event reporter and its way of running a harness are
    the same for both kits."""
    return sibling("start")


def guard(fd) -> None:
    """An audit hook that refuses every PROGRAM_EVENTS event (at every level; the seccomp filter refuses execve
    itself at the Linux levels, whatever calls it), said first on the events descriptor `fd` (when there is one) as
    a `gradelib.program` record; and that calls `tripwires` at the attention harness's first TRIPWIRES_EVENT (a
    later one is the submission's)."""
    write, asked = os.write, []

    def hook(event: str, args: tuple) -> None:
        if event in ("os.kill", "os.killpg") and fd is not None and _ends_itself(event, args):
            try:
                write(fd, f"\n{EVENT_PREFIX}selfkill {event}\n".encode())
            except OSError:
                pass
        if event in PROGRAM_EVENTS:
            if fd is not None:
                try:
                    write(fd, f"\n{EVENT_PREFIX}program {event}\n".encode())
                except OSError:
                    pass
            raise PermissionError(f"{event}: starting another program is not allowed while grading")
        if event == TRIPWIRES_EVENT and not asked:
            asked.append(event)
            tripwires(*args)

    sys.addaudithook(hook)


def _ends_itself(event: str, args: tuple) -> bool:
    """Whether os.kill's or os.killpg's `args` send SIGKILL to this process, its parent (the template, the sandbox's
    first process) or either's group, or everything: an end the run chose."""
    try:
        target, sig = args
        if sig != signal.SIGKILL:
            return False
        me, parent = os.getpid(), os.getppid()
        groups = {os.getpgrp(), os.getpgid(parent)}
        if event == "os.kill":
            return target in (0, -1, me, parent) or (target < 0 and -target in groups)
        return target == 0 or target in groups or target == parent
    except Exception:  # whatever the arguments, never in the way of the call
        return False


def tripwires(hit, tripwire, after_stage: list) -> None:
    """Against a submission that dodges the attention harness's tripwires (set through its `tripwire(owner, attr,
    label)`, each reporting by `hit(label)`): the engine object called directly, a new engine, a saved-tensors hook
    pushed over the harness's or removed, a graph recorded in another thread (anomaly mode); `after_stage` gets the
    check that anomaly mode is still in place."""
    import torch
    from torch.autograd.variable import Variable

    after_stage.append(_graph_in_any_thread(hit, tripwire))
    autograd = getattr(torch._C, "_autograd", None)
    tripwire(autograd, "_pop_saved_tensors_default_hooks", "a call removing the grader's saved-tensors hook")
    # A hook over the grader's (never popped) would see the graph in its place; a new engine object is not the
    # audited one. Neither is honest code's business.
    tripwire(autograd, "_push_saved_tensors_default_hooks", "a saved-tensors hook pushed over the grader's")
    tripwire(torch.autograd.graph.saved_tensors_hooks, "__enter__", "a saved-tensors hook pushed over the grader's")
    tripwire(torch._C, "_ImperativeEngine", "a new autograd engine")
    tripwire(sys.modules.get("torch.autograd.variable"), "ImperativeEngine", "a new autograd engine")
    if hasattr(Variable, "_execution_engine"):
        Variable._execution_engine = _audited_engine(Variable._execution_engine, hit)


def _audited_engine(engine, hit):
    """Stands in for the autograd engine object every backward pass goes through (also when code calls it directly):
    reports the first use, then delegates. The engine is held in a closure, not in an attribute."""

    class AuditedEngine:
        __slots__ = ()

        def __getattr__(self, name):
            hit(f"the autograd engine ({name})")
            return getattr(engine, name)

    return AuditedEngine()


def _graph_in_any_thread(hit, tripwire):
    """Anomaly mode, a switch of the whole process (saved-tensors hooks and grad mode are per thread): torch then
    calls torch.fx.traceback.format_stack for every node it records, in any thread. Honest code records none.
    Returns the check, run after every stage, that the switch and the patch are still in place."""
    import torch
    import torch.fx.traceback as fx_traceback

    original, is_on = fx_traceback.format_stack, torch.is_anomaly_enabled

    def format_stack(*args, **kwargs):
        hit(GRAPH_LABEL)
        return original(*args, **kwargs)

    fx_traceback.format_stack = format_stack
    torch.set_anomaly_enabled(True, False)  # no NaN check: backward is never run for honest code anyway
    for owner in (torch, torch._C, getattr(torch._C, "_autograd", None)):
        for name in ("set_anomaly_enabled", "_set_anomaly_enabled"):
            tripwire(owner, name, "a call switching the grader's anomaly mode")

    def check() -> None:
        try:
            intact = is_on() and sys.modules.get("torch.fx.traceback") is fx_traceback and (
                fx_traceback.format_stack is format_stack)
        except BaseException:
            intact = False
        if not intact:
            hit(TAKEN_OFF)

    return check


def _add_paths(paths: list[str]) -> None:
    """Put back the folders the grader's interpreter has on sys.path and `-I` leaves off (a user site, a
    PYTHONPATH entry), so the run imports what the grader's interpreter imports; say which cannot be read."""
    for path in paths:
        if path in sys.path:
            continue
        if os.access(path, os.R_OK | os.X_OK):
            sys.path.append(path)
        else:
            print(f"note: {path} (on the grader's Python path) cannot be read here, so packages installed there "
                  "cannot be imported", file=sys.stderr)


def _limit_cpu(seconds) -> None:
    """The portable level's CPU-time limit, set here where no preexec step can (none on Windows)."""
    try:
        kernel().set_rlimits({"RLIMIT_CPU": int(seconds)})
    except ImportError:  # no resource module: Windows
        pass


def main() -> None:
    config = json.loads(os.environ.pop(BOOT_ENV, "{}"))
    _add_paths(config.get("paths") or [])
    if config.get("cpu_s"):
        _limit_cpu(config["cpu_s"])
    rules = config.get("landlock")
    if rules:
        abi = kernel().landlock_abi()
        if abi:
            kernel().apply_landlock(abi, rules["read"], rules["write"])
    report_fd = config.get("report_fd")
    if report_fd is not None:
        os.set_inheritable(int(report_fd), False)  # a submission's own subprocesses do not get it
        start().install_reporter(int(report_fd))
    if config.get("seccomp", True):
        why = kernel().apply_seccomp()
        sys.audit("gradelib.seccomp", why or "ok")
    guard(None if report_fd is None else int(report_fd))
    template = config.get("template")
    if template:  # Linux levels only
        sibling("forkserver").serve(kernel(), template, int(report_fd), start().run_harness, start().exit_code)
        return
    start().run_harness(sys.argv[1:])


if __name__ == "__main__":
    main()
