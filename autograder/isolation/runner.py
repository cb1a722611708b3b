"""One run in a fresh interpreter: started at the level in force, watched to its limits, ended whole."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from gradelib.runner import KIT
from gradelib.runner.limits import LOG_CAP, ChildRun, Limits
from gradelib.runner.streams import drain, new_sinks, over_cap, pump, stream_fields, watch

from . import cgroups, launch, leftovers, template
from .kernel import children_of, is_linux, kill_tree
from .levels import isolation_level, refusal
from .memory import MemoryWatch
from .processes import become_subreaper, kill_new_children, kill_tokened, register, unregister


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
    from the submission's template process instead (template.py).
    """
    workdir = Path(workdir).resolve()
    level = isolation_level()
    why = refusal(limits.isolation)
    if why:
        return ChildRun(None, False, 0.0, why, [], 0, level)
    if level == "portable" and not is_linux():
        return KIT.run(argv, workdir, limits, env_extra)  # the kit's runner (warm within a session)
    become_subreaper()
    current = template.current()
    if current is not None and current.compatible(workdir, limits):
        done = current.run(argv, workdir, limits, env_extra)
        if done is not None:
            return done
    (workdir / "tmp").mkdir(exist_ok=True)
    out_r, out_w = os.pipe()
    rep_r, rep_w = os.pipe()
    started = None
    try:
        started = launch.prepare(level, argv, workdir, limits, rep_w, env_extra)
        return _supervise(started, workdir, limits, out_r, out_w, rep_r, rep_w, level)
    finally:
        if started is not None and started.slot is not None and level == "fallback":
            leftovers.clear_owned(started.slot.uid)
        launch.release(started)
        for fd in (out_r, out_w, rep_r, rep_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _supervise(started: launch.Launch, workdir: Path, limits: Limits, out_r: int, out_w: int, rep_r: int, rep_w: int,
               level: str) -> ChildRun:
    before = children_of(os.getpid())
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            started.cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=started.env,
            start_new_session=True, preexec_fn=started.preexec, close_fds=True, pass_fds=(rep_w,),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return ChildRun(None, False, 0.0, f"could not start the child process: {exc}", started.isolation, 0, level)
    register(proc.pid, started.uid, started.groups, started.token)
    os.close(out_w)
    os.close(rep_w)
    log, events = new_sinks(LOG_CAP)
    sel = watch(log, events, out_r, rep_r)
    memory = MemoryWatch(limits.memory_mb, started.groups, lambda: {proc.pid, *(children_of(os.getpid()) - before)})

    deadline = start + limits.timeout_s
    timed_out = flooded = False
    returncode: int | None = None
    while True:
        returncode = proc.poll()
        if returncode is not None:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if sel.get_map():
            pump(sel, min(left, 0.05))
            if over_cap(log, events, limits):
                flooded = True
                break
        else:
            time.sleep(min(left, 0.05))
        if memory.over():
            break
    # Killing bubblewrap ends the namespace's init and with it every process of the run;
    # at the fallback level the session and our orphans are killed instead.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = cgroups.kill(started.groups)
    # Without a PID namespace or cgroups to end them at once: everything below the child, and the orphans
    # that came to us (a subreaper), stopped and then killed.
    killed += kill_tree(lambda: {proc.pid, *(children_of(os.getpid()) - before)})
    if returncode is None:
        returncode = proc.wait() if (flooded or memory.stopped) else None
    wall = time.monotonic() - start
    killed += kill_new_children(before)
    if started.slot is not None:
        killed += kill_tokened(started.slot.uid, started.slot.token)
    unregister(proc.pid)
    drain(sel)  # every writer is gone now
    if level == "namespaces" and returncode is not None and returncode > 128 and not timed_out:
        # bwrap reports a child killed by signal N as exit status 128 + N.
        returncode = -(returncode - 128)
    return ChildRun(returncode, timed_out, wall, log.text(), [*started.isolation, memory.label()], killed, level,
                    **stream_fields(events, limits, flooded), **memory.finish())
