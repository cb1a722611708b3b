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

from ..grading.safe_reading import READER
from . import levels, runner, template, tmpfs
from .kernel import is_linux


class Isolating:
    """A gradelib.runner runner (the kit portable module's functions) at the strongest level here (levels.py)."""

    def run(self, argv: list[str], workdir: Path, limits: Limits, env_extra: dict[str, str] | None = None) -> ChildRun:
        return runner.run(argv, workdir, limits, env_extra)

    def session(self, root: Path, limits: Limits, preload: tuple[str, ...]):
        if not is_linux():  # no template off Linux: the kit's warm process (runner.run sends the runs to it)
            return kit.KIT.session(root, limits, preload)
        return template.session(root, limits, preload)

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
