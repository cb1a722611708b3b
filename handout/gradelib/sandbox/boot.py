"""First code of every sandboxed child: confine it, then run the harness.

    python -I -B boot.py HARNESS.py [ARGS...]   (configuration in $GRADER_BOOT)

Runs before any line of the submission, with nothing but the standard library
and kernel.py, which lies beside it (the grader mounts or copies the two files
alone):

- applies Landlock (when the grader asks: inside bubblewrap the mounts are made
  first, and a Landlock-confined process could no longer mount);
- installs an audit hook that forwards the harness's `gradelib.*` events (such
  as an autograd entry point being called) at once over a pipe the grader
  opened. The record leaves the process when the event happens, so clearing
  or patching Python state afterwards cannot take it back, and Python offers
  no way to remove an audit hook;
- installs the seccomp filter (Linux levels).

    python -I -B boot.py                          (a template process, when $GRADER_BOOT holds "template")

A template process (template.py's Session, one per submission) is confined
the same way, imports numpy and torch once, and then forks one child per run
on the grader's request: the child takes the run's pipes for output and audit
events, its folder, environment and rlimits, and runs the harness; the
template reports how it ended and kills whatever the run left. A child never
holds the template's control socket. The template runs no line of the
submission itself.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

BOOT_ENV = "GRADER_BOOT"  # the grader's launch.py sets it
EVENT_PREFIX = "gradelib."
MAX_EVENT = 200
SYSV_IPC = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}  # /proc/sysvipc/<kind> -> the call that removes one
IPC_RMID = 0

_kernel = None


def kernel():
    """kernel.py from this file's own folder (not importable by name: -I leaves the folder off sys.path,
    and a submission's own kernel.py must not be shadowed)."""
    global _kernel
    if _kernel is None:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.py")
        spec = importlib.util.spec_from_file_location("_gradelib_sandbox_kernel", path)
        _kernel = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = _kernel
        spec.loader.exec_module(_kernel)
    return _kernel


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


def _kill_descendants() -> int:
    """SIGKILL and reap every process below the template (orphans come to it: it is a subreaper)."""
    k = kernel()
    return k.kill_until_gone(lambda: k.children_of(os.getpid()), 10.0, 0.005, reap=True)


def _fork_run(sock, request: dict, fds: list[int], report_fd: int) -> int:
    """Fork the child of one run; returns its pid (in the template)."""
    k = kernel()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sock.close()  # the run never holds the template's control socket
        out_fd, events_fd = fds
        os.setsid()
        k.prctl(k.PR_SET_PDEATHSIG, 9)  # SIGKILL when the template goes
        k.prctl(k.PR_SET_DUMPABLE, 1)  # as after exec: itself, not the template
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(events_fd, report_fd, inheritable=False)
        for fd in (out_fd, events_fd):
            if fd not in (1, 2, report_fd):
                os.close(fd)
        import resource

        for name, value in request.get("rlimits", {}).items():
            limit = getattr(resource, name)
            soft, hard = resource.getrlimit(limit)
            value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(limit, (value, value))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request.get("env", {}))
        import random

        random.seed()
        _run_harness(request["argv"])
        code = 0
    except SystemExit as exc:
        code = _printed_exit(exc.code)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)
    return 0  # not reached


def _clear_ipc() -> int:
    """Remove what a run left in the submission's private /dev/shm and System V IPC namespace (the
    namespaces level gives each submission its own), so the next run of the submission starts with
    none of it; how many were removed."""
    import shutil

    removed = 0
    try:
        entries = list(os.scandir("/dev/shm"))
    except OSError:
        entries = []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed += 1
        except (OSError, RecursionError):  # a tree deeper than the recursion limit stays (the submission's own)
            pass
    lib = kernel().libc()
    for kind, call in SYSV_IPC.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                args = (int(fields[1]), 0, IPC_RMID) if kind == "sem" else (int(fields[1]), IPC_RMID, None)
                removed += getattr(lib, call)(*args) == 0
    return removed


def _serve(control_fd: int, report_fd: int, preload: list[str], private_ipc: bool = False) -> None:
    """The template's loop: one request, one forked run, one reply with how it ended (`private_ipc`:
    /dev/shm and System V IPC are the submission's own, emptied after each run)."""
    import socket

    k = kernel()
    for name in preload:
        try:
            __import__(name)
        except Exception:
            pass  # the run imports it itself, and reports what fails
    k.prctl(k.PR_SET_CHILD_SUBREAPER, 1)
    k.prctl(k.PR_SET_DUMPABLE, 0)  # runs of the same uid cannot read or trace it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=control_fd)
    sock.send(b'{"ready": true}')
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            break
        if not message:
            break  # the grader is gone
        request = json.loads(message)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            sock.send(b'{"error": "a run needs two descriptors"}')
            continue
        pid = _fork_run(sock, request, fds, report_fd)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        status = None
        while status is None:
            try:
                done, raw = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if done == pid:
                status = os.waitstatus_to_exitcode(raw)  # -N when killed by signal N
        killed = _kill_descendants()
        if private_ipc:
            _clear_ipc()
        sock.send(json.dumps({"returncode": status, "killed": killed}).encode())
    os._exit(0)


def main() -> None:
    config = json.loads(os.environ.pop(BOOT_ENV, "{}"))
    rules = config.get("landlock")
    if rules:
        abi = kernel().landlock_abi()
        if abi:
            kernel().apply_landlock(abi, rules["read"], rules["write"])
    report_fd = config.get("report_fd")
    if report_fd is not None:
        _install_reporter(int(report_fd))
    if config.get("seccomp", True):
        why = kernel().apply_seccomp()
        sys.audit("gradelib.seccomp", why or "ok")
    template = config.get("template")
    if template:
        _serve(int(template["control_fd"]), int(report_fd), list(template.get("preload", [])),
               bool(template.get("private_ipc")))
        return
    _run_harness(sys.argv[1:])


if __name__ == "__main__":
    main()
