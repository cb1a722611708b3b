"""Within one grading, the kit's runs go to one warm process that imported numpy and torch once.

A fresh interpreter per run spends a second or more importing torch each time; forking a process that
already did is Linux's way only (macOS cannot fork safely after importing torch, Windows cannot fork).
So the kit starts one plain child per grading (start.py, the same on every system), which imports them
once and then runs each harness in turn, forgetting the modules each run imported. It keeps each run's
limits: the run's own time, CPU time, output and memory; a run that passes one ends the warm process with
everything it started (the next run starts a new one). Not isolation: one run could leave state for the
next, which on a student's own machine costs only their own preview.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from . import portable
from .limits import LOG_CAP, ChildRun, Limits, child_env, cpu_seconds
from .paths import BOOT_ENV, START, extra_paths
from .resident import MemoryWatch
from .streams import new_sinks, over_cap, stream_fields

ISOLATION = "portable: no isolation (the user's own account); one warm process per grading"
FRESH_ENV = "GRADELIB_TEMPLATE"  # "off": a fresh interpreter per run (the benchmarks compare both)
# Harnesses that set tripwires inside torch itself (module state a warm process keeps from run to run): each
# runs in a process that has run nothing before, so no earlier run (a notebook, the public run of the same file)
# can have taken its tripwires off, and an earlier run's tripwires cannot fire in it. Later runs of other
# harnesses may share its process: its tripwires only report, and only the attention problem reads them.
CLEAN_SLATE = frozenset({"attention_child.py"})


class Warm:
    """The warm process of one grading: runs under `root` with these limits go to it, one at a time."""

    def __init__(self, root: Path, limits: Limits, preload: tuple[str, ...]):
        self.root, self.limits, self.preload, self.runs = Path(root).resolve(), limits, preload, 0
        self.served = 0  # runs the current process has taken
        self.folder = self.root / "_warm"
        self.folder.mkdir(exist_ok=True)
        (self.folder / "tmp").mkdir(exist_ok=True)
        shutil.copyfile(START, self.folder / START.name)
        self.proc: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        self.served = 0
        env = child_env(str(self.folder), str(self.folder / "tmp"), None)
        env[BOOT_ENV] = json.dumps({"warm": True, "paths": extra_paths(), "preload": list(self.preload)})
        try:
            self.proc = subprocess.Popen(
                portable.child_prefix(self.folder / START.name), cwd=self.folder, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True, **_session_options())
        except (OSError, subprocess.SubprocessError):
            self.proc = None
            return
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(self.proc.stdout, self.answers), daemon=True).start()

    def compatible(self, workdir: Path, limits: Limits) -> bool:
        if replace(limits, timeout_s=self.limits.timeout_s) != self.limits:  # every limit but the run's own time
            return False
        try:
            Path(workdir).resolve().relative_to(self.root)
        except ValueError:
            return False
        return True

    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun | None:
        """The run, in the warm process; None when there is none to take it (a fresh child runs it then)."""
        clean_slate = bool(argv) and Path(str(argv[0])).name in CLEAN_SLATE
        if clean_slate and self.served:
            self.close()
        if self.proc is None or self.proc.poll() is not None:
            self._start()
            if self.proc is None:
                return None
        workdir = Path(workdir).resolve()
        (workdir / "tmp").mkdir(exist_ok=True)
        self.runs += 1
        self.served += 1
        out, events_file = self.folder / f"run{self.runs}.out", self.folder / f"run{self.runs}.events"
        task = {"argv": [str(a) for a in argv], "cwd": str(workdir), "cpu_s": cpu_seconds(limits),
                "env": child_env(str(workdir), str(workdir / "tmp"), env_extra), "out": str(out),
                "events": str(events_file)}
        log, events = new_sinks(LOG_CAP)
        memory = MemoryWatch(limits.memory_mb, [], lambda: {self.proc.pid})
        start = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        offsets = [0, 0]
        deadline = start + limits.timeout_s
        timed_out = flooded = False
        answer = returncode = None
        while True:
            with contextlib.suppress(queue.Empty):
                answer = self.answers.get(timeout=0.02)
            _follow(out, log, offsets, 0)
            _follow(events_file, events, offsets, 1)
            if isinstance(answer, dict):
                returncode = answer.get("code", 1)
                break
            if answer is False or self.proc.poll() is not None:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if over_cap(log, events, limits):
                flooded = True
                break
            if memory.over():
                break
        wall = time.monotonic() - start
        if not isinstance(answer, dict):  # a limit passed, or the process ended: it goes, with all it started
            killed = portable._end_tree(self.proc)
            returncode = self.proc.returncode
            self.proc = None
        else:
            killed = _end_children(self.proc.pid)
        _follow(out, log, offsets, 0)
        _follow(events_file, events, offsets, 1)
        for path in (out, events_file):
            path.unlink(missing_ok=True)
        return ChildRun(None if timed_out else returncode, timed_out, wall, log.text(), [ISOLATION, memory.label()],
                        killed, "portable", **stream_fields(events, limits, flooded), **memory.finish())

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            portable._end_tree(self.proc)
            self.proc = None


def _session_options() -> dict:
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def _lines(stream, answers: queue.Queue) -> None:
    for line in stream:
        try:
            answers.put(json.loads(line))
        except ValueError:
            answers.put(False)
    answers.put(False)  # the process closed its answers: it is gone


def _follow(path: Path, sink, offsets: list[int], which: int) -> None:
    """Add what the run has written to `path` since last time to `sink`."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offsets[which])
            chunk = fh.read(1 << 20)
    except OSError:
        return
    if chunk:
        offsets[which] += len(chunk)
        sink.add(chunk)


def _end_children(pid: int) -> int:
    """Kill whatever the run started below the warm process; how many."""
    try:
        import psutil

        children = psutil.Process(pid).children(recursive=True)
    except Exception:
        return 0
    for p in children:
        with contextlib.suppress(Exception):
            p.kill()
    return len(children)


_current: list[Warm] = []


def run(argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun | None:
    """The run in the grading's warm process, or None where there is none for it."""
    if _current and _current[-1].compatible(workdir, limits):
        return _current[-1].run(argv, workdir, limits, env_extra)
    return None


@contextlib.contextmanager
def session(root: Path, limits: Limits, preload: tuple[str, ...]):
    """Runs under `root` go to one warm process that imported `preload` once."""
    if os.environ.get(FRESH_ENV, "") == "off":
        yield None
        return
    warm = Warm(root, limits, preload)
    _current.append(warm)
    try:
        yield warm
    finally:
        _current.remove(warm)
        warm.close()
