"""One run in a fresh interpreter: started at the level in force, watched to its limits, ended whole."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gradelib.runner import KIT
from gradelib.runner.limits import LOG_CAP, ChildRun

from . import cgroups, launch, leftovers, slots, template
from .interpreter import Limits
from .kernel import children_of, is_linux, kill_tree
from .levels import isolation_level, refusal
from .memory import MemoryWatch, RunClock
from .pipes import IsolatedRun, drain, new_sinks, over_cap, pump, stream_fields, watch
from .processes import become_subreaper, kill_new_children, kill_tokened, register, unregister

SETPRIV_EXEC_FAILED = 126  # setpriv's exit status when it cannot exec its command
START_TRIES = 4  # uids tried for one run whose start another grader's processes refuse


class GraderFault(RuntimeError):
    """A run could not start, or ended, for a reason outside the submission and its limits: the grading of its
    problem is the grader's failure (not graded, retried), never the student's score."""


class StartFailure(GraderFault):
    """A run could not start (no uid, no process, no memory to fork)."""


class RunLost(GraderFault):
    """A run ended for a reason none of its limits gives: killed by a signal the grader did not send, the machine's
    OOM killer, its template gone without a result."""


def fault_of(run: ChildRun) -> str:
    """How the run ended, when it was none of its limits nor its own code, by what the grader itself saw ('' when
    its end was the submission's): a fault it recorded (the group's OOM counters, a template gone), or a SIGKILL
    that neither its timer, its output and audit counters, its memory watch nor the run's own cgroup explains.
    The one thing a run says that counts here is that it sent itself or its template SIGKILL (boot.py's guard
    records it): that can only cost the run. (One that does so unseen, or ignores SIGXCPU and passes its CPU
    limit's hard end in threads where no cpu cgroup holds it to one CPU, is not graded: never a score, and a TA
    is told.)"""
    if run.event_args("selfkill"):
        return ""
    fault = getattr(run, "fault", "")
    if fault:
        return fault
    limited = run.timed_out or run.output_capped_mb or run.memory_limit_mb or getattr(run, "events_capped_mb", 0)
    if run.returncode == -signal.SIGKILL and not limited:
        return "was killed by SIGKILL, which none of the grader's limits sent (the machine's OOM killer, or another " \
            "process)"
    return ""


def run(
    argv: list[str],
    workdir: Path,
    limits: Limits,
    env_extra: dict[str, str] | None = None,
) -> ChildRun:
    """Run `python -I boot.py argv...` in `workdir` under the limits; return how it ended.

    The child's stdout and stderr come back over a pipe (never to our stdout,
    never through a file the child could replace), so nothing a submission
    prints can pose as grader output. Inside `session(...)` the run is forked
    from the submission's template process instead (template.py). A run with
    hidden inputs at hand (`limits.hidden`) says how it ended by kind alone
    (pipes.hidden_end), whichever way it ran.
    """
    limits = Limits.of(limits)
    done = _run(argv, Path(workdir).resolve(), replace(limits, hidden=False), env_extra)
    if not limits.hidden:
        return done
    # The kit's runner, off Linux: no audit channel, so no guards whose silence would mean anything (None).
    return replace(done, hidden=True) if isinstance(done, IsolatedRun) else \
        IsolatedRun(**vars(done), hidden=True, level="portable", events_tampered=None)


def _run(argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun:
    level = isolation_level()
    why = refusal(limits.min_isolation)
    if why:
        return IsolatedRun(None, False, 0.0, why, level=level)
    if level == "portable" and not is_linux():
        return KIT.run(argv, workdir, limits, env_extra)  # the kit's runner (warm within a session)
    become_subreaper()
    current = template.current()
    if current is not None and current.compatible(workdir, limits):
        done = current.run(argv, workdir, limits, env_extra)
        if done is not None:
            return done
    (workdir / "tmp").mkdir(exist_ok=True)
    for _ in range(START_TRIES):
        done, uid = _attempt(argv, workdir, limits, env_extra, level)
        if done is not None:
            return done
        # The kernel counts this uid's processes in another container (which we cannot see): another uid.
        slots.avoid(uid)
    raise StartFailure(f"no sandbox uid could start a run in {START_TRIES} tries: another grader's processes hold "
                       "them (Resource temporarily unavailable)")


@dataclass(frozen=True)
class RunPipes:
    """A run's two pipes, each a (read end, write end): its output (stdout and stderr together) and its audit
    events. The grader reads; the child writes."""

    out_r: int
    out_w: int
    rep_r: int
    rep_w: int

    @classmethod
    def open(cls) -> RunPipes:
        return cls(*os.pipe(), *os.pipe())

    def close(self) -> None:
        """Close every end still open."""
        for fd in (self.out_r, self.out_w, self.rep_r, self.rep_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _attempt(argv: list[str], workdir: Path, limits: Limits, env_extra, level: str) -> tuple[ChildRun | None, int]:
    """(how the run ended, or None when it could not start as its uid; that uid)."""
    pipes = RunPipes.open()
    started = None
    try:
        started = launch.prepare(level, argv, workdir, limits, pipes.rep_w, env_extra)
        return _supervise(started, workdir, limits, pipes, level), started.uid
    finally:
        if started is not None and started.slot is not None and level == "fallback":
            leftovers.clear_owned(started.slot.uid)
        launch.release(started)
        pipes.close()


def _start(started: launch.Launch, workdir: Path, pipes: RunPipes) -> subprocess.Popen | None:
    """The run's process; None when it could not start as its uid (another's processes hold it there)."""
    try:
        return subprocess.Popen(
            started.cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=pipes.out_w, stderr=pipes.out_w,
            env=started.env, start_new_session=True, preexec_fn=started.preexec, close_fds=True,
            pass_fds=(pipes.rep_w,),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.EAGAIN and started.slot is not None:
            return None  # its uid has processes elsewhere: the caller tries another
        raise StartFailure(f"could not start the child process: {exc}") from None


def _watch(proc: subprocess.Popen, clock: RunClock, sel, log, events, limits: Limits,
           memory: MemoryWatch) -> tuple[int | None, bool, bool]:
    """Pump the run's pipes until it ends, its time is up, it prints past its cap or it holds more memory than its
    limit: (its return code, or None when it was stopped; timed_out; flooded)."""
    while True:
        returncode = proc.poll()
        if returncode is not None:
            return returncode, False, False
        left = clock.left()
        if left <= 0:
            return None, True, False
        if sel.get_map():
            pump(sel, min(left, 0.05))
            if over_cap(log, events, limits):
                return None, False, True
        else:
            time.sleep(min(left, 0.05))
        if memory.over():
            return None, False, False


def _kill_run(proc: subprocess.Popen, started: launch.Launch, below: Callable[[], set[int]]) -> int:
    """End every process of the run; how many were killed. Killing bubblewrap ends the namespace's init and with it
    every process of the run; at the fallback level the session and our orphans are killed instead."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = cgroups.kill(started.groups)
    # Without a PID namespace or cgroups to end them at once: everything below the child, and the orphans
    # that came to us (a subreaper), stopped and then killed.
    return killed + kill_tree(below)


