"""The processes of the runs in progress: the grader as subreaper, killing what a run left, and aborting."""

from __future__ import annotations

import os
import signal

from . import cgroups
from .kernel import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, children_of, kill_until_gone, prctl

_subreaper_set = False
_active: dict[int, dict] = {}  # runs and templates in progress, by pid: {"uid": ..., "token": ..., "cgroups": [...]}
TOKEN_ENV = "GRADELIB_RUN"  # in every sandboxed run's environment: "<lock folder token>:<slot>"


def become_subreaper() -> None:
    """Orphans of the child get re-parented to us, so none can outlive a run."""
    global _subreaper_set
    if not _subreaper_set:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        # Nothing of the same uid may read this process's memory (/proc/<pid>/mem).
        prctl(PR_SET_DUMPABLE, 0)
        _subreaper_set = True


def processes_by_uid(uids: range | set[int] | None = None) -> dict[int, list[int]]:
    """Pids by real uid (only the uids asked for), from one scan of /proc."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        if uids is None or uid in uids:
            found.setdefault(uid, []).append(int(entry))
    return found


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real uid is `uid`."""
    return processes_by_uid({uid}).get(uid, [])


def run_token(pid: int) -> str:
    """The GRADELIB_RUN token in a process's environment ('' when it has none or cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            entries = fh.read().split(b"\0")
    except OSError:
        return ""
    prefix = TOKEN_ENV.encode() + b"="
    for entry in entries:
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("latin-1")
    return ""


def kill_tokened(uid: int, token: str, wait_s: float = 5.0) -> int:
    """SIGKILL the processes of `uid` that carry this run's token (what a run of ours left, never another
    grader's) until none is left; the number killed."""
    return kill_until_gone(lambda: [p for p in processes_of_uid(uid) if run_token(p) == token], wait_s, 0.02,
                           reap=False)


def kill_new_children(before: set[int]) -> int:
    """Kill and reap every child of ours that did not exist before the run."""
    # Each kill re-parents the next link of a chain of orphans to us: go on until none is left.
    return kill_until_gone(lambda: children_of(os.getpid()) - before, 10.0, 0.01, reap=True)


def register(pid: int, uid: int, groups: list, token: str = "") -> None:
    """A run or template started: what abort_active must end if the grader is stopped."""
    _active[pid] = {"uid": uid, "token": token, "cgroups": groups}


def unregister(pid: int) -> None:
    _active.pop(pid, None)


def abort_active() -> None:
    """Kill the runs and templates in progress, everything they started, and remove their cgroups
    (for a grader's signal handler: the process ends next, and nobody else would remove them)."""
    for pid, entry in list(_active.items()):
        cgroups.kill(entry.get("cgroups") or [], wait_s=2.0)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if entry.get("uid") and entry.get("token"):
            kill_tokened(entry["uid"], entry["token"], wait_s=2.0)
        for folder in entry.get("cgroups") or []:
            cgroups.remove(folder)
