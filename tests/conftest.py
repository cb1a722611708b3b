"""pytest fixtures shared by the tests (plain helpers live in support.py)."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import tempfile
from pathlib import Path

# One torch thread in each test worker (read when torch starts, so before anything imports it): the
# workers already share the cores, and two threads of one process that wait on each other crawl on a
# busy machine. Code that asks for threads itself (reference training) still gets them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# An optimiser's first step makes torch's compiler cache folder, /tmp/torchinductor_<user> (the tests that train): the
# suite's is made here under build/, which it owns (a run as another user finds it there), and nothing is left in /tmp.
INDUCTOR_CACHE = Path(__file__).resolve().parent.parent / "build" / "torchinductor"
INDUCTOR_CACHE.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))

import pytest  # noqa: E402

from autograder.tools import notebooks  # noqa: E402

from support import SOLUTIONS  # noqa: E402


@pytest.fixture(scope="session")
def otter_build(tmp_path_factory) -> tuple[dict[str, bytes], Path]:
    """One run of otter assign per test run, shared by the workers: (student files by handout path, staff output
    folder).

    Under pytest-xdist the first worker that asks builds into the run's common temporary folder
    while holding a lock; the others wait for it and read what it wrote (the tests only read it).
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    done = shared / "otter_build"
    with open(shared / "otter_build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done / "files.pickle").is_file():
            staff, private = done / "staff", done / "tmp"  # the build's temp folder: what it leaves there is listed
            staff.mkdir(parents=True, exist_ok=True)
            private.mkdir(exist_ok=True)
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("TMPDIR", str(private))
                patch.setattr(tempfile, "tempdir", None)
                files = notebooks.build(staff_out=staff)
            (done / "left_in_tmp.txt").write_text("".join(f"{p.name}\n" for p in sorted(private.iterdir())))
            (done / "files.pickle.tmp").write_bytes(pickle.dumps(files))
            (done / "files.pickle.tmp").rename(done / "files.pickle")
    return pickle.loads((done / "files.pickle").read_bytes()), done / "staff"


def shared_batch(tmp_path_factory, level: str = "", attacks: tuple[str, ...] | None = None) -> dict:
    """One run of an attack batch (attack_batch.py) per test run and level, shared by the workers.

    As for otter_build, the first worker that asks runs it while holding a lock and the others read what
    it saved; a failed run saves nothing, and the next test that asks runs it again in a folder of its own.
    """
    from attack_batch import run_batch

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    label = f"attack_batch{'-' + level if level else ''}"
    saved = shared / f"{label}.pickle"
    with open(shared / f"{label}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.is_file():
            result = run_batch(Path(tempfile.mkdtemp(prefix=f"{label}-", dir=shared)), level, attacks)
            saved.with_suffix(".tmp").write_bytes(pickle.dumps(result))
            saved.with_suffix(".tmp").rename(saved)
    return pickle.loads(saved.read_bytes())


@pytest.fixture(scope="session", params=["machine", "fallback", "portable"])
def attack_batch(request, tmp_path_factory) -> dict:
    """The attack batch at each level this machine can make or reproduce: its own (namespaces here, as root
    with bubblewrap), the fallback of a root container with Docker's default privileges (tests/isolation/container.py),
    and the portable level as a course grader asks for it (subsets: the attacks on the grader's comparisons
    work alike at every level, and the portable level promises limits, not isolation).
    Its results and what it left on the host, read by the test_attacks_*.py files."""
    from attack_batch import FALLBACK_ATTACKS, PORTABLE_ATTACKS

    if request.param == "fallback":
        from container import available

        why = available()
        if why:
            pytest.skip(f"Docker's default container cannot be reproduced here: {why}")
        return shared_batch(tmp_path_factory, "fallback", FALLBACK_ATTACKS)
    if request.param == "portable":
        return shared_batch(tmp_path_factory, "portable", PORTABLE_ATTACKS)
    return shared_batch(tmp_path_factory)


@pytest.fixture
def reference_attention() -> str:
    return (SOLUTIONS / "attention.py").read_text()


@pytest.fixture
def copy_solution(tmp_path: Path):
    def _copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copyfile(SOLUTIONS / name, dest)
        return dest

    return _copy


# The longest test files first: with one worker per file, a long file started last would finish the run alone.
# `make test` passes --no-loadscope-reorder, without which pytest-xdist hands out the files with the most tests
# first, whatever this order says. Each file's time is in build/test_times.jsonl after `make test` (the longest
# are on the manual's figures page).
# The attack batch runs once per level, shared by the workers (conftest's shared_batch): test_attacks_batch.py
# runs the machine's own level, then the portable one, while test_attacks_processes.py starts with its
# fallback-level tests (BATCH_FIRST): two workers share the three batches instead of one running them in a row;
# the other test_attacks_*.py files read them at their end.
LONGEST_FIRST = ("test_attacks_batch.py", "test_attacks_processes.py", "test_own_corpus.py", "test_container.py",
                 "test_class_grading.py", "test_attacks_hidden.py", "test_student_platforms.py", "test_faults.py",
                 "test_mutants.py", "test_notebooks_handout.py", "test_notebooks_robustness.py",
                 "test_lm_notebook_bugs.py", "test_attention_bugs.py", "test_notebook_checks.py", "test_handout.py",
                 "test_platforms.py", "test_class_tools.py", "test_attacks_autograd.py", "test_notebooks_bugs.py",
                 "test_attacks_template.py", "test_attention_student_patterns.py", "test_lm_model_grading.py",
                 "test_course_ops.py", "test_attacks_files.py", "test_same_verdict.py", "test_attacks_harness.py",
                 "test_safe_reading.py", "test_lm_notebook.py")
BATCH_FIRST = {"test_attacks_batch.py": ("machine", "portable"), "test_attacks_processes.py": ("fallback",)}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Back to one torch thread before each test: notebook 3's first cell asks for two, and a test
    that runs its code in this process would otherwise leave two for every later test of the worker."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def batch_order(item) -> int:
        """Within a file: first the tests of the levels of the attack batch that it runs (BATCH_FIRST, in that
        order), then those that read no batch, then those that read another level: by then another worker has
        run that level's batch, and none waits on its lock."""
        levels = BATCH_FIRST.get(item.path.name, ())
        if "attack_batch" not in getattr(item, "fixturenames", ()):
            return len(levels)
        level = item.callspec.params.get("attack_batch") if hasattr(item, "callspec") else None
        return levels.index(level) if level in levels else len(levels) + 1

    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), batch_order(item)))


