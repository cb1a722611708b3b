"""A submission's scratch folder, removed whole however deep (the course grader's: the kit's own runner removes a
student's folders with shutil.rmtree)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def remove_tree(folder: Path) -> None:
    """Remove a folder a submission's runs wrote into, however deep (1,500 nested folders are past Python's
    recursion limit and a path's length limit, so this walks by descriptors, one level at a time, as
    coreutils' rm does). Links are removed, never followed; it stays on the folder's file system; nothing
    here raises."""
    if os.unlink in os.supports_dir_fd and os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
        _remove_by_descriptors(str(folder))
    else:
        _remove_by_paths(str(folder))


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
MAX_STEPS = 10_000_000  # a bound on the walk, whatever the tree


def _unlink_until_a_folder(fd: int, device: int, stuck: set[tuple[int, int]]) -> tuple[str, tuple[int, int]] | None:
    """Unlink the entries of the folder open as `fd` up to its first folder to enter (on `device`, not `stuck`):
    (that folder's name, (device, inode)), or None when none is left."""
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError:
                        pass
                elif (st.st_dev, st.st_ino) not in stuck and st.st_dev == device:
                    return entry.name, (st.st_dev, st.st_ino)
    except OSError:
        pass
    return None


def _remove_by_descriptors(top: str) -> None:
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError:
        try:
            os.unlink(top)  # a file or a link where a folder was expected
        except OSError:
            pass
        return
    device = os.fstat(fd).st_dev
    names: list[str] = []  # the folders entered below `top`, by name
    stuck: set[tuple[int, int]] = set()  # folders that could not be entered or removed: left alone
    for _ in range(MAX_STEPS):
        below = _unlink_until_a_folder(fd, device, stuck)
        if below is not None:
            try:
                inner = os.open(below[0], _DIR_FLAGS, dir_fd=fd)
            except OSError:
                stuck.add(below[1])
                continue
            os.close(fd)
            fd = inner
            names.append(below[0])
            continue
        if not names:  # `top` is empty (or holds only what could not be removed)
            os.close(fd)
            try:
                os.rmdir(top)
            except OSError:
                pass
            return
        here = os.fstat(fd)
        parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = parent
        try:
            os.rmdir(names.pop(), dir_fd=fd)
        except OSError:
            stuck.add((here.st_dev, here.st_ino))
    os.close(fd)


def _remove_by_paths(top: str) -> None:
    """remove_tree where the system has no descriptor-relative calls (Windows)."""
    stack = [(top, False)]
    while stack:
        path, emptied = stack.pop()
        if emptied:
            try:
                os.rmdir(path)
            except OSError:
                pass
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        junction = getattr(st, "st_file_attributes", 0) & getattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0)
        if not stat.S_ISDIR(st.st_mode) or junction:  # a file, a link, a junction: removed, never entered
            try:
                os.rmdir(path) if junction else os.unlink(path)
            except OSError:
                pass
            continue
        stack.append((path, True))
        try:
            with os.scandir(path) as entries:
                stack.extend((entry.path, False) for entry in entries)
        except OSError:
            pass
