"""A cpu, a pids and a memory cgroup per run (v1, or v2 where delegated): made, killed whole, removed, swept."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gradelib.runner.limits import Limits

from .kernel import process_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
_run_counter = iter(range(1, 1 << 62))


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
    by a signal mid-run); how many. Only groups below our own, named for a grader that is gone."""
    removed = 0
    for base in {CGROUP_ROOT, own("cpu"), own("pids"), own("memory")}:
        for folder in base.glob("gradelib-*"):
            try:
                owner = int(folder.name.split("-")[1])
            except (ValueError, IndexError):
                continue
            if not process_alive(owner):
                kill([folder])
                remove(folder)
                removed += not folder.exists()
    return removed
