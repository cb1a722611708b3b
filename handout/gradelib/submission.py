"""Open a handin -- a tar (plain or gzip) or a folder -- into a fresh folder, safely.

Nothing from an archive is written outside the destination: members with
absolute paths, '..', links, devices or FIFOs are refused, and so are archives
with too many members or too many bytes once unpacked. A folder handin is
copied file by file, without following symlinks, so a link cannot smuggle in
a file from elsewhere on the grader's disk.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
from pathlib import Path, PurePosixPath

MAX_MEMBERS = 64
MAX_TOTAL_BYTES = 200 * 1024 * 1024
MAX_FILE_BYTES = 100 * 1024 * 1024


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


def _extract_tar(path: Path, dest: Path) -> list[str]:
    try:
        tar = tarfile.open(path, mode="r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise HandinError(f"{path.name} is not a tar archive ({exc}); build it with `make handin`") from None
    notes = []
    with tar:
        members = []
        total = 0
        try:
            for i, member in enumerate(tar):
                if i >= MAX_MEMBERS:
                    raise HandinError(f"{path.name} has more than {MAX_MEMBERS} members")
                members.append(member)
        except tarfile.TarError as exc:
            raise HandinError(f"{path.name} is a damaged tar archive ({exc})") from None
        files = []
        for m in members:
            name = PurePosixPath(m.name)
            if name.is_absolute() or ".." in name.parts:
                raise HandinError(f"{path.name}: member '{m.name}' points outside the archive; refusing it")
            if m.issym() or m.islnk():
                raise HandinError(f"{path.name}: member '{m.name}' is a link; handins hold regular files only")
            if m.ischr() or m.isblk() or m.isfifo() or m.isdev():
                raise HandinError(f"{path.name}: member '{m.name}' is a device or FIFO; refusing it")
            if m.isdir():
                continue
            if not m.isfile():
                raise HandinError(f"{path.name}: member '{m.name}' is not a regular file")
            total += m.size
            if m.size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                raise HandinError(f"{path.name} unpacks to more than {MAX_TOTAL_BYTES // 2**20} MB")
            files.append(m)
        if not files:
            raise HandinError(f"{path.name} is an empty archive; it must hold the handin files at its top level")
        # A single top-level folder (tar -cf handin.tar handin/) is accepted and stripped.
        tops = {PurePosixPath(m.name).parts[0] for m in files}
        strip = len(tops) == 1 and all(len(PurePosixPath(m.name).parts) == 2 for m in files)
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
            src = tar.extractfile(m)
            if src is None:
                continue
            with src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    return notes
