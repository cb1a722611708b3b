"""Every shape an upload comes in, for the course grader: a folder, a tar, a zip, or one of these nested.

The student kit reads only the student's own handin (gradelib/intake.py: a folder of the handin's
files, the handin.tar `make handin` writes); the course grader, Gradescope and Autolab get what
students upload and LMS bulk downloads give, hostile or not, so this reader takes in:

- a folder of the handin's files, or one whose files are all inside one subfolder (handin/...);
- a folder holding exactly one archive;
- a tar (plain or gzip) or a .zip archive, with its files at the top level or all under one top folder.

Nothing from an archive is written outside the destination: members with
absolute paths, '..', links, devices, FIFOs, sparse data or encryption are
refused, and so are archives with too many members, duplicate names, or too
many bytes once unpacked. Sizes are checked twice: against the member headers
while listing (so a bomb is refused before it is inflated), and again by
counting the bytes actually written, so a header or a gzip trailer that lies
about a size cannot get past the cap. What a tar header announces beyond its
own 512 bytes (a PAX header, a GNU long name), which tarfile reads whole, is
measured before tarfile reads it (MeasuredTarInfo); a zip member compressed
with bzip2 or LZMA, which zipfile inflates a whole read at a time, is refused.
A folder is copied file by file without
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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator

from gradelib.handin_contract import HANDIN_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES
from gradelib.intake import REBUILD, HandinError, Intake, found_text

__all__ = ["HandinError", "Intake", "copy_capped", "open_handin", "open_upload", "resolve_upload"]

MAX_MEMBERS = 64
NAME_MAX_BYTES = 255  # longest file name Linux file systems take
CHUNK = 1024 * 1024
MAX_ZIP_INDEX_BYTES = 1024 * 1024  # a zip's central directory: 64 entries take a few KB
# What tarfile reads whole beyond a header's 512 bytes, by type flag: measured first (MeasuredTarInfo).
TAR_EXTENSIONS = {b"x": "a PAX extended header", b"X": "a PAX extended header", b"g": "a PAX global header",
                  b"L": "a GNU long name", b"K": "a GNU long link name"}
MAX_TAR_EXTENSION_BYTES = 256 * 1024  # all of an archive's together; a handin's take a few hundred bytes a file
MAX_TAR_HEADERS = 4 * MAX_MEMBERS
# zipfile inflates these a whole read at a time (a 4 KB read of bzip2 can be gigabytes); handins use deflate.
ZIP_METHODS = {zipfile.ZIP_STORED: "", zipfile.ZIP_DEFLATED: "", zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "LZMA"}
ZIP_FLAG_ENCRYPTED = 0x1
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ZIP_SUFFIXES = (".zip",)
ARCHIVE_SUFFIXES = TAR_SUFFIXES + ZIP_SUFFIXES
# Added by macOS Finder and archive tools; never part of a handin.
JUNK_NAMES = {"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini"}
# What a damaged or truncated (compressed) archive raises while it is read.
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error, lzma.LZMAError, struct.error)


def open_upload(path: Path, dest: Path) -> Intake:
    """Put the upload's handin files into `dest` (top level); say what was skipped and what the upload held."""
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
        _open_folder(path, dest, intake)
    elif stat.S_ISREG(st.st_mode):
        open_archive(path, dest, intake, "")
    else:
        raise HandinError(f"{shown(path.name)} is neither a file nor a folder")
    return intake


def open_handin(path: Path, dest: Path) -> list[str]:
    """open_upload, for its notes alone."""
    return open_upload(path, dest).notes


def resolve_upload(path: Path) -> Path:
    """The archive or folder that open_upload would read the handin from (for naming and logs)."""
    path = Path(path)
    for _ in range(2):
        if path.is_symlink() or not path.is_dir():
            return path
        try:
            kind, target = _folder_shape(path, visible_entries(path))
        except (HandinError, OSError):
            return path
        if kind == "files":
            return path
        path = target
    return path


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


