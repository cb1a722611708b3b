"""First code of every sandboxed child: confine it, then run the harness.

    python -I -B boot.py HARNESS.py [ARGS...]   (configuration in $GRADER_BOOT)

Runs before any line of the submission, with nothing but the standard library
and the files beside it, kernel.py (the Linux interfaces), guards.py (what a
run of attention.py cannot reach), forkserver.py (a template's loop) and the
student kit's start.py (the event reporter and the way to run a harness, shared
by both kits), which the grader mounts or copies with it and nothing else:

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
  believes, since it can only cost the run), and arms guards.py when the
  attention harness has set its own tripwires: the course's, out of the
  submission's reach.

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
# Raised by the kit's attention_child.py once its own tripwires are set, with (hit, tripwire, after_stage).
TRIPWIRES_EVENT = "grader.tripwires"

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


def guard(fd, filtered: bool) -> None:
    """An audit hook that refuses every PROGRAM_EVENTS event (at every level; the seccomp filter refuses execve
    itself at the Linux levels, whatever calls it), said first on the events descriptor `fd` (when there is one) as
    a `gradelib.program` record; that says a SIGKILL the run sends itself in a `gradelib.selfkill` record; and
    that arms guards.py (`filtered`: whether seccomp is in force) at the attention harness's first TRIPWIRES_EVENT
    (a later one is the submission's), or says in a `gradelib.guards` record that it could not."""
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
        if event == TRIPWIRES_EVENT and not asked and fd is not None:
            asked.append(event)
            try:
                sibling("guards").arm(kernel(), fd, args[2], filtered)
            except Exception as exc:  # the grader's own failure: said, so that the grading counts as none
                write(fd, f"\n{EVENT_PREFIX}guards {type(exc).__name__}\n".encode())

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
    why = kernel().apply_seccomp() if config.get("seccomp", True) else "off"
    if why != "off":
        sys.audit("gradelib.seccomp", why or "ok")
    guard(None if report_fd is None else int(report_fd), why == "")
    template = config.get("template")
    if template:  # Linux levels only
        sibling("forkserver").serve(kernel(), template, int(report_fd), start().run_harness, start().exit_code)
        return
    start().run_harness(sys.argv[1:])


if __name__ == "__main__":
    main()
