"""The course grader's runner: the isolation levels behind the student kit's run interface.

Every problem calls `gradelib.runner.run`; the course grader's entry points run their gradings inside
`installed()`, which puts this runner there, so the same problems run confined (namespaces, the
fallback, or on Linux the portable level with the template), and off Linux through the kit's own runner.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from gradelib import runner as kit
from gradelib import safeio
from gradelib.runner.limits import ChildRun, Limits

from . import levels, runner, template, tmpfs
from .kernel import is_linux
from .safe_reading import READER

# Harnesses that set tripwires in torch: off Linux (the kit's warm process) each runs in a process that ran nothing
# before, since a warm process keeps them (the public run of the same file could take them off, or set its own).
CLEAN_SLATE = frozenset({"attention_child.py"})


class Isolating:
    """A gradelib.runner runner (the kit portable module's functions) at the strongest level here (levels.py)."""

    def __init__(self):
        self.warm: list = []  # off Linux: the kit's warm child (None: none) of each session in force, innermost last

    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None = None) -> ChildRun:
        """The run, or runner.GraderFault when it could not start or ended for a reason none of its limits gives
        (runner.fault_of): the problem is then not graded, and FAULTS says why."""
        warm = self.warm[-1] if self.warm else None
        if warm is not None and warm.runs and argv and Path(str(argv[0])).name in CLEAN_SLATE:
            warm.close()  # the kit's runner starts it again for this run
        what = f"the sandboxed run of {Path(str(argv[0])).name if argv else 'a harness'}"
        try:
            done = runner.run(argv, workdir, limits, env_extra)
            fault = runner.fault_of(done)
            if fault:
                raise runner.RunLost(f"{what} {fault}")
        except runner.GraderFault as exc:
            FAULTS.append(str(exc))
            raise
        return done

    @contextlib.contextmanager
    def session(self, root: Path, limits: Limits, preload: tuple[str, ...]):
        if is_linux():
            with template.session(root, limits, preload) as current:
                yield current
            return
        with kit.KIT.session(root, limits, preload) as warm:  # no template: the kit's warm process takes the runs
            self.warm.append(warm)
            try:
                yield warm
            finally:
                self.warm.pop()

    def level(self) -> str:
        return levels.isolation_level()

    def hold(self, folder: Path) -> None:
        # Traversable (not listable) so a child running as another uid reaches its own scratch; as root, all of it
        # in a size- and file-count-capped tmpfs.
        folder.chmod(0o711)
        tmpfs.cap_folder(folder)

    def release(self, folder: Path) -> None:
        tmpfs.release(folder)


ISOLATING = Isolating()
FAULTS: list[str] = []  # each run of this process lost to a fault (GraderFault), in words: the batch worker retries


@contextlib.contextmanager
def installed():
    """Gradings within run through the isolating runner and read files through the hostile-safe reader (the ones
    installed before, after)."""
    before = kit.current()
    kit.install(ISOLATING)
    reader_before = safeio.install(READER)
    try:
        yield ISOLATING
    finally:
        kit.install(None if before is kit.KIT else before)
        safeio.install(reader_before)
