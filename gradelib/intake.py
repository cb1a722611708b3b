"""Open the student's own handin (a folder, or handin.tar read as the course grader reads one, with its words)."""

from __future__ import annotations

import itertools
import shutil
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .safeio import clean_text

FOUND_SHOWN_CHARS = 400
REBUILD = "build it with `make handin`, which writes handin.tar"


class HandinError(ValueError):
    """The handin cannot be opened; the message says what is wrong and what is expected."""


@dataclass
class Intake:
    """What opening an upload found: notes for the student and the names the upload held."""

    notes: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # cleaned names, as paths within the upload


def open_upload(path: Path, dest: Path) -> Intake:
    """Put the handin's files into `dest` (top level); say what was skipped and what the handin held."""
    path, intake = Path(path), Intake()
    dest.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        for src in sorted(path.iterdir()):
            intake.found.append(clean_text(src.name) + ("/" if src.is_dir() else ""))
            if src.is_symlink():
                intake.notes.append(f"skipped {clean_text(src.name)}: symbolic links are not followed")
            elif src.is_file():
                shutil.copyfile(src, dest / src.name)
    elif path.is_file():
        _open_tar(path, dest, intake)
    else:
        raise HandinError(f"{clean_text(path.name)} does not exist")
    return intake


def _open_tar(path: Path, dest: Path, intake: Intake) -> None:
    label = clean_text(path.name)
    try:
        with tarfile.open(path) as tar:
            members = [(m, [p for p in PurePosixPath(m.name).parts if p != "."]) for m in tar if not m.isdir()]
            for m, parts in members:
                if m.name.startswith("/") or ".." in parts:
                    raise HandinError(f"{label}: member '{clean_text(m.name)}' points outside the archive; refusing it")
                if not m.isfile():
                    what = "is a link" if m.issym() or m.islnk() else "is not a regular file"
                    raise HandinError(f"{label}: member '{clean_text(m.name)}' {what}; handins hold regular files only")
            if not members:
                raise HandinError(f"{label} is an empty archive; it must hold the handin files at its top level")
            intake.found = [clean_text("/".join(parts)) for _, parts in members]
            # One top folder (tar -cf handin.tar handin/) is stripped, as the course grader does.
            if len({parts[0] for _, parts in members}) == 1 and all(len(parts) > 1 for _, parts in members):
                members = [(m, parts[1:]) for m, parts in members]
            for m, parts in members:
                if len(parts) != 1:
                    intake.notes.append(f"skipped {clean_text('/'.join(parts))}: handin files belong at the top "
                                        "level of the archive")
                elif (dest / parts[0]).exists():
                    raise HandinError(f"{label} holds two members named {clean_text(parts[0])}, so which one is "
                                      f"the handin is unclear; {REBUILD}")
                else:
                    with tar.extractfile(m) as src, open(dest / parts[0], "xb") as out:
                        shutil.copyfileobj(src, out)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        first = (str(exc) or type(exc).__name__).splitlines()[0].rstrip(":")
        raise HandinError(f"{label} is not a tar archive or is damaged ({clean_text(first)}); {REBUILD}") from None


def found_text(found: list[str]) -> str:
    """'a.py, notes/handin.tar, … (N more)' capped in length (the first name always shown); 'nothing' if none."""
    if not found:
        return "nothing"
    ends = itertools.accumulate(len(name) + 2 for name in found)  # the length of the text up to each name
    shown = max(1, sum(end <= FOUND_SHOWN_CHARS for end in ends))
    rest = len(found) - shown
    return ", ".join(found[:shown]) + (f", … ({rest} more)" if rest else "")
