"""The course grader off Linux (macOS, Windows): no template, so its runs go to the kit's warm process
(gradelib/runner/portable.py), where attention runs twice in one process (public, then hidden). Simulated here on
any system: the level is the portable one and the system is not Linux (autograder/isolation/install.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.isolation import install, levels, runner
from autograder.isolation.interpreter import Limits
from gradelib import runner as kit

pytestmark = pytest.mark.pythons

REPO = Path(__file__).resolve().parents[2]
# Generous: a busy machine stretches a run's wall time.
LIMITS = Limits(timeout_s=120.0, memory_mb=400, output_mb=1, min_isolation="portable")


@pytest.fixture
def off_linux(monkeypatch):
    """The course's runner installed, as on macOS at the portable level."""
    monkeypatch.setattr(install, "is_linux", lambda: False)
    monkeypatch.setattr(runner, "is_linux", lambda: False)
    monkeypatch.setattr(levels, "_level", ("portable", "simulated"))
    with install.installed():
        yield


def test_a_harness_with_tripwires_in_torch_runs_where_no_run_has_been(tmp_path, off_linux):
    """attention_child.py sets tripwires inside torch, which a warm process keeps: a run before it (a notebook,
    the public run of the same file) could take them off for it, or set its own to fire in it. So it runs in a
    process that has run nothing before."""
    marks = "import sys\nprint('mark', getattr(sys, '_left_here', None))\nsys._left_here = {name!r}\n"
    seen = {}
    with kit.session(tmp_path, LIMITS, ()) as warm:
        assert warm is not None and warm is install.ISOLATING.warm[-1]  # the kit's warm process, not a template
        for i, name in enumerate(["plain.py", "attention_child.py", "attention_child.py", "plain.py", "plain.py"]):
            work = tmp_path / f"run{i}"
            work.mkdir()
            (work / name).write_text(marks.format(name=name))
            seen[i] = kit.run([name], work, LIMITS).log_tail.strip()
    assert seen == {0: "mark None", 1: "mark None", 2: "mark None", 3: "mark attention_child.py",
                    4: "mark plain.py"}, seen


def test_the_reference_attention_keeps_every_point_graded_public_then_hidden_in_one_session(tmp_path, off_linux):
    """The course grader's portable level grades attention twice in one warm session (public, then hidden):
    the second run's tripwires must not be taken for the reference's own use of autograd."""
    from autograder.batch.worker import grade_hidden
    from gradelib import rubric

    (tmp_path / "handin").mkdir()
    (tmp_path / "handin" / "attention.py").write_bytes((REPO / "solutions" / "attention.py").read_bytes())
    result = grade_hidden(tmp_path / "handin", case_root=REPO / "fixtures", only=["attention"], limits=LIMITS)
    full = rubric.load()["attention"].points
    assert result.isolation == "portable"
    assert result.flags == {} and sum(t.score for t in result.tests) == full, (
        result.flags, [t.output[:300] for t in result.tests if not t.passed])
