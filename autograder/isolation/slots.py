"""Sandbox uids: one per concurrent run, held by an flock that the kernel drops if the grader dies.

Graders that share a lock folder share the uids through the locks (one file per uid). Graders that
cannot see each other's locks or processes (containers side by side on one host, each with its own
/run and /proc) still share the kernel, which counts processes per uid across all of them: so each
grader starts at a random place in the ring of UIDS uids, and never takes a uid that has a process
anywhere on the kernel (in_use_anywhere, a probe that sees through PID namespaces). A run that still
meets another's uid (two graders probing the same one at the same instant) cannot start, and
runner.py retries it on another uid (avoid). A grader never kills a process because of its uid
alone: a run's leftovers are swept only when they carry this lock folder's token and no grader holds
their uid's lock.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import resource
import shutil
import subprocess
from pathlib import Path

from .processes import TOKEN_ENV, kill_tokened, processes_by_uid, run_token

UID_BASE = 61000  # uids UID_BASE .. UID_BASE + UIDS - 1 are reserved for sandboxed children
UIDS = 2048
SLOTS = 64  # at most this many runs of one grader at once
SLOT_DIR_ENV = "GRADELIB_SLOT_DIR"  # another lock folder (the default: /run/gradelib-sandbox)
START_ENV = "GRADELIB_SLOT_START"  # tests: the first uid this grader tries (default: a random one)

_start: int | None = None  # where this grader's ring starts (chosen once per grader process)
_avoid: set[int] = set()  # uids a run of this grader could not start as (another's processes)


def slot_dir() -> Path:
    return Path(os.environ.get(SLOT_DIR_ENV) or "/run/gradelib-sandbox")


def _token(folder: Path) -> str:
    """This lock folder's token, from its device and inode: what the runs of its graders carry."""
    st = os.stat(folder)
    return hashlib.sha256(f"{st.st_dev}:{st.st_ino}".encode()).hexdigest()[:16]


def lock_path(uid: int) -> Path:
    return slot_dir() / f"uid-{uid}.lock"


def _folder() -> Path:
    folder = slot_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _ring() -> list[int]:
    """The uids in the order this grader tries them: from its random start round the reserved range."""
    global _start
    if _start is None:
        forced = os.environ.get(START_ENV, "")
        _start = int(forced) - UID_BASE if forced.isdigit() else random.SystemRandom().randrange(UIDS)
    return [UID_BASE + (_start + k) % UIDS for k in range(UIDS)]


def block() -> range:
    """The uids any grader may give a run."""
    return range(UID_BASE, UID_BASE + UIDS)


def avoid(uid: int) -> None:
    """A run could not start as `uid` (the kernel counts another's processes there): this grader skips it."""
    _avoid.add(uid)


def in_use_anywhere(uid: int) -> bool:
    """Whether a process of `uid` runs anywhere on this kernel, in containers whose /proc we cannot see too:
    a child that becomes `uid` with a process limit of 0 cannot exec while that uid has any other process."""
    true = shutil.which("true") or "/bin/true"

    def become() -> None:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    try:
        subprocess.run([true], preexec_fn=become, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, close_fds=True, timeout=30, check=False)
    except OSError as exc:
        return exc.errno == errno.EAGAIN
    except subprocess.SubprocessError:
        return True
    return False


class Slot:
    """A sandbox uid held for one run (or one submission's template), and the token its processes carry."""

    def __init__(self, probe: bool = True) -> None:
        import fcntl

        folder = _folder()
        token = _token(folder)
        sweep_free()  # leftovers of this folder's graders that are gone
        held = 0
        for uid in _ring():
            if uid in _avoid:
                continue
            fd = os.open(lock_path(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                held += 1
                if held >= SLOTS * 4:
                    break
                continue
            if probe and in_use_anywhere(uid):  # another grader's run (another lock folder), or a leftover not ours
                os.close(fd)
                continue
            self.fd, self.uid, self.token = fd, uid, f"{token}:{uid}"
            return
        raise RuntimeError(f"no free sandbox uid in {UID_BASE}..{UID_BASE + UIDS - 1} (lock folder {folder})")

    @property
    def env(self) -> dict[str, str]:
        return {TOKEN_ENV: self.token}

    def release(self) -> None:
        kill_tokened(self.uid, self.token)
        os.close(self.fd)


def sweep_free() -> int:
    """Kill the leftovers of this lock folder's graders that are gone: processes of reserved uids whose lock
    is free and whose environment carries this folder's token for that uid (a grader killed mid-run)."""
    import fcntl

    folder = slot_dir()
    if not folder.is_dir():
        return 0
    token = _token(folder)
    killed = 0
    for uid, pids in processes_by_uid(block()).items():
        if not any(run_token(p) == f"{token}:{uid}" for p in pids):
            continue
        try:
            fd = os.open(lock_path(uid), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grader is running there
        try:
            killed += kill_tokened(uid, f"{token}:{uid}")
        finally:
            os.close(fd)
    return killed
