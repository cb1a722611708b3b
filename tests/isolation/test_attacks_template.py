"""Attacks on the per-submission template process (autograder/isolation/template.py): runs of one submission
are forked from one template, so a run may kill or stop the template, leave a daemon behind for the next
run, or leave files in /dev/shm and System V segments for it.

What must hold: what one run does to the template, or leaves behind, costs that run only: the next
problem of the same submission is graded in full, by a fresh template where needed, sees nothing of the
earlier run, and nothing outlives the grading.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from autograder.isolation import Limits as sandbox_limits
from gradelib import rubric

from attack_tools import (
    NOTEBOOK_1,
    NOTEBOOK_2,
    attack_source,
    descendants,
    needs_namespaces,
    notebook_with_first_cell,
    processes_named,
)
from support import SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks

# Each prepended to the reference attention.py, and heartbeat_cell.py, the first cell of notebook 1, runs next; but
# the daemon (ctypes names it, which attention's guards refuse): the first cell of notebook 1, then that of notebook 2.
TEMPLATE_ATTACKS = ("daemon_into_next_run", "kill_template", "stop_template")


@pytest.mark.parametrize("attack", sorted(TEMPLATE_ATTACKS))
def test_a_run_that_attacks_the_template_costs_only_itself(tmp_path, attack):
    marker = "zt" + uuid.uuid4().hex[:10]
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    heartbeat = attack_source("heartbeat_cell", MARKER=marker)
    if attack == "daemon_into_next_run":
        first, then = ["losses", "masks"], rubric.load()["masks"]
        files = {"attention.py": reference,
                 NOTEBOOK_1: notebook_with_first_cell(attack_source(attack, MARKER=marker)),
                 NOTEBOOK_2: notebook_with_first_cell(heartbeat, NOTEBOOK_2)}
    else:
        first, then = ["attention", "losses"], rubric.load()["losses"]
        files = {"attention.py": attack_source(attack, MARKER=marker) + reference,
                 NOTEBOOK_1: notebook_with_first_cell(heartbeat)}
    (tmp_path / "attack").mkdir()
    (tmp_path / "honest").mkdir()
    before = set(descendants(os.getpid()))  # what other tests left running is not this test's
    start = time.monotonic()
    attacked = grade_files(tmp_path / "attack", files, only=first, timeout_s=30)
    wall = time.monotonic() - start
    # The next problem of the same submission is graded in full (a fresh template where the old one went) ...
    assert attacked.score >= then.points, (attack, [(t.name, t.score, t.output[:200]) for t in attacked.tests])
    # ... with no heartbeat from the first run's daemon: it died with that run.
    said = "\n".join([*attacked.notes, *(t.output for t in attacked.tests)])
    assert "heartbeat alive" not in said, said
    if attack == "daemon_into_next_run" and attacked.isolation != "namespaces":
        assert "heartbeat stopped" in said, said  # the daemon ran, and was gone before the next run began
    elif attack == "daemon_into_next_run":  # its heartbeat file went with the submission's emptied /dev/shm too
        assert "heartbeat" not in said, said
    Path(f"/dev/shm/hb-{marker}").unlink(missing_ok=True)  # the host's /dev/shm at the fallback level
    assert wall < 60, wall
    # Nothing of the attack outlives the grading, and an honest handin graded next is untouched.
    assert processes_named(marker) == [] and set(descendants(os.getpid())) - before == set()
    honest = grade_files(tmp_path / "honest", {"attention.py": SOLUTIONS.joinpath("attention.py").read_text()},
                         only=["attention"], timeout_s=30)
    assert honest.score == rubric.load()["attention"].points
    assert processes_named(marker) == []


@needs_namespaces
def test_shared_memory_one_run_leaves_is_gone_before_the_next_run_of_the_submission(tmp_path):
    """At the namespaces level a submission's runs share its sandbox's /dev/shm and IPC namespace: the
    template empties both after each run, so what one problem's run leaves (notebook 1's first cell: a file and,
    through ctypes, a System V segment) never reaches the next (notebook 2's)."""
    marker = "zs" + uuid.uuid4().hex[:10]
    files = {"attention.py": SOLUTIONS.joinpath("attention.py").read_text(),
             NOTEBOOK_1: notebook_with_first_cell(attack_source("shm_left", MARKER=marker)),
             NOTEBOOK_2: notebook_with_first_cell(attack_source("shm_seen_cell", MARKER=marker), NOTEBOOK_2)}
    result = grade_files(tmp_path, files, only=["losses", "masks"], timeout_s=30)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "shared memory seen: files=[] segments=0" in said, said
    assert "shm_left: written" in said, said  # the first cell ran (its own segment was made: shmid >= 0)
    assert result.score == rubric.load()["losses"].points + rubric.load()["masks"].points, said


def test_every_public_run_of_a_submission_comes_before_its_hidden_runs_all_from_one_template(tmp_path, monkeypatch):
    """The reference graded in full: the five public runs (attention, notebooks 1 and 2, notebook 3's functions for
    prediction and for generation) come before the six hidden ones (those five and the model's run on the hidden
    rows), all forked from one template (the problems' threads outlive its start), and it keeps 120 of 120."""
    import json

    from autograder.batch.worker import grade_hidden
    from autograder.isolation import runner, template
    from autograder.tools.demo import reference_handin

    from support import FIXTURES

    hidden = {c["name"] for p in FIXTURES.glob("*/hidden/cases.json") for c in json.loads(p.read_text())}
    seen, starts = [], []
    run, start = runner.run, template.Session._start

    def spied_run(argv, workdir, limits, env_extra=None):
        cases = {p.stem for p in Path(workdir, "inputs").glob("*.npz")}
        seen.append("hidden" if argv[0] == "model_reveal_child.py" or cases & hidden else "public")
        return run(argv, workdir, limits, env_extra)

    monkeypatch.setattr(runner, "run", spied_run)
    monkeypatch.setattr(template.Session, "_start", lambda self: starts.append(self) or start(self))
    result = grade_hidden(reference_handin(tmp_path / "reference"), case_root=FIXTURES,
                          limits=sandbox_limits(timeout_s=60))
    assert result.score == 120.0, [(t.name, t.output[:300]) for t in result.tests if t.score < t.max_score]
    assert seen == ["public"] * 5 + ["hidden"] * 6, seen
    assert len(starts) == 1, starts


# Two runs in one session, at a level: what each says of how it ran (its isolation lines, its output).
SESSION_RUNS = r"""
import json, os, shutil, sys, tempfile
from pathlib import Path
sys.path.insert(0, {repo!r})
from autograder import isolation as sandbox
root = Path(tempfile.mkdtemp(prefix="session-"))
os.chmod(root, 0o711)
limits = sandbox.Limits(timeout_s=60, min_isolation="portable")
said = []
with sandbox.session(root, limits):
    for i in range(2):
        work = root / f"run{{i}}"
        work.mkdir()
        (work / "harness.py").write_text("import os, torch\nprint('pid', os.getpid(), 'uid', os.getuid())\n")
        done = sandbox.run(["harness.py"], work, limits)
        said.append({{"isolation": done.isolation, "returncode": done.returncode, "log": done.log_tail}})
shutil.rmtree(root)
print("RUNS" + json.dumps({{"level": sandbox.isolation_level(), "runs": said}}))
"""


@pytest.mark.parametrize("level", ["machine", "fallback", "portable"])
def test_the_runs_of_a_session_are_forked_from_its_template(level):
    """A template that cannot start costs only speed (each run then starts a fresh interpreter), so nothing
    else would notice it failing: each Linux level must start it, and fork both runs from it."""
    import json
    import subprocess
    import sys

    from support import REPO

    cmd = [sys.executable, "-c", SESSION_RUNS.format(repo=str(REPO))]
    env = {**os.environ}
    if level == "portable":
        env["GRADELIB_SANDBOX"] = "portable"
    if level == "fallback":
        from container import available, docker_default

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
        with docker_default(cmd) as wrapped:
            proc = subprocess.run(wrapped, capture_output=True, text=True, timeout=300)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RUNS")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = json.loads(line[4:])
    assert level == "machine" or found["level"] == level, found["level"]
    for run in found["runs"]:
        assert run["returncode"] == 0 and "pid" in run["log"], run
        assert "template process (forked per run)" in run["isolation"], run
