"""The course grader where courses run it: a root container with Docker's default privileges (Gradescope's,
Autolab's), reproduced here (tests/container.py): no CAP_SYS_ADMIN, so no namespaces and no mounts, cgroups
read-only, an interpreter every user can read. There the fallback level grades: the reference handin gets
full marks through Gradescope's run_autograder, the blank handout nothing, the student's local grader full
public marks (as in a Colab tab, root without bubblewrap), and two graders on one host with lock folders of
their own never touch each other's runs. (What attacks gain there: test_attacks_*.py's fallback batch.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from container import available, docker_default

from autograder.build.demo import blank_handin, reference_handin
from gradelib import rubric

from support import REPO

pytestmark = pytest.mark.skipif(bool(available()), reason=f"Docker's default container cannot be reproduced here: {available()}")
COURSE_POINTS = sum(p.points for p in rubric.load().values())


def run_autograder(tmp_path: Path, handin: Path, env: dict | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """Gradescope's flow: /autograder/submission -> run_autograder -> /autograder/results/results.json."""
    root = tmp_path / "autograder"
    (root / "results").mkdir(parents=True)
    shutil.copytree(handin, root / "submission")
    (root / "source").symlink_to(REPO)
    script = REPO / "autograder" / "platforms" / "platform_files" / "run_autograder"
    extra = {"AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable, **(env or {})}
    with docker_default(["bash", str(script)], env=extra) as cmd:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    path = root / "results" / "results.json"
    assert path.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(path.read_text()), proc


def test_the_reference_scores_full_marks_and_the_blank_handout_zero_through_run_autograder(tmp_path):
    reference, proc = run_autograder(tmp_path / "ref", reference_handin(tmp_path / "reference"))
    assert reference["score"] == pytest.approx(COURSE_POINTS), [t["output"] for t in reference["tests"] if t["score"] < t["max_score"]]
    assert reference["extra_data"]["isolation"] == "fallback"
    blank, _ = run_autograder(tmp_path / "blank", blank_handin(tmp_path / "blank_handin"))
    assert blank["score"] == 0.0
    assert "Traceback" not in json.dumps(blank)


def _lock_folder_sharing_the_block(base: Path) -> Path:
    """A lock folder whose block of sandbox uids is the default folder's: the worst case for two graders."""
    from autograder.isolation import slots

    wanted = slots.block()
    for i in range(2000):  # each kept, so each is a new inode: a folder's block comes from its device and inode
        folder = base / "locks" / str(i)
        folder.mkdir(parents=True)
        if slots.first_uid_of(folder) == wanted.start:
            return folder
    raise AssertionError("no lock folder maps to the default block in 2000 tries")


def test_two_graders_with_their_own_lock_folders_grade_at_once_untouched(tmp_path):
    """A grader in a container beside one on the host: neither sees the other's slot locks, their uid blocks
    are the same here (the worst case), and each kills and sweeps only what it started."""
    handin = reference_handin(tmp_path / "reference")
    other = _lock_folder_sharing_the_block(tmp_path)
    cli = [sys.executable, str(REPO / "autograder" / "autograder.py"), str(handin)]
    host = subprocess.Popen([*cli, "--out", str(tmp_path / "host")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with docker_default([*cli, "--out", str(tmp_path / "container")], env={"GRADELIB_SLOT_DIR": str(other)}) as cmd:
        contained = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    host_out, host_err = host.communicate(timeout=900)
    for out, proc_out, err in (("host", host_out, host_err), ("container", contained.stdout, contained.stderr)):
        results = json.loads((tmp_path / out / "reference" / "results.json").read_text())
        assert results["score"] == pytest.approx(COURSE_POINTS), (out, [t["output"] for t in results["tests"]
                                                                        if t["score"] < t["max_score"]], err[-2000:])


def test_the_student_side_grades_in_a_root_container_without_bubblewrap(tmp_path):
    """A Colab tab or a course's own container: root, no namespaces. The local grader picks the fallback there
    and gives the solved handout full public marks."""
    from test_student_platforms import full_public_marks, solved_handout

    folder = solved_handout(Path(tempfile.mkdtemp(dir=tmp_path)) / "handout")
    os.chmod(folder.parent, 0o755)
    with docker_default([sys.executable, "autograder.py"]) as cmd:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=folder)
    full_public_marks(proc)
    assert "Sandbox: fallback" in proc.stdout, proc.stdout[-2000:]
