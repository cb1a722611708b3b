"""Faults are never a grade: a run the grader loses, a full disk, a kill while the class files are written.

Each fault is made from the grader's side, as the machine or an operator would make it: the deepest sandboxed
process of a stage (found among the batch's own descendants by the run folder it works in, `grade-<stage>-`)
killed with SIGKILL mid-run; the output folder on a tmpfs filled mid-run; the batch killed between writing a
class file and renaming it. Each ends, after the rerun, in the results a clean run gives: for the reference handin,
every line at full marks (what the clean run of the reference gives, tests/test_platforms.py and make demo).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autograder.batch.records import source_key
from autograder.isolation import kernel
from autograder.isolation.memory import MemoryWatch, cgroup_oom
from autograder.isolation.pipes import IsolatedRun
from autograder.isolation.runner import fault_of
from autograder.tools.demo import reference_handin
from gradelib.handin_contract import PREDICTION_STEPS

from support import REPO, SOLUTIONS

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "autograder"]
TIMEOUT = "120"  # seconds per problem run (the model run gets twice that): no honest run meets it on a busy machine


def _descendants(root: int) -> set[int]:
    return kernel.descendants({root}) - {root}


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


class Killer(threading.Thread):
    """SIGKILLs, below the process `root`, the deepest process working in a run folder of each stage in `stages`
    (stage -> how many of its runs to kill), `after_s` after it first sees it and once its run folder holds the
    file `ready[stage]` names, if any; `killed` lists (stage, pid)."""

    def __init__(self, root: int, stages: dict[str, int], after_s: float = 0.1, ready: dict[str, str] | None = None):
        super().__init__(daemon=True)
        self.root, self.left, self.after_s, self.ready = root, dict(stages), after_s, ready or {}
        self.killed: list[tuple[str, int]] = []
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and any(self.left.values()):
            below = _descendants(self.root)
            for stage, left in self.left.items():
                if not left:
                    continue
                mine = {p for p in below if f"/grade-{stage}-" in _cwd(p)}
                deepest = {p for p in mine if not (kernel.children_of(p) & mine)}
                for pid in sorted(deepest):
                    first = self.seen.setdefault(pid, time.monotonic())
                    due = stage not in self.ready or os.path.exists(f"/proc/{pid}/cwd/{self.ready[stage]}")
                    if time.monotonic() - first >= self.after_s and self.left[stage] and due:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            continue
                        self.killed.append((stage, pid))
                        self.left[stage] -= 1
            time.sleep(0.05)


def _grade(args: list[str], stages: dict[str, int] | None = None, env: dict | None = None,
           ready: dict[str, str] | None = None):
    """Run the CLI; with `stages`, a Killer below it. (returncode, stdout, stderr, what was killed)."""
    proc = subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or dict(os.environ), start_new_session=True)
    killer = Killer(proc.pid, stages or {}, ready=ready)
    killer.start()
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        killer.done.set()
        killer.join()
    return proc.returncode, out, err, killer.killed


def _results(out: Path, name: str) -> dict:
    return json.loads((out / name / "results.json").read_text())


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as fh:
        return {r["submission"]: r for r in csv.DictReader(fh)}


def _full_marks(data: dict) -> list[str]:
    """The lines of a results.json that are not at full marks (none for a clean grading of the reference)."""
    return [f"{t['name']}: {t['score']} / {t['max_score']}" for t in data["tests"]
            if t["score"] != t["max_score"] or t.get("status") != "passed"]


SLOW_START = "import time\n\ntime.sleep(2)  # the run lives long enough for the killer to find it, at any load\n"


def slow_attention(dest: Path) -> None:
    """The reference attention.py, after a 2 s sleep at import: still full marks, and each of its runs lasts at
    least 2 s, so the Killer (polling every 50 ms) finds it however fast the machine grades."""
    (dest / "attention.py").write_text(SLOW_START + (SOLUTIONS / "attention.py").read_text())


def slow_notebook(path: Path) -> None:
    """The same for a notebook: a first code cell that sleeps 2 s (notebook 1's run is as short as attention's)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(SLOW_START))
    nbformat.write(nb, path)


