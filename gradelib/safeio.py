"""Read a file a submission or its child wrote (capped, a .npy header checked before its data, no pickles); clean text.
Each refusal is a SafeReadError a student can act on; the course grader installs its own Reader (`install`)."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


class SafeReadError(ValueError):
    """A file was refused: str(exc) is "<file name> <detail>", in words a student can act on. reason: "missing",
    "not_regular", "size", "format" (not parseable), "dtype" (a plain number of another kind) or "unsafe_dtype"
    (objects, structured, subarray, complex, long double). shape: from a .npy header that was parsed."""

    def __init__(self, name: str, detail: str, reason: str, shape: tuple[int, ...] | None = None):
        super().__init__(f"{name} {detail}")
        self.name, self.detail, self.reason, self.shape = name, detail, reason, shape


class Reader:
    """How the grader opens a file and bounds a notebook; the kit's own trusts the student's own files."""

    def open(self, path: Path, root: Path | None = None, single_link: bool = False) -> tuple[int, os.stat_result]:
        """An fd of the regular file `path` (the caller closes it) and its stat, or SafeReadError. root and
        single_link concern a hostile child's scratch (the course grader's Reader)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        except OSError as exc:
            missing = isinstance(exc, FileNotFoundError)
            raise SafeReadError(path.name, "is missing" if missing else f"cannot be opened ({exc.strerror or exc})",
                                "missing" if missing else "not_regular") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a special file"
            raise SafeReadError(path.name, f"is {kind}, not a regular file; it was not read", "not_regular")
        return fd, st

    def read_bytes(self, path: Path, max_bytes: int, root: Path | None = None, single_link: bool = False) -> bytes:
        """See the module's read_bytes."""
        fd, st = self.open(path, root, single_link)
        with open(fd, "rb") as fh:
            if st.st_size > max_bytes:
                raise too_big(path.name, st.st_size, max_bytes)
            return fh.read()

    def read_npy(self, path: Path, max_bytes: int, kinds: str, max_elements: int | None, root: Path | None = None,
                 single_link: bool = False) -> np.ndarray:
        """See the module's read_npy: the header first, then the data it says there must be."""
        fd, st = self.open(path, root, single_link)
        with open(fd, "rb") as fh:
            shape, fortran, dtype = parse_header(fh, path.name)
            count = check_header(path.name, shape, dtype, kinds, max_elements, st.st_size, max_bytes)
            data = fh.read(count * dtype.itemsize)
        if len(data) < count * dtype.itemsize:
            raise truncated(path.name, shape, dtype, count * dtype.itemsize, len(data))
        return to_array(data, 0, count, shape, fortran, dtype)


_INSTALLED = [Reader()]


def install(reader: Reader | None) -> Reader:
    """Open every later file through `reader` (None: the kit's own again); returns the one it replaces."""
    before, _INSTALLED[0] = _INSTALLED[0], reader or Reader()
    return before


def truncated(name: str, shape: tuple, dtype: np.dtype, needed: int, held: int) -> SafeReadError:
    """The refusal of a .npy that holds fewer bytes of data than its header says."""
    return SafeReadError(name, f"is truncated: shape {shape} of {dtype} needs {needed} bytes of data and the file "
                         f"holds {held}; save it again with np.save.", "format", shape)


def too_big(name: str, size: int, max_bytes: int) -> SafeReadError:
    """The refusal of a file of `size` bytes, more than `max_bytes`."""
    return SafeReadError(name, f"holds {size} bytes, more than the {max_bytes} the grader reads; it was not read",
                         "size")


def stat_regular(path: Path) -> os.stat_result:
    """The stat of `path` when it is a regular file (opened the same way as for reading), else SafeReadError."""
    fd, st = _INSTALLED[0].open(Path(path))
    os.close(fd)
    return st


