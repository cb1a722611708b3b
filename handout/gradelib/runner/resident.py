"""A run's memory limit on what its processes hold (resident memory, measured with psutil), or none
where psutil is missing (said in the run's lines)."""

from __future__ import annotations

import time
from typing import Callable

SAMPLE_S = 0.05  # how often a run is measured


def resident_mb(roots: set[int], shared_once: bool = False) -> int:
    """Resident MB of the roots and everything below them; `shared_once`: shared pages split among the
    processes that share them (PSS) where the system says, else only each process's own (USS)."""
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
                if shared_once:
                    info = p.memory_full_info()
                    total += getattr(info, "pss", info.uss)
                else:
                    total += p.memory_info().rss
            except (psutil.Error, AttributeError):
                pass
    return total >> 20


def measurable() -> str:
    """'' where the memory limit can be measured, else why not."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return "psutil is not installed"
    return ""


class MemoryWatch:
    """Whether a run has passed its memory limit, and how much it held at most."""

    def __init__(self, limit_mb: int, _groups, roots: Callable[[], set[int]]):
        self.limit_mb, self.roots, self.peak_mb, self.stopped, self._next = limit_mb, roots, 0, False, 0.0
        self._why = measurable()

    def label(self) -> str:
        if self._why:
            return f"memory: not limited ({self._why})"
        return f"memory: {self.limit_mb} MB of resident memory for the run's processes together (sampled, psutil)"

    def over(self) -> bool:
        """Measure now and then: True once the run holds more than its limit."""
        if self._why or self.stopped or time.monotonic() < self._next:
            return self.stopped
        self._next = time.monotonic() + SAMPLE_S
        try:
            used = resident_mb(self.roots())
            if used > self.limit_mb:  # whole resident memories count shared pages once per process: measure again
                used = resident_mb(self.roots(), True)
        except Exception:  # a process that ended mid-measurement, a psutil that cannot read it
            return False
        self.peak_mb = max(self.peak_mb, used)
        self.stopped = used > self.limit_mb
        return self.stopped

    def finish(self) -> dict:
        return {"memory_limit_mb": self.limit_mb if self.stopped else 0,
                "memory_used_mb": self.peak_mb if self.stopped else 0}
