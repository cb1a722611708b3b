"""First code of every sandboxed child: confine it, then run the harness.

    python -I -B boot.py HARNESS.py [ARGS...]   (configuration in $GRADER_BOOT)

Runs before any line of the submission, with nothing but the standard library
and the two files beside it, kernel.py (the Linux interfaces) and forkserver.py
(a template's loop), which the grader mounts or copies with it and nothing else:

- applies Landlock (when the grader asks: inside bubblewrap the mounts are made
  first, and a Landlock-confined process could no longer mount);
- installs an audit hook that forwards the harness's `gradelib.*` events (such
  as an autograd entry point being called) at once over a pipe the grader
  opened. The record leaves the process when the event happens, so clearing
  or patching Python state afterwards cannot take it back, and Python offers
  no way to remove an audit hook;
- installs the seccomp filter (Linux levels);
- refuses, by another audit hook, every way Python has to start another program.

    python -I -B boot.py                          (a template process, when $GRADER_BOOT holds "template")

A template process (template.py's Session, one per submission, on Linux) is
confined the same way and then runs forkserver.py's loop.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

BOOT_ENV = "GRADER_BOOT"  # the grader's launch.py sets it
EVENT_PREFIX = "gradelib."
MAX_EVENT = 200

_siblings: dict = {}


def sibling(name: str):
    """kernel.py or forkserver.py from this file's own folder (not importable by name: -I leaves the folder
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


def _install_reporter(fd: int) -> None:
    os.set_inheritable(fd, False)  # a submission's own subprocesses do not get it
    write = os.write  # bound now: rebinding os.write later changes nothing here

    def hook(event: str, args: tuple) -> None:
        if event.startswith(EVENT_PREFIX):
            line = " ".join([event, *(str(a) for a in args)])[:MAX_EVENT].replace("\n", " ")
            try:
                # One write (atomic on a pipe) that starts with an end of line too: bytes a submission wrote
                # to the pipe without one end there and cannot swallow this record into theirs.
                write(fd, ("\n" + line + "\n").encode("utf-8", "replace"))
            except OSError:
                pass

    sys.addaudithook(hook)


# Audit events of a process about to start another program or to become one. A fresh interpreter has none of
# the harness's tripwires and no audit hook, so once the harness runs none may start: each is refused here,
# at every level (the seccomp filter refuses execve itself at the Linux levels, whatever calls it).
PROGRAM_EVENTS = frozenset(("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
                            "_winapi.CreateProcess"))


def _refuse_programs(fd) -> None:
    """An audit hook that refuses every PROGRAM_EVENTS event, said first on the grader's audit pipe (`fd`,
    when there is one) as a `gradelib.program` record."""
    write = os.write

    def hook(event: str, args: tuple) -> None:
        if event in PROGRAM_EVENTS:
            if fd is not None:
                try:
                    write(fd, f"\n{EVENT_PREFIX}program {event}\n".encode())
                except OSError:
                    pass
            raise PermissionError(f"{event}: starting another program is not allowed while grading")

    sys.addaudithook(hook)


def _printed_exit(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_harness(argv: list[str]) -> None:
    sys.audit("gradelib.boot", "ok")
    if len(argv) < 1:
        sys.exit("boot.py: no harness given")
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


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


def _report_fd(config: dict):
    """The descriptor of the grader's audit pipe: passed as a descriptor, or on Windows as a handle."""
    if config.get("report_handle") is not None:
        import msvcrt

        return msvcrt.open_osfhandle(int(config["report_handle"]), os.O_WRONLY)
    return config.get("report_fd")


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
    report_fd = _report_fd(config)
    if report_fd is not None:
        _install_reporter(int(report_fd))
    if config.get("seccomp", True):
        why = kernel().apply_seccomp()
        sys.audit("gradelib.seccomp", why or "ok")
    _refuse_programs(None if report_fd is None else int(report_fd))
    template = config.get("template")
    if template:  # Linux levels only
        sibling("forkserver").serve(kernel(), template, int(report_fd), _run_harness, _printed_exit)
        return
    _run_harness(sys.argv[1:])


if __name__ == "__main__":
    main()
