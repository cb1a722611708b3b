"""The namespaces level: a run in bubblewrap's fresh PID, network, IPC, UTS and mount namespaces.

Its root is an empty tmpfs holding, read-only, /usr, a few files of /etc and
the Python installation at their own paths; its scratch folder at /scratch; a
fresh /proc, a minimal /dev and private size-capped /tmp and /dev/shm that
vanish with it. It runs as a real unprivileged uid, one per concurrent run
(slots.py), with no capabilities, no_new_privs, RLIMIT_NPROC, and Landlock
inside as a second layer. Killing bubblewrap ends the namespace's init, and
the kernel then kills every process of the run, setsid() or not.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gradelib.runner.limits import child_env

from .interpreter import BOOT_ENV, BOOT_FILES, Limits, extra_paths, python_mounts, rlimit_values
from .kernel import landlock_abi, rlimits
from .slots import Slot

SHM_MB = 64  # private /dev/shm of a namespaced child
SCRATCH_INSIDE = "/scratch"
BOOT_INSIDE_DIR = "/run/grader"
BOOT_INSIDE = f"{BOOT_INSIDE_DIR}/boot.py"
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf")


def bwrap_argv(workdir: Path, uid: int, limits: Limits) -> tuple[list[str], list[str], list[str]]:
    """(bwrap + setpriv + python argv prefix, Landlock read paths, write paths) for a namespaced child."""
    pymounts, exe = python_mounts()
    pymounts += [p for p in extra_paths() if not any(p == m or p.startswith(m + "/") for m in pymounts)]
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent", "--new-session",
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    # Private and empty; not writable by the child (TMPDIR is its scratch). Mounted before the
    # interpreter, so a Python installation or virtual environment under /tmp is bound over it.
    argv += ["--size", str(1024 * 1024), "--tmpfs", "/tmp"]
    made: set[str] = {"/", "/tmp"}

    def parents(path: str) -> list[str]:
        # bwrap makes missing parents 0700 (root only): make them traversable first.
        out = []
        parts = Path(path).parts[1:-1]
        for i in range(len(parts)):
            p = "/" + "/".join(parts[: i + 1])
            if p not in made:
                made.add(p)
                out += ["--perms", "0755", "--dir", p]
        return out

    for path in [*(p for p in ETC_FILES if os.path.exists(p)), *pymounts]:
        argv += [*parents(path), "--ro-bind", path, path]
    argv += [
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "01777", "--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm",
        "--bind", str(workdir), SCRATCH_INSIDE,
        *parents(BOOT_INSIDE),
    ]
    for name, source in BOOT_FILES.items():
        argv += ["--ro-bind", str(source), f"{BOOT_INSIDE_DIR}/{name}"]
    argv += [
        "--remount-ro", "/",
        "--chdir", SCRATCH_INSIDE,
        "--",
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
        exe, "-I", "-B", BOOT_INSIDE,
    ]
    read = ["/usr", "/etc", "/proc", "/dev", BOOT_INSIDE_DIR, *pymounts]
    write = [SCRATCH_INSIDE, "/dev/shm", "/dev/null"]
    return argv, read, write


def launch(argv, workdir: Path, limits: Limits, slot: Slot, rep_w: int, env_extra, template: dict | None = None):
    """(command, preexec, environment, isolation lines) of a namespaced run in `workdir` as the slot's uid."""
    os.chown(workdir, slot.uid, slot.uid)
    os.chown(workdir / "tmp", slot.uid, slot.uid)
    prefix, read, write = bwrap_argv(workdir, slot.uid, limits)
    tmp = f"{SCRATCH_INSIDE}/tmp"
    env = child_env(SCRATCH_INSIDE, tmp, env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": {"read": read, "write": write}, "report_fd": rep_w, "template": template,
                                "paths": extra_paths()})
    rl = rlimits({**rlimit_values(limits), "RLIMIT_NPROC": limits.processes})  # counted for the slot's uid only

    def preexec() -> None:
        rl()
        # bwrap is root here; the child gives up root by exec'ing setpriv.

    isolation = ["namespaces (bubblewrap)", f"uid {slot.uid}"]
    if landlock_abi():
        isolation.append(f"landlock abi {landlock_abi()}")
    return [*prefix, *argv], preexec, env, isolation
