"""A submission's scratch folder as a size- and file-capped tmpfs (as root on Linux), and its removal."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .kernel import is_linux, libc
from .scratch import remove_tree

SCRATCH_MB = 512  # everything one submission's runs may write, its own files included
SCRATCH_FILES = 20_000  # files and folders (inodes) of one submission
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2


def cap_folder(folder: Path, mb: int = SCRATCH_MB, files: int = SCRATCH_FILES) -> str:
    """Mount a size- and inode-capped tmpfs on the empty `folder` (root on Linux only); what was done, in words.

    A submission's files and every run's scratch folder then live in memory that
    cannot outgrow `mb` or `files`, whatever the runs write, and vanish with
    `uncap_folder` even if a process still holds a file open.
    """
    if not is_linux() or os.geteuid() != 0:
        return ""
    options = f"size={mb}m,nr_inodes={files},mode=0711".encode()
    if libc().mount(b"tmpfs", str(folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        return ""
    return f"scratch: tmpfs of {mb} MB and {files:,} files"


def uncap_folder(folder: Path) -> None:
    """Detach the tmpfs `cap_folder` mounted (its contents go with it); nothing when none is there."""
    if not is_linux():
        return
    for mount in reversed(mounts_under(Path(folder))):
        libc().umount2(str(mount).encode(), MNT_DETACH)


def mounts_under(folder: Path) -> list[Path]:
    """Mount points at or below `folder`, from /proc/self/mountinfo, outermost first."""
    found = []
    root = os.fsencode(os.path.realpath(folder))
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:  # the mount point, with space, tab, newline and backslash as \ooo
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            if point == root or point.startswith(root + b"/"):
                found.append(Path(os.fsdecode(point)))
    return found


def release(folder: Path) -> None:
    """Detach the folder's tmpfs (everything in it goes with it), then remove the folder."""
    uncap_folder(folder)
    remove_tree(folder)
