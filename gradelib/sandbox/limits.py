"""What a run may use (Limits), how it ended (ChildRun), and the environment and rlimits it starts with."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field


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


def child_env(home: str, tmp: str, extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment of a run: nothing of the grader's own."""
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


def rlimits(limits: Limits, nproc: int | None):
    """A function that sets the run's rlimits on the calling process (between fork and exec)."""
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
