"""Run the student side as it runs on macOS or on Windows, on this Linux machine.

    python tests/platform_sim.py darwin|win32 FOLDER -- ENTRY [ARGS...]

What the student's Python and system lack is made absent before any of the
project's code is imported: sys.platform says the other system; the modules
Windows' Python does not have (fcntl, pwd, grp, resource, termios) cannot be
imported; os, signal and socket lose the names the other system's Python does
not define (O_NOFOLLOW, fork, setitimer, SIGALRM, SO_PASSCRED, ...); the C
library has no prctl, mount or Linux system calls (dlsym says "symbol not
found", as macOS's does; Windows has no C library handle for None at all);
/proc and /sys do not exist. The children the portable level starts run under
the same simulation (this file is put in front of boot.py). What cannot be
simulated: the host's own subprocess and psutil keep their POSIX internals, and
numpy, torch and the other packages are imported before the simulation starts
(they branch on sys.platform themselves, to load what only the real system has).

ENTRY is a script run as __main__ (autograder.py), `-m MODULE` (runpy), or
`-c CODE`; FOLDER becomes the working directory and the first entry of sys.path
("-" for a child: it stays where it was started).
"""

from __future__ import annotations

import builtins
import ctypes
import importlib.abc
import io
import os
import runpy

# The host's own modules that must work as they do on the host (imported before anything is taken away).
import selectors  # noqa: F401
import signal
import socket
import subprocess
import sys
import threading  # noqa: F401

HERE = os.path.abspath(__file__)
ABSENT_MODULES = {
    "win32": {"fcntl", "pwd", "grp", "resource", "termios", "tomllib" if sys.version_info < (3, 11) else ""},
    "darwin": set(),
}
ABSENT_ATTRS = {
    "win32": {
        os: ["O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_DIRECTORY", "O_PATH", "fork", "forkpty", "killpg", "setsid",
             "getuid", "geteuid", "getgid", "getegid", "setuid", "setgid", "setgroups", "lchown", "chown", "getpgid",
             "wait4", "sched_getaffinity", "memfd_create", "pidfd_open", "mkfifo", "sysconf", "uname", "fchmod"],
        signal: ["SIGALRM", "SIGPROF", "SIGXCPU", "SIGHUP", "SIGCHLD", "setitimer", "getitimer", "ITIMER_REAL",
                 "ITIMER_PROF", "alarm", "pause", "pthread_kill"],
        socket: ["SO_PASSCRED", "SCM_CREDENTIALS", "SCM_RIGHTS", "send_fds", "recv_fds", "AF_UNIX", "CMSG_SPACE"],
    },
    "darwin": {
        os: ["O_PATH", "sched_getaffinity", "memfd_create", "pidfd_open"],
        socket: ["SO_PASSCRED", "SCM_CREDENTIALS"],
    },
}
LINUX_SYMBOLS = {"prctl", "syscall", "mount", "umount2", "capset", "shmctl", "msgctl", "semctl"}
LINUX_TREES = ("/proc", "/sys")
PRELOAD = ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "otter", "nbformat", "tomli", "psutil")
CHILD_PRELOAD = ("numpy", "torch")  # what every harness imports (matplotlib only where a graded cell does)


class _Absent(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]):
        self.names = {n for n in names if n}

    def find_spec(self, name, path, target=None):
        if name in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class _LibC:
    """The C library as macOS has it: none of Linux's own calls."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name in LINUX_SYMBOLS:
            raise AttributeError(f"dlsym(RTLD_DEFAULT, {name}): symbol not found")
        return getattr(self._real, name)


def _linux_path(path) -> bool:
    try:
        text = os.fsdecode(path) if not isinstance(path, int) else ""
    except TypeError:
        return False
    text = os.path.abspath(text) if text else text
    return any(text == t or text.startswith(t + "/") for t in LINUX_TREES)


def _hide_linux_trees() -> None:
    def guard(fn):
        def wrapped(path, *args, **kwargs):
            if _linux_path(path):
                raise FileNotFoundError(2, "No such file or directory", os.fsdecode(path))
            return fn(path, *args, **kwargs)
        return wrapped

    builtins.open = guard(builtins.open)
    io.open = builtins.open
    for name in ("open", "listdir", "scandir", "stat", "lstat", "access"):
        setattr(os, name, guard(getattr(os, name)))
    def absent(fn):
        return lambda path, *args, **kwargs: False if _linux_path(path) else fn(path, *args, **kwargs)

    for name in ("exists", "isdir", "isfile", "lexists"):
        setattr(os.path, name, absent(getattr(os.path, name)))


def apply(target: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Make this process look like `target`'s Python as far as the project's code can tell.

    The third-party packages the student side uses are imported first, on the host as it is: they
    support the other systems themselves, and branch on sys.platform to load what only those have."""
    for name in preload:
        try:
            __import__(name)
        except ImportError:
            pass
    sys.meta_path.insert(0, _Absent(ABSENT_MODULES[target]))
    for name in ABSENT_MODULES[target]:
        sys.modules.pop(name, None)
    kill = signal.SIGKILL  # the host's subprocess and psutil kill with it; the project's code may not
    for module, names in ABSENT_ATTRS[target].items():
        for name in names:
            if hasattr(module, name):
                delattr(module, name)
    subprocess.Popen.kill = lambda self: self.send_signal(kill)
    real_cdll = ctypes.CDLL

    class CDLL(real_cdll):
        def __new__(cls, name, *args, **kwargs):
            if name is None and target == "win32":
                raise TypeError("LoadLibrary() argument 1 must be str, not None")
            lib = real_cdll(name, *args, **kwargs)
            return _LibC(lib) if name is None else lib

    ctypes.CDLL = CDLL
    _hide_linux_trees()
    sys.platform = target


def _simulate_children(target: str) -> None:
    """The portable level's children run through this file too, under the same simulation."""
    from gradelib.runner import portable

    portable.child_prefix = lambda boot: [sys.executable, "-I", "-B", HERE, target, "-", "--", str(boot)]


def main(argv: list[str]) -> None:
    target, folder, sep, entry, *rest = argv
    assert sep == "--" and target in ABSENT_ATTRS, argv
    preload = CHILD_PRELOAD if folder == "-" else PRELOAD
    if "PLATFORM_SIM_PRELOAD" in os.environ:  # a probe of the simulation itself: no package to import first
        preload = tuple(n for n in os.environ["PLATFORM_SIM_PRELOAD"].split(",") if n)
    apply(target, preload)
    if folder == "-":  # a child of the portable level, in the folder it was started in: boot.py as usual
        sys.argv = [entry, *rest]
        runpy.run_path(entry, run_name="__main__")
        return
    folder = os.path.abspath(folder)
    os.chdir(folder)
    sys.path.insert(0, folder)
    _simulate_children(target)
    if entry == "-m":
        sys.argv = [rest[0], *rest[1:]]
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    elif entry == "-c":
        sys.argv = ["-c", *rest[1:]]
        exec(compile(rest[0], "<simulated>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [entry, *rest]
        runpy.run_path(entry, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
