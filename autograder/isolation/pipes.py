"""The grader's side of an isolated run's pipes: its output and audit events read as they come, to their caps.

The isolation levels (runner.py, template.py) read a run's pipes with a selector while they watch it;
what is read goes into the kit's capped tail (gradelib/runner/limits.py) and the audit events here, whose
reader, unlike the kit's, trusts nothing a submission may write there.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from dataclasses import dataclass, field

from gradelib.runner.limits import EVENTS_KEPT, ChildRun, Events, Limits, Tail

EVENTS_LIMIT_MB = 1  # audit events a run may send; the harness sends a few lines, so a run that sends more is stopped
EVENT_NAMES_KEPT = 32  # distinct event names indexed; the harness's own are always indexed
HARNESS_EVENTS = ("boot", "autograd", "program", "refused", "key", "alive", "guards",
                  "selfkill")  # always indexed
EVENT_RECORD_MAX = 4096  # bytes of one record; start.py's hook writes at most 4 x 200 + 1


@dataclass
class IsolatedRun(ChildRun):
    """A ChildRun at an isolation level: how it was confined, the processes it left that were killed, the level,
    the cap on the audit events it may send, when it sent more and was stopped for it, what a memory stop was
    for, when not resident memory alone (said after the limit), and a fault the grader saw."""

    isolation: list[str] = field(default_factory=list)
    leftover_killed: int = 0
    level: str = "fallback"
    events_capped_mb: int = 0
    memory_where: str = ""
    events_tampered: str | None = ""  # why the audit channel cannot be trusted (AuditEvents.tampered); None: no channel
    fault: str = ""  # what the grader saw end the run that was none of its limits (runner.fault_of), '' when nothing
    hidden: bool = False  # it had hidden inputs at hand (Limits.hidden): its end is said by kind alone

    def describe(self) -> str:
        if self.hidden:
            return hidden_end(self)
        if self.events_capped_mb:
            return (f"was stopped when it sent more than {self.events_capped_mb} MB to the grader's audit pipe "
                    "(only the grader's own hook writes there)")
        memory_stop = self.memory_limit_mb and not self.output_capped_mb
        if self.returncode == -9 and not (memory_stop or self.output_capped_mb) and self.event_args("selfkill"):
            return "was killed by SIGKILL, which its own code sent (to itself, or to the process that runs it)"
        return super().describe() + (self.memory_where if memory_stop else "")


def hidden_end(run: ChildRun) -> str:
    """How a run that had hidden inputs at hand ended, by kind alone: it ran out of time (the wall clock or the CPU
    limit), ran out of memory, or ended early (any exit code, any other signal, a cap on what it sends). An exit code,
    a signal's name or the memory it held could each carry bits of a hidden input, one resubmission at a time."""
    if run.timed_out or run.returncode == -signal.SIGXCPU:
        return "ran out of time"
    if run.memory_limit_mb and not run.output_capped_mb:
        return "ran out of memory"
    return "ended early"


class AuditEvents(Events):
    """The audit events a run sends (start.py's hook writes each `gradelib.<name> args` as one line, in one write
    that starts with an end of line), each indexed by name, so no padding of harmless events pushes an autograd
    record out of view; anything else (bytes a submission wrote there) or a flood marks the channel `tampered`."""

    def __init__(self, limit_bytes: int):
        super().__init__()
        self.limit, self.total, self.tampered, self._partial = limit_bytes, 0, "", bytearray()

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


def new_sinks(log_cap: int) -> tuple[Tail, AuditEvents]:
    """A run's output tail and its events."""
    return Tail(log_cap), AuditEvents(EVENTS_LIMIT_MB << 20)


def stream_fields(events: AuditEvents, limits: Limits, flooded: bool) -> dict:
    """What an IsolatedRun says of the run's audit events, and which flood (output or events) stopped it."""
    return {"output_capped_mb": limits.output_mb if flooded and not events.flooded else 0,
            "event_index": events.by_name, "events_tampered": events.tampered,
            "events_capped_mb": EVENTS_LIMIT_MB if events.flooded else 0}


def over_cap(log: Tail, events: AuditEvents, limits: Limits) -> bool:
    """Whether the run printed or sent more than it may (it is stopped at once: reading it all costs the grader)."""
    return log.total > limits.output_mb << 20 or events.flooded


def watch(log: Tail, events: Events, out_r: int, rep_r: int) -> selectors.DefaultSelector:
    """A selector over the run's output and event pipes, each read into its sink."""
    sel = selectors.DefaultSelector()
    for fd, sink in ((out_r, log), (rep_r, events)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, sink)
    return sel


def pump(sel: selectors.DefaultSelector, wait_s: float) -> list:
    """Read what the pipes hold into their sinks (a pipe at its end is dropped); other ready keys are returned."""
    others = []
    for key, _ in sel.select(wait_s):
        if not isinstance(key.data, (Tail, Events)):
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


def drain(sel: selectors.DefaultSelector, wait_s: float = 2.0) -> None:
    """Every writer is gone: read what is left, up to end of file (or wait_s), then close the selector."""
    until = time.monotonic() + wait_s
    while sel.get_map() and time.monotonic() < until:
        pump(sel, 0.05)
    sel.close()
