"""Which isolation level runs here (probed once), why, and what it applies, in words.

"namespaces" (namespaces.py) where root has bubblewrap; else "fallback" (fallback.py) where a run can be
confined without namespaces (as root: a sandbox uid that can read the interpreter; not root: Landlock);
else "portable" (portable.py: macOS, Windows, a container where neither can be made): a plain child of
the same interpreter with time, output and memory limits and no isolation. GRADELIB_SANDBOX=fallback or
=portable asks for a weaker level than the machine offers.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .interpreter import Limits
from .kernel import is_linux, landlock_abi
from .memory import sampler
from .namespaces import BOOT_INSIDE, bwrap_argv
from .slots import Slot, block

LEVELS = ("namespaces", "fallback", "portable")
# Limits.min_isolation, the weakest level a run accepts (the strongest the machine allows always runs): "best":
# namespaces or the fallback, never the portable level (the course grader's default); "strict": namespaces only;
# "portable": whatever the machine offers, the portable level included (the student side, or when asked for).
ISOLATION_CHOICES = ("best", "strict", "portable")
FORCE_ENV = "GRADELIB_SANDBOX"  # "fallback" or "portable": a weaker level than the machine offers
FALLBACK_NAMES = ("fallback", "landlock", "none")  # the fallback's earlier names are still understood

_level: tuple[str, str] | None = None  # (level, why not a stronger one)


def probe_namespaces() -> str | None:
    """None when a namespaced child runs here, else why not."""
    if not is_linux():
        return f"{platform.system() or sys.platform}: namespaces are Linux's"
    forced = os.environ.get(FORCE_ENV, "")
    if forced in (*FALLBACK_NAMES, "portable"):
        return f"{FORCE_ENV}={forced} asks for the {'portable' if forced == 'portable' else 'fallback'} level"
    if os.geteuid() != 0:
        return "not root: a real unprivileged uid for the child needs root"
    for tool in ("bwrap", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make setup installs bubblewrap)"
    slot = None
    probe = Path(tempfile.mkdtemp(prefix="sandbox-probe-"))
    try:
        # Without the kernel-wide probe: in a batch that is its PID namespace's init, probing here left its
        # workers' bubblewrap runs killed by SIGKILL (seen, not understood); a busy uid here only fails this test.
        slot = Slot(probe=False)
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


def probe_fallback() -> str | None:
    """None when a fallback-level child runs here, else why not."""
    if not is_linux():
        return f"{platform.system() or sys.platform}: the fallback uses Linux's Landlock, seccomp and uids"
    if os.environ.get(FORCE_ENV, "") == "portable":
        return f"{FORCE_ENV}=portable asks for the portable level"
    if os.geteuid() != 0:
        return None if landlock_abi() else ("not root and no Landlock in this kernel: a run could read every file "
                                             "this user can")
    from .fallback import unreadable_for

    uid = block().start
    blocked = unreadable_for(uid)
    if blocked:
        return (f"no sandbox uid can read the interpreter ({blocked[0]} is not readable by uid {uid}; make the "
                "Python installation readable by all users, e.g. install it under /usr or /opt), and a run is "
                "never given uid 0")
    return _try_fallback_child()


def _try_fallback_child() -> str | None:
    """Start one fallback child as a sandbox uid (the capability set may not allow the switch)."""
    from . import launch

    probe = Path(tempfile.mkdtemp(prefix="sandbox-probe-"))
    started = None
    try:
        (probe / "tmp").mkdir()
        os.chmod(probe, 0o711)
        script = probe / "probe.py"
        script.write_text("import os\nprint(os.getuid())\n")
        started = launch.prepare("fallback", [str(script)], probe, Limits(timeout_s=30), 2, None)
        started.env.pop("GRADER_BOOT", None)  # the probe runs the interpreter alone, not boot.py
        cmd = [sys.executable, "-I", "-S", str(script)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                              preexec_fn=started.preexec, env=started.env, cwd=probe)
        if proc.returncode != 0 or proc.stdout.strip() != str(started.uid):
            return f"a fallback child could not start as a sandbox uid: {(proc.stderr or proc.stdout).strip()[-300:]}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"a fallback child could not start as a sandbox uid: {exc}"
    finally:
        launch.release(started)
        shutil.rmtree(probe, ignore_errors=True)
    return None


def isolation_level() -> str:
    """"namespaces", "fallback" or "portable": what `run` applies on this machine (probed once)."""
    global _level
    if _level is None:
        why = probe_namespaces()
        if why is None:
            _level = ("namespaces", "")
        else:
            why_not = probe_fallback()
            _level = ("fallback", why) if why_not is None else ("portable", f"{why}; {why_not}")
    return _level[0]


def isolation_reason() -> str:
    """Why a stronger level is not used here ('' at the namespaces level)."""
    isolation_level()
    return _level[1] if _level else ""


def refusal(isolation: str) -> str:
    """Why a run with this `Limits.min_isolation` may not run at the level in force ('' when it may)."""
    level = isolation_level()
    if isolation == "strict" and level != "namespaces":
        return f"refused to run without namespaces: {isolation_reason()}"
    if isolation != "portable" and level == "portable":
        return (f"refused to grade at the portable level, which isolates nothing ({isolation_reason()}); "
                "--isolation portable grades there anyway, on trust")
    return ""


def exposed(paths: list) -> list[str]:
    """Of the grader's own `paths` (hidden cases, results), those a run could read here: at the fallback without
    Landlock (a kernel or container that lacks it) a sandbox uid reads what file permissions let any user read."""
    if isolation_level() != "fallback" or landlock_abi() or os.geteuid() != 0:
        return []
    from .interpreter import readable_by

    uid = block().start
    return [str(p) for p in paths if os.path.exists(p) and readable_by(uid, uid, str(p))]


def isolation_report() -> list[str]:
    """What `run` can apply on this machine, in words."""
    level = isolation_level()
    measure, how = sampler()
    memory = (
        f"memory: resident memory of a run's processes, sampled ({how})" if measure else f"memory: not limited ({how})"
    )
    if level == "namespaces":
        return [
            "namespaces: bubblewrap with fresh PID, network, IPC, UTS and mount namespaces; only the interpreter "
            "(read-only) and the scratch folder mounted; private /tmp and /dev/shm",
            f"a distinct unprivileged uid per concurrent run (from {block().start}), no capabilities, "
            "RLIMIT_NPROC, wall-clock timeout and rlimits, seccomp (no sockets, no namespaces, no keyrings)",
            f"Landlock ABI {landlock_abi()} inside as a second layer" if landlock_abi() else "no Landlock inside",
        ]
    if level == "portable":
        return [f"portable: no isolation ({isolation_reason()})",
                "a plain child process of the same interpreter and user, ended with everything it started",
                "wall-clock timeout, CPU time where the system has the limit, an output cap", memory,
                "it does not stop a submission from reading or changing this user's files, or the network"]
    report = [
        f"fallback: no namespaces ({isolation_reason()})",
        "own session, killed whole after the run",
        "wall-clock timeout and rlimits (CPU, files, processes), seccomp (no sockets, no namespaces, no keyrings)",
    ]
    abi = landlock_abi()
    report.append(f"Landlock ABI {abi}: filesystem confined to the interpreter and the scratch folder" if abi
                  else "no Landlock: the run can read what its uid can read")
    if os.geteuid() == 0:
        report.append(f"a distinct unprivileged uid per concurrent run (from {block().start}); /dev/shm and "
                      "System V IPC it leaves are removed after it")
    else:
        report.append(f"runs as uid {os.geteuid()} (not root: no user switch)")
    return report


def reset() -> None:
    """Probe again at the next call (tests that change the machine's conditions)."""
    global _level
    _level = None


