"""A template process's loop (Linux levels only), run by boot.py after it confined the template: one
request from the grader, one forked run, one reply with how it ended.

The template imported numpy and torch once; each run is a fork of it that takes the run's pipes for
output and audit events, its folder, environment and rlimits, and runs the harness; where the grader asks
(`write`), a Landlock layer of its own lets it write in its folder (and a few devices) only, never where an
earlier run of the submission wrote. The template
reports how the run ended and kills whatever it left (it is their subreaper). A run never holds the
template's control socket. The template runs no line of the submission itself. `k` is kernel.py,
loaded by boot.py from beside this file.
"""

from __future__ import annotations

import json
import os
import sys

SYSV_IPC = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}  # /proc/sysvipc/<kind> -> the call that removes one
IPC_RMID = 0


def kill_descendants(k, own_uid: bool) -> int:
    """SIGKILL and reap every process below the template (orphans come to it: it is a subreaper); the number
    killed. With `own_uid` the template runs as a uid that only this submission's runs have (a sandbox uid),
    so every process it may signal is one of them: kill(-1) reaches them all, however they were started,
    and needs no /proc (which the fallback level does not let a run list). Otherwise (the portable level,
    the user's own uid) they are found in /proc."""
    if not own_uid:  # all stopped first, so a chain of processes that fork as they are killed is caught whole
        return k.end_tree(lambda: k.children_of(os.getpid()), 10.0, reap=True)
    killed = 0
    for _ in range(10_000):
        try:
            os.kill(-1, 9)  # every process this uid may signal but the template itself
            killed += 1
        except ProcessLookupError:
            break
        _reap()
    _reap()
    return killed


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def fork_run(k, sock, request: dict, fds: list[int], report_fd: int, run_harness, exit_code) -> int:
    """Fork the child of one run; returns its pid (in the template). The child runs the harness with
    `run_harness(argv)` and ends with `exit_code(SystemExit.code)`."""
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
        k.set_rlimits({name: int(value) for name, value in request.get("rlimits", {}).items()})
        os.chdir(request["cwd"])
        if request.get("write") is not None:  # a Landlock layer of the run's own: it writes in its folder only
            k.apply_landlock(k.landlock_abi(), ["/"], request["write"])
        os.environ.clear()
        os.environ.update(request.get("env", {}))
        import random

        random.seed()
        if "tempfile" in sys.modules:  # its own TMPDIR, not the one the template's imports asked for
            sys.modules["tempfile"].tempdir = None
        run_harness(request["argv"])
        code = 0
    except SystemExit as exc:
        code = exit_code(exc.code)
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


def clear_ipc(k) -> int:
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
    lib = k.libc()
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


def preload(names: list[str]) -> None:
    """Import the modules every run uses, once; one that fails is left to the run, which reports it."""
    for name in names:
        try:
            __import__(name)
        except Exception:
            pass


def wait_for(pid: int) -> int | None:
    """Reap children (the subreaper's orphans among them) until `pid` ends: its exit code, -N when killed by signal
    N; None when no child is left."""
    while True:
        try:
            done, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        if done == pid:
            return os.waitstatus_to_exitcode(raw)


def serve(k, config: dict, report_fd: int, run_harness, exit_code) -> None:
    """The template's loop: one request, one forked run, one reply with how it ended. `config`: control_fd,
    preload (modules imported once), private_ipc (/dev/shm and System V IPC are the submission's own, emptied
    after each run) and own_uid (see kill_descendants)."""
    import socket

    control_fd, private_ipc = int(config["control_fd"]), bool(config.get("private_ipc"))
    preload(config.get("preload", []))
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
        pid = fork_run(k, sock, request, fds, report_fd, run_harness, exit_code)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        status = wait_for(pid)
        killed = kill_descendants(k, bool(config.get("own_uid")))
        if private_ipc:
            clear_ipc(k)
        sock.send(json.dumps({"returncode": status, "killed": killed}).encode())
    os._exit(0)
