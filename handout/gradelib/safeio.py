"""The one place that opens a file a submission or its child controls, and cleans text that came from one.

A child's scratch may hold a symbolic link (to a root-only file, to another student's feedback), a FIFO that blocks
a reader, a link to /dev/zero, or a .npy whose header promises gigabytes. So every read opens with O_NOFOLLOW (below
`root`, each folder too) and O_NONBLOCK, checks with fstat that it opened a regular file, and refuses more than
`max_bytes`. A .npy is parsed from the bytes read: no pickles, plain numeric dtypes, the shape checked against the
bytes present before anything is allocated. Each refusal is a SafeReadError whose message a student can act on.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

# Windows has none of these flags (nor opening a folder, nor dir_fd): there a path is checked for links
# component by component just before it is opened, which is all a student's own machine needs.
_FLAG = {name: getattr(os, name, 0) for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_DIRECTORY", "O_BINARY")}
OPEN_FLAGS = os.O_RDONLY | _FLAG["O_NOFOLLOW"] | _FLAG["O_NONBLOCK"] | _FLAG["O_CLOEXEC"] | _FLAG["O_BINARY"]
DIR_FLAGS = os.O_RDONLY | _FLAG["O_NOFOLLOW"] | _FLAG["O_DIRECTORY"] | _FLAG["O_CLOEXEC"]
NOFOLLOW_OPEN = bool(_FLAG["O_NOFOLLOW"]) and os.open in os.supports_dir_fd
MAX_NPY_HEADER = 10_000  # numpy's own default limit for a trusted header
KINDS = {"a folder": stat.S_ISDIR, "a FIFO (named pipe)": stat.S_ISFIFO, "a socket": stat.S_ISSOCK,
         "a character device": stat.S_ISCHR, "a block device": stat.S_ISBLK, "a symbolic link": stat.S_ISLNK}


class SafeReadError(ValueError):
    """A file was refused. str(exc) is "<file name> <detail>", in words a student can act on. reason: "missing",
    "not_regular" (link, FIFO, device, folder...), "size" (more bytes or values than allowed), "format" (not
    parseable), "dtype" (a plain number of another kind) or "unsafe_dtype" (objects, structured, subarray, complex,
    long double). shape, dtype: from the .npy header, when it was parsed."""

    def __init__(self, name: str, detail: str, reason: str, shape: tuple[int, ...] | None = None,
                 dtype: np.dtype | None = None):
        super().__init__(f"{name} {detail}")
        self.name, self.detail, self.reason, self.shape, self.dtype = name, detail, reason, shape, dtype


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


def _open_regular(path: Path, root: Path | None, single_link: bool) -> tuple[int, os.stat_result]:
    """An fd of a regular file (the caller closes it) and its stat; the caller decides what size is too large."""
    fd = _open_fd(Path(path), root)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((what for what, test in KINDS.items() if test(st.st_mode)), "a special file")
            raise SafeReadError(path.name, f"is {kind}, not a regular file; it was not read", "not_regular")
        if single_link and st.st_nlink > 1:
            raise SafeReadError(path.name, f"has {st.st_nlink} hard links, not a file of its own; it was not read",
                                "not_regular")
        return fd, st
    except BaseException:
        os.close(fd)
        raise


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


def _truncated(name: str, shape: tuple, dtype: np.dtype, needed: int, held: int) -> SafeReadError:
    return SafeReadError(name, f"is truncated: shape {shape} of {dtype} needs {needed} bytes of data and the file "
                         f"holds {held}; save it again with np.save.", "format", shape, dtype)


def _too_big(name: str, size: int, max_bytes: int) -> SafeReadError:
    return SafeReadError(name, f"holds {size} bytes, more than the {max_bytes} the grader reads; it was not read",
                         "size")


def stat_regular(path: Path, *, root: Path | None = None, single_link: bool = False) -> os.stat_result:
    """The stat of `path` when it is a regular file (opened the same safe way as for reading), else SafeReadError."""
    fd, st = _open_regular(Path(path), root, single_link)
    os.close(fd)
    return st


def read_bytes(path: Path, max_bytes: int, *, root: Path | None = None, single_link: bool = False) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them, or SafeReadError.

    root: every folder between `root` and the file is opened without following links too
        (a child owns the whole tree below its scratch folder, not just the file).
    single_link: refuse a file with other hard links; a child's own outputs have none,
        and a hard link would point the grader at a file the child could not read itself.
    """
    path = Path(path)
    fd, st = _open_regular(path, root, single_link)
    try:
        if st.st_size > max_bytes:
            raise _too_big(path.name, st.st_size, max_bytes)
        data = _read_prefix(fd, path.name, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew after fstat
        raise SafeReadError(path.name, f"holds more than the {max_bytes} bytes the grader reads; it was not read",
                            "size")
    return data


def read_text(path: Path, max_bytes: int, *, root: Path | None = None, single_link: bool = False) -> str:
    """The file as UTF-8 text (undecodable bytes replaced), at most `max_bytes` bytes."""
    return read_bytes(path, max_bytes, root=root, single_link=single_link).decode("utf-8", errors="replace")


def _refuse_constant(token: str):
    raise ValueError(f"{token} is not a JSON number")


def read_json(path: Path, max_bytes: int, *, root: Path | None = None, single_link: bool = False) -> Any:
    """The file parsed as strict JSON (NaN and Infinity, which no JSON reader outside Python accepts, refused), at
    most `max_bytes` bytes."""
    data = read_bytes(path, max_bytes, root=root, single_link=single_link)
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SafeReadError(Path(path).name, f"is not valid JSON ({clean_text(exc)[:200]})", "format") from None


def check_dtype(dtype: np.dtype, kinds: str, name: str, shape: tuple[int, ...] | None = None) -> None:
    """SafeReadError unless `dtype` is a plain number of one of `kinds` that float64 can hold."""
    if set(kinds) <= set("f"):
        wanted = "a float dtype (e.g. float32)"
    elif set(kinds) <= set("iu"):
        wanted = "an integer dtype (e.g. int64)"
    else:
        wanted = "a plain numeric dtype (bool, integer or float, e.g. float64)"
    refused = "which the grader does not load"
    if dtype.hasobject:
        why = f"holds Python objects (a pickle), {refused}; save {wanted} with np.save."
    elif dtype.names is not None:
        why = f"has a structured dtype {dtype}, {refused}; expected {wanted}."
    elif dtype.subdtype is not None or dtype.shape != ():
        why = f"has a subarray dtype {dtype}, {refused}; expected {wanted}."
    elif dtype.kind == "c":
        why = f"has the complex dtype {dtype}, {refused}; expected {wanted}."
    elif dtype.kind == "f" and dtype.itemsize > 8:
        why = (f"has dtype {dtype} (long double), {refused}: its values can overflow the float64 that scores are "
               f"computed in; expected {wanted}.")
    elif dtype.kind not in kinds or dtype.kind not in "biuf":
        raise SafeReadError(name, f"has dtype {dtype}, expected {wanted}.", "dtype", shape, dtype)
    else:
        return
    raise SafeReadError(name, why, "unsafe_dtype", shape, dtype)


def _parse_header(fh: io.BytesIO, name: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(fh)
        if version in ((1, 0), (2, 0)):
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            return read(fh, max_header_size=MAX_NPY_HEADER)
    except (ValueError, EOFError, TypeError, SyntaxError, OverflowError, RecursionError) as exc:
        raise SafeReadError(name, f"is not a .npy array ({clean_text(exc)[:200]}); save it with np.save.",
                            "format") from None
    if version == (3, 0):  # only structured dtypes with non-Latin-1 field names need it
        raise SafeReadError(name, "uses .npy format version 3.0, made only for structured arrays; save a plain numeric "
                            "array with np.save.", "format")
    raise SafeReadError(name, f"is not a .npy array (unknown format version {version[0]}.{version[1]}); save it with "
                        "np.save.", "format")


def read_npy(path: Path, *, max_bytes: int, kinds: str = "biuf", max_elements: int | None = None,
             root: Path | None = None, single_link: bool = False) -> np.ndarray:
    """A .npy file as a plain numeric array (C order, native byte order, its own memory), or SafeReadError.

    kinds: the numpy dtype kinds accepted, from "biuf" (bool, int, uint, float up to float64).
    max_elements: the most values accepted, checked from the header before any data is read.
    A file over `max_bytes` is not read; its header is, so the message can name its shape.
    """
    path = Path(path)
    name = path.name
    fd, st = _open_regular(path, root, single_link)
    try:
        if st.st_size > max_bytes:
            try:
                shape, _fortran, dtype = _parse_header(io.BytesIO(_read_prefix(fd, name, MAX_NPY_HEADER + 64)), name)
            except SafeReadError:
                raise _too_big(name, st.st_size, max_bytes) from None
            raise SafeReadError(name, f"has shape {tuple(shape)} of {dtype} in {st.st_size} bytes, more than the "
                                f"{max_bytes} the grader reads; it was not read.", "size", tuple(shape), dtype)
        # The header first: the data is read only once the header says how much there must be.
        data = _read_prefix(fd, name, MAX_NPY_HEADER + 64)
        fh = io.BytesIO(data)
        shape, fortran, dtype = _parse_header(fh, name)
        if not all(isinstance(s, int) and s >= 0 for s in shape):
            raise SafeReadError(name, f"has an invalid shape {shape}; save it again with np.save.", "format")
        shape = tuple(shape)
        check_dtype(dtype, kinds, name, shape)
        count = 1
        for s in shape:
            count *= s  # Python ints: a hostile shape cannot overflow
        if max_elements is not None and count > max_elements:
            raise SafeReadError(name, f"has shape {shape} ({count} values), more than the {max_elements} the grader "
                                "reads; it was not read.", "size", shape, dtype)
        offset, needed = fh.tell(), count * dtype.itemsize
        if needed > st.st_size - offset:
            raise _truncated(name, shape, dtype, needed, st.st_size - offset)
        if st.st_size - offset > needed:  # np.save writes nothing after the data: padding costs the grader reads
            raise SafeReadError(name, f"holds {st.st_size - offset - needed} bytes after the {needed} bytes of data "
                                f"its shape {shape} of {dtype} needs; it was not read (save it again with np.save).",
                                "format", shape, dtype)
        data += _read_prefix(fd, name, offset + needed - len(data))
    finally:
        os.close(fd)
    if needed > len(data) - offset:  # it shrank after fstat
        raise _truncated(name, shape, dtype, needed, len(data) - offset)
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    arr = flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
    return np.array(arr, dtype=dtype.newbyteorder("="), order="C")


# C0 controls but tab and newline, DEL, C1 controls, bidi embeddings/overrides/isolates and marks, line/paragraph
# separators (no escape sequence, bell or bidi override reaches a terminal, a report or HTML); a lone surrogate
# cannot be written as UTF-8.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def clean_text(text: object) -> str:
    """`text` as a str without control characters (tab and newline kept); \\r\\n and \\r become \\n."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub("", s.replace("\r\n", "\n").replace("\r", "\n"))


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


def quote(text: object, limit: int) -> str:
    """A submission's words kept to one line of at most `limit` characters: its line breaks become ' | ', so no
    line of it can start a line of the grader's own (a forged TOTAL or {"scores": ...} line)."""
    s = " | ".join(part.strip() for part in clean_text(text).splitlines() if part.strip())
    return s if len(s) <= limit else s[: limit - 1] + "…"