@pytest.fixture
def private_tmp():
    """A TMPDIR of the test's own, so the scratch a run leaves is seen (and removed) here."""
    folder = Path(tempfile.mkdtemp(prefix="faults-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- what the grader saw, in words


def test_only_a_kill_no_limit_explains_is_a_fault():
    def run(returncode, **kw) -> IsolatedRun:
        return IsolatedRun(returncode, kw.pop("timed_out", False), 3.0, "", **kw)

    assert "none of the grader's limits" in fault_of(run(-signal.SIGKILL))
    # Its own limits: the timer (no return code), output or audit floods, the memory watch, the kernel's SIGXCPU.
    assert fault_of(run(None, timed_out=True)) == ""
    assert fault_of(run(-signal.SIGKILL, output_capped_mb=32)) == ""
    assert fault_of(run(-signal.SIGKILL, events_capped_mb=1)) == ""
    assert fault_of(run(-signal.SIGKILL, memory_limit_mb=3072, memory_used_mb=3100)) == ""
    assert fault_of(run(-signal.SIGXCPU)) == ""
    # Its own code: an exception, a crash.
    assert fault_of(run(1)) == "" and fault_of(run(-signal.SIGSEGV)) == ""
    # What the grader recorded itself (the machine's OOM killer, a template gone) is a fault however the run ended.
    assert fault_of(run(0, fault="the template process it was forked from ended")) != ""
    # ...unless the run's own code sent itself or its template SIGKILL (boot.py's guard records it: it costs the run).
    chose = {"selfkill": ["os.kill"]}
    assert fault_of(run(-signal.SIGKILL, event_index=chose)) == ""
    assert fault_of(run(None, event_index=chose, fault="the template process it was forked from ended")) == ""


def test_the_guard_records_a_sigkill_a_run_sends_itself_or_its_parent_and_no_other():
    from autograder.isolation.boot import _ends_itself

    me, parent = os.getpid(), os.getppid()
    for event, args in (("os.kill", (me, signal.SIGKILL)), ("os.kill", (parent, 9)), ("os.kill", (0, 9)),
                        ("os.kill", (-1, 9)), ("os.kill", (-os.getpgrp(), 9)), ("os.killpg", (0, 9)),
                        ("os.killpg", (parent, 9)), ("os.killpg", (os.getpgrp(), signal.SIGKILL))):
        assert _ends_itself(event, args), (event, args)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        for event, args in (("os.kill", (child.pid, 9)), ("os.killpg", (child.pid, 9)), ("os.kill", (me, 15)),
                            ("os.kill", (parent, signal.SIGTERM)), ("os.kill", ("x",)), ("os.kill", ())):
            assert not _ends_itself(event, args), (event, args)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(("files", "kills", "own"), [
    ({"memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n"}, 1, True),  # v2: the group's own limit
    ({"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\n"}, 1, False),  # v2: the machine's OOM killer
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "memory.failcnt": "12\n"}, 1, True),
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "memory.failcnt": "0\n"}, 2, False),
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", "memory.failcnt": "0\n"}, 0, False),
])
def test_the_group_counters_tell_its_own_limit_from_the_machines_oom_killer(tmp_path, files, kills, own):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "memory.max").write_text("1073741824\n")
    assert cgroup_oom(tmp_path) == (kills, own)
    watch = MemoryWatch(1024, [tmp_path], lambda: set())
    done = watch.finish()
    assert bool(done["memory_limit_mb"]) == (kills > 0 and own)  # a stop for its limit: the submission's
    assert bool(done["fault"]) == (kills > 0 and not own)  # the machine's: no grade, a retry


