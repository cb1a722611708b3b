"""Open a handin -- a folder of its files or a tar (plain or gzip) -- into a fresh folder, safely.

The student kit's reader of the two forms the handout makes (the folder `python autograder.py`
grades, the handin.tar `make handin` writes), and the core every other shape an upload comes in
(zip, a folder holding the handin one level down or an archive: what LMS bulk downloads give) is
read with: the course grader adds those (its uploads reader passes them to open_upload).

Nothing from an archive is written outside the destination: members with
absolute paths, '..', links, devices, FIFOs, sparse data or encryption are
refused, and so are archives with too many members, duplicate names, or too
many bytes once unpacked. Sizes are checked twice: against the member headers
while listing (so a bomb is refused before it is inflated), and again by
counting the bytes actually written, so a header or a gzip trailer that lies
about a size cannot get past the cap. A folder is copied file by file without
following symlinks, so a link cannot smuggle in a file from elsewhere on the
grader's disk. Names the grader cannot safely write or show (control
characters, NUL, not UTF-8, longer than a file name may be) are skipped with
a note, and any name that goes into a note is cleaned first: notes reach the
student's results.json and the instructor's terminal.
"""

from __future__ import annotations

import itertools
import lzma
import os
import stat
import struct
import tarfile
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator

from .handin_contract import MAX_FILE_BYTES, MAX_TOTAL_BYTES

MAX_MEMBERS = 64
NAME_MAX_BYTES = 255  # longest file name Linux file systems take
CHUNK = 1024 * 1024
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ZIP_SUFFIXES = (".zip",)
# Added by macOS Finder and archive tools; never part of a handin.
JUNK_NAMES = {"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini"}
FOUND_SHOWN_CHARS = 400
# What a damaged or truncated (compressed) archive raises while it is read.
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error, lzma.LZMAError, struct.error)
REBUILD = "build it with `make handin`, which writes handin.tar"


class HandinError(ValueError):
    """The handin cannot be opened; the message says what is wrong and what is expected."""


@dataclass
class Intake:
    """What opening an upload found: notes for the student and the names the upload held."""

    notes: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # cleaned names, as paths within the upload


def open_handin(path: Path, dest: Path) -> list[str]:
    """Put the handin's files into `dest` (top level); return notes about what was skipped."""
    return open_upload(path, dest).notes


def open_upload(
    path: Path, dest: Path, open_folder: Callable | None = None, open_zip: Callable | None = None
) -> Intake:
    """Put the handin's files into `dest` (top level); say what was skipped and what the upload held.

    open_folder(src, dest, intake) and open_zip(path, label, dest, intake, prefix): the course grader's readers of
    the other shapes an upload comes in; the kit copies a folder's top-level files
    and refuses a zip."""
    path = Path(path)
    dest.mkdir(parents=True, exist_ok=True)
    intake = Intake()
    try:
        st = path.lstat()
    except (OSError, ValueError):
        raise HandinError(f"{shown(path.name)} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise HandinError(f"{shown(path.name)} is a symbolic link; submit the file or folder itself")
    if stat.S_ISDIR(st.st_mode):
        (open_folder or _open_folder)(path, dest, intake)
    elif stat.S_ISREG(st.st_mode):
        open_archive(path, dest, intake, "", open_zip)
    else:
        raise HandinError(f"{shown(path.name)} is neither a file nor a folder")
    return intake


def shown(name: str, limit: int = 80) -> str:
    """`name` safe to print: control and format characters and undecodable bytes become '?', long names are cut."""
    clean = "".join(
        "?" if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") else c for c in name
    )
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def name_problem(name: str) -> str | None:
    """Why a file name cannot be written into the handin folder, or None when it can."""
    if "\0" in name:
        return "holds a NUL byte"
    if any(0xDC80 <= ord(c) <= 0xDCFF for c in name):
        return "is not UTF-8 text"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in name):
        return "holds control characters"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not UTF-8 text"
    if size > NAME_MAX_BYTES:
        return f"is {size} bytes long; a file name may have at most {NAME_MAX_BYTES}"
    if name in (".", ".."):
        return "is not a file name"
    return None


def found_text(found: list[str]) -> str:
    """'a.py, notes/handin.tar, … (N more)' capped in length; 'nothing' for an empty upload."""
    if not found:
        return "nothing"
    parts: list[str] = []
    used = 0
    for name in found:
        if parts and used + len(name) + 2 > FOUND_SHOWN_CHARS:
            break
        parts.append(name)
        used += len(name) + 2
    rest = len(found) - len(parts)
    return ", ".join(parts) + (f", … ({rest} more)" if rest else "")


