"""What a run starts from: the interpreter (its folders, who can read them, the sys.path it adds back) and the
boot files run first."""

from __future__ import annotations

import ast
import functools
import os
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import gradelib
from gradelib.runner import limits as kit
from gradelib.runner.limits import cpu_seconds
from gradelib.runner.portable import BOOT_ENV, START  # noqa: F401 (the kit's: the same for every level)

BOOT_DIR = Path(__file__).resolve().parent
# The child's entry point and what it loads from beside it: name there -> this side's file. start.py is the
# student kit's child entry; boot.py reuses its event reporter and its way of running a harness.
BOOT_FILES = {name: BOOT_DIR / name for name in ("boot.py", "kernel.py", "guards.py", "forkserver.py")}
BOOT_FILES["start.py"] = START
# Address space a run may map beyond its memory limit. A CUDA build of torch maps over 3 GB at import and touches
# about 0.5 GB of it: the limit that matters is resident memory (a memory cgroup, or the grader's sampling), and
# this cap only stops one allocation far past it before a byte of it is touched.
ADDRESS_SPACE_SLACK_MB = 16384


@dataclass(frozen=True)
class Limits(kit.Limits):
    """The kit's Limits and what only the isolating levels enforce (rlimits, the pids cgroup, the weakest level)."""

    file_mb: int = 64  # largest file the child may write
    open_files: int = 256
    processes: int = 64  # processes and threads together (RLIMIT_NPROC)
    # The weakest isolation level a run accepts: "best" (the course grader's default), "strict" or "portable"
    # (levels.refusal).
    min_isolation: str = "best"
    # The run has hidden inputs at hand: how it ended is said without a number it could choose (IsolatedRun.hidden).
    hidden: bool = False

    @classmethod
    def of(cls, limits: kit.Limits) -> Limits:
        """`limits` with the course's fields too (their defaults where the kit's Limits has none)."""
        return limits if isinstance(limits, cls) else cls(**vars(limits))


def rlimit_values(limits: Limits) -> dict[str, int]:
    """The run's rlimits by resource name (kernel.rlimits sets them): address space far above the memory
    limit (ADDRESS_SPACE_SLACK_MB), since what a torch build maps differs by gigabytes between builds and
    what a run touches is what the memory limit counts."""
    return {"RLIMIT_CPU": cpu_seconds(limits), "RLIMIT_AS": (limits.memory_mb + ADDRESS_SPACE_SLACK_MB) << 20,
            "RLIMIT_FSIZE": limits.file_mb << 20, "RLIMIT_NOFILE": limits.open_files, "RLIMIT_CORE": 0}


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
    own = Path(gradelib.__file__).resolve().parents[1]  # the folder gradelib/ lies in
    out = []
    for entry in sys.path:
        if not entry or entry in isolated or not os.path.isdir(entry):
            continue
        resolved = Path(entry).resolve()
        if resolved == own or own in resolved.parents or resolved == Path.cwd().resolve():
            continue
        out.append(entry)
    return out


@functools.lru_cache(maxsize=None)
def _isolated_path() -> tuple[str, ...]:
    """sys.path of `python -I` with this interpreter (asked once)."""
    code = "import sys, site; site.main(); print(repr(sys.path))"
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
        return tuple(str(p) for p in ast.literal_eval(out.strip() or "[]"))
    except (OSError, ValueError, SyntaxError, subprocess.SubprocessError):
        return ()
