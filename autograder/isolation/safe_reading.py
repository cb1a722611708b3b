"""The course grader's reader of files a hostile submission or its child controls (the kit's safeio, hardened).

A child's scratch may hold a symbolic link (to a root-only file, to another student's feedback), a FIFO that blocks
a reader, a link to /dev/zero, or a hard link to a file the child could not read itself. So READER opens every file
with O_NOFOLLOW (below `root`, each folder too) and O_NONBLOCK, checks with fstat that it opened a regular file,
reads no more than its cap, and parses a .npy header from a bounded prefix before reading the data it promises (the
kit's safeio holds the checks and their messages). `installed()` (autograder/isolation/install.py) puts
READER in force for every course grading; the batch's own reads (results, records, tables) pass it by name here.
READER also bounds what the grader's own process spends parsing a notebook (notebook_budget).
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from pathlib import Path
from typing import Any

from gradelib import safeio
from gradelib.handin_contract import MAX_FILE_BYTES
from gradelib.safeio import SafeReadError, check_header, parse_header, to_array, too_big, truncated

# Windows has none of these flags (nor opening a folder, nor dir_fd): there a path is checked for links
# component by component just before it is opened.
_FLAG = {name: getattr(os, name, 0) for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_DIRECTORY", "O_BINARY")}
OPEN_FLAGS = os.O_RDONLY | _FLAG["O_NOFOLLOW"] | _FLAG["O_NONBLOCK"] | _FLAG["O_CLOEXEC"] | _FLAG["O_BINARY"]
DIR_FLAGS = os.O_RDONLY | _FLAG["O_NOFOLLOW"] | _FLAG["O_DIRECTORY"] | _FLAG["O_CLOEXEC"]
NOFOLLOW_OPEN = bool(_FLAG["O_NOFOLLOW"]) and os.open in os.supports_dir_fd
MAX_NPY_HEADER = 10_000  # numpy's own default limit for a trusted header
KINDS = {"a folder": stat.S_ISDIR, "a FIFO (named pipe)": stat.S_ISFIFO, "a socket": stat.S_ISSOCK,
         "a character device": stat.S_ISCHR, "a block device": stat.S_ISBLK, "a symbolic link": stat.S_ISLNK}


def _why(exc: OSError) -> tuple[str, str]:
    if exc.errno == errno.ENOENT:
        return "is missing", "missing"
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return "is a symbolic link, not a regular file; the grader does not follow links", "not_regular"
    if exc.errno == errno.ENOTDIR:
        return "lies under a symbolic link or a file, not a folder; the grader does not follow links", "not_regular"
    if exc.errno == errno.EACCES:
        return "cannot be read (permission denied)", "not_regular"
    return f"cannot be opened ({os.strerror(exc.errno) if exc.errno else type(exc).__name__})", "not_regular"


def _open_fd(path: Path, root: Path | None) -> int:
    """An fd for `path`; with `root`, no component of `path` below `root` may be a symbolic link."""
    try:
        rel = path.relative_to(root) if root is not None and path.is_relative_to(root) else None
        if root is not None and (rel is None or ".." in rel.parts or not rel.parts):
            raise SafeReadError(path.name, f"lies outside the folder {root}", "not_regular")
        if not NOFOLLOW_OPEN:  # each folder below `root`, and the file, checked for a link just before the open
            for i in range(1, len(rel.parts) if rel else 0):
                mode = os.lstat(Path(root, *rel.parts[:i])).st_mode
                if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
                    raise OSError(errno.ENOTDIR, "not a folder")
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise OSError(errno.ELOOP, "a link")
        if rel is None or not NOFOLLOW_OPEN:
            return os.open(path, OPEN_FLAGS)
        dir_fd = os.open(root, DIR_FLAGS)
        try:
            for part in rel.parts[:-1]:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=dir_fd)
                os.close(dir_fd)
                dir_fd = next_fd
            return os.open(rel.parts[-1], OPEN_FLAGS, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise SafeReadError(path.name, *_why(exc)) from None


def _read_prefix(fd: int, name: str, n: int) -> bytes:
    """Up to `n` bytes from where the descriptor stands (fewer at the end of the file)."""
    chunks, total = [], 0
    try:
        while total < n:
            chunk = os.read(fd, min(1 << 20, n - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:  # EAGAIN included: a regular file never blocks, but nothing here may wait
        why = os.strerror(exc.errno) if exc.errno else exc
        raise SafeReadError(name, f"could not be read ({why})", "not_regular") from None
    return b"".join(chunks)


# What the grader's own process may spend parsing a notebook (the matplotlib hint, the similarity report): json.loads
# makes an object of every value (an empty {} takes 64 bytes for its 3 in the file: a 95 MB notebook of them took
# 2.4 GB) and one str of the whole file, 1, 2 or 4 bytes a character after its widest one; both are bounded before it
# runs. The reference notebooks hold about 3,000 values and 110 kB.
MAX_NOTEBOOK_VALUES = 500_000
MAX_NOTEBOOK_TEXT_BYTES = 64 * 2**20
_ASCII = bytes(range(0x80))
_WIDE_ESCAPES = (re.compile(rb"\\u[dD][89abAB]"), re.compile(rb"\\u(?!00)"))


def _width(chunk: bytes) -> int:
    """Bytes a character takes in the str json.loads decodes `chunk` into (1, 2 or 4), after its widest one."""
    wide = chunk.translate(None, _ASCII)  # the non-ASCII bytes alone, found at C speed
    if b"\\u" not in chunk:
        escaped = 1
    else:
        escaped = 4 if _WIDE_ESCAPES[0].search(chunk) else 2 if _WIDE_ESCAPES[1].search(chunk) else 1
    if not wide:
        return escaped
    coded = 4 if wide.translate(None, bytes(range(0xf0, 0xf5))) != wide else (
        2 if wide.translate(None, bytes(range(0xc4, 0xf0))) != wide else 1)
    return max(escaped, coded)


def notebook_budget(source: bytes | Path) -> str:
    """Why parsing the notebook `source` (its bytes, or its file, read a MB at a time) would take more than the
    grader's fixed budget ('' when it would not): a count of bytes, no parse."""
    values, width, size, tail = 1, 1, 0, b""  # at least as many values as the file holds
    with (io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")) as fh:
        while chunk := fh.read(2**20):
            values += chunk.count(b",") + chunk.count(b"{") + chunk.count(b"[")
            seen = tail + chunk  # an escape may straddle two chunks
            width = max(width, _width(seen)) if width < 4 else 4
            size, tail = size + len(chunk), chunk[-6:]
    if values > MAX_NOTEBOOK_VALUES:
        return (f"it holds up to {values:,} JSON values, more than the {MAX_NOTEBOOK_VALUES:,} the grader reads "
                "(a notebook holds a few thousand: clear its outputs and save it)")
    if size * width > MAX_NOTEBOOK_TEXT_BYTES:
        return (f"it is {size / 2**20:.1f} MB of text, {width} byte(s) a character, more than the "
                f"{MAX_NOTEBOOK_TEXT_BYTES // 2**20} MB the grader reads (clear its outputs and save it)")
    return ""


class HostileReader(safeio.Reader):
    """safeio.Reader for files a hostile child controls: no link followed, no FIFO waited on, no hard link read."""

    def open(self, path: Path, root: Path | None = None, single_link: bool = False) -> tuple[int, os.stat_result]:
        """An fd of a regular file (the caller closes it) and its stat. root: every folder between `root` and the
        file is opened without following links too (a child owns the whole tree below its scratch folder).
        single_link: refuse a file with other hard links (one would point the grader at a file the child could not
        read itself)."""
        fd = _open_fd(Path(path), root)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = next((what for what, test in KINDS.items() if test(st.st_mode)), "a special file")
                raise SafeReadError(path.name, f"is {kind}, not a regular file; it was not read", "not_regular")
            if single_link and st.st_nlink > 1:
                raise SafeReadError(path.name, f"has {st.st_nlink} hard links, not a file of its own; it was not "
                                    "read", "not_regular")
            return fd, st
        except BaseException:
            os.close(fd)
            raise

    def read_bytes(self, path: Path, max_bytes: int, root: Path | None = None, single_link: bool = False) -> bytes:
        """safeio.read_bytes: no more than `max_bytes` + 1 bytes are read, whatever the file does meanwhile."""
        fd, st = self.open(path, root, single_link)
        try:
            if st.st_size > max_bytes:
                raise too_big(path.name, st.st_size, max_bytes)
            data = _read_prefix(fd, path.name, max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:  # it grew after fstat
            raise SafeReadError(path.name, f"holds more than the {max_bytes} bytes the grader reads; it was not read",
                                "size")
        return data

    def read_npy(self, path: Path, max_bytes: int, kinds: str, max_elements: int | None, root: Path | None = None,
                 single_link: bool = False):
        """safeio.read_npy: the header parsed from a bounded prefix, the data read only once the header says how much
        there must be, and no byte more (np.save writes nothing after the data)."""
        name = path.name
        fd, st = self.open(path, root, single_link)
        try:
            data = _read_prefix(fd, name, MAX_NPY_HEADER + 64)
            fh = io.BytesIO(data)
            try:
                shape, fortran, dtype = parse_header(fh, name)
            except SafeReadError:
                if st.st_size > max_bytes:
                    raise too_big(name, st.st_size, max_bytes) from None
                raise
            shape = tuple(shape)
            count = check_header(name, shape, dtype, kinds, max_elements, st.st_size, max_bytes)
            offset, needed = fh.tell(), count * dtype.itemsize
            if needed > st.st_size - offset:
                raise truncated(name, shape, dtype, needed, st.st_size - offset)
            if st.st_size - offset > needed:  # padding costs the grader reads
                raise SafeReadError(name, f"holds {st.st_size - offset - needed} bytes after the {needed} bytes of "
                                    f"data its shape {shape} of {dtype} needs; it was not read (save it again with "
                                    "np.save).", "format", shape)
            data += _read_prefix(fd, name, offset + needed - len(data))
        finally:
            os.close(fd)
        if needed > len(data) - offset:  # it shrank after fstat
            raise truncated(name, shape, dtype, needed, len(data) - offset)
        return to_array(data, offset, count, shape, fortran, dtype)

    def notebook_budget(self, source: bytes | Path) -> str:
        """The module's notebook_budget, which the kit's problems ask before running a notebook; '' for a file a run
        could not read either (not regular, over the handin's cap): the run reports it."""
        try:
            if not isinstance(source, bytes):
                fd, st = self.open(Path(source))
                os.close(fd)
                if st.st_size > MAX_FILE_BYTES:
                    return ""
            return notebook_budget(source)
        except (SafeReadError, OSError):
            return ""


READER = HostileReader()


def read_text(path: Path, max_bytes: int) -> str:
    """safeio.read_text through READER, whatever reader is installed."""
    return safeio.read_text(path, max_bytes, reader=READER)


def read_json(path: Path, max_bytes: int) -> Any:
    """safeio.read_json through READER, whatever reader is installed."""
    return safeio.read_json(path, max_bytes, reader=READER)
