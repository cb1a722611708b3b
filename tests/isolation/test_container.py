"""The course grader where courses run it: Gradescope's, Autolab's and PrairieLearn's containers.

With a real Docker engine (tests/isolation/docker_engine.py: one that answers, or `dockerd` started here as root, images
from debootstrap, no registry): Gradescope's flow (setup.sh, then run_autograder per handin in a fresh container
with Docker's default security, and under `--cpus 0.5 --memory 768m`), Autolab's job as Tango runs it (its
exact command, autodriver as `autolab`, the job as `autograde`) and PrairieLearn's job as its host runs it (/grade,
the question's entrypoint as root, no network, its timeout). Without one, the flow runs in Docker's default
container as tests/isolation/container.py reproduces it (setpriv), and the test says so.

Graders that share a kernel and a temp folder but see nothing of each other (PID namespaces of their own, as
containers and CI jobs have) never touch each other's runs, uids or scratch. (What attacks gain in a container:
test_attacks_*.py's fallback batch.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker_engine
import pytest
from container import available, docker_default

from autograder.platforms.package import PL_GRADER
from autograder.tools.demo import blank_handin, reference_handin
from gradelib import rubric

from support import REPO

pytestmark = pytest.mark.container

NO_REPRODUCTION = available()
COURSE_POINTS = sum(p.points for p in rubric.load().values())
ATTENTION_POINTS = rubric.load()["attention"].points
linux_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("unshare"),
    reason="needs root on Linux with unshare (PID namespaces)",
)


# ---------------------------------------------------------------- a real engine, once per run of this file

@pytest.fixture(scope="module")
def engine():
    """(the engine, its base image) or the reason there is none; a daemon started here is stopped after."""
    found, why = docker_engine.start()
    if found is None:
        yield None, why
        return
    try:
        start = time.monotonic()
        base = docker_engine.base_image(found)
        print(f"\ndocker engine: base image {base} in {time.monotonic() - start:.0f} s", file=sys.stderr)
        yield (found, base), ""
    finally:
        found.stop()


def _real(engine) -> tuple:
    if engine[0] is None:
        pytest.skip(f"no real Docker engine here ({engine[1]}): test_the_flow_in_the_reproduced_container runs instead")
    wheel = docker_engine.torch_wheel()
    if wheel is None:
        pytest.skip("no local CPU torch wheel for the images (TORCH_WHEEL, or one in PIP_FIND_LINKS)")
    return (*engine[0], wheel)


def _broken(dest: Path) -> Path:
    """The reference with an attention.py that does not parse: the attention problem's points lost, and why."""
    handin = reference_handin(dest)
    (handin / "attention.py").write_text("class Attention(:\n    pass\n")
    return handin


def test_gradescope_on_a_real_engine_setup_then_a_fresh_container_per_handin(tmp_path, engine):
    (eng, base, wheel) = _real(engine)
    start = time.monotonic()
    image = docker_engine.gradescope_image(eng, base, wheel)
    built = time.monotonic() - start

    def run(name: str, handin: Path, *limits: str) -> tuple[dict, float]:
        results = tmp_path / name / "results"
        results.mkdir(parents=True)
        t = time.monotonic()
        proc = eng("run", "--rm", "--network", "none", *limits, "-v", f"{handin}:/autograder/submission",
                   "-v", f"{results}:/autograder/results", image, "/autograder/run_autograder", check=False)
        assert (results / "results.json").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads((results / "results.json").read_text()), time.monotonic() - t

    reference, ref_s = run("ref", reference_handin(tmp_path / "reference"), "--cpus", "0.5", "--memory", "768m")
    assert reference["score"] == pytest.approx(COURSE_POINTS), [
        t["output"] for t in reference["tests"] if t["score"] < t["max_score"]
    ]
    assert reference["extra_data"]["isolation"] == "fallback"
    broken, broken_s = run("broken", _broken(tmp_path / "broken"))
    assert broken["score"] == pytest.approx(COURSE_POINTS - ATTENTION_POINTS)
    assert "Traceback" not in json.dumps(broken) and "syntax" in broken["output"].lower(), broken["output"]
    print(f"\ngradescope on a real engine: image {built:.0f} s; reference {reference['score']:g} in {ref_s:.0f} s "
          f"(--cpus 0.5 --memory 768m); broken attention.py {broken['score']:g} in {broken_s:.0f} s", file=sys.stderr)


