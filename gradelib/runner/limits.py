"""What a run may use (Limits), how it ended (ChildRun), its environment, and what it sends back: its output
(a capped tail) and its audit events, read from pipes or files the grader opened."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Resources a submission's process may use."""

    timeout_s: float = 60.0  # wall clock for the whole run
    memory_mb: int = 3072  # resident memory of all the run's processes together
    file_mb: int = 64  # largest file the child may write
    open_files: int = 256
    processes: int = 64  # processes and threads together (RLIMIT_NPROC)
    output_mb: int = 32  # all it may print; a run that prints more is stopped at once
    min_isolation: str = "best"  # the weakest isolation level the course grader may use (the kit's runner has one)


LOG_CAP = 64 * 1024  # bytes of the child's output kept (its tail)
EVENTS_LIMIT_MB = 1  # audit events a run may send; the harness sends a few lines, so a run that sends more is stopped
EVENTS_KEPT = 256  # arguments kept per event name
EVENT_NAMES_KEPT = 32  # distinct event names indexed; the harness's own are always indexed
HARNESS_EVENTS = ("boot", "autograd")
EVENT_RECORD_MAX = 4096  # bytes of one record; start.py's hook writes at most 4 x 200 + 1


@dataclass
class ChildRun:
    """How the child process ended; nothing here comes from the child's own claims."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
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
            return (f"was stopped when its output passed {self.output_capped_mb} MB "
                    "(print less: the grader keeps only the last lines)")
        if self.events_capped_mb:
            return (f"was stopped when it sent more than {self.events_capped_mb} MB to the grader's audit pipe "
                    "(only the grader's own hook writes there)")
        if self.memory_limit_mb:
            held = f"held {self.memory_used_mb} MB" if self.memory_used_mb else "held more"
            return f"was stopped when its processes {held}, over the {self.memory_limit_mb} MB memory limit" + \
                self.memory_where
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
    """The audit events a run sends (start.py's hook writes each `gradelib.<name> args` as one line, in one write
    that starts with an end of line), each indexed by name, so no padding of harmless events pushes an autograd
    record out of view; anything else (bytes a submission wrote there) or a flood marks the channel `tampered`."""

    def __init__(self, limit_bytes: int):
        self.limit, self.total, self.tampered, self._partial = limit_bytes, 0, "", bytearray()
        self.by_name: dict[str, list[str]] = {}

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.flooded:
            self.tampered = self.tampered or f"it sent more than {self.limit >> 20} MB of audit events"
            return
        *complete, rest = (self._partial + chunk).split(b"\n")
        self._partial = bytearray(rest)
        if len(self._partial) > EVENT_RECORD_MAX:
            self.tampered = self.tampered or "it wrote an over-long record to the grader's audit pipe"
            self._partial.clear()
        for raw in complete:
            self._record(raw)

    def _record(self, raw: bytes) -> None:
        if not raw:
            return  # each record starts with an end of line of its own
        event, _, args = raw.decode("utf-8", errors="replace").partition(" ")
        name = event[len("gradelib."):]
        if not event.startswith("gradelib.") or not name.isidentifier() or len(raw) > EVENT_RECORD_MAX:
            self.tampered = self.tampered or "it wrote to the grader's audit pipe"
            return
        if name in self.by_name or name in HARNESS_EVENTS or len(self.by_name) < EVENT_NAMES_KEPT:
            kept = self.by_name.setdefault(name, [])
            if len(kept) < EVENTS_KEPT:
                kept.append(args)

    @property
    def flooded(self) -> bool:
        return self.total > self.limit


def new_sinks(log_cap: int) -> tuple[Tail, Events]:
    """A run's output tail and its events."""
    return Tail(log_cap), Events(EVENTS_LIMIT_MB << 20)


def stream_fields(events: Events, limits: Limits, flooded: bool) -> dict:
    """What a ChildRun says of the run's audit events, and which flood (output or events) stopped it."""
    return {"output_capped_mb": limits.output_mb if flooded and not events.flooded else 0,
            "event_index": events.by_name, "events_tampered": events.tampered,
            "events_capped_mb": EVENTS_LIMIT_MB if events.flooded else 0}


def over_cap(log: Tail, events: Events, limits: Limits) -> bool:
    """Whether the run printed or sent more than it may (it is stopped at once: reading it all costs the grader)."""
    return log.total > limits.output_mb << 20 or events.flooded
