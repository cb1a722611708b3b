"""Docker's default container, reproduced on this machine for one command: the fallback of the container tests
where no real Docker engine can be had (tests/isolation/docker_engine.py), and the level for what a real engine
cannot show
cheaply (the student's side, attack batches).

Gradescope and Autolab run the grader as root in a container with Docker's default privileges:
its default capability set (no CAP_SYS_ADMIN, so no new namespaces and no mounts), cgroups
mounted read-only, and an interpreter installed where any user can read it. `docker_default(cmd)`
gives the command that runs `cmd` so: in a PID namespace of its own (its /proc shows its processes
only, as a container's does) and a private mount namespace (made before the capabilities go) with a
64 MB /dev/shm of its own, where the cgroup file systems are read-only and the folders above the
interpreter that only root may enter are shown traversable, then through setpriv with Docker's
default bounding set, so the command and everything it starts has no other capability.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

# Docker's default capabilities (moby's oci/caps/defaults.go).
DOCKER_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
               "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap")


def available() -> str:
    """'' where the reproduction can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (to make the mount namespace before dropping capabilities)"
    for tool in ("unshare", "setpriv", "mount"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return ""


def _closed_folders(paths: list[str]) -> list[tuple[str, str]]:
    """(folder others may not enter, its child on the way to a path) for each such folder above `paths`."""
    found: dict[str, str] = {}
    for path in paths:
        parts = Path(os.path.realpath(path)).parts
        for i in range(1, len(parts) - 1):
            folder = str(Path(*parts[: i + 1]))
            if not os.stat(folder).st_mode & 0o001:
                found.setdefault(folder, parts[i + 1])
    return sorted(found.items())


@contextlib.contextmanager
def docker_default(cmd: list[str], env: dict[str, str] | None = None, shm_mb: int = 0):
    """The command that runs `cmd` as root with Docker's default capability set and read-only cgroups
    (the empty folders it mounts views on are removed when the block ends); with `shm_mb`, a /dev/shm of
    that size of its own, as Docker gives (64 MB unless told)."""
    caps = ",".join(f"+{c}" for c in DOCKER_CAPS)
    with _reproduced(cmd, env, f"setpriv --bounding-set=-all,{caps} --inh-caps=-all --", shm_mb) as wrapped:
        yield wrapped


@contextlib.contextmanager
def linux_user(cmd: list[str], uid: int = 65534, env: dict[str, str] | None = None):
    """The command that runs `cmd` as a Linux user who is not root (uid `uid`, no capabilities, no groups):
    a student on a Linux laptop, where the grader has no namespaces and no other uid to give a run."""
    with _reproduced(cmd, env, f"setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all "
                               "--bounding-set=-all --") as wrapped:
        yield wrapped


@contextlib.contextmanager
def _reproduced(cmd: list[str], env: dict[str, str] | None, setpriv: str, shm_mb: int = 0):
    """`cmd` in a private mount namespace where the interpreter is readable by every user and the cgroup file
    systems are read-only, started through `setpriv` (what the process may keep of root)."""
    from autograder.isolation.interpreter import python_paths

    views = []
    script = ["set -e", "mount --make-rprivate /", "mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev tmpfs /dev/shm"]
    for folder, child in _closed_folders([sys.executable, *python_paths()]):
        # A traversable tmpfs over the folder, holding only the child the interpreter needs.
        view = tempfile.mkdtemp(prefix="docker-default-view-")
        views.append(view)
        script += [f"mount -t tmpfs -o mode=0755,size=64k tmpfs {shlex.quote(view)}",
                   f"mkdir -p {shlex.quote(view + '/' + child)}",
                   f"mount --rbind {shlex.quote(folder + '/' + child)} {shlex.quote(view + '/' + child)}",
                   f"mount --rbind {shlex.quote(view)} {shlex.quote(folder)}"]
    if shm_mb:
        script.append(f"mount -t tmpfs -o size={int(shm_mb)}m,mode=1777,nosuid,nodev,noexec tmpfs /dev/shm")
    script.append("for m in $(awk '$3 ~ /^cgroup/ || $2 == \"/sys/fs/cgroup\" {print $2}' /proc/self/mounts); do "
                  "mount -o remount,bind,ro \"$m\" 2>/dev/null || true; done")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    script.append(f"exec env {exports} {setpriv} " + " ".join(shlex.quote(c) for c in cmd))
    try:
        yield ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--", "sh", "-c", "\n".join(script)]
    finally:
        for view in views:
            os.rmdir(view)
