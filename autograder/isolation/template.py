"""One confined template process per submission, forked once per run (the grader's side of the fork server).

`runner.run` starts a fresh interpreter for every run, and each imports torch
again (over a second). Within `session(root, limits)` the runs whose folders
lie under `root` are forked instead from a template that was started once,
confined like any child (same namespaces, uid, Landlock, rlimits, cgroups),
and imported numpy and torch (and matplotlib for a submission with notebooks).
The template runs no line of the submission. A forked run gets its own pipes,
folder, environment, session and rlimits; when it ends, the template kills
everything it left (it is their subreaper) and says how it ended (boot.py's
side). A run that passes its deadline is killed from here; a template that
dies or stops answering is replaced at the next run. Only runs of one
submission share a template, so whatever a run does to it costs that
submission's own runs, never another's.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from gradelib.runner import PRELOAD, PRELOAD_NOTEBOOKS  # noqa: F401 (the package's names)
from gradelib.runner.limits import LOG_CAP, ChildRun, Tail, child_env

from . import cgroups, fallback, launch, leftovers
from .interpreter import Limits
from .kernel import children_of, is_linux, kill_tree, kill_until_gone, landlock_abi
from .levels import isolation_level
from .memory import MemoryWatch, RunClock
from .namespaces import SCRATCH_INSIDE
from .pipes import IsolatedRun, drain, new_sinks, over_cap, pump, stream_fields, watch
from .processes import become_subreaper, kill_new_children, kill_tokened, register, unregister
from .scratch import remove_tree

TEMPLATE_START_S = 120.0  # a template that is not ready by then is given up (runs start one by one)
TEMPLATE_REPLY_S = 5.0  # after its run was killed, a template that does not answer is given up
TEMPLATE_ENV = "GRADELIB_TEMPLATE"  # "off": no template, a fresh interpreter per run
TEMPLATE_CPU_S = 3600  # the template's own CPU limit; each run sets its own below it


class Session:
    """The template of one submission, started at its first run."""

    def __init__(self, root: Path, limits: Limits, preload: tuple[str, ...] = PRELOAD):
        self.root = Path(root).resolve()
        self.limits = limits
        self.preload = tuple(preload)
        self.level = isolation_level()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.pid = 0  # the template's pid as this process sees it
        self.started: launch.Launch | None = None
        self.isolation: list[str] = []
        self.broken = ""  # why no template could be started ('' while none was tried or it works)
        self.before: set[int] = set()

    def compatible(self, workdir: Path, limits: Limits) -> bool:
        if self.broken:
            return False
        if replace(limits, timeout_s=self.limits.timeout_s) != self.limits:  # every limit but the run's own time
            return False
        try:
            Path(workdir).resolve().relative_to(self.root)
        except ValueError:
            return False
        return True

    # -------------------------------------------------------------- the template
    def _start(self) -> bool:
        become_subreaper()
        self.before = children_of(os.getpid())
        (self.root / "tmp").mkdir(exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        # At the namespaces level /dev/shm and System V IPC are the submission's own: the template empties them after
        # each run.
        config = {
            "control_fd": theirs.fileno(),
            "preload": list(self.preload),
            "private_ipc": self.level == "namespaces",
            # As a sandbox uid of its own (not the user's, at the portable level), the template ends a run's
            # processes with kill(-1): at the fallback it may not list /proc.
            "own_uid": self.level == "namespaces" or (self.level == "fallback" and os.geteuid() == 0),
        }
        # The template counts as one process of the run's uid and cgroup.
        limits = replace(self.limits, timeout_s=TEMPLATE_CPU_S, processes=self.limits.processes + 1)
        try:
            self.started = launch.prepare(self.level, [], self.root, limits, rep_w, None, config)
            if self.level == "namespaces":
                os.chown(self.root, os.getuid(), os.getgid())  # the submission's folder stays the grader's
            self.started.env["MPLCONFIGDIR"] = self.started.env["TMPDIR"]
            self.isolation = [*self.started.isolation, "template process (forked per run)"]
            self.proc = subprocess.Popen(
                self.started.cmd, cwd=self.root, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                env=self.started.env, start_new_session=True, preexec_fn=self.started.preexec, close_fds=True,
                pass_fds=(rep_w, theirs.fileno()),
            )
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.broken = f"the template process could not start: {exc}"
            self._stop()
            return False
        finally:
            theirs.close()
            for fd in (rep_w, out_w, rep_r):
                os.close(fd)
        self.sock = ours
        register(self.proc.pid, self.started.uid, self.started.groups, self.started.token)
        reply, creds = self._receive(TEMPLATE_START_S)
        tail = Tail(4000)
        try:
            os.set_blocking(out_r, False)
            tail.add(os.read(out_r, 4000))
        except OSError:
            pass
        os.close(out_r)
        if not reply or not reply.get("ready"):
            said = tail.text().strip()
            self.broken = "the template process did not start" + (f": {said[-300:]}" if said else "")
            self._stop()
            return False
        self.pid = creds[0] if creds else self.proc.pid
        return True

    def _receive(self, wait_s: float) -> tuple[dict | None, tuple[int, int, int] | None]:
        """The template's next reply (and the sender's pid, uid, gid as the kernel vouches), or None."""
        sock = self.sock
        if sock is None:
            return None, None
        ready = selectors.DefaultSelector()
        ready.register(sock, selectors.EVENT_READ)
        try:
            if not ready.select(wait_s):
                return None, None
            data, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except OSError:
            return None, None
        finally:
            ready.close()
        creds = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
                creds = struct.unpack("iII", payload[:12])
        try:
            return (json.loads(data) if data else None), creds
        except ValueError:
            return None, creds

    def _stop(self) -> int:
        """End the template and everything of the submission; the number of processes killed."""
        killed = 0
        started = self.started
        if self.proc is not None:
            unregister(self.proc.pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed += cgroups.kill(started.groups if started else [])
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            killed += kill_new_children(self.before)
        if started is not None and started.slot is not None:
            killed += kill_tokened(started.slot.uid, started.slot.token)
            if self.level == "fallback":
                leftovers.clear_owned(started.slot.uid)
        launch.release(started)
        if self.sock is not None:
            self.sock.close()
        self.proc, self.sock, self.started, self.pid = None, None, None, 0
        return killed

    def close(self) -> None:
        self._stop()

    def _kill_run(self) -> int:
        """Kill every process below the template (the run's), however it tried to get away."""
        killed = kill_tree(lambda: children_of(self.pid), 5.0)
        killed += kill_until_gone(lambda: children_of(self.pid), 5.0, 0.01, reap=False)
        if self.level != "namespaces":
            killed += kill_new_children(self.before | {self.proc.pid})  # orphans that came to us
        return killed

    # -------------------------------------------------------------- one run
    def _prepare_folder(self, workdir: Path) -> str:
        """Give the run's folder to the run's user; its path as the run sees it."""
        (workdir / "tmp").mkdir(exist_ok=True)
        slot = self.started.slot
        if self.level == "namespaces":
            os.chown(workdir, slot.uid, slot.uid)
            os.chown(workdir / "tmp", slot.uid, slot.uid)
            return f"{SCRATCH_INSIDE}/{workdir.relative_to(self.root)}"
        if slot is not None:
            fallback.give_to(workdir, slot.uid)
        return str(workdir)

    def _writable(self, inside: str) -> list[str] | None:
        """Where the run may write, as it sees it: its own folder and the devices (and /dev/shm where it is emptied
        after each run); None where no Landlock layer confines it (the portable level, a kernel without Landlock)."""
        if self.level == "portable" or not landlock_abi():
            return None
        emptied = self.level == "namespaces" or self.started.slot is not None  # or removed as the run's own uid
        return [inside, *(p for p in fallback.DEVICE_PATHS if p != "/dev/shm" or emptied)]

    def _empty_shared_tmp(self) -> None:
        """Empty the template's own temp folder (`root`/tmp, which every run could reach as ../tmp): a run finds
        nothing an earlier run, or the template's imports, left there."""
        tmp = self.root / "tmp"
        try:
            entries = list(os.scandir(tmp))
        except OSError:
            return
        for entry in entries:
            remove_tree(Path(entry.path))

    def _ready(self) -> bool:
        """A live template to fork from, started afresh where it went; False when none works here."""
        if self.proc is not None and self.proc.poll() is None:
            return True
        if self.proc is not None:
            self._stop()
        return self._start()

    def _send(self, request: dict) -> tuple[int, int] | None:
        """Hand the template the run's request with the write ends of the run's two pipes (its output, its audit
        events); their read ends, or None when the template cannot take it (it is stopped)."""
        out_r, out_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [out_w, rep_w])
        except OSError:
            for fd in (out_r, out_w, rep_r, rep_w):
                os.close(fd)
            self._stop()
            return None
        finally:
            for fd in (out_w, rep_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
        return out_r, rep_r

    def _end_unanswered(self, stopped_here: bool, gone: bool) -> tuple[dict | None, int]:
        """After a run the template has not answered for: kill what the run left and, where this side stopped it
        (time, output, memory) and the template lives, wait for its reply on how the run ended. (The reply or None,
        the processes killed); with no reply the template is stopped and the next run starts a fresh one."""
        killed = self._kill_run()
        reply = None
        while reply is None and stopped_here and not gone:  # killed from here: the template now reaps it and answers
            message, _creds = self._receive(TEMPLATE_REPLY_S)
            if message is None:
                break
            if "returncode" in message:
                reply = message
        if reply is None:
            killed += self._stop()
        return reply, killed

    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None) -> ChildRun | None:
        """The run, forked from the template; None when no template works here (run it the usual way)."""
        if not self._ready():
            return None
        workdir = Path(workdir).resolve()
        inside = self._prepare_folder(workdir)
        slot = self.started.slot
        env = child_env(inside, f"{inside}/tmp", {**(env_extra or {}), **(slot.env if slot else {})})
        request = {"argv": list(argv), "cwd": inside, "env": env, "rlimits": {"RLIMIT_CPU": int(limits.timeout_s) + 5},
                   "write": self._writable(inside)}
        self._empty_shared_tmp()
        clock = RunClock(limits.timeout_s, lambda: children_of(self.pid))
        pipes = self._send(request)
        if pipes is None:
            return None
        log, events = new_sinks(LOG_CAP)
        sel = watch(log, events, *pipes)
        sel.register(self.sock, selectors.EVENT_READ, "template")
        memory = MemoryWatch(limits.memory_mb, self.started.groups, clock.roots, slot.uid if slot is not None else None)
        reply, timed_out, flooded, gone = self._wait_for_reply(sel, clock, log, events, limits, memory)
        sel.unregister(self.sock)
        stopped_here = timed_out or flooded or memory.stopped
        killed = 0
        if reply is None:
            reply, killed = self._end_unanswered(stopped_here, gone)
        wall = min(clock.elapsed(), limits.timeout_s) if timed_out else clock.elapsed()  # a stop says its limit
        returncode, said = reply_fields(reply, timed_out)
        drain(sel)
        for fd in pipes:
            os.close(fd)
        if self.level == "fallback" and slot is not None:
            leftovers.clear_owned(slot.uid)
        done = IsolatedRun(returncode, timed_out, wall, log.text(),
                           **stream_fields(events, limits, flooded), **memory.finish(),
                           isolation=[*self.isolation, memory.label()], leftover_killed=killed + said, level=self.level)
        if reply is None and not stopped_here:
            done.fault = done.fault or "the template process it was forked from ended, and the run with it"
        return done

    def _wait_for_reply(self, sel, clock: RunClock, log, events, limits: Limits, memory: MemoryWatch):
        """Pump the run's pipes until the template says how the run ended, its time is up, the run
        prints past its cap or holds more memory than its limit, or the template goes:
        (reply, timed_out, flooded, gone)."""
        timed_out, flooded, reply, gone = False, False, None, False
        quiet_since = None  # when the run's pipes both closed: its processes are gone, the reply is due
        while reply is None and not gone:
            left = clock.left()
            if left <= 0:
                timed_out = True
                break
            if len(sel.get_map()) == 1:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > TEMPLATE_REPLY_S:
                    break  # a template that was stopped or is stuck: replaced below
            if pump(sel, min(left, 0.05)):  # the template said something, or its socket closed
                message, _creds = self._receive(0)
                if message is None:
                    gone = True  # the template died (or was killed by the run)
                elif "returncode" in message:
                    reply = message
            if over_cap(log, events, limits):
                flooded = True
                break
            if memory.over():
                break
        return reply, timed_out, flooded, gone


def reply_fields(reply: dict | None, timed_out: bool) -> tuple[int | None, int]:
    """(The run's return code, the processes the template says it killed) from the template's reply; with no reply
    the template went, and the run with it (killed), unless the run's time was up."""
    if reply is None:
        return (None if timed_out else -signal.SIGKILL), 0
    returncode, said = reply.get("returncode"), reply.get("killed")
    said = said if type(said) is int and 0 <= said < 1 << 20 else 0  # the template's count, if it is one
    return (returncode if isinstance(returncode, int) else None), said


_session: Session | None = None


def current() -> Session | None:
    """The session runs are forked from now, if any."""
    return _session


@contextlib.contextmanager
def session(root: Path, limits: Limits, preload: tuple[str, ...] = PRELOAD):
    """Runs under `root` with these limits are forked from one template process (see Session) that
    imported the modules `preload` names."""
    global _session
    # Off Linux no template: fork() after importing torch is not safe on macOS, and Windows has none.
    if os.environ.get(TEMPLATE_ENV, "") == "off" or not is_linux():  # (the benchmarks compare both on Linux)
        yield None
        return
    outer, _session = _session, Session(root, Limits.of(limits), preload)
    try:
        yield _session
    finally:
        _session.close()
        _session = outer


