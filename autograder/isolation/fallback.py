"""The fallback level, where namespaces cannot be made (no bubblewrap, not root, a root container with
Docker's default privileges): the run in its own session, with rlimits, Landlock where the kernel has it,
the seccomp filter, and, as root, a sandbox uid of its own (one per concurrent run, as at the namespaces
level) that can read the interpreter and its scratch folder and nothing of the grader's. It never runs as
uid 0: where no sandbox uid can read the interpreter, the level is unavailable (levels.py says why).
The grader, a subreaper, kills its orphans; its /dev/shm and System V leftovers are removed after it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

from gradelib.runner.limits import child_env

from .interpreter import BOOT_ENV, BOOT_FILES, Limits, extra_paths, python_paths, readable_by, rlimit_values
from .kernel import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, apply_landlock, landlock_abi, prctl, rlimits
from .slots import Slot

READ_ONLY_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/sys", "/opt/conda")
# Of /proc (the host's, here: no PID namespace) a run reads its own process and the machine's facts numpy
# and torch ask for, never the other processes' command lines, environments or memory maps. /proc/self is
# opened in the child itself, after fork, so it is the run's own folder.
PROC_PATHS = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems", "/proc/sys/kernel",
              "/proc/sys/vm/overcommit_memory")
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/shm")
BOOT_FOLDER = "_boot"  # in the run's folder: the copies of the boot files the child starts from


def unreadable_for(uid: int) -> list[str]:
    """The interpreter's files and folders a user `uid` (group `uid`, no others) cannot read."""
    return [p for p in [sys.executable, *python_paths()] if not readable_by(uid, uid, p)]


def give_to(folder: Path, uid: int) -> None:
    """Make `folder` and everything in it the run user's (links are not followed)."""
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.chown(folder, uid, uid)


def copy_boot(workdir: Path) -> Path:
    """The boot files, copied into the run's folder (the child cannot read the grader's own)."""
    folder = workdir / BOOT_FOLDER
    folder.mkdir(exist_ok=True)
    for name, source in BOOT_FILES.items():
        shutil.copyfile(source, folder / name)
        os.chmod(folder / name, 0o644)
    os.chmod(folder, 0o755)
    return folder / "boot.py"


def launch(argv, workdir: Path, limits: Limits, slot: Slot | None, rep_w: int, env_extra,
           template: dict | None = None):
    """(command, preexec, environment, isolation lines) of a fallback-level run in `workdir`: as the slot's
    uid when the grader is root (slot given), else as the grader's own uid."""
    abi = landlock_abi()
    boot = copy_boot(workdir)
    # As the user's own uid (not root) the run could read those processes' /proc anyway, and a template
    # lists /proc to end a run's processes: all of /proc then.
    proc = PROC_PATHS if slot is not None else ("/proc",)
    read_paths = [p for p in (*READ_ONLY_SYSTEM_PATHS, *proc, *python_paths(), *extra_paths()) if os.path.exists(p)]
    # /dev/shm only as a uid of the run's own, whose files there are removed after each run.
    write_paths = [str(workdir), *[p for p in DEVICE_PATHS if os.path.exists(p) and (slot or p != "/dev/shm")]]
    if slot is not None:
        if template is None:
            give_to(workdir, slot.uid)
        else:  # the submission's folder stays the grader's; each run's folder is given to the run's uid
            os.chown(workdir / "tmp", slot.uid, slot.uid)
        isolation = [f"uid {slot.uid}"]
        nproc = limits.processes  # the uid is the run's own: a count per uid caps the run alone
    else:
        # The uid is shared (with the grader, or with classmates graded alongside): a count per uid would
        # let one submission use up another's, so only the pids cgroup caps processes.
        isolation = [f"uid {os.geteuid()} (the grader's own: not root, no user switch)"]
        nproc = None
    if abi:
        isolation.append(f"landlock abi {abi}")
    rl = rlimits({**rlimit_values(limits), **({"RLIMIT_NPROC": nproc} if nproc else {})})
    uid = slot.uid if slot is not None else None

    def preexec() -> None:  # runs in the child between fork and exec
        rl()
        if abi:
            apply_landlock(abi, read_paths, write_paths)
        else:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if template is not None:  # a template that outlives its grader would be nobody's
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))

    env = child_env(str(workdir), str(workdir / "tmp"), env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": None, "report_fd": rep_w, "template": template, "paths": extra_paths()})
    return [sys.executable, "-I", "-B", str(boot), *argv], preexec, env, isolation
