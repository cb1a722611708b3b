"""The kit's runner (the "portable" level, on Linux, macOS and Windows alike): a plain child of the same
interpreter, for students' own machines. It isolates nothing; it keeps the grading the same:
the same harnesses, a wall-clock limit, a CPU-time limit where the system has one, an output
cap, a memory limit on what the run's processes hold (psutil), a scratch folder, and the whole process tree
ended afterwards. Everything here exists on every system Python runs on: pipes are read by threads,
processes found and ended through psutil (or the process group, without it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .limits import LOG_CAP, ChildRun, Limits, child_env, cpu_seconds
from .paths import BOOT_ENV, START, extra_paths
from .resident import MemoryWatch
from .streams import new_sinks, over_cap, stream_fields

BOOT_FOLDER = "_boot"
ISOLATION = "portable: no isolation (the user's own account)"


def child_prefix(boot: Path) -> list[str]:
    """The command before the harness: this interpreter, isolated from the environment, running boot.py."""
    return [sys.executable, "-I", "-B", str(boot)]


def _copy_boot(workdir: Path) -> Path:
    folder = workdir / BOOT_FOLDER
    folder.mkdir(exist_ok=True)
    shutil.copyfile(START, folder / START.name)
    return folder / START.name


def _reader(fd: int, sink, done: threading.Event) -> threading.Thread:
    def loop() -> None:
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                sink.add(chunk)
        except OSError:
            pass
        finally:
            done.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _tree(pid: int) -> list:
    """psutil processes of the run (the child and everything below it), [] without psutil."""
    try:
        import psutil
    except ImportError:
        return []
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except Exception:
        return []


def _end_tree(proc: subprocess.Popen) -> int:
    """Kill the child and everything it started; how many were killed. Each process found is suspended
    first, over and over until no new one appears, so a chain that forks as fast as it is killed is caught
    whole."""
    suspended: dict[int, object] = {}
    for _ in range(100):
        fresh = [p for p in _tree(proc.pid) if p.pid not in suspended]
        if not fresh:
            break
        for p in fresh:
            try:
                p.suspend()
            except Exception:
                pass
            suspended[p.pid] = p
    if hasattr(os, "killpg"):  # the child's own session and process group, on systems that have them
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    killed = 0
    for p in suspended.values():
        try:
            p.kill()
            killed += 1
        except Exception:
            pass
    try:
        proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    return killed


def _popen_options(rep_w: int) -> tuple[dict, dict]:
    """(Popen keyword arguments, boot configuration) that hand the child the audit pipe's write end."""
    if os.name == "nt":  # a handle, inherited through the STARTUPINFO list; boot.py turns it into a descriptor
        import msvcrt

        handle = msvcrt.get_osfhandle(rep_w)
        os.set_handle_inheritable(handle, True)
        info = subprocess.STARTUPINFO(lpAttributeList={"handle_list": [handle]})
        return ({"startupinfo": info, "creationflags": subprocess.CREATE_NEW_PROCESS_GROUP},
                {"report_handle": handle})
    return {"start_new_session": True, "pass_fds": (rep_w,)}, {"report_fd": rep_w}


def run(argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun:
    """Run `python -I boot.py argv...` in `workdir` as a plain child; return how it ended."""
    workdir = Path(workdir).resolve()
    (workdir / "tmp").mkdir(exist_ok=True)
    boot = _copy_boot(workdir)
    rep_r, rep_w = os.pipe()
    options, channel = _popen_options(rep_w)
    env = child_env(str(workdir), str(workdir / "tmp"), env_extra)
    env[BOOT_ENV] = json.dumps({"paths": extra_paths(),
                                "cpu_s": cpu_seconds(limits), **channel})
    start = time.monotonic()
    try:
        proc = subprocess.Popen([*child_prefix(boot), *argv], cwd=workdir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, close_fds=True, **options)
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(rep_r)
        os.close(rep_w)
        return ChildRun(None, False, 0.0, f"could not start the child process: {exc}", [ISOLATION], 0, "portable")
    os.close(rep_w)
    log, events = new_sinks(LOG_CAP)
    done = [threading.Event(), threading.Event()]
    readers = [_reader(proc.stdout.fileno(), log, done[0]), _reader(rep_r, events, done[1])]
    memory = MemoryWatch(limits.memory_mb, [], lambda: {proc.pid})
    deadline = start + limits.timeout_s
    timed_out = flooded = False
    while True:
        returncode = proc.poll()
        if returncode is not None:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        if over_cap(log, events, limits):
            flooded = True
            break
        if memory.over():
            break
        time.sleep(0.02)
    killed = _end_tree(proc)
    if not timed_out:
        returncode = proc.returncode
    wall = time.monotonic() - start
    for thread in readers:
        thread.join(timeout=2.0)
    for stream in (proc.stdout,):
        try:
            stream.close()
        except OSError:
            pass
    try:
        os.close(rep_r)
    except OSError:
        pass
    return ChildRun(returncode if not timed_out else None, timed_out, wall, log.text(), [ISOLATION, memory.label()],
                    killed, "portable", **stream_fields(events, limits, flooded), **memory.finish())
