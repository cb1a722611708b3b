"""First code of every sandboxed child: confine it, then run the harness.

    python -I -B boot.py HARNESS.py [ARGS...]   (configuration in $GRADER_BOOT)

Runs before any line of the submission, with nothing but the standard library:

- applies Landlock (when the grader asks: inside bubblewrap the mounts are made
  first, and a Landlock-confined process could no longer mount);
- installs an audit hook that forwards the harness's `gradelib.*` events (such
  as an autograd entry point being called) at once over a pipe the grader
  opened. The record leaves the process when the event happens, so clearing
  or patching Python state afterwards cannot take it back, and Python offers
  no way to remove an audit hook.

    python -I -B boot.py                          (a template process, when $GRADER_BOOT holds "template")

A template process (gradelib/sandbox.py's Session, one per submission) is
confined the same way, imports numpy and torch once, and then forks one
child per run on the grader's request: the child takes the run's pipes for
output and audit events, its folder, environment and rlimits, and runs the
harness; the template reports how it ended and kills whatever the run left.
A child never holds the template's control socket. The template runs no
line of the submission itself.

The same file is imported by gradelib/sandbox.py for its Landlock helpers.
"""

from __future__ import annotations

import ctypes
import json
import os
import runpy
import sys

# Linux constants (stable kernel ABI).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel, 0 when unavailable."""
    try:
        version = _libc.syscall(
            SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION
        )
    except Exception:
        return 0
    return max(int(version), 0)


def _fs_mask(abi: int) -> int:
    mask = _FS_ALL_V1
    if abi >= 2:
        mask |= _FS_REFER
    if abi >= 3:
        mask |= _FS_TRUNCATE
    if abi >= 5:
        mask |= _FS_IOCTL_DEV
    return mask


def _apply_landlock(abi: int, read_paths: list[str], write_paths: list[str]) -> None:
    """Confine this process (and its future children) to the given paths."""
    handled = _fs_mask(abi)
    attr = _RulesetAttr(handled, 0, 0)
    size = 16  # ABI 1-3 know two fields; ABI >= 6 knows three
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    if abi < 4:
        size = 8
    fd = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    read_access = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    for paths, access in ((read_paths, read_access), (write_paths, handled)):
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                allowed = access
                if not os.path.isdir(path):
                    # Directory-only rights are invalid on a file rule.
                    allowed &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
                rule = _PathBeneathAttr(allowed & handled, pfd)
                if _libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(pfd)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(fd)


