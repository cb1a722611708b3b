"""A cpu, a pids and a memory cgroup per run (v1, or v2 where delegated): made, killed whole, removed, swept."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .interpreter import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
_run_counter = iter(range(1, 1 << 62))
_owner: tuple[int, str, int] | None = None  # (descriptor, id, pid) of this grader's lock, held for its life


def _lock_folder() -> Path:
    # slots.slot_dir(), the sandbox's lock folder (not imported: slots imports this module, through processes)
    return Path(os.environ.get("GRADELIB_SLOT_DIR") or "/run/gradelib-sandbox")


def _owner_id() -> str:
    """The id in this grader's run cgroup names, whose lock file (in the sandbox's lock folder) it holds for as
    long as it lives: the proof sweep() needs that a group's grader is gone, wherever its pid lives."""
    import fcntl
    import secrets

    global _owner
    if _owner is None or _owner[2] != os.getpid():
        ident = secrets.token_hex(6)
        _lock_folder().mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(
            _lock_folder() / f"cgroups-{ident}.lock",
            os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        fcntl.flock(fd, fcntl.LOCK_EX)
        _owner = (fd, ident, os.getpid())
    return _owner[1]


def make(limits: Limits) -> list[Path]:
    """A cpu, a pids and a memory cgroup (v1, or v2 where delegated) for one run; [] where none can be made.

    The whole run shares one CPU, so however many processes or sessions it
    starts (each setsid() is an autogroup of its own in the root cgroup),
    a classmate graded alongside keeps its share; pids.max caps processes and
    threads of the run whatever uid they have; the memory limit holds for all
    its processes together (RLIMIT_AS caps each one alone: 64 processes of
    3 GB each would be 192 GB). Where nothing can be made the run goes on
    with rlimits only; the memory controller is optional.
    """
    if os.geteuid() != 0:
        return []
    name = f"gradelib-{os.getpid()}-{next(_run_counter)}-{_owner_id()}"
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
        base = own(controller) if controller else CGROUP_ROOT
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
            remove(folder)
            continue
        made.append(folder)
    return made


def label(groups: list[Path]) -> str:
    """The isolation line naming the run's groups ('' for none)."""
    names = []
    for folder in groups:
        first = folder.relative_to(CGROUP_ROOT).parts[0]
        names.append(first if first in ("cpu", "pids", "memory") else "v2")
    return "cgroups: " + ", ".join(names) if names else ""


def joining(groups: list[Path], inner):
    """A preexec function: the new process enters the run's groups (before exec: everything it starts is
    inside), then runs `inner`."""
    procs_files = [str(c / "cgroup.procs") for c in groups]

    def preexec() -> None:
        for path in procs_files:
            with open(path, "w") as fh:
                fh.write(str(os.getpid()))
        inner()

    return preexec


def own(controller: str) -> Path:
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


def remove(folder: Path) -> None:
    for _ in range(100):  # busy until its last (killed) process is gone
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def kill(groups: list[Path], wait_s: float = 10.0) -> int:
    """SIGKILL every process in the run's cgroups until they are empty; the number killed.

    Sessions, double forks and re-parenting do not take a process out of its cgroup.
    The CPU cap is lifted first: a throttled process would take long to die.
    """
    killed: set[int] = set()
    for folder in groups:
        for fname, value in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
            if (folder / fname).exists():
                try:
                    (folder / fname).write_text(value)
                except OSError:
                    pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for folder in groups:
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


def release(groups: list[Path]) -> int:
    """Kill what is left in the groups and remove them; the number killed."""
    killed = kill(groups)
    for folder in groups:
        remove(folder)
    return killed


def sweep() -> int:
    """Empty and remove the run cgroups of graders that ended without removing them (killed, or ended
    by a signal mid-run); how many. Only groups below our own whose grader's lock is free: a grader in
    another PID namespace (a CI job, `unshare --pid`) sharing this cgroup tree holds its own, though its
    pid means nothing here. A group whose lock file is not in our lock folder proves nothing and stays."""
    import fcntl

    removed = 0
    left: set[str] = set()  # owners whose groups stay
    for base in {CGROUP_ROOT, own("cpu"), own("pids"), own("memory")}:
        for folder in base.glob("gradelib-*"):
            parts = folder.name.split("-")
            if len(parts) != 4 or (_owner is not None and parts[3] == _owner[1]):
                continue
            left.add(parts[3])
            try:
                fd = os.open(_lock_folder() / f"cgroups-{parts[3]}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its grader is running, wherever it runs
            else:
                kill([folder])
                remove(folder)
                removed += not folder.exists()
                if not folder.exists():
                    left.discard(parts[3])
            finally:
                os.close(fd)
    _forget_owners(left)
    return removed


def _forget_owners(keep: set[str]) -> None:
    """Remove the lock files of graders that are gone and have no group left (one per grader process)."""
    import fcntl

    for path in _lock_folder().glob("cgroups-*.lock"):
        ident = path.name[len("cgroups-"):-len(".lock")]
        if ident in keep or (_owner is not None and ident == _owner[1]):
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink()
        except OSError:
            pass  # held: its grader runs
        finally:
            os.close(fd)
