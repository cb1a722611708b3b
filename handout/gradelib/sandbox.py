"""Run a submission's code in a separate, confined process.

The grader never imports student code. It writes inputs into a scratch folder,
starts `python -I boot.py harness.py` there, and reads back plain arrays once
the process and everything it started are gone. Two levels, the strongest the
machine allows (`isolation_level()`; `Limits.isolation="strict"` refuses the
weaker one):

"namespaces" (root with bubblewrap and util-linux setpriv): the child runs in
  fresh PID, network, IPC, UTS and mount namespaces. Its root is an empty
  tmpfs holding, read-only, /usr, a few files of /etc and the Python
  installation at their own paths; its scratch folder at /scratch; a fresh
  /proc, a minimal /dev and private size-capped /tmp and /dev/shm that vanish
  with it. It runs as a real unprivileged uid, one per concurrent run (a lock
  under /run), with no capabilities, no_new_privs, RLIMIT_NPROC, and Landlock
  inside as a second layer. Killing bubblewrap ends the namespace's init, and
  the kernel then kills every process of the run, setsid() or not.
"landlock" / "none" (no bubblewrap, not root, or an unprivileged container):
  its own session, rlimits, Landlock when the kernel has it, `nobody` or uid 0
  without capabilities, and the grader as child subreaper to kill orphans.

At both levels the child's stdout/stderr and its audit events come back over
pipes the grader opened before it started (never a path the child can
replace), read with a byte cap.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import pwd
import selectors
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .child.boot import (  # noqa: F401  (re-exported: tests and tools use them from here)
    BOOT_ENV,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    _apply_landlock,
    _children_of,
    _kill_until_gone,
    _libc,
    landlock_abi,
)

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

NOBODY = "nobody"
READ_ONLY_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/sys", "/opt/conda")
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/shm")

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
    processes: int = 64  # processes and threads together (RLIMIT_NPROC)
    output_mb: int = 32  # all it may print; a run that prints more is stopped at once
    isolation: str = "best"  # "strict": refuse to run without namespaces


LOG_CAP = 64 * 1024  # bytes of the child's output kept (its tail)
EVENTS_LIMIT_MB = 1  # audit events a run may send; the harness sends a few lines, so a run that sends more is stopped
EVENTS_KEPT = 256  # records kept in order (ChildRun.events), and arguments kept per event name
EVENT_NAMES_KEPT = 32  # distinct event names indexed; the harness's own are always indexed
HARNESS_EVENTS = ("boot", "autograd")
EVENT_RECORD_MAX = 4096  # bytes of one record; boot.py's hook writes at most 4 x 200 + 1
SHM_MB = 64  # private /dev/shm of a namespaced child
UID_BASE = 61000  # uids UID_BASE .. UID_BASE + SLOTS - 1 are reserved for sandboxed children
SLOTS = 64
SLOT_DIR = Path("/run/gradelib-sandbox")
SCRATCH_INSIDE = "/scratch"
BOOT_INSIDE = "/run/grader/boot.py"
BOOT_SOURCE = Path(__file__).resolve().parent / "child" / "boot.py"
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf")
LEVELS = ("namespaces", "landlock", "none")
FORCE_ENV = "GRADELIB_SANDBOX"  # "landlock": use the fallback even where namespaces work


@dataclass
class ChildRun:
    """How the child process ended; nothing here comes from the child's own claims."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    isolation: list[str] = field(default_factory=list)
    leftover_killed: int = 0
    level: str = "none"
    events: list[str] = field(default_factory=list)  # the first audit events, in order, as "gradelib.<name> args"
    output_capped_mb: int = 0  # the cap on what it may print, when it printed more and was stopped for it
    event_index: dict[str, list[str]] = field(default_factory=dict)  # event name -> arguments of each, in order
    events_tampered: str = ""  # why the audit channel cannot be trusted (the run wrote to it or flooded it)
    events_capped_mb: int = 0  # the cap on the audit events it may send, when it sent more and was stopped for it

    def describe(self) -> str:
        if self.output_capped_mb:
            return f"was stopped when its output passed {self.output_capped_mb} MB (print less: the grader keeps only the last lines)"
        if self.events_capped_mb:
            return (f"was stopped when it sent more than {self.events_capped_mb} MB to the grader's audit pipe "
                    "(only the grader's own hook writes there)")
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

    def event_args(self, name: str) -> list[str]:
        """Arguments of every `gradelib.<name>` event the child raised."""
        return list(self.event_index.get(name, []))


_subreaper_set = False


