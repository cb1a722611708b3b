"""What a run sends back: its output (a capped tail) and its audit events, read from pipes the grader opened."""

from __future__ import annotations

from .limits import EVENT_NAMES_KEPT, EVENT_RECORD_MAX, EVENTS_KEPT, EVENTS_LIMIT_MB, HARNESS_EVENTS, Limits


class Tail:
    """The last `cap` bytes written to a pipe."""

    def __init__(self, cap: int):
        self.cap, self.data, self.total = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        del self.data[: max(0, len(self.data) - self.cap)]

    def text(self, limit: int = 4000) -> str:
        return printable(bytes(self.data).decode("utf-8", errors="replace")[-limit:])


class Events:
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


def new_sinks(log_cap: int) -> tuple[Tail, Events]:
    return Tail(log_cap), Events(EVENTS_LIMIT_MB << 20)


def stream_fields(events: Events, limits: Limits, flooded: bool) -> dict:
    """What a ChildRun says of the run's audit events, and which flood (output or events) stopped it."""
    return {"events": events.records, "output_capped_mb": limits.output_mb if flooded and not events.flooded else 0,
            "event_index": events.by_name, "events_tampered": events.tampered,
            "events_capped_mb": EVENTS_LIMIT_MB if events.flooded else 0}


def over_cap(log: Tail, events: Events, limits: Limits) -> bool:
    """Whether the run printed or sent more than it may (it is stopped at once: reading it all costs the grader)."""
    return log.total > limits.output_mb << 20 or events.flooded


def printable(text: str) -> str:
    return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