def test_a_problem_graded_again_loses_its_not_graded_mark_and_keeps_the_others(tmp_path):
    """The retry and the next run merge one problem's new grade into results where others stay as they were: the
    problem graded now is graded, one still lost stays not graded, and the score appears once none is lost."""
    from autograder.batch import regrade
    from autograder.batch.records import read_row
    from autograder.grading import rubric_check
    from autograder.grading.course_result import CourseResult, CourseTest

    from support import FIXTURES

    problems = rubric_check.load()
    order = list(problems)

    def graded(ok: list[str], lost: list[str]) -> CourseResult:
        r = CourseResult(submission="s", problems=tuple(p for p in order if p in ok + lost))
        for pid in r.problems:
            r.tests.append(CourseTest(pid, f"{pid}: all", problems[pid].points if pid in ok else 0.0,
                                      problems[pid].points, "public", "x"))
            r.max_points[pid] = problems[pid].points
            r.problem_flags[pid] = []
        for pid in lost:
            r.mark_not_graded(pid, f"the run of {pid} was lost")
        return r

    out = tmp_path / "s"
    for step, (ok, lost, merge, left) in enumerate([
        ([], ["attention", "losses", "prediction"], False, ["attention", "losses", "prediction"]),
        (["attention"], ["losses", "prediction"], True, ["losses", "prediction"]),
        (["losses"], [], True, ["prediction"]),
        (["prediction"], [], True, []),
    ]):
        regrade.write_merged(graded(ok, lost), out, regrade.current_records(problems, ok + lost, FIXTURES), order,
                             merge)
        data = json.loads((out / "results.json").read_text())
        assert sorted(read_row(out / "results.json", "s").not_graded) == left, (step, data["extra_data"])
        assert (data["score"] is None) == bool(left)
    assert data["score"] == sum(problems[p].points for p in ("attention", "losses", "prediction"))


# ---------------------------------------------------------------- a run killed from outside, at every stage


def test_runs_killed_from_outside_at_every_stage_are_graded_again_to_the_clean_grade(tmp_path, private_tmp):
    """attention's run, notebook 1's, the model's (midway through the hidden steps: each waits for the grader's
    reveal, so the run is still there whatever the load) and notebook 3's functions' each SIGKILLed once: each
    problem they cost is not graded, the worker is started again on it, and the grade is the clean one.
    (generation's lines are left out for time: they read the same model run prediction does.)"""
    handin = reference_handin(tmp_path / "reference")
    slow_attention(handin)
    slow_notebook(handin / "01_mlm_and_next_token.ipynb")
    out = tmp_path / "grades"
    midway = f"outputs/test/step_{PREDICTION_STEPS // 2}.npy"  # model_reveal_child.py answers one step per reveal
    rc, stdout, stderr, killed = _grade(
        [str(handin), "--out", str(out), "--timeout", TIMEOUT, "--only", "attention", "losses", "prediction"],
        {"attention": 1, "losses": 1, "model": 1, "prediction": 1}, {**os.environ, "TMPDIR": str(private_tmp)},
        ready={"model": midway})
    assert rc == 0, stderr[-3000:]
    assert sorted(s for s, _ in killed) == ["attention", "losses", "model", "prediction"], killed
    data = _results(out, "reference")
    assert _full_marks(data) == [] and data["score"] == 30 + 20 + 24, _full_marks(data)
    assert "flags" not in data["extra_data"], data["extra_data"]
    assert stdout.strip().splitlines()[-1] == '{"scores":{"attention":30.0,"losses":20.0,"prediction":24.0}}'
    log = (out / ".logs" / "reference.log").read_text()
    # Attempt 1 loses attention, losses and prediction (its model run); attempt 2, prediction again (notebook 3's
    # functions run only once the model's did); attempt 3 is clean.
    assert log.count("--- attempt") == 3 and log.count("none of the grader's limits sent") >= 4, log[-3000:]
    # Nothing of the runs is left: no scratch.
    assert list(private_tmp.iterdir()) == []


