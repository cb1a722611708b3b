"""What the attack tests share: hostile sources from tests/isolation/attacks/ with their placeholders filled, the
instructor CLI, what a grading may leave behind on the host, and skip marks by isolation level.

Imported like any module (`from attack_tools import ...`). The batch that grades every contained attack
between two runs of the reference is attack_batch.py, run once per test session (conftest.py's `attack_batch`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.isolation import isolation_level, isolation_report
from autograder.isolation.kernel import landlock_abi
from autograder.isolation.slots import block
from gradelib import rubric

from support import REPO, SOLUTIONS

ATTACK_FOLDER = Path(__file__).resolve().parent / "attacks"
PYTHON = sys.executable
CLI = REPO / "autograder" / "autograder.py"
POINTS = rubric.load()["attention"].points
PLACEHOLDER = re.compile(r"@[A-Z][A-Z0-9_]*@")
NOTEBOOK_1, NOTEBOOK_2 = "01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb"

needs_landlock = pytest.mark.skipif(
    landlock_abi() == 0, reason="file-system containment relies on Landlock, which this kernel lacks: "
    + "; ".join(isolation_report())
)
needs_namespaces = pytest.mark.skipif(
    isolation_level() != "namespaces", reason="this attack is stopped only by the namespace level (bubblewrap as "
    "root); here: " + "; ".join(isolation_report())
)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="dropping privileges needs root; here: " + "; ".join(isolation_report())
)


def attack_source(*parts: str, **fills: object) -> str:
    """The text of tests/isolation/attacks/<part>.py for each part, joined, with every @KEY@ replaced by
    str(fills[KEY]).

    Placeholders sit inside string literals, so each file stays valid Python. Fills are applied in the
    order given: a value may itself hold a placeholder given after it. One left unfilled is an error.
    """
    text = "".join((ATTACK_FOLDER / f"{part}.py").read_text() for part in parts)
    for key, value in fills.items():
        text = text.replace(f"@{key}@", str(value))
    left = sorted(set(PLACEHOLDER.findall(text)))
    if left:
        raise KeyError(f"{', '.join(parts)}: no value for {', '.join(left)}")
    return text


def notebook_with_first_cell(source: str, name: str = NOTEBOOK_1) -> str:
    """A notebook of the reference (notebook 1 unless `name` says) with `source` as a new first code cell, as text:
    a cell runs without the guards of attention's runs, so an attack there meets the kernel's layers alone."""
    import nbformat

    nb = nbformat.read(SOLUTIONS / name, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(source))
    return nbformat.writes(nb)


def run_cli(*args: str, timeout: float = 240, level: str = "", shm_mb: int = 0) -> subprocess.CompletedProcess:
    """The instructor's CLI, at the machine's own level, or at `level`: "fallback" in Docker's default
    container (tests/isolation/container.py; with a /dev/shm of `shm_mb` of its own), "portable" as asked for
    (--isolation portable)."""
    cmd = [PYTHON, str(CLI), *args]
    if level == "portable":
        env = {**os.environ, "GRADELIB_SANDBOX": "portable"}
        return subprocess.run([*cmd, "--isolation", "portable"], capture_output=True, text=True, timeout=timeout,
                              cwd=REPO, env=env)
    if level == "fallback":
        from container import docker_default

        with docker_default(cmd, shm_mb=shm_mb) as wrapped:
            return subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def outputs(result: dict) -> str:
    """Everything a results.json says to the student: each line's output, then the submission's."""
    return "\n".join(t["output"] for t in result["tests"]) + "\n" + result.get("output", "")


def batch_level(batch: dict) -> str:
    """The level a batch was graded at: the machine's own, or the one it was run at (run_cli)."""
    from autograder.isolation import isolation_level

    return batch["level"] or isolation_level()


def only_at(batch: dict, *levels: str, attack: str = "") -> None:
    """Skip unless the batch ran at one of `levels` (and graded `attack`): at the portable level a run is a
    plain process of the grader's user, which stops runaway code, not a hostile submission."""
    level = batch_level(batch)
    if level not in levels:
        pytest.skip(f"the {level} level does not stop this (it is checked at {', '.join(levels)})")
    if attack and attack not in batch["results"]:
        pytest.skip(f"{attack} is not in the {level} level's batch")


