"""The kit's runner (see gradelib.runner), the same on Linux, macOS and Windows: a plain child with time, CPU,
output and memory (psutil) limits, its process tree ended afterwards; it isolates nothing. Within a grading (`session`)
the runs go in turn to one warm child that imported numpy and torch once; a run past a limit ends it."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..child.child_common import clock
from .limits import LOG_CAP, ChildRun, Events, Limits, Tail, child_env, cpu_seconds

BOOT_ENV = "GRADER_BOOT"  # start.py reads its configuration from here (and removes it)
START = Path(__file__).resolve().parent / "start.py"
FRESH_ENV = "GRADELIB_TEMPLATE"  # "off": a fresh interpreter per run (the benchmarks compare both)
SAMPLE_S = 0.05  # how often a run's memory is measured


def child_prefix(boot: Path) -> list[str]:
    """The command of a child: this interpreter, isolated from the environment, running start.py."""
    return [sys.executable, "-I", "-B", str(boot)]


class Child:
    """A child (start.py) that runs harnesses under `root` one at a time, with `preload` imported once."""

    def __init__(self, root: Path, preload: tuple[str, ...]):
        self.root, self.preload, self.runs = Path(root).resolve(), preload, 0
        self.folder, self.proc, self.failure = self.root / "_warm", None, ""
        (self.folder / "tmp").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(START, self.folder / START.name)
        self._start()

    def _start(self) -> None:
        env = child_env(str(self.folder), str(self.folder / "tmp"), None)
        env[BOOT_ENV] = json.dumps({"paths": extra_paths(), "preload": list(self.preload)})
        own = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" else {"start_new_session": True}
        try:
            self.proc = subprocess.Popen(child_prefix(self.folder / START.name), cwd=self.folder, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, **own)
        except (OSError, subprocess.SubprocessError) as exc:
            self.proc, self.failure = None, str(exc)
            return
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(self.proc.stdout, self.answers), daemon=True).start()

    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun | None:
        """The run, in this child; None when it cannot take it (it did not start)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
            if self.proc is None:
                return None
        workdir = Path(workdir).resolve()
        (workdir / "tmp").mkdir(exist_ok=True)
        self.runs += 1
        files = [self.folder / f"run{self.runs}.out", self.folder / f"run{self.runs}.events"]
        task = {"argv": [str(a) for a in argv], "cwd": str(workdir), "cpu_s": cpu_seconds(limits),
                "env": child_env(str(workdir), str(workdir / "tmp"), env_extra), "out": str(files[0]),
                "events": str(files[1])}
        sinks, sampled, peak = (Tail(LOG_CAP), Events()), 0.0, 0  # peak: the most resident MB seen
        start, began = clock(self.proc.pid), time.monotonic()  # its time: the wall clock less its waits for a CPU
        try:
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        offsets, timed_out, flooded, answer = [0, 0], False, False, None
        while answer is None and not (timed_out or flooded or peak > limits.memory_mb):
            with contextlib.suppress(queue.Empty):
                answer = self.answers.get(timeout=0.02)
            _follow(files, sinks, offsets)
            if answer is None and self.proc.poll() is None:
                timed_out = min(clock(self.proc.pid) - start, time.monotonic() - began) >= limits.timeout_s
                flooded = not timed_out and sinks[0].total > limits.output_mb << 20  # a flood stops it at once
                if not (timed_out or flooded) and time.monotonic() >= sampled + SAMPLE_S:
                    sampled, peak = time.monotonic(), max(peak, resident_mb(self.proc.pid, limits.memory_mb))
            elif answer is None:  # the child is gone
                answer = False
        wall = min(clock(self.proc.pid) - start, time.monotonic() - began)  # the wall clock once the child is gone
        if isinstance(answer, dict):
            returncode = answer.get("code", 1)
            _end_tree(self.proc, below_only=True)
        else:  # a limit passed, or the process ended: it goes, with all it started
            _end_tree(self.proc)
            returncode, self.proc = self.proc.returncode, None
        _follow(files, sinks, offsets)
        for path in files:
            path.unlink(missing_ok=True)
        return ChildRun(None if timed_out else returncode, timed_out, wall, sinks[0].text(),
                        limits.output_mb if flooded else 0, sinks[1].by_name,
                        memory_limit_mb=limits.memory_mb if peak > limits.memory_mb else 0,
                        memory_used_mb=peak if peak > limits.memory_mb else 0)

    def close(self) -> None:
        """End the child and everything it started."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            _end_tree(self.proc)
            self.proc = None


def _lines(stream, answers: queue.Queue) -> None:
    """Each answer the child writes, parsed (False: unreadable, or the child is gone)."""
    for line in stream:
        try:
            answers.put(json.loads(line))
        except ValueError:
            answers.put(False)
    answers.put(False)  # the process closed its answers: it is gone


def _follow(files: list[Path], sinks, offsets: list[int]) -> None:
    """Add what the run has written to its output and events files since last time to their sinks."""
    for which, path in enumerate(files):
        try:
            with open(path, "rb") as fh:
                fh.seek(offsets[which])
                chunk = fh.read(1 << 20)
        except OSError:
            continue
        if chunk:
            offsets[which] += len(chunk)
            sinks[which].add(chunk)


def _tree(pid: int) -> list:
    """psutil processes of the run (the child and everything below it), [] without psutil."""
    try:
        import psutil
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except Exception:
        return []


def _end_tree(proc: subprocess.Popen, below_only: bool = False) -> None:
    """Kill the child and everything it started (`below_only`: only what it started). Each process found is suspended
    first, over and over until no new one appears, so a chain that forks as fast as it is killed is caught whole."""
    suspended: dict[int, object] = {}
    for _ in range(100):
        fresh = [p for p in _tree(proc.pid)[below_only:] if p.pid not in suspended]
        if not fresh:
            break
        for p in fresh:
            with contextlib.suppress(Exception):
                p.suspend()
            suspended[p.pid] = p
    if hasattr(os, "killpg") and not below_only:  # the child's own session and process group, where systems have them
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    for p in suspended.values():
        with contextlib.suppress(Exception):
            p.kill()
    if not below_only:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def resident_mb(pid: int, limit_mb: int) -> int:
    """Resident MB of the process `pid` and all below it (0 without psutil: no memory limit then); past `limit_mb`
    measured again with shared pages split among their sharers (PSS) where the system says, else unshared (USS)."""
    used = 0
    for shared_once in (False, True):  # whole resident memories count shared pages in each process that shares them
        total = 0
        for p in _tree(pid):
            with contextlib.suppress(Exception):  # a process that ended mid-measurement, a psutil that cannot read it
                info = p.memory_full_info() if shared_once else p.memory_info()
                total += getattr(info, "pss", info.uss) if shared_once else info.rss
        used = total >> 20
        if used <= limit_mb:
            break
    return used


_current: list[Child] = []


def run(argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun:
    """How the run ended, in the grading's warm child (with its own limits), else in a child of its own."""
    if _current and Path(workdir).resolve().is_relative_to(_current[-1].root):
        done = _current[-1].run(argv, workdir, limits, env_extra)
        if done is not None:
            return done
    own = Child(workdir, ())
    try:
        done = own.run(argv, workdir, limits, env_extra)
    finally:
        own.close()
    return done or ChildRun(None, False, 0.0, f"could not start the child process: {own.failure}")