def test_a_run_lost_on_every_attempt_is_not_graded_and_the_next_run_gives_its_first_grade(tmp_path, private_tmp):
    """With no retry left, the lost problem is `not graded`: no score in results.json, grades.csv, scores.csv or
    Autolab's line, first on report.html's list; the same command then grades it, and the regrade log records its
    first grade as one (not a change from 0)."""
    subs = tmp_path / "subs"
    for name in ("lost", "kept"):
        (subs / name).mkdir(parents=True)
        slow_attention(subs / name)
    out = tmp_path / "grades"
    args = [str(subs / "lost"), str(subs / "kept"), "--out", str(out), "--only", "attention",
            "--timeout", TIMEOUT, "--jobs", "1"]
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    # The killer takes the first attention run it sees: `lost`'s, graded first (--jobs 1, in order)...
    rc, stdout, stderr, killed = _grade([*args, "--retries", "0"], {"attention": 1}, env)
    assert rc == 0 and len(killed) == 1, stderr[-3000:]
    lost = _results(out, "lost")
    assert lost["score"] is None and all(t["score"] is None and "status" not in t for t in lost["tests"]), lost
    assert "not graded: attention" in lost["extra_data"]["flags"], lost["extra_data"]
    assert "none of the grader's limits sent" in lost["extra_data"]["flags"]["not graded: attention"]
    assert "attention not graded" in (out / "lost" / "feedback.txt").read_text()
    assert "1 could not be graded" in stdout, stdout
    rows = _rows(out)
    assert (rows["lost"]["attention"], rows["lost"]["final"]) == ("not graded", "not graded")
    assert rows["kept"]["attention"] == "30.00"
    with open(out / "scores.csv", newline="") as fh:
        assert {r["id"]: r["score"] for r in csv.DictReader(fh)} == {"lost": "", "kept": "30.00"}
    html = (out / "report.html").read_text()
    listed = html[html.index('<table id="failed"'):]
    assert "lost" in listed[: listed.index("</table>")] and "not graded: attention" in listed
    assert html.index('id="failed"') < html.index('id="score-histogram"') < html.index('id="pass-rates"')
    # ...and the same command, run again, grades exactly what was lost.
    rc, stdout, stderr, _ = _grade(args, None, env)
    assert rc == 0 and "regrading 1 of 2: not graded yet (attention)" in stdout, stdout + stderr[-2000:]
    assert _full_marks(_results(out, "lost")) == [] and _results(out, "lost")["score"] == 30
    with open(out / "regrades.csv", newline="") as fh:
        log = list(csv.DictReader(fh))
    assert [(r["submission"], r["problem"], r["old_score"], r["new_score"]) for r in log] == [
        ("lost", "attention", "not graded", "30")], log
    assert log[0]["reason"].startswith("first grade") and "score(s) changed" not in stdout
    assert list(private_tmp.iterdir()) == []