def _is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _folder_shape(folder: Path, entries: list[Path]) -> tuple[str, Path]:
    """('files', folder), ('archive', the one archive) or ('subfolder', the one subfolder)."""
    names = {p.name for p in entries}
    if names & set(HANDIN_FILES):
        return "files", folder
    kinds = {p: p.lstat().st_mode for p in entries}
    archives = [p for p, m in kinds.items() if stat.S_ISREG(m) and _is_archive_name(p.name)]
    dirs = [p for p, m in kinds.items() if stat.S_ISDIR(m)]
    if len(archives) > 1:
        raise HandinError(
            f"the upload holds {len(archives)} archives ({found_text([shown(p.name) for p in archives])}); "
            f"submit one handin archive, or the handin files themselves"
        )
    if len(archives) == 1:
        return "archive", archives[0]
    # Only when nothing else is beside it: with stray files around, which folder is the handin is a guess.
    if len(dirs) == 1 and len(entries) == 1:
        return "subfolder", dirs[0]
    return "files", folder


def _open_folder(src: Path, dest: Path, intake: Intake, depth: int = 0) -> None:
    entries = visible_entries(src)
    if depth == 0:
        # Lazy and cut, so a tree of many nested folders costs a bounded listing.
        intake.found = list(itertools.islice(walk(src, ""), 4 * MAX_MEMBERS))
    kind, target = _folder_shape(src, entries)
    if kind == "archive":
        open_archive(target, dest, intake, _relative(target, src, depth))
        return
    if kind == "subfolder" and depth == 0:
        _open_folder(target, dest, intake, depth=1)
        return
    if kind == "subfolder":
        raise HandinError(
            f"the handin files are nested two folders deep ({shown(src.name)}/{shown(target.name)}/); "
            f"put them at the top level of the upload"
        )
    copy_files(src, dest, entries, intake)


def _relative(target: Path, src: Path, depth: int) -> str:
    return (shown(src.name, 60) + "/" if depth else "") + shown(target.name, 60) + ":"


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


def open_archive(path: Path, dest: Path, intake: Intake, prefix: str) -> None:
    """A tar's or a zip's files into `dest`."""
    label = shown(path.name)
    if path.stat().st_size > MAX_TOTAL_BYTES:
        raise HandinError(f"{label} is larger than {MAX_TOTAL_BYTES // 2**20} MB")
    kind = _archive_kind(path)
    try:
        (_open_zip if kind == "zip" else _open_tar)(path, label, dest, intake, prefix)
    except HandinError:
        raise
    except (*READ_ERRORS, UnicodeDecodeError, NotImplementedError, RuntimeError) as exc:
        raise HandinError(f"{label} is a damaged {kind} archive ({shown(str(exc), 120)}); {REBUILD}") from None


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


