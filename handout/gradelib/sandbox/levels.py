"""Which isolation level runs here (probed once), why, and what it applies, in words."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import fallback
from .kernel import landlock_abi
from .limits import Limits
from .namespaces import BOOT_INSIDE, bwrap_argv
from .slots import UID_BASE, Slot

LEVELS = ("namespaces", "landlock", "none")
FORCE_ENV = "GRADELIB_SANDBOX"  # "landlock": use the fallback even where namespaces work

_level: tuple[str, str] | None = None  # (level, why)

def probe_namespaces() -> str | None:
    """None when a namespaced child runs here, else why not."""
    if os.environ.get(FORCE_ENV, "") in ("landlock", "none"):
        return f"{FORCE_ENV}={os.environ[FORCE_ENV]} asks for the fallback"
    if os.geteuid() != 0:
        return "not root: a real unprivileged uid for the child needs root"
    for tool in ("bwrap", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make setup installs bubblewrap)"
    slot = None
    probe = Path(tempfile.mkdtemp(prefix="sandbox-probe-"))
    try:
        slot = Slot()
        os.chown(probe, slot.uid, slot.uid)
        argv, _r, _w = bwrap_argv(probe, slot.uid, Limits())
        argv = argv[: len(argv) - 1 - argv[::-1].index(BOOT_INSIDE)] + ["-S", "-c", "import os; print(os.getuid())"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or proc.stdout.strip() != str(slot.uid):
            return f"bubblewrap could not start a test child: {(proc.stderr or proc.stdout).strip()[:300]}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start a test child: {exc}"
    finally:
        if slot is not None:
            slot.release()
        shutil.rmtree(probe, ignore_errors=True)
    return None

def isolation_level() -> str:
    """"namespaces", "landlock" or "none": what `run` applies on this machine (probed once)."""
    global _level
    if _level is None:
        why = probe_namespaces()
        if why is None:
            _level = ("namespaces", "")
        else:
            _level = ("landlock" if landlock_abi() else "none", why)
    return _level[0]

def isolation_reason() -> str:
    """Why namespaces are not used here ('' when they are)."""
    isolation_level()
    return _level[1] if _level else ""

def isolation_report() -> list[str]:
    """What `run` can apply on this machine, in words."""
    level = isolation_level()
    if level == "namespaces":
        return [
            "namespaces: bubblewrap with fresh PID, network, IPC, UTS and mount namespaces; only the interpreter "
            "(read-only) and the scratch folder mounted; private /tmp and /dev/shm",
            f"a distinct unprivileged uid per concurrent run (from {UID_BASE}), no capabilities, "
            "RLIMIT_NPROC, wall-clock timeout and rlimits",
            f"Landlock ABI {landlock_abi()} inside as a second layer" if landlock_abi() else "no Landlock inside",
        ]
    report = [f"{level}: no namespaces ({isolation_reason()})", "own session, killed whole after the run",
              "wall-clock timeout and rlimits (CPU, memory, files, processes)"]
    abi = landlock_abi()
    report.append(f"Landlock ABI {abi}: filesystem confined to the scratch folder" if abi else "no Landlock: the child can read files this user can read")
    if os.geteuid() == 0:
        if fallback.nobody_can_run_python():
            report.append("runs as user nobody")
        else:
            report.append("runs as uid 0 with all capabilities dropped (the interpreter is not readable by nobody)")
    else:
        report.append(f"runs as uid {os.geteuid()} (not root: no user switch)")
    return report

def reset() -> None:
    """Probe again at the next call (tests that change the machine's conditions)."""
    global _level
    _level = None
