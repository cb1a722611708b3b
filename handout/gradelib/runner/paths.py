"""What a child starts from: the kit's start file, and the folders of the grader's sys.path it adds back."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BOOT_ENV = "GRADER_BOOT"  # start.py reads its configuration from here (and removes it)
START = Path(__file__).resolve().parent / "start.py"


def extra_paths() -> list[str]:
    """Folders on this interpreter's sys.path that `python -I` leaves off its own (the user site of a
    `pip install --user`, PYTHONPATH, a conda or venv .pth addition): the child adds them back, so it sees
    the packages the grader sees. The grader's own folder (the handout, the course repository) is not one."""
    isolated = set(_isolated_path())
    own = Path(__file__).resolve().parents[2]  # the folder gradelib/ lies in
    out = []
    for entry in sys.path:
        if not entry or entry in isolated or not os.path.isdir(entry):
            continue
        resolved = Path(entry).resolve()
        if resolved == own or own in resolved.parents or resolved == Path.cwd().resolve():
            continue
        out.append(entry)
    return out


_isolated_cache: list[str] | None = None


def _isolated_path() -> list[str]:
    """sys.path of `python -I` with this interpreter (asked once)."""
    global _isolated_cache
    if _isolated_cache is None:
        import subprocess

        try:
            out = subprocess.run(
                [sys.executable, "-I", "-S", "-c", "import sys, site; site.main(); print(repr(sys.path))"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            ).stdout
            _isolated_cache = [str(p) for p in __import__("ast").literal_eval(out.strip() or "[]")]
        except (OSError, ValueError, SyntaxError, subprocess.SubprocessError):
            _isolated_cache = []
    return _isolated_cache
