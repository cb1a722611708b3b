"""A run's memory limit, on what it holds (resident memory) rather than what it maps: its memory cgroup's
verdict where it has one, else its processes' resident memory sampled by the grader (/proc on Linux,
psutil elsewhere), else nothing (said in the run's isolation lines).

Sampled on Linux, the shared memory the run made counts too, though no process maps it: the files its uid
has in /dev/shm, the memfd and /dev/shm files its processes hold open, its System V segments. Its files in
/dev/shm have a cap of their own besides, a share of that folder, so that no run fills it for the others
(Docker's /dev/shm holds 64 MB).

Its time limit is on a clock that the machine's load does not move (RunClock)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Callable

from .kernel import descendants, is_linux, resident_mb

SAMPLE_S = 0.05  # how often a run without a memory cgroup is measured
SHARED_SAMPLE_S = 0.25  # how often its shared memory is (a walk of /dev/shm)
SHM = "/dev/shm"
SHM_SHARE = 4  # a run's files may fill this part of /dev/shm at most (a quarter)
MAX_WALK = 20_000  # the run's entries in /dev/shm counted per measurement; a run that made more is stopped
MAX_LOOKED = 200_000  # entries of anyone's looked at per measurement (beyond: the walk stops there)


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

    def __init__(self, limit_mb: int, groups: list[Path], roots: Callable[[], set[int]], uid: int | None = None):
        """`uid`: the run's own uid, or None where it runs as the grader's (whose files in /dev/shm count only
        from the run's start on)."""
        self.limit_mb = limit_mb
        self.group = memory_group(groups)
        self.roots = roots
        self.peak_mb = 0
        self.stopped = False
        self.where = ""  # what the stop was for, when it was not resident memory alone
        self._next = 0.0
        self._measure, self._how = (None, "cgroup") if self.group is not None else sampler()
        self._shared = SharedMemory(uid) if self._measure is not None and is_linux() else None

    def label(self) -> str:
        if self.group is not None:
            return f"memory: {self.limit_mb} MB for the run's processes together (memory cgroup)"
        if self._measure is None:
            return f"memory: not limited ({self._how})"
        shared = " and the shared memory it made" if self._shared is not None else ""
        return (f"memory: {self.limit_mb} MB of resident memory for the run's processes together{shared} "
                f"(sampled, {self._how})")

    def over(self) -> bool:
        """Measure now and then (no cgroup): True once the run holds more than its limit."""
        if self._measure is None or self.stopped or time.monotonic() < self._next:
            return self.stopped
        self._next = time.monotonic() + SAMPLE_S
        try:
            roots = self.roots()
            shared_mb, where = self._shared.measure(roots) if self._shared is not None else (0, "")
            used = self._measure(roots) + shared_mb
            if used > self.limit_mb:  # whole resident memories count shared pages once per process: measure again
                used = self._measure(roots, True) + shared_mb
        except Exception:  # a process that ended mid-measurement, a psutil that cannot read it
            return False
        self.peak_mb = max(self.peak_mb, used)
        self.stopped = used > self.limit_mb or bool(where)
        if self.stopped:
            self.where = where or (" (shared memory included)" if shared_mb else "")
        return self.stopped

    def finish(self) -> dict:
        """The ChildRun fields: read the cgroup's peak and whether its limit killed a process of the run; an OOM kill
        while the group stayed under its limit was the machine's (a fault, never the run's)."""
        fault = ""
        if self.group is not None:
            self.peak_mb = max(self.peak_mb, _cgroup_peak_mb(self.group))
            kills, own = cgroup_oom(self.group)
            self.stopped = self.stopped or (kills > 0 and own)
            if kills and not self.stopped:
                fault = (f"the machine's OOM killer ended {kills} of its processes while they held less than their "
                         f"{self.limit_mb} MB limit")
        return {"memory_limit_mb": self.limit_mb if self.stopped else 0,
                "memory_used_mb": self.peak_mb if self.stopped else 0, "memory_where": self.where, "fault": fault}


class SharedMemory:
    """The shared memory a run made, in MB, measured every SHARED_SAMPLE_S (Linux only)."""

    def __init__(self, uid: int | None):
        self.uid = os.geteuid() if uid is None else uid
        # Where the uid is the grader's (the portable level, a user's own fallback), its other programs' files
        # are not the run's: only the entries made since the run started count (a browser's, made during the
        # run, would count too: a user's laptop is no class run).
        shared = uid is None or uid == os.geteuid()
        self.since = time.time() if shared else None
        self.before: set[tuple[int, int]] = set()
        if shared:
            try:
                with os.scandir(SHM) as entries:
                    self.before = {(e.stat(follow_symlinks=False).st_dev, e.inode()) for e in entries}
            except OSError:
                pass
        try:
            fs = os.statvfs(SHM)
            self.cap = fs.f_blocks * fs.f_frsize // SHM_SHARE
        except OSError:
            self.cap = 0
        self._next, self._last = 0.0, (0, "")

    def measure(self, roots: set[int]) -> tuple[int, str]:
        """(MB of shared memory, '' or why the run is stopped whatever its total)."""
        if time.monotonic() < self._next:
            return self._last
        self._next = time.monotonic() + SHARED_SAMPLE_S
        seen: set[tuple[int, int]] = set()
        in_shm, walked_all = self._shm_files(seen)
        total = in_shm + _open_files(descendants(roots), seen) + _sysv_segments(self.uid)
        why = ""
        if not walked_all:
            why = f" (it made more than {MAX_WALK:,} files in {SHM})"
        elif self.cap and in_shm > self.cap:
            why = f" (its files in {SHM} held {in_shm >> 20} MB, over a run's share of {self.cap >> 20} MB)"
        self._last = (total >> 20, why)
        return self._last

    def _shm_files(self, seen: set) -> tuple[int, bool]:
        """Bytes of the run's files in /dev/shm (folders it closed to everyone included: the grader, root,
        reads them anyway, and as the run's own uid it may open its own folders), and whether it saw them all."""
        total, stack, steps, looked = 0, [SHM], 0, 0
        while stack and looked < MAX_LOOKED:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except PermissionError:
                if folder != SHM and _opened(folder):
                    stack.append(folder)
                continue
            except OSError:
                continue
            for entry in entries:
                looked += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_uid != self.uid or (self.since is not None and (st.st_ctime < self.since - 1
                                                                          or (st.st_dev, st.st_ino) in self.before)):
                    continue
                steps += 1
                if steps > MAX_WALK:
                    return total, False
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
        return total, True


def _opened(folder: str) -> bool:
    """Give the owner (this process's uid) back the right to list and enter `folder`; whether it could."""
    try:
        os.chmod(folder, stat.S_IMODE(os.lstat(folder).st_mode) | stat.S_IRWXU)
        return True
    except OSError:
        return False


def _open_files(pids: set[int], seen: set) -> int:
    """Bytes of the memfd and /dev/shm files (unlinked or not) these processes hold open."""
    total = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not (target.startswith("/memfd:") or target.startswith(SHM + "/")):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _sysv_segments(uid: int) -> int:
    """Bytes of the System V segments `uid` made or owns (attached or not: an unattached one is in no one's
    resident memory)."""
    try:
        with open("/proc/sysvipc/shm") as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        return 0
    total = 0
    for row in rows:
        f = row.split()  # key shmid perms size cpid lpid nattch uid gid cuid cgid ...
        if len(f) > 9 and str(uid) in (f[7], f[9]) and f[3].isdigit():
            total += int(f[3])
    return total


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _cgroup_peak_mb(group: Path) -> int:
    return max(_read_int(group / "memory.max_usage_in_bytes"), _read_int(group / "memory.peak")) >> 20


def cgroup_oom(group: Path) -> tuple[int, bool]:
    """(processes of the group any OOM killer ended, whether the group itself reached its limit): v2's memory.events
    counts `oom` when the group's own limit was hit; v1 has no such count, and a group at its limit fails a charge
    (memory.failcnt). The kernel counts `oom_kill` for the machine's OOM killer too."""
    kills, own = 0, False
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        try:
            fields = dict(line.split(" ", 1) for line in (group / name).read_text().splitlines() if " " in line)
            kills = int(fields.get("oom_kill", 0))
            own = int(fields.get("oom", 0)) > 0 if name == "memory.events" else _read_int(group / "memory.failcnt") > 0
        except (OSError, ValueError):
            continue
        break
    return kills, own


LOAD_STRETCH = 10  # a run that waits for a CPU may take this many times its time limit on the wall clock, no more
SCAN_S = 0.5  # how often the run's processes are looked for (their threads' waits are read at every look at the run)


class RunClock:
    """A run's time limit on the wall clock less the time its threads (of `roots()` and below, those that ended
    included) were ready to run but waited for a CPU (the machine's load), yet never so much that the clock shows less
    than the CPU time they used together, nor lets the run pass LOAD_STRETCH x `limit_s` on the wall clock
    (/proc/<pid>/task/<tid>/schedstat; elsewhere the wall clock). A run that computes is stopped by its CPU time, one
    that waits (sleeps, blocks) by the wall clock, whatever the load."""

    def __init__(self, limit_s: float, roots: Callable[[], set[int]]):
        self.start, self.limit_s, self.roots, self.queued = time.monotonic(), limit_s, roots, 0.0
        self.pids, self.scan_at, self.seen = set(), 0.0, {}  # (pid, tid) -> (CPU seconds, seconds waiting) last read

    def left(self) -> float:
        """Seconds left of the limit (none: it passed)."""
        now = time.monotonic()
        if is_linux():
            if now >= self.scan_at:
                self.pids, self.scan_at = descendants(self.roots()), now + SCAN_S
            self.seen.update(schedstats(self.pids))
            ran, waited = sum(r for r, _ in self.seen.values()), sum(w for _, w in self.seen.values())
            self.queued = max(self.queued, min(waited, now - self.start - ran, (LOAD_STRETCH - 1) * self.limit_s))
        return self.limit_s - self.elapsed()

    def elapsed(self) -> float:
        """Seconds on this clock since the run started."""
        return time.monotonic() - self.start - self.queued


def schedstats(pids: set[int]) -> dict[tuple[int, str], tuple[float, float]]:
    """(pid, tid) -> (seconds on a CPU, seconds ready to run but waiting for one) of each thread of the processes."""
    found = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    ran, waited = fh.read().split()[:2]
                found[pid, tid] = (int(ran) / 1e9, int(waited) / 1e9)
            except (OSError, ValueError):
                continue
    return found
