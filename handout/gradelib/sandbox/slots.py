"""Sandbox uids: one per concurrent run, held by an flock that the kernel drops if the grader dies."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .processes import kill_uid

UID_BASE = 61000  # uids UID_BASE .. UID_BASE + SLOTS - 1 are reserved for sandboxed children
SLOTS = 64
SLOT_DIR = Path("/run/gradelib-sandbox")


class Slot:
    """A sandbox uid held for one run."""

    def __init__(self) -> None:
        SLOT_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        for k in range(SLOTS):
            fd = os.open(SLOT_DIR / f"slot-{k}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid = fd, UID_BASE + k
            # A grader that died mid-run may have left processes of this uid.
            kill_uid(self.uid)
            return
        raise RuntimeError(f"all {SLOTS} sandbox uids are in use")

    def release(self) -> None:
        kill_uid(self.uid)
        os.close(self.fd)


def sweep_free() -> int:
    """Kill processes of sandbox uids that no live grader holds (left by a grader that was killed)."""
    owners: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + SLOTS:
                owners.setdefault(uid, []).append(int(entry))
    killed = 0
    for uid in owners:
        try:
            fd = os.open(SLOT_DIR / f"slot-{uid - UID_BASE}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grader is running there
        try:
            killed += kill_uid(uid)
        finally:
            os.close(fd)
    return killed
