"""What a run starts from: the interpreter (its folders, who can read them) and the boot files run first."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

BOOT_ENV = "GRADER_BOOT"  # boot.py reads its configuration from here (and removes it)
BOOT_DIR = Path(__file__).resolve().parent
BOOT_FILES = ("boot.py", "kernel.py", "forkserver.py")  # the child's entry point and what it loads from beside it


def python_paths() -> list[str]:
    """Folders the interpreter and its packages live in (read-only in the child)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(str(Path(sys.executable).resolve().parent.parent))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    paths.update(site.getsitepackages())
    return sorted(p for p in paths if p and os.path.exists(p))


def python_mounts() -> tuple[list[str], str]:
    """(folders to mount read-only, the interpreter to run inside)."""
    prefix = os.path.realpath(sys.prefix)
    roots = {prefix, os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}
    roots.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    roots.update(os.path.realpath(p) for p in python_paths())
    kept: list[str] = []
    for path in sorted(roots):
        if path.startswith("/usr/") or path == "/usr" or any(path.startswith(k + "/") for k in kept):
            continue
        kept.append(path)
    if sys.prefix != sys.base_prefix:  # a venv: its own bin/python finds pyvenv.cfg
        exe = os.path.join(prefix, "bin", os.path.basename(sys.executable))
    else:
        exe = os.path.realpath(sys.executable)
    return kept, exe


def readable_by(uid: int, gid: int, path: str) -> bool:
    """Whether a user with no supplementary groups can reach and read `path`."""
    p = Path(path).resolve()
    for part in [*reversed(p.parents), p]:
        try:
            st = part.stat()
        except OSError:
            return False
        need = 0o1 if part != p or part.is_dir() else 0o4
        if st.st_uid == uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        if not bits & need:
            return False
    return True


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
            out = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys, site; site.main(); print(repr(sys.path))"],
                                 capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL).stdout
            _isolated_cache = [str(p) for p in __import__("ast").literal_eval(out.strip() or "[]")]
        except (OSError, ValueError, SyntaxError, subprocess.SubprocessError):
            _isolated_cache = []
    return _isolated_cache
