"""How every problem runs code: `run([harness], scratch, limits)` runs the harness in a separate process and returns
how it ended (a ChildRun), through the kit's runner (the portable module: run, session, hold and release) or
the one the course grader installs (`install`)."""

from __future__ import annotations

from pathlib import Path

from . import portable
from .limits import ChildRun, Limits

PRELOAD = ("numpy", "torch")  # imported once per grading by a warm process, never by each run
PRELOAD_NOTEBOOKS = ("matplotlib.pyplot",)  # also, when a cell the grader runs names matplotlib (grade.runs_matplotlib)
RAN_AS = "your code ran in a separate process with time, CPU, output and memory limits"
KIT = portable  # the kit's runner
_installed: list = []


def install(runner) -> None:
    """Run every later grading through `runner` (None: the kit's own again)."""
    _installed[:] = [runner] if runner is not None else []


def current():
    """The runner in force: the one `install` put in, else the kit's own."""
    return _installed[0] if _installed else KIT


def run(argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None = None) -> ChildRun:
    """Run `python -I <start> argv...` in `workdir` under `limits` through the runner in force."""
    return current().run(argv, Path(workdir), limits, env_extra)


def session(root: Path, limits: Limits, preload: tuple[str, ...] = PRELOAD):
    """Runs under `root` share the modules `preload` names, imported once (a speed matter only)."""
    return current().session(Path(root), limits, preload)
