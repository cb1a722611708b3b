"""A run's memory limit, on what it holds (resident memory) rather than what it maps: its memory cgroup's
verdict where it has one, else its processes' resident memory sampled by the grader (/proc on Linux,
psutil elsewhere), else nothing (said in the run's isolation lines)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .kernel import descendants, is_linux, resident_mb

SAMPLE_S = 0.05  # how often a run without a memory cgroup is measured


def memory_group(groups: list[Path]) -> Path | None:
    """The run's cgroup that limits memory (v1's memory controller, or v2 with memory.max), if any."""
    for folder in groups:
        if (folder / "memory.limit_in_bytes").exists() or (folder / "memory.max").exists():
            return folder
    return None


def _psutil_resident_mb(roots: set[int], shared_once: bool = False) -> int:
    import psutil

    total = 0
    for root in roots:
        try:
            proc = psutil.Process(root)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    return total >> 20


def sampler() -> tuple[Callable[[set[int], bool], int] | None, str]:
    """((roots, shared_once) -> resident MB of the roots and everything below them, how), or (None, why none)
    on this machine."""
    if is_linux():
        return (lambda roots, shared_once=False: resident_mb(descendants(roots), shared_once)), "/proc"
    try:
        import psutil  # noqa: F401
    except ImportError:
        return None, "psutil is not installed"
    return _psutil_resident_mb, "psutil"


class MemoryWatch:
    """Whether a run has passed its memory limit, and how much it held at most."""

    def __init__(self, limit_mb: int, groups: list[Path], roots: Callable[[], set[int]]):
        self.limit_mb = limit_mb
        self.group = memory_group(groups)
        self.roots = roots
        self.peak_mb = 0
        self.stopped = False
        self._next = 0.0
        self._measure, self._how = (None, "cgroup") if self.group is not None else sampler()

    def label(self) -> str:
        if self.group is not None:
            return f"memory: {self.limit_mb} MB for the run's processes together (memory cgroup)"
        if self._measure is None:
            return f"memory: not limited ({self._how})"
        return f"memory: {self.limit_mb} MB of resident memory for the run's processes together (sampled, {self._how})"

    def over(self) -> bool:
        """Measure now and then (no cgroup): True once the run holds more than its limit."""
        if self._measure is None or self.stopped or time.monotonic() < self._next:
            return self.stopped
        self._next = time.monotonic() + SAMPLE_S
        try:
            roots = self.roots()
            used = self._measure(roots)
            if used > self.limit_mb:  # whole resident memories count shared pages once per process: measure again
                used = self._measure(roots, True)
        except Exception:  # a process that ended mid-measurement, a psutil that cannot read it
            return False
        self.peak_mb = max(self.peak_mb, used)
        self.stopped = used > self.limit_mb
        return self.stopped

    def finish(self) -> dict:
        """The ChildRun fields: read the cgroup's peak and whether its limit killed a process of the run."""
        if self.group is not None:
            self.peak_mb = max(self.peak_mb, _cgroup_peak_mb(self.group))
            self.stopped = self.stopped or _cgroup_oom_kills(self.group) > 0
        return {"memory_limit_mb": self.limit_mb if self.stopped else 0,
                "memory_used_mb": self.peak_mb if self.stopped else 0}


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _cgroup_peak_mb(group: Path) -> int:
    return max(_read_int(group / "memory.max_usage_in_bytes"), _read_int(group / "memory.peak")) >> 20


def _cgroup_oom_kills(group: Path) -> int:
    for name in ("memory.oom_control", "memory.events"):  # v1, v2
        try:
            for line in (group / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0