def _exit_status(level: str, returncode: int | None, timed_out: bool) -> int | None:
    """The run's own return code: bwrap reports a child killed by signal N as exit status 128 + N."""
    if level == "namespaces" and returncode is not None and returncode > 128 and not timed_out:
        return -(returncode - 128)
    return returncode


def _uid_refused(level: str, returncode: int | None, text: str) -> bool:
    """Whether setpriv, as the run's uid, could not exec the interpreter: the uid's processes elsewhere."""
    return level == "namespaces" and returncode == SETPRIV_EXEC_FAILED and text.startswith("setpriv: ") and \
        os.strerror(errno.EAGAIN) in text.splitlines()[0]


def _supervise(started: launch.Launch, workdir: Path, limits: Limits, pipes: RunPipes, level: str) -> ChildRun | None:
    """How the run ended; None when it could not start as its uid (another's processes hold it there)."""
    before = children_of(os.getpid())
    proc = None

    def below() -> set[int]:
        return {proc.pid, *(children_of(os.getpid()) - before)}

    clock = RunClock(limits.timeout_s, below)
    proc = _start(started, workdir, pipes)
    if proc is None:
        return None
    register(proc.pid, started.uid, started.groups, started.token)
    os.close(pipes.out_w)
    os.close(pipes.rep_w)
    log, events = new_sinks(LOG_CAP)
    sel = watch(log, events, pipes.out_r, pipes.rep_r)
    memory = MemoryWatch(limits.memory_mb, started.groups, clock.roots,
                         started.slot.uid if started.slot is not None else None)
    returncode, timed_out, flooded = _watch(proc, clock, sel, log, events, limits, memory)
    killed = _kill_run(proc, started, below)
    if returncode is None:
        returncode = proc.wait() if (flooded or memory.stopped) else None
    wall = min(clock.elapsed(), limits.timeout_s) if timed_out else clock.elapsed()  # a stop says its limit
    killed += kill_new_children(before)
    if started.slot is not None:
        killed += kill_tokened(started.slot.uid, started.slot.token)
    unregister(proc.pid)
    drain(sel)  # every writer is gone now
    returncode, text = _exit_status(level, returncode, timed_out), log.text()
    if _uid_refused(level, returncode, text):
        return None
    return IsolatedRun(returncode, timed_out, wall, text, **stream_fields(events, limits, flooded), **memory.finish(),
                       isolation=[*started.isolation, memory.label()], leftover_killed=killed, level=level)
