"""Sandbox uids: one per concurrent run, held by an flock that the kernel drops if the grader dies.

Graders that share a lock folder share its 64 uids through the locks. A grader with
another lock folder (one in a container or chroot beside one on the host) cannot see
those locks, so the folder's identity picks which block of uids a grader uses, and a
grader never takes a uid while processes of it are alive, nor kills a process because
of its uid alone: a run's leftovers are swept only when they carry this lock folder's
token and the grader that held their slot is gone.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .processes import TOKEN_ENV, kill_tokened, processes_by_uid, run_token

UID_BASE = 61000  # uids UID_BASE .. UID_BASE + BLOCKS * SLOTS - 1 are reserved for sandboxed children
SLOTS = 64
BLOCKS = 32
SLOT_DIR_ENV = "GRADELIB_SLOT_DIR"  # another lock folder (the default: /run/gradelib-sandbox)


def slot_dir() -> Path:
    return Path(os.environ.get(SLOT_DIR_ENV) or "/run/gradelib-sandbox")


def _identity(folder: Path) -> tuple[int, str]:
    """(the first uid of this lock folder's block, its token), from the folder's device and inode."""
    st = os.stat(folder)
    digest = hashlib.sha256(f"{st.st_dev}:{st.st_ino}".encode()).hexdigest()
    return UID_BASE + (int(digest, 16) % BLOCKS) * SLOTS, digest[:16]


def first_uid_of(folder: Path) -> int:
    """The first uid of the block a lock folder picks."""
    return _identity(folder)[0]


def _folder() -> Path:
    folder = slot_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def block() -> range:
    """The uids this grader's lock folder uses."""
    base, _token = _identity(_folder())
    return range(base, base + SLOTS)


class Slot:
    """A sandbox uid held for one run (or one submission's template), and the token its processes carry."""

    def __init__(self) -> None:
        import fcntl

        folder = _folder()
        base, token = _identity(folder)
        sweep_free()  # leftovers of this folder's graders that are gone
        busy = processes_by_uid(range(base, base + SLOTS))
        for k in range(SLOTS):
            if base + k in busy:  # another grader's (another lock folder), or not ours to kill: not used
                continue
            fd = os.open(folder / f"slot-{k}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid, self.token = fd, base + k, f"{token}:{k}"
            return
        raise RuntimeError(f"all {SLOTS} sandbox uids are in use (lock folder {folder})")

    @property
    def env(self) -> dict[str, str]:
        return {TOKEN_ENV: self.token}

    def release(self) -> None:
        kill_tokened(self.uid, self.token)
        os.close(self.fd)


def sweep_free() -> int:
    """Kill the leftovers of this lock folder's graders that are gone: processes of our block's uids whose
    slot lock is free and whose environment carries that slot's token (a grader killed mid-run)."""
    import fcntl

    folder = slot_dir()
    if not folder.is_dir():
        return 0
    base, token = _identity(folder)
    killed = 0
    for uid, pids in processes_by_uid(range(base, base + SLOTS)).items():
        k = uid - base
        mine = [p for p in pids if run_token(p) == f"{token}:{k}"]
        if not mine:
            continue
        try:
            fd = os.open(folder / f"slot-{k}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grader is running there
        try:
            killed += kill_tokened(uid, f"{token}:{k}")
        finally:
            os.close(fd)
    return killed
