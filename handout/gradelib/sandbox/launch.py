"""How a child starts at the level in force: its command, user, environment, cgroups and what it is told."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import cgroups, fallback, namespaces
from .limits import Limits
from .slots import Slot


@dataclass
class Launch:
    """Everything needed to start one confined child (a run or a template), and what to give back after."""

    cmd: list[str]
    preexec: Callable[[], None]
    env: dict[str, str]
    isolation: list[str]
    slot: Slot | None = None
    groups: list[Path] = field(default_factory=list)

    @property
    def uid(self) -> int:
        return self.slot.uid if self.slot is not None else 0


def prepare(level: str, argv: list[str], workdir: Path, limits: Limits, rep_w: int, env_extra: dict | None,
            template: dict | None = None) -> Launch:
    """The launch of `argv` in `workdir` at `level`; the caller calls `release` when the child is gone."""
    slot = None
    if level == "namespaces":
        slot = Slot()
        try:
            cmd, preexec, env, isolation = namespaces.launch(argv, workdir, limits, slot, rep_w, env_extra, template)
        except BaseException:
            slot.release()
            raise
    else:
        cmd, preexec, env, isolation = fallback.launch(argv, workdir, limits, rep_w, env_extra, template)
    groups = cgroups.make(limits)
    if groups:
        isolation.append(cgroups.label(groups))
    return Launch(cmd, cgroups.joining(groups, preexec), env, isolation, slot, groups)


def release(launch: Launch | None) -> None:
    """Remove the child's cgroups (killing what is left in them) and give its uid back."""
    if launch is None:
        return
    cgroups.release(launch.groups)
    launch.groups = []
    if launch.slot is not None:
        launch.slot.release()
        launch.slot = None