class MeasuredTarInfo(tarfile.TarInfo):
    """A tar header, measured before tarfile reads what it announces (tarfile.open(..., tarinfo=MeasuredTarInfo)):
    HandinError for extensions (TAR_EXTENSIONS) of more than MAX_TAR_EXTENSION_BYTES in all, two of one kind
    before a member, a negative size, sparse data (its map is read block by block) or more than MAX_TAR_HEADERS
    headers. tarfile's own code reads each header and calls _proc_member with its type and size; nothing here
    parses the archive apart from tarfile, so the two cannot disagree on where a header starts."""

    def _proc_member(self, tar):
        seen = tar.__dict__.setdefault("measured", {"headers": 0, "bytes": 0, "kinds": set()})
        kind, label = TAR_EXTENSIONS.get(self.type), shown(Path(tar.name or "the archive").name)
        seen["headers"] += 1
        seen["bytes"] += max(self.size, 0) if kind else 0
        if self.size < 0 or seen["bytes"] > MAX_TAR_EXTENSION_BYTES:
            alone = self.size < 0 or self.size > MAX_TAR_EXTENSION_BYTES
            raise HandinError(
                f"{label} holds " + (f"{kind or 'a tar header'} of {self.size:,} bytes" if alone else
                                     f"PAX headers and GNU long names of more than {MAX_TAR_EXTENSION_BYTES:,} bytes")
                + f"; a handin's tar headers may hold {MAX_TAR_EXTENSION_BYTES:,} bytes of names and attributes in "
                f"all (a few hundred a file); {REBUILD}")
        if kind in seen["kinds"]:
            raise HandinError(f"{label} holds two {kind.split(' ', 1)[1]}s before one member (a tar writes one); "
                              f"{REBUILD}")
        if seen["headers"] > MAX_TAR_HEADERS:
            raise HandinError(f"{label} holds more than {MAX_TAR_HEADERS} tar headers; a handin holds a few files")
        if self.type == tarfile.GNUTYPE_SPARSE:
            _refuse_sparse(label, self.name)
        seen["kinds"] = seen["kinds"] | {kind} if kind else set()
        return super()._proc_member(tar)

    def _proc_gnusparse_10(self, next, pax_headers, tar):
        """GNU sparse format 1.0: its map is read block by block until it holds as many numbers as it says."""
        _refuse_sparse(shown(Path(tar.name or "the archive").name), next.name)


def _refuse_sparse(label: str, name: str) -> None:
    raise HandinError(f"{label}: member '{shown(name)}' is a sparse file; handins hold regular files only")


def _open_tar(path: Path, label: str, dest: Path, intake: Intake, prefix: str) -> None:
    try:
        tar = tarfile.open(path, mode="r:*", tarinfo=MeasuredTarInfo)
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


def _vet_zip_index(path: Path, label: str) -> None:
    """Refuse a flood of members from the end record, before zipfile builds its index of all of them."""
    # zipfile has no public way to read the end record alone; without it the
    # member cap below still holds, only after the whole index is built.
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:
        return
    with open(path, "rb") as fh:
        rec = end_record(fh)
    if rec is None:
        raise zipfile.BadZipFile("File is not a zip file")
    count, size = int(rec[zipfile._ECD_ENTRIES_TOTAL]), int(rec[zipfile._ECD_SIZE])
    if count > MAX_MEMBERS or size > MAX_ZIP_INDEX_BYTES:
        raise HandinError(f"{label} has more than {MAX_MEMBERS} members; a handin holds a few files")


def _open_zip(path: Path, label: str, dest: Path, intake: Intake, prefix: str) -> None:
    try:
        _vet_zip_index(path, label)
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise HandinError(f"{label} is not a zip archive ({shown(str(exc), 120)}); {REBUILD}") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise HandinError(f"{label} has more than {MAX_MEMBERS} members; a handin holds a few files")
        members: list[Member] = []
        total = 0
        for info in infos:
            name = info.filename
            vet_path(label, name)
            # Unix tools store st_mode in the high bits; many store permission bits only (no type).
            kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
            if kind:
                if stat.S_ISLNK(kind):
                    raise HandinError(f"{label}: member '{shown(name)}' is a link; handins hold regular files only")
                if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
                    raise HandinError(f"{label}: member '{shown(name)}' is a device or FIFO; refusing it")
            method = ZIP_METHODS.get(info.compress_type, f"method {info.compress_type}")
            if method:
                raise HandinError(f"{label}: member '{shown(name)}' is compressed with {method}; a handin zip uses "
                                  f"deflate (what zip, Finder and Windows make) or no compression")
            if info.flag_bits & ZIP_FLAG_ENCRYPTED:
                raise HandinError(f"{label}: member '{shown(name)}' is encrypted; submit an archive without a password")
            if info.is_dir():
                continue
            total += info.file_size
            if info.file_size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:  # the same caps as for a tar
                raise HandinError(f"{label} unpacks to more than {MAX_TOTAL_BYTES // 2**20} MB; refusing it")
            members.append(Member(name, info.file_size, lambda info=info: zf.open(info)))
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
