"""The student kit's runner (gradelib/runner/): each run keeps its limits inside the grading's warm process,
a run that passes one costs only itself, and each run imports its own modules afresh. No root, nothing
Linux-only: the same runs pass on macOS and Windows (test_student_platforms.py grades there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradelib import runner
from gradelib.runner.limits import Limits

REPO = Path(__file__).resolve().parents[1]

# Generous: a busy machine stretches a run's wall time; only loop.py is meant to time out (with its own 5 s).
LIMITS = Limits(timeout_s=120.0, memory_mb=400, output_mb=1)
HARNESSES = {
    "helper_says.py": "import os, sys\nsys.path.insert(0, os.getcwd())\nimport helper\nprint('helper', helper.SAYS)\n",
    "loop.py": "while True:\n    pass\n",
    "flood.py": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "exit3.py": "import os\nos._exit(3)\n",
    "grow.py": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n",
    "event.py": "import sys\nsys.audit('gradelib.autograd', 'backward')\nraise SystemExit(4)\n",
}


def folder(root: Path, name: str, says: str = "") -> Path:
    work = root / f"run-{name}-{says}"
    work.mkdir()
    (work / name).write_text(HARNESSES[name])
    if says:
        (work / "helper.py").write_text(f"SAYS = {says!r}\n")
    return work


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, runner.ChildRun]:
    """One warm session, every harness in turn, each followed by a plain run that must still work."""
    root = tmp_path_factory.mktemp("kit")
    out = {}
    with runner.session(root, LIMITS, ()) as warm:
        assert warm is not None
        for name, says in [("helper_says.py", "first"), ("helper_says.py", "second"), ("loop.py", ""),
                           ("helper_says.py", "after loop"), ("flood.py", ""), ("exit3.py", ""), ("grow.py", ""),
                           ("event.py", ""), ("helper_says.py", "last")]:
            work = folder(root, name, says)
            limits = Limits(**{**LIMITS.__dict__, "timeout_s": 5.0}) if name == "loop.py" else LIMITS
            out[f"{name}:{says}"] = runner.run([name], work, limits)
    return out


def test_each_run_imports_its_own_modules(runs):
    assert "helper first" in runs["helper_says.py:first"].log_tail
    assert "helper second" in runs["helper_says.py:second"].log_tail, runs["helper_says.py:second"]
    assert runs["helper_says.py:last"].returncode == 0 and "helper last" in runs["helper_says.py:last"].log_tail


def test_a_run_past_its_time_is_stopped_and_the_next_one_runs(runs):
    assert runs["loop.py:"].timed_out and runs["loop.py:"].returncode is None
    assert "helper after loop" in runs["helper_says.py:after loop"].log_tail


def test_output_exit_code_memory_and_events_are_the_runs_own(runs):
    assert runs["flood.py:"].output_capped_mb == LIMITS.output_mb
    assert runs["exit3.py:"].returncode == 3
    assert runs["grow.py:"].memory_limit_mb == LIMITS.memory_mb, runs["grow.py:"]
    assert runs["event.py:"].returncode == 4 and runs["event.py:"].event_args("autograd") == ["backward"]