# ---------------------------------------------------------------- a full disk


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_disk_that_fills_mid_run_stops_the_run_cleanly_and_the_rerun_finishes_it(tmp_path, private_tmp):
    subs = tmp_path / "subs"
    names = ["s1", "s2", "s3", "s4"]
    for name in names:
        (subs / name).mkdir(parents=True)
        shutil.copyfile(SOLUTIONS / "attention.py", subs / name / "attention.py")
    out = tmp_path / "grades"
    out.mkdir()
    assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(out)]).returncode == 0
    try:
        args = [*map(str, (subs / n for n in names)), "--out", str(out), "--only", "attention", "--timeout", TIMEOUT]
        env = {**os.environ, "TMPDIR": str(private_tmp)}
        proc = subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True)
        deadline = time.monotonic() + 300
        while not (out / "s1" / "results.json").is_file() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        filler = out / "filler"
        with open(filler, "wb", buffering=0) as fh:  # the disk fills: whatever space is left, taken
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr and "Grading stopped: the grader could not write its own files" in stderr
        said = stderr[stderr.index("Grading stopped"):]
        assert "No space left on device" in said and f"submissions, in {out}, each whole" in said, said
        assert " on the disk of " in said and "run the same command again" in said, said
        assert f"python -m autograder {' '.join(args)}" in said, said
        graded = sorted(p.parent.name for p in out.glob("*/results.json"))
        assert "s1" in graded and len(graded) < len(names), graded
        assert f"Saved: the results of {len(graded)} of {len(names)} submissions" in said, said
        for name in graded:  # whole, and graded once: a worker that could not write was not retried
            assert _full_marks(_results(out, name)) == []
        for name in names:
            log = out / ".logs" / f"{name}.log"
            assert not log.is_file() or log.read_text().count("--- attempt") <= 1, log.read_text()
        assert not [p for p in out.rglob("*.tmp")], "a half-written file was left"
        first = (out / "s1" / "results.json").read_bytes()
        filler.unlink()  # space again: the same command finishes the class
        rc = subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
        assert rc.returncode == 0, rc.stderr[-3000:]
        assert f"{len(graded)} up to date" in rc.stdout, rc.stdout
        assert (out / "s1" / "results.json").read_bytes() == first
        assert all(_full_marks(_results(out, n)) == [] for n in names)
        assert {n: r["total"] for n, r in _rows(out).items()} == dict.fromkeys(names, "30.00")
        assert list(private_tmp.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(out)])


# ---------------------------------------------------------------- a kill while the class files are written