def attack_text(batch: dict, attack: str) -> str:
    """What the batch's results say about one attack (which must have its results.json)."""
    result = batch["results"][attack]
    assert result is not None, f"{attack} has no results.json"
    return outputs(result)


def forged_files(folder: Path) -> list[Path]:
    """Files under `folder` holding the score the attacks forge."""
    return [p for p in folder.rglob("*") if p.is_file() and b"999.0" in p.read_bytes()]


def processes_named(comm: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                pids.append(int(entry))
        except OSError:
            pass
    return pids


# Words in /proc/<pid>/cgroup of a process that runs in a container (Docker, containerd, Podman).
CONTAINERS = ("docker", "containerd", "libpod")


def sandbox_uid_processes() -> list[int]:
    """Processes of sandbox uids that no live grader holds: what a grading left behind.

    A grader holds its uid's slot lock for as long as it runs anything as that uid, so the
    processes of a uid whose lock we can take belong to no grading in progress (another
    test's, run alongside, keeps its lock). While we hold the lock no grader can take it.
    """
    import fcntl

    from autograder.isolation.slots import lock_path

    uids = block()
    by_uid: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        try:
            uid = os.stat(f"/proc/{entry}").st_uid if entry.isdigit() else -1
            # A grader in a container (the container lane, run alongside) uses the same uid block with its own
            # locks, PID namespace and files: its processes are that container's to judge (test_container.py).
            if uid in uids and any(word in Path(f"/proc/{entry}/cgroup").read_text() for word in CONTAINERS):
                continue
        except OSError:
            continue
        if uid in uids:
            by_uid.setdefault(uid, []).append(int(entry))
    stray = []
    for uid, pids in sorted(by_uid.items()):
        try:
            fd = os.open(lock_path(uid), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            stray += pids  # no lock file: no grader ever held it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grading in progress (another test's)
        try:
            stray += [p for p in pids if os.path.exists(f"/proc/{p}")]
        finally:
            os.close(fd)
    return stray


def _owner_dead(name: str, prefix: str) -> bool:
    """A name <prefix><pid>-... made by a process that is gone or a zombie (or a name without a pid).

    A zombie has ended: an orphaned grader re-parented to a long-lived subreaper (a test worker that
    graded in-process) may stay one until that process ends, and nothing of it may stay that long."""
    owner = name[len(prefix):].split("-")[0]
    if not owner.isdigit():
        return True
    try:
        stat = Path(f"/proc/{owner}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] in ("Z", "X")


def leftover_scratch(before: set[Path] = frozenset()) -> list[str]:
    """Batch scratch folders not in `before` whose batch has ended (a running batch's are its own)."""
    return sorted(str(p) for p in set(Path("/tmp").glob("autograder-scratch-*")) - set(before)
                  if _owner_dead(p.name, "autograder-scratch-"))


def files_named(top: str, part: str, seconds: float) -> list[str]:
    """Files under `top` whose name holds `part`, as far as a walk gets in `seconds`. The walk keeps its own
    stack (os.walk recurses, and another test's tree, deeper than the recursion limit, may be there) and,
    like os.walk, follows no link to a folder."""
    found, stack, deadline = [], [top], time.monotonic() + seconds
    while stack and time.monotonic() < deadline:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    if not is_dir:
                        found += [entry.path] if part in entry.name else []
                    elif not entry.is_symlink():
                        stack.append(entry.path)
        except OSError:
            continue
    return found


def _dead_groups() -> set[str]:
    return {str(p) for p in Path("/sys/fs/cgroup").glob("**/gradelib-*") if _owner_dead(p.name, "gradelib-")}


# Groups a grader killed before this test session began left (another job on a shared host, in a cgroup of its own
# that no grader of ours sweeps): not this suite's leftovers. Taken at collection, before any test grades.
_BEFORE_SESSION = _dead_groups()


def leftover_cgroups() -> list[str]:
    """Run cgroups whose grader has ended, made during this test session."""
    return sorted(_dead_groups() - _BEFORE_SESSION)


def descendants(pid: int) -> list[int]:
    """Live processes below `pid` (whatever uid; orphans of a sandboxed run come to the grader, a subreaper)."""
    parent = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split() if stat else []
        if fields and fields[0] != "Z":  # a zombie runs nothing
            parent[int(entry)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        found += kids
        frontier = kids
    return found