# ---------------------------------------------------------------- folders


def is_junk(name: str) -> bool:
    return name in JUNK_NAMES or name.startswith("._")


def visible_entries(folder: Path) -> list[Path]:
    """Entries of `folder` a student put there: no dot files, no OS metadata, at most a bounded number."""
    entries = []
    with os.scandir(folder) as it:
        for i, entry in enumerate(it):
            if i >= 4 * MAX_MEMBERS:
                raise HandinError(f"folder {shown(folder.name)} holds more than {4 * MAX_MEMBERS} entries; "
                                  f"a handin holds a few files")
            if not entry.name.startswith(".") and not is_junk(entry.name):
                entries.append(Path(entry.path))
    return sorted(entries)


def walk(folder: Path, prefix: str, depth: int = 0) -> Iterator[str]:
    """Relative names under `folder` (files, links, and folders as 'name/'), not following links, bounded."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(Path(e.path) for e in itertools.islice(it, 4 * MAX_MEMBERS))
    except OSError:
        return
    for p in entries:
        rel = prefix + shown(p.name, 60)
        if p.is_dir() and not p.is_symlink():
            empty = True
            for inner in walk(p, rel + "/", depth + 1) if depth < 3 else ():
                empty = False
                yield inner
            if empty:
                yield rel + ("/" if depth < 3 else "/…")
        else:
            yield rel


def _open_folder(src: Path, dest: Path, intake: Intake) -> None:
    """The kit's folder: the handin's files at its top level (what `python autograder.py` grades)."""
    # Lazy and cut, so a tree of many nested folders costs a bounded listing.
    intake.found = list(itertools.islice(walk(src, ""), 4 * MAX_MEMBERS))
    copy_files(src, dest, visible_entries(src), intake)


def copy_files(src: Path, dest: Path, entries: list[Path], intake: Intake) -> None:
    if len(entries) > MAX_MEMBERS:
        raise HandinError(f"folder {shown(src.name)} holds {len(entries)} entries; at most {MAX_MEMBERS} are accepted")
    total = 0
    for entry in entries:
        st = entry.lstat()
        if stat.S_ISLNK(st.st_mode):
            intake.notes.append(f"skipped {shown(entry.name)}: symbolic links are not followed")
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        why = name_problem(entry.name)
        if why:
            intake.notes.append(f"skipped a file whose name {why} ('{shown(entry.name)}')")
            continue
        total += st.st_size
        if st.st_size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
            raise HandinError(f"{shown(entry.name)} makes the handin larger than {MAX_TOTAL_BYTES // 2**20} MB")
        try:
            with open(entry, "rb") as fin, open(dest / entry.name, "xb") as out:
                copy_capped(fin, out, MAX_FILE_BYTES, shown(entry.name))
        except OSError as exc:
            raise HandinError(f"{shown(entry.name)} could not be read ({exc.strerror or type(exc).__name__})") from None


# ---------------------------------------------------------------- archives


@dataclass
class Member:
    name: str  # as stored, '/'-separated
    size: int  # declared size
    open: Callable[[], BinaryIO | None]


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


def _archive_kind(path: Path) -> str:
    """'tar' or 'zip': by the name's suffix when it has one, else by the first bytes."""
    lower = path.name.lower()
    with open(path, "rb") as fh:
        head = fh.read(4)
    is_zip = head in (b"PK\x03\x04", b"PK\x05\x06")
    if lower.endswith(TAR_SUFFIXES):
        if is_zip:
            raise HandinError(
                f"{shown(path.name)} is not a tar archive (it starts like a zip archive): name it "
                f"{shown(path.name.rsplit('.tar', 1)[0])}.zip, or {REBUILD}"
            )
        return "tar"
    if lower.endswith(ZIP_SUFFIXES) or is_zip:
        return "zip"
    return "tar"


