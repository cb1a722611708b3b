"""What a run may use (Limits), how it ended (ChildRun), and the environment and rlimits it starts with."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Resources a submission's process may use."""

    timeout_s: float = 60.0  # wall clock for the whole run
    memory_mb: int = 3072  # resident memory of all the run's processes together (not what they map: see rlimits)
    file_mb: int = 64  # largest file the child may write
    open_files: int = 256
    processes: int = 64  # processes and threads together (RLIMIT_NPROC)
    output_mb: int = 32  # all it may print; a run that prints more is stopped at once
    # The weakest isolation level a run accepts (the strongest the machine allows always runs):
    # "best": namespaces or the fallback, never the portable level (the course grader's default);
    # "strict": namespaces only; "portable": whatever the machine offers, the portable level included
    # (the student side, or a course grader that asks for it).
    min_isolation: str = "best"


ISOLATION_CHOICES = ("best", "strict", "portable")
# Address space a run may map beyond its memory limit (kernel.rlimits). A CUDA build of torch maps over 3 GB at
# import and
# touches about 0.5 GB of it: the limit that matters is resident memory (a memory cgroup, or the grader's
# sampling), and this cap only stops one allocation far past it before a byte of it is touched.
ADDRESS_SPACE_SLACK_MB = 16384
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
    level: str = "fallback"
    events: list[str] = field(default_factory=list)  # the first audit events, in order, as "gradelib.<name> args"
    output_capped_mb: int = 0  # the cap on what it may print, when it printed more and was stopped for it
    event_index: dict[str, list[str]] = field(default_factory=dict)  # event name -> arguments of each, in order
    events_tampered: str = ""  # why the audit channel cannot be trusted (the run wrote to it or flooded it)
    events_capped_mb: int = 0  # the cap on the audit events it may send, when it sent more and was stopped for it
    memory_limit_mb: int = 0  # the run's memory limit, when it was stopped for passing it
    memory_used_mb: int = 0  # the most resident memory seen (or the memory cgroup's peak), when known
    memory_where: str = ""  # what the memory stop was for, when not resident memory alone (said after the limit)

    def describe(self) -> str:
        """How the run ended, as the end of a sentence about the submission's process (e.g. "was stopped when ...")."""
        if self.output_capped_mb:
            return (
                f"was stopped when its output passed {self.output_capped_mb} MB "
                "(print less: the grader keeps only the last lines)"
            )
        if self.events_capped_mb:
            return (f"was stopped when it sent more than {self.events_capped_mb} MB to the grader's audit pipe "
                    "(only the grader's own hook writes there)")
        if self.memory_limit_mb:
            held = f"held {self.memory_used_mb} MB" if self.memory_used_mb else "held more"
            return (
                f"was stopped when its processes {held}, "
                f"over the {self.memory_limit_mb} MB memory limit{self.memory_where}"
            )
        if self.timed_out:
            return f"was stopped after the {self.wall_s:.0f} s time limit"
        if self.returncode is None:
            return "did not start"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except (ValueError, AttributeError):
                name = str(-self.returncode)
            hints = {"SIGKILL": " from outside its limits (none of the limits the grader sets: the machine may have "
                                "run out of memory, or another process killed it)", "SIGXCPU": " (the CPU-time limit)"}
            return f"was killed by {name}{hints.get(name, '')}"
        return f"exited with code {self.returncode}"

    def event_args(self, name: str) -> list[str]:
        """Arguments of every `gradelib.<name>` event the child raised."""
        return list(self.event_index.get(name, []))


def child_env(home: str, tmp: str, extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment of a run: nothing of the grader's own (on Windows, the few variables the
    interpreter itself needs to start)."""
    env = {
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
    }
    if os.name == "nt":
        env.update({k: os.environ[k] for k in ("SYSTEMROOT", "WINDIR", "PATH", "PATHEXT") if k in os.environ})
        env.update({"TEMP": tmp, "TMP": tmp, "USERPROFILE": home})
    return {**env, **(extra or {})}


def cpu_seconds(limits: Limits) -> int:
    """The run's CPU-time limit: its wall-clock limit and a little more (threads may use more)."""
    return int(limits.timeout_s) + 5


def rlimit_values(limits: Limits) -> dict[str, int]:
    """The run's rlimits by resource name (kernel.rlimits sets them): address space far above the memory
    limit (ADDRESS_SPACE_SLACK_MB), since what a torch build maps differs by gigabytes between builds and
    what a run touches is what the memory limit counts."""
    return {"RLIMIT_CPU": cpu_seconds(limits), "RLIMIT_AS": (limits.memory_mb + ADDRESS_SPACE_SLACK_MB) << 20,
            "RLIMIT_FSIZE": limits.file_mb << 20, "RLIMIT_NOFILE": limits.open_files, "RLIMIT_CORE": 0}