def read_bytes(path: Path, max_bytes: int, *, root: Path | None = None, single_link: bool = False,
               reader: Reader | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them, or SafeReadError. root, single_link: see
    Reader.open; reader: the one to read it with (default: the one installed)."""
    return (reader or _INSTALLED[0]).read_bytes(Path(path), max_bytes, root, single_link)


def read_text(path: Path, max_bytes: int, *, reader: Reader | None = None) -> str:
    """The file as UTF-8 text (undecodable bytes replaced), at most `max_bytes` bytes."""
    return read_bytes(path, max_bytes, reader=reader).decode("utf-8", errors="replace")


def _refuse_constant(token: str):
    raise ValueError(f"{token} is not a JSON number")


def read_json(path: Path, max_bytes: int, *, root: Path | None = None, single_link: bool = False,
              reader: Reader | None = None) -> Any:
    """The file parsed as strict JSON (NaN and Infinity, which no JSON reader outside Python accepts, refused), at
    most `max_bytes` bytes."""
    data = read_bytes(path, max_bytes, root=root, single_link=single_link, reader=reader)
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SafeReadError(Path(path).name, f"is not valid JSON ({clean_text(exc)[:200]})", "format") from None


def check_dtype(dtype: np.dtype, kinds: str, name: str, shape: tuple[int, ...] | None = None) -> None:
    """SafeReadError unless `dtype` is a plain number of one of `kinds` that float64 can hold."""
    wanted = {"f": "a float dtype (e.g. float32)", "iu": "an integer dtype (e.g. int64)"}.get(
        kinds, "a plain numeric dtype (bool, integer or float, e.g. float64)")
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
        raise SafeReadError(name, f"has dtype {dtype}, expected {wanted}.", "dtype", shape)
    else:
        return
    raise SafeReadError(name, why, "unsafe_dtype", shape)


def parse_header(fh: BinaryIO, name: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of the .npy header `fh` stands at, or SafeReadError."""
    try:
        version = np.lib.format.read_magic(fh)
        if version in ((1, 0), (2, 0)):
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            return read(fh)  # numpy's own limit on the header's length (10,000 bytes)
    except (ValueError, EOFError, TypeError, SyntaxError, OverflowError, RecursionError) as exc:
        raise SafeReadError(name, f"is not a .npy array ({clean_text(exc)[:200]}); save it with np.save.",
                            "format") from None
    # Version 3.0 is only for structured dtypes with non-Latin-1 field names.
    raise SafeReadError(name, f"is not a .npy array of plain numbers (format version {version[0]}.{version[1]}); save "
                        "a plain numeric array with np.save.", "format")


def check_header(name: str, shape: tuple[int, ...], dtype: np.dtype, kinds: str, max_elements: int | None, size: int,
                 max_bytes: int) -> int:
    """The number of values a .npy header promises, or SafeReadError: the file's `size` is over `max_bytes`, its shape
    is invalid, its dtype refused (check_dtype) or its values more than `max_elements`."""
    if size > max_bytes:
        raise SafeReadError(name, f"has shape {shape} of {dtype} in {size} bytes, more than the {max_bytes} the grader "
                            "reads; it was not read.", "size", shape)
    if not all(isinstance(s, int) and s >= 0 for s in shape):
        raise SafeReadError(name, f"has an invalid shape {shape}; save it again with np.save.", "format")
    check_dtype(dtype, kinds, name, shape)
    count = math.prod(shape)  # Python ints: a hostile shape cannot overflow
    if max_elements is not None and count > max_elements:
        raise SafeReadError(name, f"has shape {shape} ({count} values), more than the {max_elements} the grader "
                            "reads; it was not read.", "size", shape)
    return count


def to_array(data: bytes, offset: int, count: int, shape: tuple[int, ...], fortran: bool, dtype: np.dtype):
    """The array of `count` values at `offset` in `data`: C order, native byte order, its own memory."""
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    arr = flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
    return np.array(arr, dtype=dtype.newbyteorder("="), order="C")


def read_npy(path: Path, *, max_bytes: int, kinds: str = "biuf", max_elements: int | None = None,
             root: Path | None = None, single_link: bool = False) -> np.ndarray:
    """A .npy file as a plain numeric array (C order, native byte order, its own memory), or SafeReadError, by the
    Reader installed. kinds: the dtype kinds accepted, from "biuf" (bool, int, uint, float up to float64);
    max_elements: the most values accepted. A file over `max_bytes` or with more values is refused, its shape named."""
    return _INSTALLED[0].read_npy(Path(path), max_bytes, kinds, max_elements, root, single_link)


# C0 controls but tab and newline, DEL, C1, bidi controls and marks, line/paragraph separators (no escape sequence,
# bell or bidi override reaches a terminal, a report or HTML); a lone surrogate cannot be written as UTF-8.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def clean_text(text: object) -> str:
    """`text` as a str without control characters (tab and newline kept); \\r\\n and \\r become \\n."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub("", s.replace("\r\n", "\n").replace("\r", "\n"))


def notebook_budget(source: bytes | Path) -> str:
    """Why parsing the notebook `source` (its bytes or its file) would cost the grader more than it allows ('' when
    it would not): only the course's Reader has a budget; the kit allows the student's own notebook anything."""
    budget = getattr(_INSTALLED[0], "notebook_budget", None)
    return budget(source) if budget else ""


def quote(text: object, limit: int) -> str:
    """A submission's words kept to one line of at most `limit` characters: its line breaks become ' | ', so no
    line of it can start a line of the grader's own (a forged TOTAL or {"scores": ...} line)."""
    s = " | ".join(part.strip() for part in clean_text(text).splitlines() if part.strip())
    return s if len(s) <= limit else s[: limit - 1] + "…"
