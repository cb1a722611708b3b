"""How a child starts at the level in force on Linux: its command, user, environment, cgroups and what it is
told (the portable level off Linux starts its children in portable.py instead)."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gradelib.runner.limits import child_env

from . import cgroups, fallback, namespaces
from .interpreter import BOOT_ENV, Limits, extra_paths, rlimit_values
from .kernel import PR_SET_PDEATHSIG, prctl, rlimits
from .slots import Slot


@dataclass
class Launch:
    """Everything needed to start one child (a run or a template), and what to give back after."""

    cmd: list[str]
    preexec: Callable[[], None]
    env: dict[str, str]
    isolation: list[str]
    slot: Slot | None = None
    groups: list[Path] = field(default_factory=list)

    @property
    def uid(self) -> int:
        return self.slot.uid if self.slot is not None else 0

    @property
    def token(self) -> str:
        return self.slot.token if self.slot is not None else ""


def prepare(level: str, argv: list[str], workdir: Path, limits: Limits, rep_w: int, env_extra: dict | None,
            template: dict | None = None) -> Launch:
    """The launch of `argv` in `workdir` at `level`; the caller calls `release` when the child is gone."""
    slot = Slot() if level == "namespaces" or (level == "fallback" and os.geteuid() == 0) else None
    env_extra = {**(env_extra or {}), **(slot.env if slot else {})}
    try:
        if level == "namespaces":
            cmd, preexec, env, isolation = namespaces.launch(argv, workdir, limits, slot, rep_w, env_extra, template)
        elif level == "fallback":
            cmd, preexec, env, isolation = fallback.launch(argv, workdir, limits, slot, rep_w, env_extra, template)
        else:
            cmd, preexec, env, isolation = portable_linux(argv, workdir, limits, rep_w, env_extra, template)
    except BaseException:
        if slot is not None:
            slot.release()
        raise
    groups = cgroups.make(limits) if level != "portable" else []
    if groups:
        isolation.append(cgroups.label(groups))
    return Launch(cmd, cgroups.joining(groups, preexec), env, isolation, slot, groups)


def portable_linux(argv, workdir: Path, limits: Limits, rep_w: int, env_extra, template: dict | None = None):
    """The portable level on Linux (asked for, or where neither other level can be made): a plain child of the
    same interpreter and user, in its own session, with rlimits and no confinement."""
    boot = fallback.copy_boot(workdir)
    rl = rlimits(rlimit_values(limits))
    env = child_env(str(workdir), str(workdir / "tmp"), env_extra)
    env[BOOT_ENV] = json.dumps({"landlock": None, "seccomp": False, "report_fd": rep_w, "template": template,
                                "paths": extra_paths()})
    preexec = rl
    if template is not None:
        def preexec() -> None:  # a template that outlives its grader would be nobody's
            rl()
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))

    return [sys.executable, "-I", "-B", str(boot), *argv], preexec, env, ["portable: no isolation (the user's own uid)"]


def release(launch: Launch | None) -> None:
    """Remove the child's cgroups (killing what is left in them) and give its uid back."""
    if launch is None:
        return
    cgroups.release(launch.groups)
    launch.groups = []
    if launch.slot is not None:
        launch.slot.release()
        launch.slot = None
