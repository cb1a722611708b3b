"""Linux kernel interfaces the grader and the child's boot both use: prctl, Landlock, seccomp, /proc.

Standard library only, and safe to import anywhere: the C library is opened on
first use, so on macOS or Windows nothing here runs unless a caller asks for it
(and the portable level never does).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

# prctl options (stable kernel ABI).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

_libc_handle = None


def libc():
    """The C library of this process (Linux only), opened once."""
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
        _libc_handle.syscall.restype = ctypes.c_long
    return _libc_handle


def prctl(option: int, arg2: int = 0, arg3=0, arg4: int = 0, arg5: int = 0) -> int:
    return libc().prctl(option, arg2, arg3, arg4, arg5)


def is_linux() -> bool:
    return sys.platform.startswith("linux")


# ---------------------------------------------------------------- Landlock

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1


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
    """Landlock ABI version of the running kernel, 0 when unavailable (and on any other system:
    system call 444 is Landlock's only on Linux)."""
    if not is_linux():
        return 0
    try:
        version = libc().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    except Exception:
        return 0
    return max(int(version), 0)


def _fs_mask(abi: int) -> int:
    mask = FS_ALL_V1
    if abi >= 2:
        mask |= FS_REFER
    if abi >= 3:
        mask |= FS_TRUNCATE
    if abi >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def apply_landlock(abi: int, read_paths: list[str], write_paths: list[str]) -> None:
    """Confine this process (and its future children) to the given paths."""
    lib = libc()
    handled = _fs_mask(abi)
    attr = _RulesetAttr(handled, 0, 0)
    size = 16  # ABI 1-3 know two fields; ABI >= 6 knows three
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    if abi < 4:
        size = 8
    fd = lib.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    read_access = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
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
                    allowed &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
                rule = _PathBeneathAttr(allowed & handled, pfd)
                if lib.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(pfd)
    if lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if lib.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(fd)


# ---------------------------------------------------------------- seccomp
# System calls no run needs that reach past its namespaces. The kernel's keyrings are per
# uid and outside every namespace: a key one run adds, the next run under the same sandbox uid could
# read. ptrace and process_vm_* reach into other processes of the uid (the template among them);
# perf_event_open, bpf, userfaultfd and io_uring are kernel attack surface. unshare, setns and a clone() that
# asks for a new namespace would give the run a user namespace, with every capability inside it and
# the kernel code behind them (mounts, netfilter, ...) to attack. socket() has no use in grading
# (honest handins make none; the template's control socket is made by the grader): without it no
# path-named UNIX socket of the host (a root daemon's, at the fallback level) can be reached, nor the
# network. execve and execveat: a run starts no other program (a fresh interpreter would have none of the
# harness's tripwires; the boot refuses Python's ways too). mq_open: POSIX message queues, which would outlive
# the run. Each fails with EPERM. memfd_create (memory in nobody's resident set, that sampling would not see)
# fails with ENOSYS, see UNSUPPORTED_SYSCALLS; /dev/shm, which multiprocessing uses, stays, counted as the
# run's memory. clone3 takes
# its flags in memory a filter cannot read, so it fails with ENOSYS: the C library then falls back
# to clone(), whose flags the filter checks (threads and fork() work as before).

SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
DENIED_SYSCALLS = {  # name -> number, per architecture (the kernel's syscall tables)
    "x86_64": {
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "perf_event_open": 298,
        "bpf": 321,
        "userfaultfd": 323,
        "unshare": 272,
        "setns": 308,
        "socket": 41,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "execve": 59,
        "execveat": 322,
        "mq_open": 240,
    },
    "aarch64": {
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "perf_event_open": 241,
        "bpf": 280,
        "userfaultfd": 282,
        "unshare": 97,
        "setns": 268,
        "socket": 198,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "execve": 221,
        "execveat": 281,
        "mq_open": 180,
    },
}
# Refused as unknown (ENOSYS), which every caller takes for an older kernel and works without: memfd_create
# (a JIT then maps /dev/shm files, which count).
UNSUPPORTED_SYSCALLS = {"x86_64": {"memfd_create": 319}, "aarch64": {"memfd_create": 279}}
CLONE_SYSCALLS = {"x86_64": (56, 435), "aarch64": (220, 435)}  # (clone, clone3)
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
# (CLONE_NEWTIME, 0x80, is clone()'s exit-signal byte there: only unshare and clone3 take it.)
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
# Offsets in struct seccomp_data: nr, arch, the low words of args[0] and args[1] (little-endian).
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARG0, SECCOMP_DATA_ARG1 = 0, 4, 16, 24


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


LD_ABS, RET, JEQ, JGE, JGT, JSET = 0x20, 0x06, 0x15, 0x35, 0x25, 0x45  # BPF_LD|W|ABS, BPF_RET|K, BPF_JMP|K ...


def assemble(code: list) -> list[tuple[int, int, int, int]]:
    """A classic BPF program, (code, jt, jf, k) per instruction, from `code`: instructions whose jumps name a
    label (None: the next instruction) and the labels themselves (a string, naming the instruction after it)."""
    labels, program = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(program)
        else:
            program.append(item)

    def offset(at: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - at - 1

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(program)]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """System calls of another ABI than the native one (32-bit int 0x80, x32) and DENIED_SYSCALLS fail with
    EPERM, a clone() with a namespace flag too, clone3 and UNSUPPORTED_SYSCALLS with ENOSYS; everything else is
    allowed."""
    clone, clone3 = CLONE_SYSCALLS[machine]
    return assemble([
        (LD_ABS, None, None, SECCOMP_DATA_ARCH),
        (JEQ, None, "deny", AUDIT_ARCH[machine]),
        (LD_ABS, None, None, SECCOMP_DATA_NR),
        (JGE, "deny", None, X32_SYSCALL_BIT),
        *((JEQ, "deny", None, nr) for nr in sorted(DENIED_SYSCALLS[machine].values())),
        (JEQ, "enosys", None, clone3),
        *((JEQ, "enosys", None, nr) for nr in sorted(UNSUPPORTED_SYSCALLS[machine].values())),
        (JEQ, "clone", None, clone),
        (RET, None, None, SECCOMP_RET_ALLOW),
        "clone", (LD_ABS, None, None, SECCOMP_DATA_ARG0), (JSET, "deny", "allow", CLONE_NAMESPACE_FLAGS),
        "allow", (RET, None, None, SECCOMP_RET_ALLOW),
        "deny", (RET, None, None, SECCOMP_RET_ERRNO | EPERM),
        "enosys", (RET, None, None, SECCOMP_RET_ERRNO | ENOSYS),
    ])


# What a run of attention.py may not do once its harness is set up (guards.py adds this filter then): install a
# signal handler (one would run Python code inside the guards' own functions), start a thread (the saved-tensors
# hook is per thread), or close, replace, duplicate or change the audit pipe's descriptor (a run could point it
# elsewhere around an autograd call, or read it back).
RUN_GUARD_SYSCALLS = {  # name -> number; None: the architecture has no such call
    "x86_64": {"rt_sigaction": 13, "clone": 56, "close": 3, "dup": 32, "fcntl": 72, "ioctl": 16, "dup2": 33,
               "dup3": 292, "close_range": 436},
    "aarch64": {"rt_sigaction": 134, "clone": 220, "close": 57, "dup": 23, "fcntl": 25, "ioctl": 29, "dup2": None,
                "dup3": 24, "close_range": 436},
}
CLONE_THREAD = 0x00010000


def run_guard_program(machine: str, fd: int) -> list[tuple[int, int, int, int]]:
    """The filter a run of attention.py gets once its harness is set up (RUN_GUARD_SYSCALLS): EPERM for
    rt_sigaction, a clone() of a thread, and close, dup, fcntl, ioctl, dup2 or dup3 naming descriptor `fd` (as
    old or new), or a close_range over it."""
    nr = RUN_GUARD_SYSCALLS[machine]
    on_fd = [nr[name] for name in ("close", "dup", "fcntl", "ioctl")]
    return assemble([
        (LD_ABS, None, None, SECCOMP_DATA_ARCH),
        (JEQ, None, "allow", AUDIT_ARCH[machine]),  # the first filter refuses every other ABI
        (LD_ABS, None, None, SECCOMP_DATA_NR),
        (JEQ, "deny", None, nr["rt_sigaction"]),
        (JEQ, "clone", None, nr["clone"]),
        *((JEQ, "arg0", None, n) for n in on_fd),
        *((JEQ, "arg01", None, n) for n in (nr["dup2"], nr["dup3"]) if n is not None),
        (JEQ, "range", "allow", nr["close_range"]),
        "clone", (LD_ABS, None, None, SECCOMP_DATA_ARG0), (JSET, "deny", "allow", CLONE_THREAD),
        "arg01", (LD_ABS, None, None, SECCOMP_DATA_ARG1), (JEQ, "deny", None, fd),
        "arg0", (LD_ABS, None, None, SECCOMP_DATA_ARG0), (JEQ, "deny", "allow", fd),
        "range", (LD_ABS, None, None, SECCOMP_DATA_ARG0), (JGT, "allow", None, fd),  # first > fd
        (LD_ABS, None, None, SECCOMP_DATA_ARG1), (JGE, "deny", "allow", fd),  # last >= fd
        "allow", (RET, None, None, SECCOMP_RET_ALLOW),
        "deny", (RET, None, None, SECCOMP_RET_ERRNO | EPERM),
    ])


def apply_seccomp(program: list[tuple[int, int, int, int]] | None = None) -> str:
    """Install a filter (`program`, by default seccomp_program's) on this process and its future children; '' or
    why it could not be. Filters add up: a later one can only refuse more."""
    machine = os.uname().machine
    if machine not in DENIED_SYSCALLS:
        return f"no seccomp filter for {machine}"
    prog = program if program is not None else seccomp_program(machine)
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    lib = libc()
    if lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
    if lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"seccomp filter refused (errno {ctypes.get_errno()})"
    return ""


# ---------------------------------------------------------------- processes, from /proc

def process_table() -> dict[int, tuple[str, int]]:
    """pid -> (state, parent pid) of every process, from one scan of /proc/<pid>/stat."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().decode("latin-1")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()  # after the command name: state, ppid, ...
            if len(fields) > 1:
                table[int(entry)] = (fields[0], int(fields[1]))
    return table


def children_of(pid: int) -> set[int]:
    """Pids whose parent is `pid` (zombies included: they are reaped after), from /proc."""
    return {child for child, (_state, parent) in process_table().items() if parent == pid}


def kill_until_gone(pids_now, wait_s: float, pause_s: float, reap: bool) -> int:
    """SIGKILL whatever pids_now() lists until it lists nothing (or wait_s passes); the number killed."""
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


def kill_tree(roots, wait_s: float = 10.0) -> int:
    """Stop every process below `roots()` (the pids it lists and their descendants), over and over until no new
    one appears, then SIGKILL them all; the number killed. A stopped process forks no more, so a chain of
    processes that fork as fast as they are killed (one another's parents, or each in a session of its own)
    is caught whole, where killing them one scan at a time can lag behind."""
    stopped: set[int] = set()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        found = descendants(set(roots())) - stopped
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        stopped |= found
    killed = 0
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def end_tree(roots, wait_s: float, reap: bool) -> int:
    """kill_tree, then SIGKILL (and with `reap`, reap) whatever roots() still lists until it lists nothing; the
    number killed. The second pass signals again those killed in the first (zombies until reaped): they are
    not counted twice."""
    killed = kill_tree(roots, wait_s)
    return max(killed, kill_until_gone(roots, wait_s, 0.005, reap=reap))


def process_alive(pid: int) -> bool:
    """Whether `pid` is a process that still runs: a zombie (ended, not yet reaped by its parent,
    which may never happen when that parent is a long-lived subreaper) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    return bool(fields) and fields[0] not in ("Z", "X")


def descendants(roots: set[int]) -> set[int]:
    """Every live process below the pids in `roots` (roots included when alive), from one scan of /proc."""
    parent = {pid: ppid for pid, (state, ppid) in process_table().items() if state not in ("Z", "X")}
    found = {p for p in roots if p in parent}
    frontier = set(found)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def resident_mb(pids: set[int], shared_once: bool = False) -> int:
    """Memory these processes hold together, in MB: each one's whole resident memory (/proc/<pid>/statm,
    which counts pages forked processes share in every one of them); with `shared_once`, each one's
    proportional share instead (/proc/<pid>/smaps_rollup's Pss: 10 ms for a process that imported torch,
    against 0.05 ms) where it can be read, which another uid's process cannot be without CAP_SYS_PTRACE
    (Docker's default container)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        if shared_once:
            try:
                with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                    pss = next((int(line.split()[1]) << 10 for line in fh if line.startswith(b"Pss:")), None)
                if pss is not None:
                    total += pss
                    continue
            except (OSError, ValueError, IndexError):
                pass
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
    return total >> 20


# ---------------------------------------------------------------- rlimits

def set_rlimits(values: dict[str, int]) -> None:
    """Set each rlimit (by resource name) on this process, never above what it was given: raising a hard
    limit needs a capability Docker's default set lacks, and would undo the grader's own caps (a
    container's, a batch worker's). RLIMIT_CPU's hard limit is one second past its soft one (SIGXCPU first)."""
    import resource

    for name, value in values.items():
        kind = getattr(resource, name)
        _soft, ceiling = resource.getrlimit(kind)
        soft, hard = value, value + 1 if name == "RLIMIT_CPU" else value
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(kind, (soft, hard))


def rlimits(values: dict[str, int]):
    """A function that sets these rlimits on the calling process (a preexec step, between fork and exec)."""
    return lambda: set_rlimits(values)
