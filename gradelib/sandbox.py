"""Run a submission's code in a separate, resource-limited process.

The grader never imports student code. It writes inputs into a scratch folder,
starts `python -I harness.py` there, and reads back plain arrays once the
process and everything it started are gone. The child gets, where the
machine allows each:

- its own session (process group), killed whole after the run;
- a wall-clock timeout, and rlimits on CPU seconds, address space, file size
  and open files;
- Landlock (Linux >= 5.13): read-only access to the Python installation and
  the system libraries, read-write access to its scratch folder only, and
  nothing else -- so it cannot read hidden cases, write other submissions'
  results, signal or ptrace the grader, or open TCP connections;
- no privileges: as root it becomes `nobody` when the interpreter is readable
  by that user, and otherwise keeps uid 0 with every capability dropped;
- no way to outlive the grader: the grader is a child subreaper, so processes
  the submission forks and orphans are re-parented to it and killed.

`isolation_report()` says which of these this machine supports.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import signal
import site
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

# Linux constants (stable kernel ABI).
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

NOBODY = "nobody"
READ_ONLY_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/sys", "/opt/conda")
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/shm")

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


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_all_capabilities() -> None:
    """Keep uid 0 but remove every capability, now and across exec."""
    # SECBIT_NOROOT | its lock | SECBIT_NO_SETUID_FIXUP | its lock: exec as uid 0
    # no longer grants capabilities.
    if _libc.prctl(PR_SET_SECUREBITS, 0x0F, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECUREBITS failed")
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly past the last cap
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _readable_by(uid: int, gid: int, path: str) -> bool:
    """Whether a user with no supplementary groups can reach and read `path`."""
    p = Path(path).resolve()
    for part in [*reversed(p.parents), p]:
        try:
            st = part.stat()
        except OSError:
            return False
        need = 0o1 if part != p or part.is_dir() else 0o4
        if st.st_uid == uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        if not bits & need:
            return False
    return True


def python_paths() -> list[str]:
    """Folders the interpreter and its packages live in (read-only in the child)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(str(Path(sys.executable).resolve().parent.parent))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    paths.update(site.getsitepackages())
    return sorted(p for p in paths if p and os.path.exists(p))


@dataclass(frozen=True)
class Limits:
    """Resources a submission's process may use."""

    timeout_s: float = 60.0  # wall clock for the whole run
    memory_mb: int = 3072  # address space (RLIMIT_AS); torch alone maps ~0.7 GB
    file_mb: int = 64  # largest file the child may write
    open_files: int = 256


@dataclass
class ChildRun:
    """How the child process ended; nothing here comes from the child's own claims."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    isolation: list[str] = field(default_factory=list)
    leftover_killed: int = 0

    def describe(self) -> str:
        if self.timed_out:
            return f"was stopped after the {self.wall_s:.0f} s time limit"
        if self.returncode is None:
            return "did not start"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            hints = {"SIGKILL": " (usually the memory limit)", "SIGXCPU": " (the CPU-time limit)"}
            hint = hints.get(name, "")
            return f"was killed by {name}{hint}"
        return f"exited with code {self.returncode}"


_subreaper_set = False


def _become_subreaper() -> None:
    """Orphans of the child get re-parented to us, so none can outlive a run."""
    global _subreaper_set
    if not _subreaper_set:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Nothing of the same uid may read this process's memory (/proc/<pid>/mem).
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        _subreaper_set = True


def _children_of(pid: int) -> set[int]:
    kids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("latin-1")
        except OSError:
            continue
        # Field 4 (ppid) follows the ')' that closes the command name.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.add(int(entry))
    return kids


def _kill_new_children(before: set[int]) -> int:
    """Kill and reap every child of ours that did not exist before the run."""
    killed = 0
    for _ in range(50):
        extra = _children_of(os.getpid()) - before
        if not extra:
            break
        for pid in extra:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in extra:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        time.sleep(0.01)
    return killed


def isolation_report() -> list[str]:
    """What `run` can apply on this machine, in words."""
    report = ["own session, killed whole after the run", "wall-clock timeout and rlimits (CPU, memory, files)"]
    abi = landlock_abi()
    report.append(f"Landlock ABI {abi}: filesystem confined to the scratch folder" if abi else "no Landlock: the child can read files this user can read")
    if os.geteuid() == 0:
        nobody = _nobody()
        if nobody and all(_readable_by(nobody[0], nobody[1], p) for p in [sys.executable, *python_paths()]):
            report.append("runs as user nobody")
        else:
            report.append("runs as uid 0 with all capabilities dropped (the interpreter is not readable by nobody)")
    else:
        report.append(f"runs as uid {os.geteuid()} (not root: no user switch)")
    return report


def _nobody() -> tuple[int, int] | None:
    try:
        pw = pwd.getpwnam(NOBODY)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def run(
    argv: list[str],
    workdir: Path,
    limits: Limits,
    env_extra: dict[str, str] | None = None,
) -> ChildRun:
    """Run `python -I argv...` in `workdir` under the limits; return how it ended.

    The child's stdout and stderr go to workdir/log.txt (never to our stdout),
    so nothing a submission prints can pose as grader output.
    """
    _become_subreaper()
    workdir = Path(workdir).resolve()
    tmp = workdir / "tmp"
    tmp.mkdir(exist_ok=True)
    abi = landlock_abi()
    isolation: list[str] = []
    read_paths = [p for p in (*READ_ONLY_SYSTEM_PATHS, *python_paths()) if os.path.exists(p)]
    write_paths = [str(workdir), *[p for p in DEVICE_PATHS if os.path.exists(p)]]

    switch_to: tuple[int, int] | None = None
    drop_caps = False
    if os.geteuid() == 0:
        nobody = _nobody()
        if nobody and all(_readable_by(nobody[0], nobody[1], p) for p in [sys.executable, *python_paths()]):
            switch_to = nobody
            for root, dirs, files in os.walk(workdir):
                for name in [*dirs, *files]:
                    os.lchown(os.path.join(root, name), *nobody)
            os.chown(workdir, *nobody)
            isolation.append("user nobody")
        else:
            drop_caps = True
            isolation.append("uid 0 without capabilities")
    if abi:
        isolation.append(f"landlock abi {abi}")

    cpu_s = int(limits.timeout_s) + 5
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.file_mb * 1024 * 1024

    def preexec() -> None:  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if abi:
            _apply_landlock(abi, read_paths, write_paths)
        else:
            _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if switch_to is not None:
            os.setgroups([])
            os.setgid(switch_to[1])
            os.setuid(switch_to[0])
        elif drop_caps:
            _drop_all_capabilities()

    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(tmp),
        **(env_extra or {}),
    }
    before = _children_of(os.getpid())
    log_path = workdir / "log.txt"
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        if switch_to is not None:
            os.chown(log_path, *switch_to)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", *argv],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=preexec,
                close_fds=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return ChildRun(None, False, 0.0, f"could not start the child process: {exc}", isolation)
        try:
            returncode: int | None = proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if returncode is None:
            returncode = proc.wait()
    wall = time.monotonic() - start
    killed = _kill_new_children(before)
    return ChildRun(returncode, timed_out, wall, read_tail(log_path), isolation, killed)


def read_tail(path: Path, limit: int = 4000) -> str:
    """The last `limit` characters of a file the child wrote, as safe text."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read(limit)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