def test_autolab_on_a_real_engine_as_tango_runs_a_job(tmp_path, engine):
    (eng, base, wheel) = _real(engine)
    start = time.monotonic()
    image = docker_engine.autolab_image(eng, base, wheel)
    built = time.monotonic() - start
    from autograder.platforms.package import build_autolab

    package, makefile = build_autolab(tmp_path / "autolab")
    figures = []
    for name, make in (("reference", reference_handin), ("blank", blank_handin), ("broken", _broken)):
        mount = tmp_path / name / "mount"
        mount.mkdir(parents=True)
        handin = make(tmp_path / name / "handin")
        with tarfile.open(mount / "handin.tar", "w") as tar:
            for f in sorted(handin.iterdir()):
                tar.add(f, arcname=f.name)
        shutil.copyfile(package, mount / "autograde.tar")
        shutil.copyfile(makefile, mount / "Makefile")
        t = time.monotonic()
        eng("run", "--rm", "--network", "none", "-v", f"{mount}:/home/mount", image, "sh", "-c",
            docker_engine.TANGO_COMMAND)
        feedback = (mount / "feedback").read_text()
        lines = feedback.strip().splitlines()
        assert lines[0] == "Autodriver: Job exited with status 0", feedback[-3000:]
        scores = json.loads(lines[-1])["scores"]  # Autolab's autoresult: the last line
        figures.append(f"{name} {sum(scores.values()):g} in {time.monotonic() - t:.0f} s")
        assert "Sandbox: fallback" in feedback and "Traceback" not in feedback, feedback[-3000:]
        if name == "reference":
            assert sum(scores.values()) == pytest.approx(COURSE_POINTS), feedback[-3000:]
        elif name == "blank":
            assert set(scores.values()) == {0.0}, feedback[-3000:]
        else:
            assert scores["attention"] == 0.0 and sum(scores.values()) == pytest.approx(
                COURSE_POINTS - ATTENTION_POINTS
            )
            assert "syntax" in feedback.lower(), feedback[-3000:]
    print(f"\nautolab on a real engine (Tango's command): image {built:.0f} s; " + "; ".join(figures), file=sys.stderr)


PL_LIMITS = ("--cpus", "0.5", "--memory", "768m", "--memory-swap", "768m")  # below PrairieLearn's (0.9 CPU, 2 GiB)


def _pl_cases(dest: Path) -> dict[str, tuple[dict[str, bytes], object]]:
    """PrairieLearn's four uploads (the files pl-file-upload takes, by name) and what each must get: a score, or
    the start of the reason it is not gradable; and the reference once more, with the hidden cases lost from the
    job's serverFilesCourse (a fault of the course's set-up): a failed job, never a score."""
    ref = reference_handin(dest / "reference")
    blank = blank_handin(dest / "blank")
    files = {f.name: f.read_bytes() for f in sorted(ref.iterdir())}
    partial = {n: files[n] for n in ("attention.py", "01_mlm_and_next_token.ipynb")}
    points = sum(rubric.load()[p].points for p in ("attention", "losses"))
    return {"reference": (files, 1.0), "blank": ({f.name: f.read_bytes() for f in sorted(blank.iterdir())}, 0.0),
            "partial": (partial, points / COURSE_POINTS),
            "broken": ({**files, "attention.py": b"class Attention(:\n    pass\n"}, "attention.py does not parse"),
            "grader fault": (files, None)}