KILL_AT_RENAME = """
import os, signal, sys
from pathlib import Path
real = os.replace
def replace(src, dst, *a, **k):
    if Path(dst).name == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)  # the file is written beside its target, not yet renamed
    return real(src, dst, *a, **k)
os.replace = replace
from autograder.batch.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _graded_folder(out: Path, name: str, score: float, source: Path) -> None:
    from autograder.batch import regrade
    from autograder.grading import rubric_check
    from autograder.grading.course_result import CourseResult, CourseTest

    from support import FIXTURES

    problems = rubric_check.load()
    order = list(problems)
    r = CourseResult(submission=name, problems=tuple(order))
    for pid in order:
        r.tests.append(CourseTest(pid, f"{pid}: all", score if pid == "attention" else 0.0, problems[pid].points,
                                  "hidden"))
        r.max_points[pid] = problems[pid].points
    regrade.write_merged(r, out / name, regrade.current_records(problems, order, FIXTURES), order, merge_old=False)
    (out / name / ".source").write_text(source_key(source))


def test_a_kill_while_the_class_files_are_written_leaves_them_whole_and_the_rerun_writes_them_exactly(tmp_path):
    subs = tmp_path / "subs"
    out, clean = tmp_path / "grades", tmp_path / "clean"
    for i, name in enumerate(["ann", "bob", "cid", "dee"]):
        (subs / name).mkdir(parents=True)
        for folder in (out, clean):
            _graded_folder(folder, name, 10.0 + i, subs / name)
    args = [*map(str, sorted(subs.iterdir())), "--only", "attention"]
    ok = subprocess.run([*CLI, *args, "--out", str(clean)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "graded 0 of 4" in ok.stdout, ok.stderr[-2000:]
    class_files = ("grades.csv", "scores.csv", "report.html")
    for target in ("grades.csv", "report.html"):
        before = {f: (out / f).read_bytes() for f in class_files if (out / f).is_file()}
        killed = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, target, *args, "--out", str(out)], cwd=REPO,
                                capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        left = [p.name for p in out.glob(".*.tmp")]
        assert left and all(p.startswith(f".{target}.") for p in left), left
        # The file being written is the old one, whole (or none yet); the files written before it are the new ones.
        assert (out / target).read_bytes() == before[target] if target in before else not (out / target).exists()
        for p in out.glob(".*.tmp"):  # a rerun a minute later: the abandoned file goes
            os.utime(p, (time.time() - 120, time.time() - 120))
    rerun = subprocess.run([*CLI, *args, "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    for f in class_files:
        assert (out / f).read_bytes() == (clean / f).read_bytes(), f
    assert not list(out.glob(".*.tmp"))


# ---------------------------------------------------------------- what each platform gets of a result not graded


def test_a_result_not_graded_gives_gradescope_no_results_json_and_autolab_no_score(tmp_path, monkeypatch, capsys):
    """Gradescope shows a run without results.json as failed, with no score: what the staff see, never a 0 the
    student sees; Autolab's last line leaves the problem out. A refusal of the course's set-up goes the same way."""
    from autograder.batch import regrade, results_json
    from autograder.grading import rubric_check
    from autograder.grading.course_result import CourseResult, CourseTest
    from autograder.platforms import runtime

    from support import FIXTURES

    problems = rubric_check.load()
    result = CourseResult(submission="s", problems=("attention", "losses"))
    for pid, score in (("attention", 0.0), ("losses", problems["losses"].points)):
        result.tests.append(CourseTest(pid, f"{pid}: all", score, problems[pid].points, "public", "x"))
        result.max_points[pid] = problems[pid].points
    result.mark_not_graded("attention", "the sandboxed run of attention_child.py was killed by SIGKILL")
    data = results_json.to_json(result, regrade.current_records(problems, ["attention", "losses"], FIXTURES))
    assert data["score"] is None and data["tests"][0]["score"] is None and "status" not in data["tests"][0]
    assert data["tests"][1]["score"] == problems["losses"].points  # the problem graded keeps its score
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    target = root / "results" / "results.json"
    target.write_text("{}")  # an older file there goes too
    monkeypatch.setattr(runtime, "_grade", lambda *a: (data, ["attention", "losses"]))
    assert runtime.gradescope(root, 30.0) == 1 and not target.exists()
    said = capsys.readouterr().out
    assert "NOT GRADED" in said and "attention: the sandboxed run of attention_child.py was killed by SIGKILL" in said
    monkeypatch.setattr(runtime, "_grade", lambda *a: (_ for _ in ()).throw(runtime.Refused("no namespaces")))
    assert runtime.gradescope(root, 30.0) == 1 and not target.exists()
    assert "no namespaces" in capsys.readouterr().out
    monkeypatch.setattr(runtime, "_grade", lambda *a: (data, ["attention", "losses"]))
    assert runtime.autolab(tmp_path / "handin.tar", 30.0) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == {"scores": {"losses": problems["losses"].points}}
    monkeypatch.setattr(runtime, "_grade", lambda *a: (_ for _ in ()).throw(runtime.Refused("no namespaces")))
    assert runtime.autolab(tmp_path / "handin.tar", 30.0) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == {"scores": {}, "message": "not graded: no namespaces"}  # no problem scored, and why


def test_an_intake_bug_is_a_note_for_a_student_and_ends_the_course_worker(tmp_path):
    """A bug of the code that opens the handin (not a HandinError): the kit's local grader says so in a note with
    zeros (no traceback for a student); in the course grader it ends the worker, whose pool retries it and then
    marks it not graded, never a score (test_class_grading's worker that keeps dying)."""
    from autograder.grading.course_side import CourseSide
    from gradelib.grade import grade_submission

    from support import FIXTURES

    def broken(path: Path, dest: Path):
        raise KeyError("x")

    handin = tmp_path / "h"
    handin.mkdir()
    shutil.copyfile(SOLUTIONS / "attention.py", handin / "attention.py")
    kwargs = {"case_root": FIXTURES, "visibilities": ("public",), "only": ["attention"], "open_upload": broken,
              "scratch_root": tmp_path}
    local = grade_submission(handin, **kwargs)
    assert local.notes == ["The handin could not be opened: internal grader error (KeyError); tell the course staff."]
    assert local.score == 0 and local.tests and all(t.score == 0 for t in local.tests)
    with pytest.raises(KeyError):
        grade_submission(handin, course=CourseSide(), **kwargs)
