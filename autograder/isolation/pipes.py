"""The grader's side of an isolated run's pipes: its output and audit events read as they come, to their caps.

The isolation levels (runner.py, template.py) read a run's pipes with a selector while they watch it;
what is read goes into the kit's sinks (gradelib/runner/limits.py: the capped tail, the events).
"""

from __future__ import annotations

import os
import selectors
import time
from dataclasses import dataclass, field

from gradelib.runner.limits import ChildRun, Events, Tail


@dataclass
class IsolatedRun(ChildRun):
    """A ChildRun at an isolation level: how it was confined, the processes it left that were killed, the level."""

    isolation: list[str] = field(default_factory=list)
    leftover_killed: int = 0
    level: str = "fallback"


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