def test_prairielearn_on_a_real_engine_as_its_host_runs_a_job(tmp_path, engine):
    """PrairieLearn's host (apps/grader-host): the job's folder at /grade, the question's entrypoint run in the image
    without network, as the image's user (root), under the question's timeout; the job counts only when it exits 0,
    and results.json over 1 MB is dropped; a grader fault exits 1 with no results.json (a failed job).
    Limits: PL_LIMITS, PrairieLearn's process and core-dump limits."""
    from test_prairielearn import host_reads, lay_out, pl_package

    (eng, base, wheel) = _real(engine)
    start = time.monotonic()
    image = docker_engine.prairielearn_image(eng, base, wheel)
    built = time.monotonic() - start
    package = pl_package(tmp_path / "pl")
    timeout = package["info"]["externalGradingOptions"]["timeout"]
    figures, wrong = [], []
    for case, (files, wanted) in _pl_cases(tmp_path / "handins").items():
        grade = tmp_path / case / "grade"
        argv = lay_out(grade, package, files)
        if wanted is None:
            (grade / "serverFilesCourse" / PL_GRADER / "fixtures" / "attention" / "hidden" / "cases.json").unlink()
        name = f"prairielearn-job-{os.getpid()}-{case.replace(' ', '-')}"
        t = time.monotonic()
        try:
            proc = eng("run", "--name", name, "-t", "--network", "none", *PL_LIMITS, "--pids-limit", "1024",
                       "--ipc", "private", "--ulimit", "core=0:0", "-v", f"{grade}:/grade", "--entrypoint", argv[0],
                       image, *argv[1:], timeout=timeout, check=False)
        finally:
            eng("rm", "-f", name, check=False, timeout=120)
        seconds = time.monotonic() - t
        if wanted is None:  # the host reads no results.json from a job that exits non-zero: a failed job
            said = proc.stdout + proc.stderr
            figures.append(f"{case}: exit {proc.returncode}, no results.json, in {seconds:.0f} s")
            if proc.returncode != 1 or (grade / "results" / "results.json").exists() or "NOT GRADED" not in said \
                    or "no hidden case" not in said or "Traceback" in said:
                wrong.append(f"{case}: exit {proc.returncode}: {said[-3000:]}")
            continue
        data = host_reads(proc.returncode, grade / "results" / "results.json", proc.stdout + proc.stderr)
        text = json.dumps(data)
        if isinstance(wanted, str):
            figures.append(f"{case}: not gradable ({data.get('format_errors', [''])[0][:60]}) in {seconds:.0f} s")
            ok = data["gradable"] is False and data["format_errors"][0].startswith(wanted)
        else:
            lost = [(t["name"], t["message"][:300]) for t in data["tests"] if t["points"] < t["max_points"]]
            figures.append(f"{case} {data['score']:.4f} in {seconds:.0f} s ({len(text.encode()) / 1024:.0f} KiB)"
                           + (f"; lost: {lost[:3]}" if case == "reference" and lost else ""))
            # the standing image for a model.pt that was graded; the sandbox level, said to the student
            ok = (data["score"] == pytest.approx(wanted) and "Sandbox: fallback" in data["output"]
                  and bool(data["images"]) == (case == "reference"))
        if not ok or "Traceback" in text:
            wrong.append(f"{case}: {text[:3000]}")
    print(f"\nprairielearn on a real engine ({' '.join(PL_LIMITS)}): image {built:.0f} s; " + "; ".join(figures),
          file=sys.stderr)
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- the reproduction, where no engine is

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


@pytest.mark.skipif(
    bool(NO_REPRODUCTION), reason=f"Docker's default container cannot be reproduced here: {NO_REPRODUCTION}"
)
def test_the_flow_in_the_reproduced_container(tmp_path, engine):
    """The fallback where no real engine runs: Docker's default container reproduced (tests/isolation/container.py)."""
    if engine[0] is not None:
        pytest.skip("a real Docker engine ran Gradescope's and Tango's flows (the tests above): no reproduction needed")
    print(f"\nno real Docker engine ({engine[1]}): Gradescope's flow in the reproduced container", file=sys.stderr)
    reference, _ = run_autograder(tmp_path / "ref", reference_handin(tmp_path / "reference"))
    assert reference["score"] == pytest.approx(COURSE_POINTS), [
        t["output"] for t in reference["tests"] if t["score"] < t["max_score"]
    ]
    assert reference["extra_data"]["isolation"] == "fallback"
    blank, _ = run_autograder(tmp_path / "blank", blank_handin(tmp_path / "blank_handin"))
    assert blank["score"] == 0.0
    assert "Traceback" not in json.dumps(blank)
    # PrairieLearn's job, its entrypoint run in the reproduced container: the reference, and a broken upload.
    from test_prairielearn import host_reads, lay_out, pl_package

    package = pl_package(tmp_path / "pl")
    for case, (files, wanted) in _pl_cases(tmp_path / "handins").items():
        if case not in ("reference", "broken"):
            continue
        grade = tmp_path / case / "grade"
        argv = lay_out(grade, package, files)
        env = {"PL_GRADE_ROOT": str(grade), "AUTOGRADER_PYTHON": sys.executable}
        with docker_default([str(grade / argv[0].removeprefix("/grade/")), *argv[1:]], env=env) as cmd:
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=package["info"]["externalGradingOptions"]["timeout"])
        data = host_reads(proc.returncode, grade / "results" / "results.json", proc.stdout + proc.stderr)
        if case == "reference":
            assert data["score"] == 1.0, [t for t in data["tests"] if t["points"] < t["max_points"]]
        else:
            assert data["gradable"] is False and data["format_errors"][0].startswith(wanted), data


