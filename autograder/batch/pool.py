"""The worker pool of a batch run: one grader process per submission, restarted when it dies, stopped at its deadline.

Each submission is graded by a worker process of its own (worker.py), at most
--jobs at a time, so one handin's crash, hang or memory blow-up ends its own
worker only. A worker that dies, or whose sandboxed run was lost to a fault
(worker.FAULT_EXIT: the problems it lost are graded again), is started again
up to --retries times; after that, or when it runs past its deadline, the
submission is recorded as not graded with a message saying why -- it is never
lost, never given a score for the grader's failure, and never retried forever.
A write of the grader's own that fails (a full disk) is not retried: the batch
stops starting workers and says so (write_error).
Whatever happened to a worker, its sandboxed processes, run cgroups and
scratch files are removed when it ends. A single submission (Gradescope's,
Autolab's) gets a worker too: the address-space cap, the deadline, the
restart and the sweep of what an escaped process left need a process
between the grader and this one, and without it a crash of the grader would
leave no results.json saying "not graded"; it costs the worker's start
(about 2 s on a busy 2-core machine, imports without torch).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from autograder import isolation as sandbox
from autograder.grading import rubric_check as rubric_mod
from autograder.isolation import cgroups, kernel, processes, slots
from autograder.isolation.kernel import PR_SET_PDEATHSIG
from autograder.isolation.memory import RunClock
from gradelib.problems import graded
from gradelib.scoring import all_zero

from ..grading.course_result import CourseResult
from . import regrade
from .atomic import remove_partial_writes
from .records import read_row
from .worker import FAULT_EXIT, WRITE_FAILED_EXIT

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.05
TERM_GRACE_S = 5.0
SCRATCH_PREFIX = "autograder-scratch-"
SCRATCH_LOCK = ".batch.lock"  # in a batch's scratch folder, locked while the batch runs


def ungraded_result(name: str, only: list[str] | None, message: str,
                    problems: dict[str, rubric_mod.Problem]) -> CourseResult:
    """Every test of the graded `problems` (those in `only`, if given) 0 with `message`: what a submission gets
    when the grader could not finish it."""
    vis = ("public", "hidden")
    selected = list(graded(problems, only).values())
    result = CourseResult(
        submission=name,
        problems=tuple(p.id for p in selected),
        max_points={p.id: sum(p.share(g, v) for g in p.groups for v in vis if v in g.visibilities) for p in selected},
        notes=[message],
    )
    for p in selected:
        result.tests += all_zero(p, vis, message)
    return result.recorded(problems)


@dataclass
class Job:
    path: Path
    name: str
    only: list[str] | None = None  # problems to grade (None: all)
    merge: bool = False  # replace only those problems' tests in the results already there
    reasons: dict[str, str] = field(default_factory=dict)  # problem -> why it is regraded
    attempts: int = 0
    proc: subprocess.Popen | None = None
    clock: RunClock | None = None  # the worker's time: the wall clock less its processes' waits for a CPU
    scratch: Path | None = None


class Batch:
    """Runs worker processes for a list of jobs; see the module docstring."""

    def __init__(self, args: argparse.Namespace, jobs: list[Job], deadline_s: float):
        self.args = args
        self.queue: deque[Job] = deque(jobs)
        self.active: list[Job] = []
        self.deadline_s = deadline_s
        self.stop_signal: int | None = None
        self.write_error = ""  # the grader's own write that failed (a full disk): the batch stops
        self.graded = 0
        self.failed: list[str] = []
        self.retried = 0  # attempts started again after a worker died or lost a run to a fault
        self.logs = args.out / ".logs"
        # Every worker's scratch lives under here, so the batch can remove what a killed worker left.
        sweep_scratch()
        cgroups.sweep()  # and the run cgroups of graders that were killed before this batch
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        self._owner_lock = hold_scratch(self.scratch)
        self.scratch.chmod(0o711)  # a fallback child, as a sandbox uid, must traverse it to its own folder

    def _preexec(self) -> None:  # in the worker, between fork and exec
        import resource

        cap = self.args.worker_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        # The worker ends when this process does, however this process ends.
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    @property
    def stopping(self) -> bool:
        return self.stop_signal is not None or bool(self.write_error)

    def _start(self, job: Job) -> None:
        try:
            self._spawn(job)
        except OSError as exc:  # its scratch folder or its log could not be made: the grader's own write
            self.write_error = self.write_error or f"starting the grading of {job.name}: {exc}"
            if job.scratch is not None:
                remove_scratch(job.scratch)
                job.scratch = None

    def _spawn(self, job: Job) -> None:
        job.attempts += 1
        job.scratch = Path(tempfile.mkdtemp(prefix=f"{job.name[:40]}-", dir=self.scratch))
        job.scratch.chmod(0o711)  # a fallback child running as `nobody` must traverse it
        # Every value as --option=value and the path after `--`: no submission's name or path reads as an option.
        argv = [
            sys.executable, "-m", "autograder.batch.worker",
            f"--name={job.name}", f"--out={self.args.out.resolve()}",
            f"--timeout={self.args.timeout}", f"--memory-mb={self.args.memory_mb}",
            f"--isolation={self.args.isolation}", f"--scratch-root={job.scratch}",
            f"--case-root={self.args.fixtures.resolve()}",
        ]
        argv.append("--rubric-on-stdin")  # the command's rubric, read once (cli.refusal): no worker reads it again
        if job.only:
            argv += [f"--only={p}" for p in job.only]
        if job.merge:
            argv.append("--merge")
        argv += ["--", str(job.path.resolve())]
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{job.name}.log", "ab") as log:
            log.write(f"--- attempt {job.attempts}\n".encode())
            log.flush()
            job.proc = subprocess.Popen(
                argv, cwd=PACKAGE_ROOT, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._preexec,
            )
        try:  # a few kilobytes: the pipe holds them whole, so this never waits on the worker
            job.proc.stdin.write(pickle.dumps(self.args.course_rubric))
        except BrokenPipeError:  # the worker died at once: its exit status says so (_finished)
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                job.proc.stdin.close()
        job.clock = RunClock(self.deadline_s, lambda pid=job.proc.pid: {pid})  # load never ends a worker early
        self.active.append(job)

    def _record_failure(self, job: Job, why: str) -> None:
        message = (
            f"This submission could not be graded: the grader's own process {why}. Its zeros are no grade: "
            f"it is marked "
            f"for regrading, which the next run of the same command does."
        )
        # The worker's log is the staff's (grades/.logs/): it can hold what the submission's code printed.
        problems = self.args.problems
        result = ungraded_result(job.name, job.only, message, problems)
        for pid in result.problems:
            result.mark_not_graded(pid, f"the grader's own process {why}")
        records = regrade.current_records(problems, list(result.problems), self.args.fixtures)
        try:
            regrade.write_merged(
                result, self.args.out / job.name, records, list(graded(problems)), job.merge
            )
        except OSError as exc:
            self.write_error = self.write_error or f"recording that {job.name} could not be graded: {exc}"
            return
        self.failed.append(job.name)

    def _finished(self, job: Job, returncode: int | None, bar) -> None:
        self.active.remove(job)
        self._clean(job)
        if self.stopping:
            return
        results = self.args.out / job.name / "results.json"
        if returncode == 0 and results.is_file():
            self.graded += 1
            bar.update(1)
            return
        if returncode == WRITE_FAILED_EXIT:  # retrying cannot help: the batch stops (cli says what to do)
            self.write_error = f"writing the results of {job.name} (its log says why: {self.logs / job.name}.log)"
            return
        if returncode == FAULT_EXIT and results.is_file():  # written, with the problems a fault cost not graded
            lost = read_row(results, job.name).not_graded
            if lost and job.attempts <= self.args.retries:
                job.only, job.merge = lost, True  # those problems again, merged into what was graded
                self.retried += 1
                self.queue.appendleft(job)
                return
            self.failed.append(job.name)
            bar.update(1)
            return
        if returncode is None:
            self._record_failure(job, f"ran past the {self.deadline_s:.0f} s limit for one submission")
        elif job.attempts <= self.args.retries:
            self.retried += 1
            self.queue.appendleft(job)
            return
        else:
            self._record_failure(job, f"{_describe_exit(returncode)} on each of {job.attempts} attempts")
        bar.update(1)

    def _kill(self, job: Job, sig: int) -> None:
        try:
            os.killpg(job.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _clean(self, job: Job) -> None:
        """Nothing of a worker that ended, however it ended, stays: its sandboxed processes, then its files."""
        workers = {j.proc.pid for j in self.active}
        self._reap_orphans(self._before, workers)
        slots.sweep_free()
        cgroups.sweep()
        if job.scratch is not None:
            remove_scratch(job.scratch)
            job.scratch = None
        remove_partial_writes(self.args.out / job.name)

    def _reap_orphans(self, before: set[int], workers: set[int] | None = None) -> None:
        # Sandboxed processes of a worker that died are re-parented here (we are a subreaper).
        # Stopped first, everything below them too, then killed: a chain of processes each in a session of
        # its own, which would otherwise come here one link at a time, is ended whole.
        workers = {j.proc.pid for j in self.active} if workers is None else workers
        kernel.end_tree(lambda: kernel.children_of(os.getpid()) - before - workers, 5.0, reap=True)

    def run(self, bar) -> None:
        processes.become_subreaper()
        before = self._before = kernel.children_of(os.getpid())
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while (self.queue or self.active) and not self.stopping:
                while self.queue and len(self.active) < max(1, self.args.jobs) and not self.stopping:
                    self._start(self.queue.popleft())
                time.sleep(POLL_S)
                if any([self._look_at(job, bar) for job in list(self.active)]):  # each job looked at
                    self._reap_orphans(before)
        finally:
            self._end_all(before)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _look_at(self, job, bar) -> bool:
        """Whether `job` has ended: on its own, or killed here as its time is up."""
        rc = job.proc.poll()
        if rc is None and job.clock.left() <= 0:
            self._stop(job)
            self._finished(job, None, bar)
            return True
        if rc is not None:
            self._finished(job, rc, bar)
            return True
        return False

    def _stop(self, job) -> None:
        """SIGTERM the job's worker tree; SIGKILL it if it has not ended TERM_GRACE_S later."""
        self._kill(job, signal.SIGTERM)
        self._wait_or_kill(job, TERM_GRACE_S)

    def _wait_or_kill(self, job, grace: float) -> None:
        """Wait `grace` seconds for the job's worker to end, then SIGKILL its tree."""
        try:
            job.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._kill(job, signal.SIGKILL)
            job.proc.wait()

    def _end_all(self, before: set[int]) -> None:
        """End every job still running (one shared grace), then sweep what the batch leaves: orphans, slots,
        cgroups, the scratch folder, the owner's lock."""
        for job in self.active:
            self._kill(job, signal.SIGTERM)
        limit = time.monotonic() + TERM_GRACE_S
        for job in self.active:
            self._wait_or_kill(job, max(0.0, limit - time.monotonic()))
        for job in self.active:
            self._clean(job)
        self.active.clear()
        self._reap_orphans(before)
        slots.sweep_free()
        cgroups.sweep()
        remove_scratch(self.scratch)
        os.close(self._owner_lock)

    def _on_signal(self, signum: int, _frame) -> None:
        self.stop_signal = signum


def remove_scratch(folder: Path) -> None:
    """Remove a scratch folder with the capped tmpfs mounts a worker made in it."""
    sandbox.uncap_folder(folder)
    sandbox.remove_tree(folder)


def hold_scratch(folder: Path) -> int:
    """Lock a batch's scratch folder for as long as the batch runs (the kernel drops the lock when it dies, however
    it dies): the proof sweep_scratch needs. The descriptor to close at the end."""
    import fcntl

    fd = os.open(folder / SCRATCH_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def sweep_scratch() -> int:
    """Remove the scratch folders of batches that were killed (SIGKILL skips their cleanup); how many.

    Only a folder whose owner's lock can be taken is abandoned: a batch in another PID namespace (a container,
    a CI job, `unshare --pid`) sharing this temp folder holds its lock, though its pid means nothing here. A
    folder without a lock file proves nothing and stays."""
    import fcntl

    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.geteuid():
            continue
        try:
            fd = os.open(folder / SCRATCH_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its batch is running, wherever it runs
        try:
            remove_scratch(folder)
            removed += 1
        finally:
            os.close(fd)
    return removed


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"
