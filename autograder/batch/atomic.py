"""The course grader's files on disk, each written so a reader sees the old one or the new one, never half.

results.json and feedback.txt per submission (results_json.write, feedback.write), the class's records and reports:
graders and TAs read them while a batch writes them, and a worker may be stopped at any moment.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

PARTIAL_SUFFIX = ".tmp"  # write_text_atomic's file beside its target, renamed over it when whole


def remove_partial_writes(folder: Path, older_than_s: float = 0.0) -> None:
    """Remove what write_text_atomic left in `folder` when its process was stopped between writing and
    renaming (the old file, if any, is still whole beside it). Only for a folder nobody writes to now, or
    only files last written `older_than_s` ago (a write takes a second at most)."""
    try:
        names = [p for p in folder.glob(f".*{PARTIAL_SUFFIX}") if p.is_file() and not p.is_symlink()]
    except OSError:
        return
    for path in names:
        try:
            if time.time() - path.stat().st_mtime >= older_than_s:
                path.unlink()
        except OSError:
            pass


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False))


def write_text_atomic(path: Path, text: str) -> None:
    """Write text so a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    if hasattr(os, "fchmod"):  # (Windows before Python 3.13 has none, nor modes to set)
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; graders and TAs share these files
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