@pytest.mark.skipif(
    bool(NO_REPRODUCTION), reason=f"Docker's default container cannot be reproduced here: {NO_REPRODUCTION}"
)
def test_a_refusal_reaches_gradescope_as_a_failed_run_with_no_grade(tmp_path):
    """A grader that refuses (here: a rubric it cannot read) writes no results.json, so Gradescope records no score;
    the run fails (exit 1) and says why on stdout, which only the staff see. Autolab's last line has no score."""
    bad = tmp_path / "rubric.toml"
    bad.write_text("[not a rubric\n")
    runtime = [sys.executable, "-c", "import sys; from pathlib import Path; from gradelib import rubric; "
               f"rubric.RUBRIC_PATH = Path({str(bad)!r}); "
               "from autograder.platforms.runtime import main; sys.exit(main())"]
    root = tmp_path / "autograder"
    (root / "results").mkdir(parents=True)
    shutil.copytree(blank_handin(tmp_path / "blank"), root / "submission")
    proc = subprocess.run([*runtime, "gradescope", "--root", str(root)], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert not (root / "results" / "results.json").exists()
    assert "NOT GRADED" in proc.stdout and "rubric" in proc.stdout.lower() and "Traceback" not in proc.stdout
    auto = subprocess.run([*runtime, "autolab", str(root / "submission")], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    last = json.loads(auto.stdout.strip().splitlines()[-1])
    assert last["scores"] == {} and "rubric" in last["message"].lower(), auto.stdout[-2000:]


# ---------------------------------------------------------------- graders that cannot see each other

def _in_own_pid_namespace(cmd: list[str], env: dict[str, str], pid: int = 1) -> list[str]:
    """`cmd` in a PID namespace of its own with its own /proc: it sees no process of ours, nor we of its by pid.
    With pid=2 a shell is its namespace's init and `cmd` its child: a pid no other namespace's grader has."""
    exports = [f"{k}={v}" for k, v in env.items()]
    shell = ["sh", "-c", '"$@"; exit $?', "sh"] if pid == 2 else []
    return ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "--", *shell, "env", *exports, *cmd]


@linux_root
def test_a_sandbox_uid_busy_in_a_container_we_cannot_see_is_never_given_to_a_run(tmp_path):
    """Another "container" holds processes of the uid this grader would try first; the grader, in a PID namespace
    of its own, sees none of them in its /proc, yet never takes that uid, and grades the handin in full."""
    from autograder.isolation import slots

    uid = slots.UID_BASE + 7
    holders = [subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"])
               for _ in range(70)]  # over a run's process limit (64): a run as this uid could not even start
    try:
        env = {"GRADELIB_SLOT_START": str(uid), "GRADELIB_SLOT_DIR": str(tmp_path / "locks"), "TMPDIR": str(tmp_path)}
        seen_and_given = (
            "import os; from autograder.isolation import slots; uid = int(os.environ['GRADELIB_SLOT_START']); "
            "print(sum(os.stat(f'/proc/{p}').st_uid == uid for p in os.listdir('/proc') if p.isdigit()), "
            "slots.Slot().uid)"
        )
        probe = subprocess.run(_in_own_pid_namespace([sys.executable, "-c", seen_and_given], env), capture_output=True,
                               text=True, timeout=120, cwd=REPO)
        seen, given = map(int, probe.stdout.split())
        assert seen == 0 and given != uid, probe.stdout + probe.stderr[-2000:]
        # The same grader with the probe blinded: the run meets the busy uid at its start and goes on to another.
        blind = ("import sys; from autograder.isolation import slots; slots.in_use_anywhere = lambda uid: False; "
                 "from autograder.batch import cli; sys.exit(cli.main(sys.argv[1:]))")
        handin = reference_handin(tmp_path / "reference")
        proc = subprocess.run(_in_own_pid_namespace(
            [sys.executable, "-c", blind, str(handin), "--out", str(tmp_path / "out"), "--only", "attention"], env),
            capture_output=True, text=True, timeout=600, cwd=REPO)
        results = json.loads((tmp_path / "out" / "reference" / "results.json").read_text())
        assert results["score"] == pytest.approx(ATTENTION_POINTS), (proc.stdout[-2000:], proc.stderr[-2000:])
    finally:
        for h in holders:
            h.kill()
            h.wait()


@linux_root
def test_graders_in_other_pid_namespaces_sharing_the_temp_folder_never_sweep_each_others_scratch(tmp_path):
    """Two graders, each in a PID namespace of its own, share TMPDIR (containers or CI jobs on one host): the second
    one's start sweeps only a scratch folder whose batch is gone (its lock free), never the running one's."""
    from autograder.batch.pool import SCRATCH_LOCK, SCRATCH_PREFIX

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    abandoned = tmp / f"{SCRATCH_PREFIX}999999-abandoned"  # a batch killed mid-run: its lock file, held by nobody
    abandoned.mkdir()
    (abandoned / SCRATCH_LOCK).write_text("")
    env = {"TMPDIR": str(tmp), "GRADELIB_SLOT_DIR": str(tmp_path / "locks")}
    cli = [sys.executable, str(REPO / "autograder" / "autograder.py"), "--only=attention"]
    first_handin, second_handin = reference_handin(tmp_path / "first"), reference_handin(tmp_path / "second")
    # The first grader is pid 2 of its namespace; the second, pid 1 of its own, sees no pid 2 when it starts.
    first = subprocess.Popen(
        _in_own_pid_namespace([*cli, str(first_handin), "--out", str(tmp_path / "a")], env, pid=2),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        running = []
        while not running and time.monotonic() < deadline and first.poll() is None:
            running = [p for p in tmp.glob(f"{SCRATCH_PREFIX}*") if p != abandoned and (p / SCRATCH_LOCK).exists()]
            time.sleep(0.05)
        assert running, "the first grader never made its scratch folder"
        second = subprocess.run(_in_own_pid_namespace([*cli, str(second_handin), "--out", str(tmp_path / "b")], env),
                                cwd=REPO, capture_output=True, text=True, timeout=600)
        assert not abandoned.exists()
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    for folder, proc_err in (("a/first", err), ("b/second", second.stderr)):
        results = json.loads((tmp_path / folder / "results.json").read_text())
        assert results["score"] == pytest.approx(ATTENTION_POINTS), (folder, proc_err[-2000:])
    assert not list(tmp.glob(f"{SCRATCH_PREFIX}*"))  # each removed its own at its end


@pytest.mark.skipif(
    bool(NO_REPRODUCTION), reason=f"Docker's default container cannot be reproduced here: {NO_REPRODUCTION}"
)
def test_the_student_side_grades_in_a_root_container_without_bubblewrap(tmp_path):
    """A Colab tab or a course's own container: root, no namespaces. The student kit's one runner (a plain child
    with limits, no isolation of its own) gives the solved handout full public marks there."""
    from test_student_platforms import full_public_marks, solved_handout

    folder = solved_handout(Path(tempfile.mkdtemp(dir=tmp_path)) / "handout")
    os.chmod(folder.parent, 0o755)
    with docker_default([sys.executable, "autograder.py"]) as cmd:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=folder)
    full_public_marks(proc)
    assert "Your code ran in a separate process with time, CPU, output and memory limits." in proc.stdout, \
        proc.stdout[-2000:]
