"""Every shape an upload comes in, for the course grader: the kit's folder and tar, and a zip or a nested one.

The student kit reads the two forms the handout makes (gradelib/intake.py: a folder of the
handin's files, the handin.tar `make handin` writes); the course grader, Gradescope and Autolab
get what students upload and LMS bulk downloads give, so they read these too, through the
kit's checks (names, sizes, links, member counts) and with its messages:

- a folder whose files are all inside one subfolder (handin/...);
- a folder holding exactly one archive;
- a .zip archive, with its files at the top level or all under one top folder.
"""

from __future__ import annotations

import itertools
import stat
import zipfile
from pathlib import Path

from gradelib import intake as kit
from gradelib.handin_contract import HANDIN_FILES
from gradelib.intake import MAX_MEMBERS, TAR_SUFFIXES, ZIP_SUFFIXES, HandinError, Intake, Member, found_text, shown

MAX_ZIP_INDEX_BYTES = 1024 * 1024  # a zip's central directory: 64 entries take a few KB
ARCHIVE_SUFFIXES = TAR_SUFFIXES + ZIP_SUFFIXES
ZIP_FLAG_ENCRYPTED = 0x1

__all__ = ["HandinError", "Intake", "copy_capped", "open_handin", "open_upload", "resolve_upload"]
copy_capped = kit.copy_capped


def open_upload(path: Path, dest: Path) -> Intake:
    """Put the upload's handin files into `dest` (top level); say what was skipped and what the upload held."""
    return kit.open_upload(path, dest, open_folder=_open_folder, open_zip=_open_zip)


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
            kind, target = _folder_shape(path, kit.visible_entries(path))
        except (HandinError, OSError):
            return path
        if kind == "files":
            return path
        path = target
    return path


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
    entries = kit.visible_entries(src)
    if depth == 0:
        # Lazy and cut, so a tree of many nested folders costs a bounded listing.
        intake.found = list(itertools.islice(kit.walk(src, ""), 4 * MAX_MEMBERS))
    kind, target = _folder_shape(src, entries)
    if kind == "archive":
        kit.open_archive(target, dest, intake, _relative(target, src, depth), _open_zip)
        return
    if kind == "subfolder" and depth == 0:
        _open_folder(target, dest, intake, depth=1)
        return
    if kind == "subfolder":
        raise HandinError(
            f"the handin files are nested two folders deep ({shown(src.name)}/{shown(target.name)}/); "
            f"put them at the top level of the upload"
        )
    kit.copy_files(src, dest, entries, intake)


def _relative(target: Path, src: Path, depth: int) -> str:
    return (shown(src.name, 60) + "/" if depth else "") + shown(target.name, 60) + ":"


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
        raise HandinError(f"{label} is not a zip archive ({shown(str(exc), 120)}); {kit.REBUILD}") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise HandinError(f"{label} has more than {MAX_MEMBERS} members; a handin holds a few files")
        members: list[Member] = []
        total = 0
        for info in infos:
            name = info.filename
            kit.vet_path(label, name)
            # Unix tools store st_mode in the high bits; many store permission bits only (no type).
            kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
            if kind:
                if stat.S_ISLNK(kind):
                    raise HandinError(f"{label}: member '{shown(name)}' is a link; handins hold regular files only")
                if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
                    raise HandinError(f"{label}: member '{shown(name)}' is a device or FIFO; refusing it")
            if info.flag_bits & ZIP_FLAG_ENCRYPTED:
                raise HandinError(f"{label}: member '{shown(name)}' is encrypted; submit an archive without a password")
            if info.is_dir():
                continue
            total += info.file_size
            if info.file_size > kit.MAX_FILE_BYTES or total > kit.MAX_TOTAL_BYTES:  # the kit's caps, as for a tar
                raise HandinError(f"{label} unpacks to more than {kit.MAX_TOTAL_BYTES // 2**20} MB; refusing it")
            members.append(Member(name, info.file_size, lambda info=info: zf.open(info)))
        kit.write_members(label, members, dest, intake, prefix)
