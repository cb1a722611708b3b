"""What a run may use (Limits), how it ended (ChildRun), its environment, its output (a capped tail) and events."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Resources a submission's process may use."""

    timeout_s: float = 60.0  # wall clock for the whole run
    memory_mb: int = 3072  # resident memory of all the run's processes together
    output_mb: int = 32  # all it may print; a run that prints more is stopped at once


LOG_CAP = 64 * 1024  # bytes of the child's output kept (its tail)
EVENTS_KEPT = 256  # arguments kept per event name


@dataclass
class ChildRun:
    """How the child process ended; nothing here comes from the child's own claims."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    output_capped_mb: int = 0  # the cap on what it may print, when it printed more and was stopped for it
    event_index: dict[str, list[str]] = field(default_factory=dict)  # event name -> arguments of each, in order
    memory_limit_mb: int = 0  # the run's memory limit, when it was stopped for passing it
    memory_used_mb: int = 0  # the most resident memory seen (or the memory cgroup's peak), when known

    def describe(self) -> str:
        """How the run ended, as the end of a sentence about the submission's process (e.g. "was stopped when ...")."""
        if self.output_capped_mb:
            return (f"was stopped when its output passed {self.output_capped_mb} MB "
                    "(print less: the grader keeps only the last lines)")
        if self.memory_limit_mb:
            held = f"held {self.memory_used_mb} MB" if self.memory_used_mb else "held more"
            return f"was stopped when its processes {held}, over the {self.memory_limit_mb} MB memory limit"
        if self.timed_out:
            return f"was stopped after the {self.wall_s:.0f} s time limit"
        if self.returncode is None:
            return "did not start"
        if self.returncode >= 0:
            return f"exited with code {self.returncode}"
        try:
            name = signal.Signals(-self.returncode).name
        except (ValueError, AttributeError):
            name = str(-self.returncode)
        hints = {"SIGKILL": " from outside its limits (none of the limits the grader sets: the machine may have "
                            "run out of memory, or another process killed it)", "SIGXCPU": " (the CPU-time limit)"}
        return f"was killed by {name}{hints.get(name, '')}"

    def event_args(self, name: str) -> list[str]:
        """Arguments of every `gradelib.<name>` event the child raised."""
        return list(self.event_index.get(name, []))


def child_env(home: str, tmp: str, extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment of a run: nothing of the grader's own (on Windows, the few variables the
    interpreter itself needs to start)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": tmp}
    if os.name == "nt":
        env.update({k: os.environ[k] for k in ("SYSTEMROOT", "WINDIR", "PATH", "PATHEXT") if k in os.environ})
        env.update({"TEMP": tmp, "TMP": tmp, "USERPROFILE": home})
    return {**env, **(extra or {})}


def cpu_seconds(limits: Limits) -> int:
    """The run's CPU-time limit: its wall-clock limit and a little more (threads may use more)."""
    return int(limits.timeout_s) + 5


class Tail:
    """The last `cap` bytes written to a pipe."""

    def __init__(self, cap: int):
        self.cap, self.data, self.total = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        del self.data[: max(0, len(self.data) - self.cap)]

    def text(self, limit: int = 4000) -> str:
        text = bytes(self.data).decode("utf-8", errors="replace")[-limit:]
        return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)


class Events:
    """The audit events start.py's hook writes (each `gradelib.<name> args` on a line of its own), kept by name."""

    def __init__(self):
        self.by_name, self._partial = {}, b""  # event name -> the arguments of each; a line not yet ended

    def add(self, chunk: bytes) -> None:
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            event, _, args = raw.decode("utf-8", errors="replace").partition(" ")
            if event.startswith("gradelib."):
                kept = self.by_name.setdefault(event[len("gradelib."):], [])
                if len(kept) < EVENTS_KEPT:
                    kept.append(args)