def open_archive(path: Path, dest: Path, intake: Intake, prefix: str, open_zip: Callable | None = None) -> None:
    """A tar's files into `dest`; a zip's through `open_zip` (the course grader's), else refused."""
    label = shown(path.name)
    if path.stat().st_size > MAX_TOTAL_BYTES:
        raise HandinError(f"{label} is larger than {MAX_TOTAL_BYTES // 2**20} MB")
    kind = _archive_kind(path)
    try:
        if kind == "zip" and open_zip is None:
            raise HandinError(f"{label} is a zip archive; {REBUILD} (the course grader also reads a .zip upload)")
        if kind == "zip":
            open_zip(path, label, dest, intake, prefix)
        else:
            _open_tar(path, label, dest, intake, prefix)
    except HandinError:
        raise
    except (*READ_ERRORS, UnicodeDecodeError, NotImplementedError, RuntimeError) as exc:
        what = "zip" if kind == "zip" else "tar"
        raise HandinError(f"{label} is a damaged {what} archive ({shown(str(exc), 120)}); {REBUILD}") from None


def vet_path(label: str, name: str) -> tuple[str, ...]:
    """The parts of a member's path; HandinError if it points outside the archive."""
    name = name.replace("\\", "/")  # some Windows zip tools store backslashes
    parts = PurePosixPath(name).parts
    if name.startswith("/") or name[1:3] == ":/" or ".." in parts:
        raise HandinError(f"{label}: member '{shown(name)}' points outside the archive; refusing it")
    return tuple(p for p in parts if p not in ("", "."))


def _vet_tar_member(label: str, m: tarfile.TarInfo) -> None:
    if m.issym() or m.islnk():
        raise HandinError(f"{label}: member '{shown(m.name)}' is a link; handins hold regular files only")
    if m.ischr() or m.isblk() or m.isfifo() or m.isdev():
        raise HandinError(f"{label}: member '{shown(m.name)}' is a device or FIFO; refusing it")
    if m.issparse():
        raise HandinError(f"{label}: member '{shown(m.name)}' is a sparse file; handins hold regular files only")
    if not (m.isfile() or m.isdir()):
        raise HandinError(f"{label}: member '{shown(m.name)}' is not a regular file")


def _open_tar(path: Path, label: str, dest: Path, intake: Intake, prefix: str) -> None:
    try:
        tar = tarfile.open(path, mode="r:*")
    except READ_ERRORS as exc:
        first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise HandinError(f"{label} is not a tar archive ({shown(first, 120)}); {REBUILD}") from None
    with tar:
        members: list[Member] = []
        total = 0
        # Members are vetted while the archive is read, so a bomb or a flood of
        # members is refused before the rest of it is inflated.
        for i, m in enumerate(tar):
            if i >= MAX_MEMBERS:
                raise HandinError(f"{label} has more than {MAX_MEMBERS} members; a handin holds a few files")
            vet_path(label, m.name)
            _vet_tar_member(label, m)
            if m.isdir():
                continue
            total += m.size
            if m.size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                raise HandinError(f"{label} unpacks to more than {MAX_TOTAL_BYTES // 2**20} MB; refusing it")
            members.append(Member(m.name, m.size, lambda m=m: tar.extractfile(m)))
        write_members(label, members, dest, intake, prefix)


def write_members(label: str, members: list[Member], dest: Path, intake: Intake, prefix: str) -> None:
    """Vet names, strip one common top folder, refuse duplicates, write top-level files with capped sizes."""
    paths = []
    for m in members:
        parts = vet_path(label, m.name)
        if parts and not any(is_junk(p) for p in parts):
            paths.append((m, parts))
    intake.found += [prefix + shown("/".join(parts), 100) for _, parts in paths]
    if not paths:
        raise HandinError(f"{label} is an empty archive; it must hold the handin files at its top level")
    # One top folder (tar -cf handin.tar handin/, or a zipped folder) is accepted and stripped.
    tops = {parts[0] for _, parts in paths}
    if len(tops) == 1 and all(len(parts) > 1 for _, parts in paths):
        paths = [(m, parts[1:]) for m, parts in paths]
    chosen: dict[str, Member] = {}
    for m, parts in paths:
        if len(parts) != 1:
            intake.notes.append(
                f"skipped {shown('/'.join(parts))}: handin files belong at the top level of the archive"
            )
            continue
        name = parts[0]
        why = name_problem(name)
        if why:
            intake.notes.append(f"skipped a member of {label} whose name {why} ('{shown(name)}')")
            continue
        if name in chosen:
            raise HandinError(
                f"{label} holds two members named {shown(name)}, so which one is the handin is unclear; {REBUILD}"
            )
        chosen[name] = m
    budget = MAX_TOTAL_BYTES
    for name, m in chosen.items():
        src = m.open()
        if src is None:
            continue
        with src, open(dest / name, "xb") as out:
            budget -= copy_capped(src, out, min(MAX_FILE_BYTES, budget), label)
