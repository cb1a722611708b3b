"""Attacks on time, memory and the process table: a process that exits at import or spins for ever, memory
taken at once, bit by bit or spread over processes, daemons and setsid chains that try to outlive their
run, fork, thread and file counts, a worker killed at its deadline and a batch killed outright, and the
run's cgroup (gradelib/runner/limits, autograder/isolation/processes, cgroups, tmpfs).

What must hold: each is stopped at its cap or limit and reported for what it is, the grader finishes in
time, and nothing of the attack (process, scratch folder, cgroup, file in /tmp) outlives the grading.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from autograder import isolation as sandbox
from autograder.isolation import cgroups
from gradelib import rubric

from attack_batch import BATCH_TIMEOUT_S, CELL_MEMORY_MB
from attack_tools import (
    CLI,
    NOTEBOOK_1,
    POINTS,
    PYTHON,
    attack_source,
    attack_text,
    batch_level,
    descendants,
    files_named,
    forged_files,
    leftover_cgroups,
    leftover_scratch,
    needs_root,
    notebook_with_first_cell,
    only_at,
    outputs,
    processes_named,
    run_cli,
    sandbox_uid_processes,
)
from support import REPO, SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks

# ---------------------------------------------------------------- time


def test_exit_at_import_is_reported(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="exit_at_import")
    text = outputs(attack_batch["results"]["exit_at_import"])
    assert "no result for this case: the submission's process exited with code 0" in text


def test_infinite_loop_is_stopped_at_the_timeout(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="infinite_loop")
    from autograder.isolation.memory import LOAD_STRETCH

    text = outputs(attack_batch["results"]["infinite_loop"])
    assert f"was stopped after the {BATCH_TIMEOUT_S} s time limit" in text, text
    # The public run takes the limit, the hidden run what is left and at least half of it (CourseSide.run_sets); a
    # run's time is the wall clock less its waits for a CPU, so a loaded machine may stretch it, at most LOAD_STRETCH
    # times on the wall clock.
    assert attack_batch["results"]["infinite_loop"]["execution_time"] < LOAD_STRETCH * (1.5 * BATCH_TIMEOUT_S + 15)


# ---------------------------------------------------------------- memory


def test_huge_allocation_hits_the_memory_cap(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="huge_allocation")
    text = outputs(attack_batch["results"]["huge_allocation"])
    # Address space is capped far above the memory limit: the run maps the 8 GB, and the memory limit stops
    # it while it fills them (the cgroup, or the grader's sampling), or the address-space cap refuses it.
    assert "MB memory limit" in text or (
        "import raised" in text and ("MemoryError" in text or "Unable to allocate" in text)
    ), text


def test_memory_cap_applies_to_gradual_growth(tmp_path):
    start = time.monotonic()
    result = grade_files(tmp_path, {"attention.py": attack_source("memory_growth")}, only=["attention"], timeout_s=180,
                         memory_mb=1536)
    assert time.monotonic() - start < 120  # stopped by the memory cap, far below the time limit
    assert result.score == 0.0
    text = "\n".join(t.output for t in result.tests)
    assert "MB memory limit" in text or "MemoryError" in text, text


def _memory_cgroups() -> bool:
    if os.geteuid() != 0:
        return False
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    return "memory" in v2.read_text().split() if v2.exists() else Path("/sys/fs/cgroup/memory/cgroup.procs").exists()


@pytest.mark.skipif(not _memory_cgroups(), reason="the run's memory cgroup needs root and the memory controller")
def test_memory_spread_over_processes_is_capped_for_the_run_as_a_whole(tmp_path):
    """RLIMIT_AS caps each process alone; the run's memory cgroup caps them together (1200 MB here),
    so five processes of 300 MB each do not all live, and nothing of them is left."""
    before = set(descendants(os.getpid()))
    result = grade_files(tmp_path, {"attention.py": attack_source("memory_spread")}, only=["attention"], timeout_s=30,
                         memory_mb=1200)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert result.score == 0.0
    assert "5 of 5 processes held 300 MB" not in said, said
    assert ("of 5 processes held 300 MB" in said) or ("MB memory limit" in said), said
    assert set(descendants(os.getpid())) - before == set()


SHM_LEVELS = {"machine": ("", 0), "fallback": ("fallback", 0), "fallback, Docker's 64 MB /dev/shm": ("fallback", 64),
              "portable": ("portable", 0)}


@pytest.mark.parametrize("level", list(SHM_LEVELS))
def test_shared_memory_no_process_maps_is_counted_and_nothing_of_it_stays(tmp_path, level):
    """640 MB in a memfd file and as much in /dev/shm files no process maps, in a folder then closed (mode 000),
    and a POSIX message queue (ctypes; in notebook 1's first cell): in nobody's resident memory, this held 1.5 GB
    against a 512 MB limit for full marks at the fallback and portable levels, the closed folder and the queue outlived
    the grader, and in Docker's 64 MB /dev/shm the folder left made the class's similarity run fail. Now the run is
    stopped (memfd_create and mq_open are refused at the Linux levels; the rest counts toward its limit, its files
    in /dev/shm have a cap of their own) or its files do not fit, and nothing of it stays at the fallback. (A cell
    that raises costs nothing: the run's score is what it lost for being stopped.)"""
    where, shm_mb = SHM_LEVELS[level]
    if where == "fallback":
        from container import available

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
    marker = "zm" + uuid.uuid4().hex[:10]
    handins = tmp_path / "handins"
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    (handins / "hoard").mkdir(parents=True)
    in_a_cell(handins / "hoard", attack_source("shm_hoard", MARKER=marker, MB=640, HOLD=5))
    (handins / "reference").mkdir()
    (handins / "reference" / "attention.py").write_text(reference)
    (handins / "reference" / NOTEBOOK_1).write_text(SOLUTIONS.joinpath(NOTEBOOK_1).read_text())
    extra = ("--similarity", "--jobs", "2") if shm_mb else ("--jobs", "1")
    try:
        proc = run_cli(
            str(handins / "hoard"),
            str(handins / "reference"),
            "--out",
            str(tmp_path / "grades"),
            "--timeout",
            "30",
            "--memory-mb",
            "512",
            "--only",
            "losses",
            *extra,
            level=where,
            shm_mb=shm_mb,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        grades = tmp_path / "grades"
        hoard = json.loads((grades / "hoard" / "results.json").read_text())
        text = outputs(hoard)
        if shm_mb:  # it fills what it can, and no more stays: the class's run, which needs /dev/shm, ends well
            assert "similarity: not finished" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
        if where and not shm_mb:
            assert "over the 512 MB memory limit" in text, text
        else:  # the namespace's own /dev/shm (or Docker's) is small, and the memory cgroup counts it
            assert "No space left on device" in text or "memory limit" in text, text
        reference_score = json.loads((grades / "reference" / "results.json").read_text())["score"]
        assert reference_score == rubric.load()["losses"].points
        # A cell's error costs nothing; a run stopped for memory loses its cases: never more than the reference.
        assert hoard["score"] <= reference_score, text
        left = [name for name in os.listdir("/dev/shm") if marker in name]
        queue = _queue_exists(f"/{marker}-q")
        if where != "portable":  # the portable level removes nothing: it isolates nothing
            assert left == [] and not queue, (left, queue)
    finally:
        _remove_shm(marker)


def _queue_exists(name: str, unlink: bool = False) -> bool:
    import ctypes

    librt = ctypes.CDLL("librt.so.1", use_errno=True)
    fd = librt.mq_open(name.encode(), os.O_RDONLY, 0, None)
    if fd >= 0:
        librt.mq_close(fd)
        if unlink:
            librt.mq_unlink(name.encode())
    return fd >= 0


def _remove_shm(marker: str) -> None:
    """What the portable level leaves, removed by the test."""
    import shutil

    for name in os.listdir("/dev/shm"):
        if marker in name:
            path = Path("/dev/shm") / name
            if path.is_dir():
                os.chmod(path, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    _queue_exists(f"/{marker}-q", unlink=True)


# ---------------------------------------------------------------- processes that try to outlive their run


def test_late_daemon_is_killed_and_writes_nothing(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="late_daemon")
    out, marker = attack_batch["out"], attack_batch["marker"]
    assert "daemon started" in outputs(attack_batch["results"]["late_daemon"])
    assert attack_batch["alive_after"] == [] and attack_batch["alive_later"] == []
    assert not (out / "daemon-was-here.txt").exists()
    assert forged_files(out) == []
    assert not Path(f"/tmp/daemon-{marker}.txt").exists()


def test_setsid_chain_dies_with_the_run(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="setsid_chain")
    assert "setsid chain started" in attack_text(attack_batch, "setsid_chain")
    # Checked the moment the batch returned: no link of the chain is left burning CPU.
    assert attack_batch["alive_after"] == [] and attack_batch["alive_later"] == []
    assert attack_batch["left"]["uid_processes"] == []


@needs_root
def test_process_and_thread_counts_stop_at_the_cap(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="resource_counts")
    from autograder.isolation import Limits

    text = attack_text(attack_batch, "resource_counts")
    found = re.search(r"counts forks=(\d+) threads=(\d+) files=(\d+)", text)
    if found is None:  # attention's run may start no thread here, so its forks (torch and all) meet the memory cap
        assert f"over the {Limits().memory_mb} MB memory limit" in text and attack_batch["left"]["scratch"] == [], text
        return
    forks, threads, files = map(int, found.groups())
    cap = Limits().processes
    assert forks < cap and forks + threads < cap, text  # RLIMIT_NPROC counts processes and threads together
    assert "fork_stop=EAGAIN" in text, text  # the cap stopped the forks, not the attack's own clock
    # Files made (they went with its scratch), its clock ran out, or the guards refused them.
    assert files > 0 or "stop=time" in text or "stop=refused" in text, text
    if os.geteuid() == 0 and batch_level(attack_batch) == "namespaces":  # its tmpfs holds SCRATCH_FILES inodes
        # (not at the fallback: a root container with Docker's default capabilities may not mount one)
        from autograder.isolation.tmpfs import SCRATCH_FILES

        assert files < SCRATCH_FILES and ("stop=ENOSPC" in text or "stop=time" in text or "stop=refused" in text), text
    assert attack_batch["left"]["scratch"] == []


@pytest.mark.parametrize("level", ["", "fallback", "portable"])
def test_a_wide_tree_of_sessions_dies_with_the_run(tmp_path, level):
    """63 processes in a binary tree, each in a session of its own, deaf to SIGTERM and spinning after the run
    has ended (the first cell of notebook 1, where ctypes names them): none is left when the grader returns, at any
    level."""
    if level == "fallback":
        from container import available

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
    marker = "zt" + uuid.uuid4().hex[:10]
    folder = tmp_path / "tree"
    folder.mkdir()
    in_a_cell(folder, attack_source("fork_tree", MARKER=marker))
    # Room for the tree's 63 copies of the notebook's process where each one's resident set counts in full.
    proc = run_cli(str(folder), "--out", str(tmp_path / "grades"), "--timeout", "20", "--only", "losses",
                   "--memory-mb", str(CELL_MEMORY_MB), level=level)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert processes_named(marker) == []
    text = outputs(json.loads((tmp_path / "grades" / "tree" / "results.json").read_text()))
    assert "fork tree started" in text, text  # the attack ran
    time.sleep(3)  # past the moment the tree would start spinning
    assert processes_named(marker) == []


def in_a_cell(folder: Path, source: str) -> None:
    """A handin in `folder`: the reference attention.py, and notebook 1 with `source` as its first cell (a run without
    attention's guards, which refuse ctypes: what the cell does meets the kernel's layers alone)."""
    (folder / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text())
    (folder / NOTEBOOK_1).write_text(notebook_with_first_cell(source))


# ---------------------------------------------------------------- killed workers and batches


def test_worker_killed_at_its_deadline_leaves_nothing(tmp_path):
    marker = "zz" + uuid.uuid4().hex[:10]
    folder = tmp_path / "filler"
    folder.mkdir()
    in_a_cell(folder, attack_source("fill_and_hang", MARKER=marker))
    scratch_before = set(Path("/tmp").glob("autograder-scratch-*"))
    start = time.monotonic()
    # The submission's own limit (60 s) is past the batch's deadline for the whole worker (10 s).
    proc = run_cli(str(folder), "--out", str(tmp_path / "grades"), "--timeout", "60", "--submission-timeout", "10",
                   "--only", "losses", "--retries", "0", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < 60
    result = json.loads((tmp_path / "grades" / "filler" / "results.json").read_text())
    assert result["score"] is None and "ran past the 10 s limit" in result["output"], result["output"]
    assert sandbox_uid_processes() == []
    assert processes_named(marker) == []
    assert leftover_cgroups() == []
    assert leftover_scratch(scratch_before) == []
    assert files_named("/tmp", marker, seconds=20) == []


def _names_in(folders: list[Path]) -> list[str]:
    """What the folders hold; one another batch has swept (a graded test beside this one) holds nothing."""
    names = []
    for folder in folders:
        try:
            names += [p.name for p in folder.iterdir()]
        except FileNotFoundError:
            pass
    return names


def test_a_batch_killed_outright_is_cleaned_up_by_the_next(tmp_path):
    """SIGKILL skips a batch's cleanup: its worker (SIGTERM on its parent's death) removes its own scratch, the
    unpacked handin and the capped tmpfs; the batch's folder, empty but for its lock, stays until the next batch."""
    from autograder.isolation.processes import become_subreaper
    from autograder.isolation.tmpfs import mounts_under

    # This process as a long-lived subreaper above the batch (as a supervisor would be): the killed
    # batch's worker is re-parented here and stays a zombie, never reaped. The next batch must count it gone.
    become_subreaper()
    marker = "zk" + uuid.uuid4().hex[:10]
    folder = tmp_path / "filler"
    folder.mkdir()
    name = f'import ctypes\nctypes.CDLL(None).prctl(15, b"{marker}", 0, 0, 0)\n'
    in_a_cell(folder, name + attack_source("fill_and_hang", MARKER=marker))
    batch = subprocess.Popen([PYTHON, str(CLI), str(folder), "--out", str(tmp_path / "grades"), "--timeout", "60",
                              "--only", "losses"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    pattern = f"autograder-scratch-{batch.pid}-*"
    deadline = time.monotonic() + 60
    while not processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker), "the submission never started"
    time.sleep(1.0)  # it has filled its scratch by now
    os.kill(batch.pid, 9)
    batch.wait()
    stale = sorted(Path("/tmp").glob(pattern))
    assert stale, "a batch killed outright skips its own cleanup"
    deadline = time.monotonic() + 20  # the worker (SIGTERM on its parent's death) ends the sandbox
    while processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker) == []
    while time.monotonic() < deadline and set(_names_in(stale)) - {".batch.lock"}:
        time.sleep(0.2)
    assert set(_names_in(stale)) <= {".batch.lock"}, _names_in(stale)
    assert all(mounts_under(p) == [] for p in stale)
    honest = tmp_path / "honest"
    honest.mkdir()
    (honest / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text())
    proc = run_cli(str(honest), "--out", str(tmp_path / "grades2"), "--only", "attention")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "grades2" / "honest" / "results.json").read_text())["score"] == POINTS
    assert not any(p.exists() for p in stale) and all(mounts_under(p) == [] for p in stale)
    # The killed batch's worker ended its run on SIGTERM; its run cgroups went with it or with the next batch.
    assert leftover_cgroups() == []


# ---------------------------------------------------------------- cgroup v2


def test_on_a_cgroup_v2_host_a_run_gets_one_cpu_and_a_process_cap(tmp_path, monkeypatch):
    """Where /sys/fs/cgroup is v2 (this machine may be v1), a run's group is made at the (namespace's)
    root, with the kernel's v2 files: cpu.max "<quota> <period>" (one CPU) and pids.max (the run's
    processes, plus bubblewrap's two); killing it lifts the CPU cap first and kills what cgroup.procs lists."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", root)
    made = cgroups.make(sandbox.Limits(processes=40))
    assert len(made) == 1 and made[0].parent == root and made[0].name.startswith(f"gradelib-{os.getpid()}-")
    assert (made[0] / "cpu.max").read_text() == f"{cgroups.CPU_PERIOD_US} {cgroups.CPU_PERIOD_US}"
    assert (made[0] / "pids.max").read_text() == "42"
    assert (made[0] / "memory.max").read_text() == str(3072 << 20) and (made[0] / "memory.swap.max").read_text() == "0"
    assert cgroups.label(made) == "cgroups: v2"
    child = subprocess.Popen(["sleep", "60"])
    try:
        (made[0] / "cgroup.procs").write_text(f"{child.pid}\n")
        assert cgroups.kill(made, wait_s=0.3) == 1
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert (made[0] / "cpu.max").read_text() == "max"
    finally:
        child.kill()
        child.wait()
