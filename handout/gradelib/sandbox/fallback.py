"""The fallback level, where namespaces cannot be made (no bubblewrap, not root, a container without the
privileges): its own session, rlimits, Landlock when the kernel has it, the seccomp filter, and
`nobody` (or uid 0 without capabilities) as its user; the grader, a subreaper, kills its orphans."""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import signal
import sys
from pathlib import Path

from .interpreter import BOOT_DIR, BOOT_ENV, BOOT_FILES, python_paths, readable_by
from .kernel import (
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    PR_SET_SECUREBITS,
    apply_landlock,
    landlock_abi,
    libc,
    prctl,
)
from .limits import Limits, child_env, rlimits

NOBODY = "nobody"
READ_ONLY_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/sys", "/opt/conda")
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/shm")
BOOT_FOLDER = "_boot"  # in the run's folder: the copies of the boot files the child starts from


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Keep uid 0 but remove every capability, now and across exec."""
    # SECBIT_NOROOT | its lock | SECBIT_NO_SETUID_FIXUP | its lock: exec as uid 0
    # no longer grants capabilities.
    lib = libc()
    if lib.prctl(PR_SET_SECUREBITS, 0x0F, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECUREBITS failed")
    for cap in range(64):
        lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly past the last cap
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if lib.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def nobody() -> tuple[int, int] | None:
    try:
        pw = pwd.getpwnam(NOBODY)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def nobody_can_run_python() -> bool:
    who = nobody()
    return bool(who) and all(readable_by(who[0], who[1], p) for p in [sys.executable, *python_paths()])


def give_to(folder: Path, owner: tuple[int, int]) -> None:
    """Make `folder` and everything in it the run user's (links are not followed)."""
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), *owner)
    os.chown(folder, *owner)


def copy_boot(workdir: Path) -> Path:
    """The boot files, copied into the run's folder (the child may not be able to read the grader's own)."""
    folder = workdir / BOOT_FOLDER
    folder.mkdir(exist_ok=True)
    for name in BOOT_FILES:
        shutil.copyfile(BOOT_DIR / name, folder / name)
    return folder / "boot.py"


def launch(argv, workdir: Path, limits: Limits, rep_w: int, env_extra, template: dict | None = None):
    """(command, preexec, environment, isolation lines) of a fallback-level run in `workdir`."""
    abi = landlock_abi()
    isolation: list[str] = []
    boot = copy_boot(workdir)
    read_paths = [p for p in (*READ_ONLY_SYSTEM_PATHS, *python_paths()) if os.path.exists(p)]
    write_paths = [str(workdir), *[p for p in DEVICE_PATHS if os.path.exists(p)]]
    switch_to: tuple[int, int] | None = None
    drop_caps = False
    if os.geteuid() == 0:
        if nobody_can_run_python():
            switch_to = nobody()
            if template is None:
                give_to(workdir, switch_to)
            else:  # the submission's folder stays the grader's; each run's folder is given to nobody
                os.chown(workdir / "tmp", *switch_to)
            isolation.append("user nobody")
        else:
            drop_caps = True
            isolation.append("uid 0 without capabilities")
    if abi:
        isolation.append(f"landlock abi {abi}")
    # The uid is shared here (with the grader, or with classmates graded alongside): a count
    # per uid would let one submission use up another's, so only the pids cgroup caps processes.
    rl = rlimits(limits, None)

    def preexec() -> None:  # runs in the child between fork and exec
        rl()
        if abi:
            apply_landlock(abi, read_paths, write_paths)
        else:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
        if switch_to is not None:
            os.setgroups([])
            os.setgid(switch_to[1])
            os.setuid(switch_to[0])
        elif drop_caps:
            drop_all_capabilities()

    env = child_env(str(workdir), str(workdir / "tmp"), env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": None, "report_fd": rep_w, "template": template})
    if template is not None:
        inner = preexec

        def preexec() -> None:  # a template that outlives its grader would be nobody's
            inner()
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))

    return [sys.executable, "-I", "-B", str(boot), *argv], preexec, env, isolation