# seccomp: system calls no run needs that reach past its namespaces. The kernel's keyrings are per
# uid and outside every namespace: a key one run adds, the next run under the same sandbox uid could
# read. ptrace and process_vm_* reach into other processes of the uid (the template among them);
# perf_event_open, bpf, userfaultfd and io_uring are kernel attack surface. unshare, setns and a clone() that
# asks for a new namespace would give the run a user namespace, with every capability inside it and
# the kernel code behind them (mounts, netfilter, ...) to attack. Each fails with EPERM. clone3 takes
# its flags in memory a filter cannot read, so it fails with ENOSYS: the C library then falls back
# to clone(), whose flags the filter checks (threads and fork() work as before).
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
DENIED_SYSCALLS = {  # name -> number, per architecture (the kernel's syscall tables)
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "ptrace": 101, "process_vm_readv": 310,
               "process_vm_writev": 311, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
               "unshare": 272, "setns": 308, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "ptrace": 117, "process_vm_readv": 270,
                "process_vm_writev": 271, "perf_event_open": 241, "bpf": 280, "userfaultfd": 282,
                "unshare": 97, "setns": 268, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427},
}
CLONE_SYSCALLS = {"x86_64": (56, 435), "aarch64": (220, 435)}  # (clone, clone3)
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
# (CLONE_NEWTIME, 0x80, is clone()'s exit-signal byte there: only unshare and clone3 take it.)
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low word: little-endian)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """A classic BPF program: (code, jt, jf, k) per instruction. System calls of another ABI than the
    native one (32-bit int 0x80, x32) and DENIED_SYSCALLS fail with EPERM, a clone() with a namespace
    flag too, clone3 with ENOSYS; everything else is allowed.

    Written with named targets ("allow", "deny", ...; None is the next instruction), then each jump
    is turned into the forward offset BPF wants."""
    ld_abs, ret = 0x20, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_RET|BPF_K
    jeq, jge, jset = 0x15, 0x35, 0x45  # BPF_JMP|BPF_K with BPF_JEQ, BPF_JGE, BPF_JSET
    clone, clone3 = CLONE_SYSCALLS[machine]
    code: list[tuple[int, str | None, str | None, int]] = [
        (ld_abs, None, None, SECCOMP_DATA_ARCH),
        (jeq, None, "deny", AUDIT_ARCH[machine]),
        (ld_abs, None, None, SECCOMP_DATA_NR),
        (jge, "deny", None, X32_SYSCALL_BIT),
        *((jeq, "deny", None, nr) for nr in sorted(DENIED_SYSCALLS[machine].values())),
        (jeq, "enosys", None, clone3),
        (jeq, "clone", None, clone),
        (ret, None, None, SECCOMP_RET_ALLOW),
    ]
    labels = {"clone": len(code)}
    code += [(ld_abs, None, None, SECCOMP_DATA_ARG0), (jset, "deny", "allow", CLONE_NAMESPACE_FLAGS)]
    labels["allow"] = len(code)
    code.append((ret, None, None, SECCOMP_RET_ALLOW))
    labels["deny"] = len(code)
    code.append((ret, None, None, SECCOMP_RET_ERRNO | EPERM))
    labels["enosys"] = len(code)
    code.append((ret, None, None, SECCOMP_RET_ERRNO | ENOSYS))

    def offset(at: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - at - 1

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


def _apply_seccomp() -> str:
    """Install the filter on this process and its future children; '' or why it could not be."""
    machine = os.uname().machine
    if machine not in DENIED_SYSCALLS:
        return f"no seccomp filter for {machine}"
    prog = seccomp_program(machine)
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"seccomp filter refused (errno {ctypes.get_errno()})"
    return ""


BOOT_ENV = "GRADER_BOOT"
EVENT_PREFIX = "gradelib."
MAX_EVENT = 200


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


def _children_of(pid: int) -> set[int]:
    """Pids whose parent is `pid`, from /proc."""
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().decode("latin-1")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()  # after the command name: state, ppid, ...
            if len(fields) > 1 and int(fields[1]) == pid:
                kids.add(int(entry))
    return kids


def _kill_until_gone(pids_now, wait_s: float, pause_s: float, reap: bool) -> int:
    """SIGKILL whatever pids_now() lists until it lists nothing (or wait_s passes); the number killed."""
    import signal
    import time

    killed = 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pids = pids_now()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        if reap:
            for pid in pids:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
        time.sleep(pause_s)
    return killed


def _kill_descendants() -> int:
    """SIGKILL and reap every process below the template (orphans come to it: it is a subreaper)."""
    return _kill_until_gone(lambda: _children_of(os.getpid()), 10.0, 0.005, reap=True)


def _fork_run(sock, request: dict, fds: list[int], report_fd: int) -> int:
    """Fork the child of one run; returns its pid (in the template)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sock.close()  # the run never holds the template's control socket
        out_fd, events_fd = fds
        os.setsid()
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL when the template goes
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after exec: itself, not the template
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


SYSV_IPC = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}  # /proc/sysvipc/<kind> -> the call that removes one
IPC_RMID = 0


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
                removed += getattr(_libc, call)(*args) == 0
    return removed


def _serve(control_fd: int, report_fd: int, preload: list[str], private_ipc: bool = False) -> None:
    """The template's loop: one request, one forked run, one reply with how it ended (`private_ipc`:
    /dev/shm and System V IPC are the submission's own, emptied after each run)."""
    import json as _json
    import socket

    for name in preload:
        try:
            __import__(name)
        except Exception:
            pass  # the run imports it itself, and reports what fails
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # runs of the same uid cannot read or trace it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=control_fd)
    sock.send(b'{"ready": true}')
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            break
        if not message:
            break  # the grader is gone
        request = _json.loads(message)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            sock.send(b'{"error": "a run needs two descriptors"}')
            continue
        pid = _fork_run(sock, request, fds, report_fd)
        for fd in fds:
            os.close(fd)
        sock.send(_json.dumps({"pid": pid}).encode())
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
        sock.send(_json.dumps({"returncode": status, "killed": killed}).encode())
    os._exit(0)


def main() -> None:
    config = json.loads(os.environ.pop(BOOT_ENV, "{}"))
    rules = config.get("landlock")
    if rules:
        abi = landlock_abi()
        if abi:
            _apply_landlock(abi, rules["read"], rules["write"])
    report_fd = config.get("report_fd")
    if report_fd is not None:
        _install_reporter(int(report_fd))
    why = _apply_seccomp()
    sys.audit("gradelib.seccomp", why or "ok")
    template = config.get("template")
    if template:
        _serve(int(template["control_fd"]), int(report_fd), list(template.get("preload", [])),
               bool(template.get("private_ipc")))
        return
    _run_harness(sys.argv[1:])


if __name__ == "__main__":
    main()
