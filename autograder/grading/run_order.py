"""The order of a submission's runs: every public run before any hidden run, across all its problems.

A run that had a hidden input at hand may leave it wherever a later run of the same submission could look (a place
the isolation misses; the portable level isolates nothing), and a public run's words are shown at once. So no public
run may follow a hidden one. `in_order` grades the problems (the kit's grade loop hands it one job per problem) each in
a thread of its own, one thread at a time: first each problem in turn up to its first hidden run (`hidden_run`, which
waits there) or its end, then each waiting problem in turn to its end. A public run asked for once a hidden one has
begun (`public_run`) is refused: a grader bug, graded as an internal failure, never a leak.

One thread runs at a time, so the problems share the submission's cache and template as in one loop. The threads
live until every problem is graded: a process started from a thread (the template, bubblewrap) is killed when that
thread ends (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

_here = threading.local()  # the _Job of the thread that runs it


class PublicAfterHidden(RuntimeError):
    """A public run asked for after a hidden run of the same submission began: refused."""


class _Job:
    def __init__(self, grading: _Grading, job: Callable[[], Any]):
        self.grading, self.job = grading, job
        self.value: Any = None
        self.error: BaseException | None = None
        self.seconds = 0.0  # while it ran, not while it waited
        self.waiting = False  # stopped at its first hidden run
        self.paused, self.resumed = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._body, daemon=True, name="grading-problem")

    def _body(self) -> None:
        _here.job = self
        began = time.monotonic()
        try:
            self.value = self.job()
        except BaseException as exc:  # noqa: BLE001 (raised again in the grading's own thread)
            self.error = exc
        self.seconds += time.monotonic() - began
        self.waiting = False
        self.paused.set()
        self.grading.finished.wait()  # see the module's docstring

    def wait_for_hidden_turn(self) -> None:
        if not self.grading.hidden_began:
            self.seconds += time.monotonic()  # less the time it waits
            self.waiting = True
            self.paused.set()
            self.resumed.wait()
            self.seconds -= time.monotonic()
        self.waiting = False


class _Grading:
    def __init__(self) -> None:
        self.hidden_began = False
        self.finished = threading.Event()


def in_order(jobs: list[Callable[[], Any]]) -> list[tuple[Any, float]]:
    """Each job's (value, seconds it ran), every public run of them all before any hidden run (see the docstring);
    an exception a job raised is raised here."""
    grading = _Grading()
    mine = [_Job(grading, job) for job in jobs]
    try:
        for job in mine:  # each up to its first hidden run, or to its end
            job.thread.start()
            job.paused.wait()
        grading.hidden_began = True
        for job in mine:
            if job.waiting:
                job.paused.clear()
                job.resumed.set()
                job.paused.wait()
    finally:
        grading.finished.set()
    for job in mine:
        job.thread.join()
        if job.error is not None:
            raise job.error
    return [(job.value, job.seconds) for job in mine]


def hidden_run() -> None:
    """Called before a run that has a hidden input at hand: within in_order, wait until every problem of the
    submission has done its public runs."""
    job = getattr(_here, "job", None)
    if job is not None:
        job.wait_for_hidden_turn()


def public_run(what: str) -> None:
    """Called before a run without a hidden input (`what` it runs): refused once a hidden run of the submission
    began."""
    job = getattr(_here, "job", None)
    if job is not None and job.grading.hidden_began:
        raise PublicAfterHidden(f"the grader asked for a public run ({what}) after a hidden run of the same "
                                "submission; it was refused (every public run comes first)")