@contextlib.contextmanager
def session(root: Path, limits: Limits, preload: tuple[str, ...]):
    """Runs under `root` go to one warm child that imported `preload` once (`limits` are each run's own)."""
    if os.environ.get(FRESH_ENV, "") == "off":
        yield None
        return
    warm = Child(root, preload)
    _current.append(warm)
    try:
        yield warm
    finally:
        _current.remove(warm)
        warm.close()


def hold(folder: Path) -> None:
    """Prepare a submission's scratch folder before anything is written to it: nothing to do for the kit's runs."""


def release(folder: Path) -> None:
    """Remove a scratch folder after its last run, however deep."""
    with contextlib.suppress(RecursionError):  # folders nested past it (Python < 3.13): the student's own code
        shutil.rmtree(folder, ignore_errors=True)


def extra_paths() -> list[str]:
    """The folders on sys.path (a `pip install --user` site, PYTHONPATH, a venv's .pth addition) the child adds back
    after `python -I`, so it sees the packages the grader sees; not the grader's own folder (the handout, the repo)."""
    own, here = Path(__file__).resolve().parents[2], Path.cwd().resolve()  # the folder gradelib/ lies in
    folders = [(entry, Path(entry).resolve()) for entry in sys.path if entry and os.path.isdir(entry)]
    return [entry for entry, resolved in folders if resolved not in (here, own) and own not in resolved.parents]