# TEST_FILE_TIMES=path: each worker appends a JSON line per test file (its wall span, the CPU-seconds of this
# process and of the children it reaped, its tests by outcome), to see which files make the suite's critical path.
# `make test` writes build/test_times.jsonl; autograder/tools/measured.py sums it up for the figures page.
_file_span: dict = {}


def _cpu_s() -> float:
    import resource

    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def _close_file_span() -> None:
    import json
    import time

    if _file_span:
        cpu0 = _file_span.pop("cpu0")
        record = {**_file_span, "end": time.time(), "cpu_s": round(_cpu_s() - cpu0, 1),
                  "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "load": os.getloadavg()}
        with open(os.environ["TEST_FILE_TIMES"], "a") as fh:
            fh.write(json.dumps(record) + "\n")
        _file_span.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    import time

    if os.environ.get("TEST_FILE_TIMES") and _file_span.get("file") != item.path.name:
        _close_file_span()
        _file_span.update(file=item.path.name, start=time.time(), cpu0=_cpu_s())


def pytest_runtest_logreport(report) -> None:
    if os.environ.get("TEST_FILE_TIMES") and _file_span and (report.when == "call" or report.outcome != "passed"):
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        counts = _file_span.setdefault("outcomes", {})
        counts[outcome] = counts.get(outcome, 0) + 1


def _session_line(**record) -> None:
    """The run's own start and end (pytest's main process, not a worker): its wall clock includes collection."""
    import json
    import time

    if os.environ.get("TEST_FILE_TIMES") and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(os.environ["TEST_FILE_TIMES"], "a") as fh:
            fh.write(json.dumps({**record, "time": time.time(), "load": os.getloadavg()}) + "\n")


def pytest_sessionstart(session) -> None:
    _session_line(session="start")


def pytest_sessionfinish(session, exitstatus) -> None:
    if os.environ.get("TEST_FILE_TIMES"):
        _close_file_span()
    _session_line(session="end", exitstatus=int(exitstatus))