def _become_subreaper() -> None:
    """Orphans of the child get re-parented to us, so none can outlive a run."""
    global _subreaper_set
    if not _subreaper_set:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Nothing of the same uid may read this process's memory (/proc/<pid>/mem).
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        _subreaper_set = True


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real uid is `uid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def _kill_new_children(before: set[int]) -> int:
    """Kill and reap every child of ours that did not exist before the run."""
    # Each kill re-parents the next link of a chain of orphans to us: go on until none is left.
    return _kill_until_gone(lambda: _children_of(os.getpid()) - before, 10.0, 0.01, reap=True)


def kill_uid(uid: int, wait_s: float = 5.0) -> int:
    """SIGKILL every process of a sandbox uid until none is left; the number killed."""
    return _kill_until_gone(lambda: processes_of_uid(uid), wait_s, 0.02, reap=False)


# ---------------------------------------------------------------- namespaces

class _Slot:
    """A sandbox uid held for one run: an flock that the kernel drops if we die."""

    def __init__(self) -> None:
        SLOT_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        for k in range(SLOTS):
            fd = os.open(SLOT_DIR / f"slot-{k}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid = fd, UID_BASE + k
            # A grader that died mid-run may have left processes of this uid.
            kill_uid(self.uid)
            return
        raise RuntimeError(f"all {SLOTS} sandbox uids are in use")

    def release(self) -> None:
        kill_uid(self.uid)
        os.close(self.fd)


def _python_mounts() -> tuple[list[str], str]:
    """(folders to mount read-only, the interpreter to run inside)."""
    prefix = os.path.realpath(sys.prefix)
    roots = {prefix, os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}
    roots.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    roots.update(os.path.realpath(p) for p in python_paths())
    kept: list[str] = []
    for path in sorted(roots):
        if path.startswith("/usr/") or path == "/usr" or any(path.startswith(k + "/") for k in kept):
            continue
        kept.append(path)
    if sys.prefix != sys.base_prefix:  # a venv: its own bin/python finds pyvenv.cfg
        exe = os.path.join(prefix, "bin", os.path.basename(sys.executable))
    else:
        exe = os.path.realpath(sys.executable)
    return kept, exe


def _bwrap_argv(workdir: Path, uid: int, limits: Limits) -> tuple[list[str], list[str], list[str]]:
    """(bwrap + setpriv + python argv prefix, Landlock read paths, write paths) for a namespaced child."""
    pymounts, exe = _python_mounts()
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent", "--new-session",
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    # Private and empty; not writable by the child (TMPDIR is its scratch). Mounted before the
    # interpreter, so a Python installation or virtual environment under /tmp is bound over it.
    argv += ["--size", str(1024 * 1024), "--tmpfs", "/tmp"]
    made: set[str] = {"/", "/tmp"}

    def parents(path: str) -> list[str]:
        # bwrap makes missing parents 0700 (root only): make them traversable first.
        out = []
        parts = Path(path).parts[1:-1]
        for i in range(len(parts)):
            p = "/" + "/".join(parts[: i + 1])
            if p not in made:
                made.add(p)
                out += ["--perms", "0755", "--dir", p]
        return out

    for path in [*(p for p in ETC_FILES if os.path.exists(p)), *pymounts]:
        argv += [*parents(path), "--ro-bind", path, path]
    argv += [
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "01777", "--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm",
        "--bind", str(workdir), SCRATCH_INSIDE,
        *parents(BOOT_INSIDE), "--ro-bind", str(BOOT_SOURCE), BOOT_INSIDE,
        "--remount-ro", "/",
        "--chdir", SCRATCH_INSIDE,
        "--",
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
        exe, "-I", "-B", BOOT_INSIDE,
    ]
    read = ["/usr", "/etc", "/proc", "/dev", *pymounts]
    write = [SCRATCH_INSIDE, "/dev/shm", "/dev/null"]
    return argv, read, write


_level: tuple[str, str] | None = None  # (level, why)


def _probe_namespaces() -> str | None:
    """None when a namespaced child runs here, else why not."""
    if os.environ.get(FORCE_ENV, "") in ("landlock", "none"):
        return f"{FORCE_ENV}={os.environ[FORCE_ENV]} asks for the fallback"
    if os.geteuid() != 0:
        return "not root: a real unprivileged uid for the child needs root"
    for tool in ("bwrap", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make setup installs bubblewrap)"
    import tempfile

    slot = None
    probe = Path(tempfile.mkdtemp(prefix="sandbox-probe-"))
    try:
        slot = _Slot()
        os.chown(probe, slot.uid, slot.uid)
        argv, _r, _w = _bwrap_argv(probe, slot.uid, Limits())
        argv = argv[: len(argv) - 1 - argv[::-1].index(BOOT_INSIDE)] + ["-S", "-c", "import os; print(os.getuid())"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or proc.stdout.strip() != str(slot.uid):
            return f"bubblewrap could not start a test child: {(proc.stderr or proc.stdout).strip()[:300]}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start a test child: {exc}"
    finally:
        if slot is not None:
            slot.release()
        shutil.rmtree(probe, ignore_errors=True)
    return None


def isolation_level() -> str:
    """"namespaces", "landlock" or "none": what `run` applies on this machine (probed once)."""
    global _level
    if _level is None:
        why = _probe_namespaces()
        if why is None:
            _level = ("namespaces", "")
        else:
            _level = ("landlock" if landlock_abi() else "none", why)
    return _level[0]


def isolation_reason() -> str:
    """Why namespaces are not used here ('' when they are)."""
    isolation_level()
    return _level[1] if _level else ""


def isolation_report() -> list[str]:
    """What `run` can apply on this machine, in words."""
    level = isolation_level()
    if level == "namespaces":
        return [
            "namespaces: bubblewrap with fresh PID, network, IPC, UTS and mount namespaces; only the interpreter "
            "(read-only) and the scratch folder mounted; private /tmp and /dev/shm",
            f"a distinct unprivileged uid per concurrent run (from {UID_BASE}), no capabilities, "
            "RLIMIT_NPROC, wall-clock timeout and rlimits",
            f"Landlock ABI {landlock_abi()} inside as a second layer" if landlock_abi() else "no Landlock inside",
        ]
    report = [f"{level}: no namespaces ({isolation_reason()})", "own session, killed whole after the run",
              "wall-clock timeout and rlimits (CPU, memory, files, processes)"]
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


def _child_env(home: str, tmp: str, extra: dict[str, str] | None) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": tmp,
        **(extra or {}),
    }


def run(
    argv: list[str],
    workdir: Path,
    limits: Limits,
    env_extra: dict[str, str] | None = None,
) -> ChildRun:
    """Run `python -I boot.py argv...` in `workdir` under the limits; return how it ended.

    The child's stdout and stderr come back over a pipe (never to our stdout,
    never through a file the child could replace), so nothing a submission
    prints can pose as grader output.
    """
    _become_subreaper()
    workdir = Path(workdir).resolve()
    level = isolation_level()
    if limits.isolation == "strict" and level != "namespaces":
        return ChildRun(None, False, 0.0, f"refused to run without namespaces: {isolation_reason()}", [], 0, level)
    if _session is not None and _session.compatible(workdir, limits):
        done = _session.run(argv, workdir, limits, env_extra)
        if done is not None:
            return done
    (workdir / "tmp").mkdir(exist_ok=True)
    out_r, out_w = os.pipe()
    rep_r, rep_w = os.pipe()
    slot: _Slot | None = None
    cgroups: list[Path] = []
    try:
        if level == "namespaces":
            slot = _Slot()
            cmd, preexec, env, isolation = _namespaced(argv, workdir, limits, slot, rep_w, env_extra)
        else:
            cmd, preexec, env, isolation = _fallback(argv, workdir, limits, rep_w, env_extra)
        cgroups = _make_cgroups(limits) if os.geteuid() == 0 else []
        if cgroups:
            isolation.append("cgroups: " + ", ".join(_cgroup_label(c) for c in cgroups))
        procs_files = [str(c / "cgroup.procs") for c in cgroups]
        inner = preexec

        def preexec() -> None:
            for path in procs_files:  # before exec: everything the run starts is inside
                with open(path, "w") as fh:
                    fh.write(str(os.getpid()))
            inner()

        return _supervise(cmd, workdir, preexec, env, limits, out_r, out_w, rep_r, rep_w, isolation, level, slot,
                          cgroups)
    finally:
        kill_cgroups(cgroups)
        for folder in cgroups:
            _remove_cgroup(folder)
        for fd in (out_r, out_w, rep_r, rep_w):
            try:
                os.close(fd)
            except OSError:
                pass
        if slot is not None:
            slot.release()


CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
_run_counter = iter(range(1, 1 << 62))


def _make_cgroups(limits: Limits) -> list[Path]:
    """A cpu, a pids and a memory cgroup (v1, or v2 where delegated) for one run; [] where none can be made.

    The whole run shares one CPU, so however many processes or sessions it
    starts (each setsid() is an autogroup of its own in the root cgroup),
    a classmate graded alongside keeps its share; pids.max caps processes and
    threads of the run whatever uid they have; the memory limit holds for all
    its processes together (RLIMIT_AS caps each one alone: 64 processes of
    3 GB each would be 192 GB). Where nothing can be made the run goes on
    with rlimits only; the memory controller is optional.
    """
    name = f"gradelib-{os.getpid()}-{next(_run_counter)}"
    memory = str(limits.memory_mb << 20)
    # bubblewrap's own two processes are in the group too.
    settings = {"cpu": {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(CPU_PERIOD_US)},
                "pids": {"pids.max": str(limits.processes + 2)},
                "memory": {"memory.limit_in_bytes": memory}}
    optional = {"memory.max", "memory.swap.max"}
    made: list[Path] = []
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2
        settings = {"": {"cpu.max": f"{CPU_PERIOD_US} {CPU_PERIOD_US}", "pids.max": str(limits.processes + 2),
                         "memory.max": memory, "memory.swap.max": "0"}}
    for controller, files in settings.items():
        # v1: below the grader's own group, so limits put on the grader (a slice, a benchmark's box) hold
        # for the run too. v2 forbids processes in a group with children: its root (a container's own, under
        # a cgroup namespace) is the exception.
        base = _own_cgroup(controller) if controller else CGROUP_ROOT
        if not (base / "cgroup.procs").exists():
            continue
        folder = base / name
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            for fname, value in files.items():
                try:
                    (folder / fname).write_text(value)
                except OSError:
                    if fname not in optional:  # v2 without the memory controller delegated: cpu and pids still hold
                        raise
        except OSError:
            _remove_cgroup(folder)
            continue
        made.append(folder)
    return made


def _own_cgroup(controller: str) -> Path:
    """The folder of this process's cgroup for a v1 controller ('' for v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _num, names, path = line.split(":", 2)
        if (controller in names.split(",")) if controller else names == "":
            folder = CGROUP_ROOT / controller / path.lstrip("/") if controller else CGROUP_ROOT / path.lstrip("/")
            if (folder / "cgroup.procs").exists():
                return folder
    return CGROUP_ROOT / controller if controller else CGROUP_ROOT


def _cgroup_label(folder: Path) -> str:
    first = folder.relative_to(CGROUP_ROOT).parts[0]
    return first if first in ("cpu", "pids", "memory") else "v2"


def _remove_cgroup(folder: Path) -> None:
    for _ in range(100):  # busy until its last (killed) process is gone
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def kill_cgroups(cgroups: list[Path], wait_s: float = 10.0) -> int:
    """SIGKILL every process in the run's cgroups until they are empty; the number killed.

    Sessions, double forks and re-parenting do not take a process out of its cgroup.
    The CPU cap is lifted first: a throttled process would take long to die.
    """
    killed: set[int] = set()
    for folder in cgroups:
        for fname, value in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
            if (folder / fname).exists():
                try:
                    (folder / fname).write_text(value)
                except OSError:
                    pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for folder in cgroups:
            try:
                pids.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return len(killed)


def sweep_cgroups() -> int:
    """Empty and remove the run cgroups of graders that ended without removing them (killed, or ended
    by a signal mid-run); how many. Only groups below our own, named for a grader that is gone."""
    removed = 0
    for base in {CGROUP_ROOT, _own_cgroup("cpu"), _own_cgroup("pids"), _own_cgroup("memory")}:
        for folder in base.glob("gradelib-*"):
            try:
                owner = int(folder.name.split("-")[1])
            except (ValueError, IndexError):
                continue
            if not process_alive(owner):
                kill_cgroups([folder])
                _remove_cgroup(folder)
                removed += not folder.exists()
    return removed


def process_alive(pid: int) -> bool:
    """Whether `pid` is a process that still runs: a zombie (ended, not yet reaped by its parent,
    which may never happen when that parent is a long-lived subreaper) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    return bool(fields) and fields[0] not in ("Z", "X")


def _rlimits(limits: Limits, nproc: int | None):
    cpu_s = int(limits.timeout_s) + 5
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.file_mb * 1024 * 1024

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _namespaced(argv, workdir: Path, limits: Limits, slot: _Slot, rep_w: int, env_extra, template: dict | None = None):
    os.chown(workdir, slot.uid, slot.uid)
    os.chown(workdir / "tmp", slot.uid, slot.uid)
    prefix, read, write = _bwrap_argv(workdir, slot.uid, limits)
    tmp = f"{SCRATCH_INSIDE}/tmp"
    env = _child_env(SCRATCH_INSIDE, tmp, env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": {"read": read, "write": write}, "report_fd": rep_w, "template": template})
    rl = _rlimits(limits, limits.processes)  # counted for the slot's uid only

    def preexec() -> None:
        rl()
        # bwrap is root here; the child gives up root by exec'ing setpriv.

    isolation = ["namespaces (bubblewrap)", f"uid {slot.uid}"]
    if landlock_abi():
        isolation.append(f"landlock abi {landlock_abi()}")
    return [*prefix, *argv], preexec, env, isolation


def _fallback(argv, workdir: Path, limits: Limits, rep_w: int, env_extra, template: dict | None = None):
    abi = landlock_abi()
    isolation: list[str] = []
    boot = workdir / "_boot.py"
    shutil.copyfile(BOOT_SOURCE, boot)
    read_paths = [p for p in (*READ_ONLY_SYSTEM_PATHS, *python_paths()) if os.path.exists(p)]
    write_paths = [str(workdir), *[p for p in DEVICE_PATHS if os.path.exists(p)]]
    switch_to: tuple[int, int] | None = None
    drop_caps = False
    if os.geteuid() == 0:
        nobody = _nobody()
        if nobody and all(_readable_by(nobody[0], nobody[1], p) for p in [sys.executable, *python_paths()]):
            switch_to = nobody
            if template is None:
                for root, dirs, files in os.walk(workdir):
                    for name in [*dirs, *files]:
                        os.lchown(os.path.join(root, name), *nobody)
                os.chown(workdir, *nobody)
            else:  # the submission's folder stays the grader's; each run's folder is given to nobody
                os.chown(workdir / "tmp", *nobody)
            isolation.append("user nobody")
        else:
            drop_caps = True
            isolation.append("uid 0 without capabilities")
    if abi:
        isolation.append(f"landlock abi {abi}")
    # The uid is shared here (with the grader, or with classmates graded alongside): a count
    # per uid would let one submission use up another's, so only the pids cgroup caps processes.
    rl = _rlimits(limits, None)

    def preexec() -> None:  # runs in the child between fork and exec
        rl()
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

    env = _child_env(str(workdir), str(workdir / "tmp"), env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": None, "report_fd": rep_w, "template": template})
    if template is not None:
        inner = preexec

        def preexec() -> None:  # a template that outlives its grader would be nobody's
            inner()
            _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    return [sys.executable, "-I", "-B", str(boot), *argv], preexec, env, isolation


class _Tail:
    """The last `cap` bytes written to a pipe."""

    def __init__(self, cap: int):
        self.cap, self.data, self.total = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        del self.data[: max(0, len(self.data) - self.cap)]


class _Events:
    """The audit events a run sends, read record by record to the end, whatever came before.

    boot.py's hook writes each `gradelib.<name> args` event as one line, in one write (atomic on a
    pipe) that also starts with an end of line, so bytes written before it without one cannot
    swallow it. Every record is indexed by name whatever precedes it, so no padding of harmless events
    pushes an autograd record out of view; anything that is not such a record (bytes a submission
    wrote to the pipe itself) or a flood past the limit marks the channel `tampered`: nothing an
    honest run does.
    """

    def __init__(self, limit_bytes: int):
        self.limit, self.total = limit_bytes, 0
        self.records: list[str] = []
        self.by_name: dict[str, list[str]] = {}
        self.tampered = ""
        self._partial = bytearray()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.total > self.limit:
            self._mark(f"it sent more than {self.limit >> 20} MB of audit events")
            return
        self._partial += chunk
        *complete, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        if len(self._partial) > EVENT_RECORD_MAX:
            self._mark("it wrote an over-long record to the grader's audit pipe")
            self._partial.clear()
        for raw in complete:
            self._record(raw)

    def _record(self, raw: bytes) -> None:
        if not raw:
            return  # each record starts with an end of line of its own
        text = raw.decode("utf-8", errors="replace")
        event, _, args = text.partition(" ")
        name = event[len("gradelib."):]
        if not event.startswith("gradelib.") or not name.isidentifier() or len(raw) > EVENT_RECORD_MAX:
            self._mark("it wrote to the grader's audit pipe")
            return
        if len(self.records) < EVENTS_KEPT:
            self.records.append(text)
        if name in self.by_name or name in HARNESS_EVENTS or len(self.by_name) < EVENT_NAMES_KEPT:
            kept = self.by_name.setdefault(name, [])
            if len(kept) < EVENTS_KEPT:
                kept.append(args)

    def _mark(self, why: str) -> None:
        self.tampered = self.tampered or why

    @property
    def flooded(self) -> bool:
        return self.total > self.limit


def _stream_fields(events: _Events, limits: Limits, flooded: bool) -> dict:
    """What a ChildRun says of the run's audit events, and which flood (output or events) stopped it."""
    return {"events": events.records, "output_capped_mb": limits.output_mb if flooded and not events.flooded else 0,
            "event_index": events.by_name, "events_tampered": events.tampered,
            "events_capped_mb": EVENTS_LIMIT_MB if events.flooded else 0}


_active: dict[int, dict] = {}  # runs and templates in progress, by pid: {"uid": ..., "cgroups": [...]}


def abort_active() -> None:
    """Kill the runs and templates in progress, everything they started, and remove their cgroups
    (for a grader's signal handler: the process ends next, and nobody else would remove them)."""
    for pid, entry in list(_active.items()):
        kill_cgroups(entry.get("cgroups") or [], wait_s=2.0)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if entry.get("uid"):
            kill_uid(entry["uid"], wait_s=2.0)
        for folder in entry.get("cgroups") or []:
            _remove_cgroup(folder)


def sweep_free_slots() -> int:
    """Kill processes of sandbox uids that no live grader holds (left by a grader that was killed)."""
    owners: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + SLOTS:
                owners.setdefault(uid, []).append(int(entry))
    killed = 0
    for uid in owners:
        try:
            fd = os.open(SLOT_DIR / f"slot-{uid - UID_BASE}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grader is running there
        try:
            killed += kill_uid(uid)
        finally:
            os.close(fd)
    return killed


def _pipes(log: _Tail, events: _Events, out_r: int, rep_r: int) -> selectors.DefaultSelector:
    """A selector over the run's output and event pipes, each read into its tail."""
    sel = selectors.DefaultSelector()
    for fd, sink in ((out_r, log), (rep_r, events)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, sink)
    return sel


def _pump(sel: selectors.DefaultSelector, wait_s: float) -> list:
    """Read what the pipes hold into their tails (a pipe at its end is dropped); other ready keys are returned."""
    others = []
    for key, _ in sel.select(wait_s):
        if not isinstance(key.data, (_Tail, _Events)):
            others.append(key)
            continue
        try:
            chunk = os.read(key.fd, 65536)
        except BlockingIOError:
            continue
        if chunk:
            key.data.add(chunk)
        else:
            sel.unregister(key.fd)
    return others


def _drain(sel: selectors.DefaultSelector, wait_s: float = 2.0) -> None:
    """Every writer is gone: read what is left, up to end of file (or wait_s), then close the selector."""
    until = time.monotonic() + wait_s
    while sel.get_map() and time.monotonic() < until:
        _pump(sel, 0.05)
    sel.close()


def _supervise(cmd, workdir, preexec, env, limits, out_r, out_w, rep_r, rep_w, isolation, level, slot,
               cgroups) -> ChildRun:
    before = _children_of(os.getpid())
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=env,
            start_new_session=True, preexec_fn=preexec, close_fds=True, pass_fds=(rep_w,),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return ChildRun(None, False, 0.0, f"could not start the child process: {exc}", isolation, 0, level)
    _active[proc.pid] = {"uid": slot.uid if slot is not None else 0, "cgroups": cgroups}
    os.close(out_w)
    os.close(rep_w)
    log, events = _Tail(LOG_CAP), _Events(EVENTS_LIMIT_MB << 20)
    sel = _pipes(log, events, out_r, rep_r)

    deadline = start + limits.timeout_s
    timed_out = flooded = False
    returncode: int | None = None
    while True:
        returncode = proc.poll()
        if returncode is not None:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if sel.get_map():
            _pump(sel, min(left, 0.05))
            if log.total > limits.output_mb << 20 or events.flooded:
                flooded = True  # printing all the time it has would only cost the grader reading it
                break
        else:
            time.sleep(min(left, 0.05))
    # Killing bubblewrap ends the namespace's init and with it every process of the run;
    # at the fallback level the session and our orphans are killed instead.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = kill_cgroups(cgroups)
    if returncode is None:
        returncode = proc.wait() if flooded else None
    wall = time.monotonic() - start
    killed += _kill_new_children(before)
    if slot is not None:
        killed += kill_uid(slot.uid)
    _active.pop(proc.pid, None)
    _drain(sel)  # every writer is gone now
    if level == "namespaces" and returncode is not None and returncode > 128 and not timed_out:
        # bwrap reports a child killed by signal N as exit status 128 + N.
        returncode = -(returncode - 128)
    text = bytes(log.data).decode("utf-8", errors="replace")[-4000:]
    return ChildRun(returncode, timed_out, wall, _printable(text), isolation, killed, level,
                    **_stream_fields(events, limits, flooded))



# ---------------------------------------------------------------- a size-capped folder per submission

SCRATCH_MB = 512  # everything one submission's runs may write, its own files included
SCRATCH_FILES = 20_000  # files and folders (inodes) of one submission
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2


def cap_folder(folder: Path, mb: int = SCRATCH_MB, files: int = SCRATCH_FILES) -> str:
    """Mount a size- and inode-capped tmpfs on the empty `folder` (root only); what was done, in words.

    A submission's files and every run's scratch folder then live in memory that
    cannot outgrow `mb` or `files`, whatever the runs write, and vanish with
    `uncap_folder` even if a process still holds a file open.
    """
    if os.geteuid() != 0:
        return ""
    options = f"size={mb}m,nr_inodes={files},mode=0711".encode()
    if _libc.mount(b"tmpfs", str(folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        return ""
    return f"scratch: tmpfs of {mb} MB and {files:,} files"


def remove_tree(folder: Path) -> None:
    """Remove a folder a submission's runs wrote into, however deep: shutil.rmtree recurses once per level
    (Python 3.11), so 1,500 nested folders raise RecursionError; coreutils' rm walks any depth. Links are
    removed, never followed; nothing here raises."""
    try:
        shutil.rmtree(folder, ignore_errors=True)
        return
    except RecursionError:
        pass
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(folder)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        pass


def uncap_folder(folder: Path) -> None:
    """Detach the tmpfs `cap_folder` mounted (its contents go with it); nothing when none is there."""
    for mount in reversed(mounts_under(Path(folder))):
        _libc.umount2(str(mount).encode(), MNT_DETACH)


def mounts_under(folder: Path) -> list[Path]:
    """Mount points at or below `folder`, from /proc/self/mountinfo, outermost first."""
    import re

    found = []
    root = os.fsencode(os.path.realpath(folder))
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:  # the mount point, with space, tab, newline and backslash as \ooo
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            if point == root or point.startswith(root + b"/"):
                found.append(Path(os.fsdecode(point)))
    return found

# ---------------------------------------------------------------- one sandbox per submission

PRELOAD = ("numpy", "torch")  # imported once by the template, never by a run
PRELOAD_NOTEBOOKS = ("matplotlib.pyplot",)  # also, when a cell the grader runs names matplotlib (grade.runs_matplotlib)
TEMPLATE_START_S = 120.0  # a template that is not ready by then is given up (runs start one by one)
TEMPLATE_REPLY_S = 5.0  # after its run was killed, a template that does not answer is given up
TEMPLATE_ENV = "GRADELIB_TEMPLATE"  # "off": no template, a fresh interpreter per run
TEMPLATE_CPU_S = 3600  # the template's own CPU limit; each run sets its own below it


class Session:
    """One confined template process per submission, forked once per run.

    `run()` of this module starts a fresh interpreter for every run, and each
    imports torch again (over a second). Within `session(root, limits)` the
    runs whose folders lie under `root` are forked instead from a template
    that was started once, confined like any child (same namespaces, uid,
    Landlock, rlimits, cgroups), and imported numpy and torch (and matplotlib
    for a submission with notebooks).
    The template runs no line of the submission. A forked run gets its own
    pipes, folder, environment, session and rlimits; when it ends, the
    template kills everything it left (it is their subreaper) and says how it
    ended. A run that passes its deadline is killed from here; a template
    that dies or stops answering is replaced at the next run. Only runs of one
    submission share a template, so whatever a run does to it costs that
    submission's own runs, never another's.
    """

    def __init__(self, root: Path, limits: Limits, preload: tuple[str, ...] = PRELOAD):
        self.root = Path(root).resolve()
        self.limits = limits
        self.preload = tuple(preload)
        self.level = isolation_level()
        self.proc: subprocess.Popen | None = None
        self.sock = None
        self.pid = 0  # the template's pid as this process sees it
        self.slot: _Slot | None = None
        self.cgroups: list[Path] = []
        self.isolation: list[str] = []
        self.broken = ""  # why no template could be started ('' while none was tried or it works)
        self.before: set[int] = set()

    def compatible(self, workdir: Path, limits: Limits) -> bool:
        if self.broken:
            return False
        if replace(limits, timeout_s=self.limits.timeout_s) != self.limits:  # every limit but the run's own time
            return False
        try:
            Path(workdir).resolve().relative_to(self.root)
        except ValueError:
            return False
        return True

    # -------------------------------------------------------------- the template
    def _start(self) -> bool:
        import socket

        _become_subreaper()
        self.before = _children_of(os.getpid())
        (self.root / "tmp").mkdir(exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        # At the namespaces level /dev/shm and System V IPC are the submission's own: the template empties them after each run.
        template = {"control_fd": theirs.fileno(), "preload": list(self.preload), "private_ipc": self.level == "namespaces"}
        # The template counts as one process of the run's uid and cgroup.
        limits = replace(self.limits, timeout_s=TEMPLATE_CPU_S, processes=self.limits.processes + 1)
        try:
            if self.level == "namespaces":
                self.slot = _Slot()
                cmd, preexec, env, isolation = _namespaced([], self.root, limits, self.slot, rep_w, None, template)
                os.chown(self.root, os.getuid(), os.getgid())  # the submission's folder stays the grader's
            else:
                cmd, preexec, env, isolation = _fallback([], self.root, limits, rep_w, None, template)
            env["MPLCONFIGDIR"] = env["TMPDIR"]
            self.cgroups = _make_cgroups(limits) if os.geteuid() == 0 else []
            if self.cgroups:
                isolation.append("cgroups: " + ", ".join(_cgroup_label(c) for c in self.cgroups))
            procs_files = [str(c / "cgroup.procs") for c in self.cgroups]
            inner = preexec

            def preexec() -> None:
                for path in procs_files:
                    with open(path, "w") as fh:
                        fh.write(str(os.getpid()))
                inner()

            self.isolation = [*isolation, "template process (forked per run)"]
            self.proc = subprocess.Popen(
                cmd, cwd=self.root, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=env,
                start_new_session=True, preexec_fn=preexec, close_fds=True, pass_fds=(rep_w, theirs.fileno()),
            )
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.broken = f"the template process could not start: {exc}"
            self._stop()
            return False
        finally:
            theirs.close()
            for fd in (rep_w, out_w, rep_r):
                os.close(fd)
        self.sock = ours
        _active[self.proc.pid] = {"uid": self.slot.uid if self.slot else 0, "cgroups": self.cgroups}
        reply, creds = self._receive(TEMPLATE_START_S)
        tail = _Tail(4000)
        try:
            os.set_blocking(out_r, False)
            tail.add(os.read(out_r, 4000))
        except OSError:
            pass
        os.close(out_r)
        if not reply or not reply.get("ready"):
            said = _printable(bytes(tail.data).decode("utf-8", "replace")).strip()
            self.broken = "the template process did not start" + (f": {said[-300:]}" if said else "")
            self._stop()
            return False
        self.pid = creds[0] if creds else self.proc.pid
        return True

    def _receive(self, wait_s: float) -> tuple[dict | None, tuple[int, int, int] | None]:
        """The template's next reply (and the sender's pid, uid, gid as the kernel vouches), or None."""
        import socket
        import struct

        sock = self.sock
        if sock is None:
            return None, None
        ready = selectors.DefaultSelector()
        ready.register(sock, selectors.EVENT_READ)
        try:
            if not ready.select(wait_s):
                return None, None
            data, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except OSError:
            return None, None
        finally:
            ready.close()
        creds = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
                creds = struct.unpack("iII", payload[:12])
        try:
            return (json.loads(data) if data else None), creds
        except ValueError:
            return None, creds

    def _stop(self) -> int:
        """End the template and everything of the submission; the number of processes killed."""
        killed = 0
        if self.proc is not None:
            _active.pop(self.proc.pid, None)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed += kill_cgroups(self.cgroups)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            killed += _kill_new_children(self.before)
        if self.slot is not None:
            killed += kill_uid(self.slot.uid)
            self.slot.release()
        for folder in self.cgroups:
            _remove_cgroup(folder)
        if self.sock is not None:
            self.sock.close()
        self.proc, self.sock, self.slot, self.cgroups, self.pid = None, None, None, [], 0
        return killed

    def close(self) -> None:
        self._stop()

    def _kill_run(self) -> int:
        """Kill every process below the template (the run's), however it tried to get away."""
        killed = _kill_until_gone(lambda: _children_of(self.pid), 5.0, 0.01, reap=False)
        if self.level != "namespaces":
            killed += _kill_new_children(self.before | {self.proc.pid})  # orphans that came to us
        return killed

    # -------------------------------------------------------------- one run
    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun | None:
        """The run, forked from the template; None when no template works here (run it the usual way)."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self._stop()
            if not self._start():
                return None
        workdir = Path(workdir).resolve()
        (workdir / "tmp").mkdir(exist_ok=True)
        if self.level == "namespaces":
            os.chown(workdir, self.slot.uid, self.slot.uid)
            os.chown(workdir / "tmp", self.slot.uid, self.slot.uid)
            inside = f"{SCRATCH_INSIDE}/{workdir.relative_to(self.root)}"
        else:
            inside = str(workdir)
            if "user nobody" in self.isolation:
                nobody = _nobody()
                for root, dirs, files in os.walk(workdir):
                    for name in [*dirs, *files]:
                        os.lchown(os.path.join(root, name), *nobody)
                os.chown(workdir, *nobody)
        env = _child_env(inside, f"{inside}/tmp", env_extra)
        cpu_s = int(limits.timeout_s) + 5
        request = {"argv": list(argv), "cwd": inside, "env": env, "rlimits": {"RLIMIT_CPU": cpu_s}}
        out_r, out_w = os.pipe()
        rep_r, rep_w = os.pipe()
        import socket

        start = time.monotonic()
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [out_w, rep_w])
        except OSError:
            for fd in (out_r, out_w, rep_r, rep_w):
                os.close(fd)
            self._stop()
            return None
        finally:
            for fd in (out_w, rep_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
        log, events = _Tail(LOG_CAP), _Events(EVENTS_LIMIT_MB << 20)
        sel = _pipes(log, events, out_r, rep_r)
        sel.register(self.sock, selectors.EVENT_READ, "template")
        deadline = start + limits.timeout_s
        timed_out, flooded, reply, gone = False, False, None, False
        quiet_since = None  # when the run's pipes both closed: its processes are gone, the reply is due
        while reply is None and not gone:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if len(sel.get_map()) == 1:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > TEMPLATE_REPLY_S:
                    break  # a template that was stopped or is stuck: replaced below
            if _pump(sel, min(left, 0.05)):  # the template said something, or its socket closed
                message, _creds = self._receive(0)
                if message is None:
                    gone = True  # the template died (or was killed by the run)
                elif "returncode" in message:
                    reply = message
            if log.total > limits.output_mb << 20 or events.flooded:
                flooded = True
                break
        sel.unregister(self.sock)
        killed = 0
        if reply is None:
            killed += self._kill_run()
            if (timed_out or flooded) and not gone:  # killed from here: the template now reaps it and answers
                while reply is None:
                    message, _creds = self._receive(TEMPLATE_REPLY_S)
                    if message is None:
                        break
                    if "returncode" in message:
                        reply = message
            if reply is None:
                killed += self._stop()  # the next run starts a fresh template
        wall = time.monotonic() - start
        returncode = reply.get("returncode") if reply else None
        said = reply.get("killed") if reply else 0
        killed += said if type(said) is int and 0 <= said < 1 << 20 else 0  # the template's count, if it is one
        if reply is None and not timed_out:
            returncode = -signal.SIGKILL  # the template went, and the run with it
        _drain(sel)
        for fd in (out_r, rep_r):
            os.close(fd)
        text = bytes(log.data).decode("utf-8", errors="replace")[-4000:]
        return ChildRun(returncode if isinstance(returncode, int) else None, timed_out, wall, _printable(text),
                        list(self.isolation), killed, self.level, **_stream_fields(events, limits, flooded))


_session: Session | None = None


@contextlib.contextmanager
def session(root: Path, limits: Limits, preload: tuple[str, ...] = PRELOAD):
    """Runs under `root` with these limits are forked from one template process (see Session) that
    imported the modules `preload` names."""
    global _session
    if os.environ.get(TEMPLATE_ENV, "") == "off":  # a fresh interpreter per run (the benchmarks compare both)
        yield None
        return
    outer, _session = _session, Session(root, limits, preload)
    try:
        yield _session
    finally:
        _session.close()
        _session = outer


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)


def read_tail(path: Path, limit: int = 4000) -> str:
    """The last `limit` characters of a regular file, as safe text; never follows a symlink or blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat_is_regular(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return _printable(data.decode("utf-8", errors="replace"))


def stat_is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)
