"""Open a handin -- a tar (plain or gzip) or a folder -- into a fresh folder, safely.

Nothing from an archive is written outside the destination: members with
absolute paths, '..', links, devices, FIFOs or sparse data are refused, and so
are archives with too many members or too many bytes once unpacked. Sizes are
checked twice: against the member headers while listing (so a bomb is refused
before it is inflated), and again by counting the bytes actually written, so a
header or a gzip trailer that lies about a size cannot get past the cap. A
folder handin is copied file by file, without following symlinks, so a link
cannot smuggle in a file from elsewhere on the grader's disk.
"""

from __future__ import annotations

import lzma
import shutil
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

MAX_MEMBERS = 64
MAX_TOTAL_BYTES = 200 * 1024 * 1024
MAX_FILE_BYTES = 100 * 1024 * 1024
CHUNK = 1024 * 1024
# What a damaged or truncated (compressed) archive raises while it is read.
READ_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError)


class HandinError(ValueError):
    """The handin cannot be opened; the message says what is wrong and what is expected."""


def open_handin(path: Path, dest: Path) -> list[str]:
    """Put the handin's files into `dest` (top level); return notes about what was skipped."""
    path = Path(path)
    dest.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise HandinError(f"{path.name} is a symbolic link; submit the file or folder itself")
    if path.is_dir():
        return _copy_folder(path, dest)
    if not path.is_file():
        raise HandinError(f"{path} does not exist")
    if path.stat().st_size > MAX_TOTAL_BYTES:
        raise HandinError(f"{path.name} is larger than {MAX_TOTAL_BYTES // 2**20} MB")
    return _extract_tar(path, dest)


def _copy_folder(src: Path, dest: Path) -> list[str]:
    notes = []
    total = 0
    entries = sorted(src.iterdir())
    if len(entries) > MAX_MEMBERS:
        raise HandinError(f"folder {src.name} holds {len(entries)} entries; at most {MAX_MEMBERS} are accepted")
    for entry in entries:
        st = entry.lstat()
        if stat.S_ISLNK(st.st_mode):
            notes.append(f"skipped {entry.name}: symbolic links are not followed")
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        total += st.st_size
        if st.st_size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
            raise HandinError(f"{entry.name} makes the handin larger than {MAX_TOTAL_BYTES // 2**20} MB")
        shutil.copyfile(entry, dest / entry.name, follow_symlinks=False)
    return notes


def copy_capped(src: BinaryIO, out: BinaryIO, limit: int, label: str) -> int:
    """Copy at most `limit` bytes; raise HandinError as soon as the source holds more."""
    written = 0
    while True:
        chunk = src.read(min(CHUNK, limit - written + 1))
        if not chunk:
            return written
        written += len(chunk)
        if written > limit:
            raise HandinError(f"{label} unpacks to more than {limit // 2**20} MB; refusing it")
        out.write(chunk)


def _vet_member(archive: str, m: tarfile.TarInfo) -> None:
    name = PurePosixPath(m.name)
    if name.is_absolute() or ".." in name.parts:
        raise HandinError(f"{archive}: member '{m.name}' points outside the archive; refusing it")
    if m.issym() or m.islnk():
        raise HandinError(f"{archive}: member '{m.name}' is a link; handins hold regular files only")
    if m.ischr() or m.isblk() or m.isfifo() or m.isdev():
        raise HandinError(f"{archive}: member '{m.name}' is a device or FIFO; refusing it")
    if m.issparse():
        raise HandinError(f"{archive}: member '{m.name}' is a sparse file; handins hold regular files only")
    if not (m.isfile() or m.isdir()):
        raise HandinError(f"{archive}: member '{m.name}' is not a regular file")


def _extract_tar(path: Path, dest: Path) -> list[str]:
    try:
        tar = tarfile.open(path, mode="r:*")
    except READ_ERRORS as exc:
        first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise HandinError(
            f"{path.name} is not a tar archive ({first}); build it with `make handin`, which writes handin.tar"
        ) from None
    notes = []
    with tar:
        files = []
        total = 0
        # Members are vetted while the archive is read, so a bomb or a flood of
        # members is refused before the rest of it is inflated.
        try:
            for i, m in enumerate(tar):
                if i >= MAX_MEMBERS:
                    raise HandinError(f"{path.name} has more than {MAX_MEMBERS} members; a handin holds a few files")
                _vet_member(path.name, m)
                if m.isdir():
                    continue
                total += m.size
                if m.size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                    raise HandinError(f"{path.name} unpacks to more than {MAX_TOTAL_BYTES // 2**20} MB; refusing it")
                if PurePosixPath(m.name).parts:
                    files.append(m)
        except READ_ERRORS as exc:
            raise HandinError(f"{path.name} is a damaged tar archive ({exc}); build it again with `make handin`") from None
        if not files:
            raise HandinError(f"{path.name} is an empty archive; it must hold the handin files at its top level")
        # A single top-level folder (tar -cf handin.tar handin/) is accepted and stripped.
        tops = {PurePosixPath(m.name).parts[0] for m in files}
        strip = len(tops) == 1 and all(len(PurePosixPath(m.name).parts) == 2 for m in files)
        budget = MAX_TOTAL_BYTES
        for m in files:
            parts = PurePosixPath(m.name).parts
            if strip:
                parts = parts[1:]
            if len(parts) != 1:
                notes.append(f"skipped {m.name}: handin files belong at the top level of the archive")
                continue
            target = dest / parts[0]
            if target.exists():
                notes.append(f"skipped a second copy of {parts[0]}")
                continue
            try:
                src = tar.extractfile(m)
                if src is None:
                    continue
                with src, open(target, "xb") as out:
                    budget -= copy_capped(src, out, min(MAX_FILE_BYTES, budget), path.name)
            except READ_ERRORS as exc:
                raise HandinError(f"{path.name} is a damaged tar archive ({exc}); build it again with `make handin`") from None
    return notes
