"""PrairieLearn's question and grader: the package `make prairielearn` writes, and a job in the folders its host
makes, reproduced in a temp folder (the entrypoint run with PL_GRADE_ROOT and this interpreter). The same job in a
real container, as PrairieLearn's host runs it: tests/isolation/test_container.py.

What PrairieLearn's host reads is checked as its code reads it (apps/grader-host reads results.json, at most 1 MB,
only from a job that exits 0; apps/prairielearn's processGradingResult): such a job is gradable unless `gradable`
is false; then its `score` must be a number in [0, 1]. A job that exits otherwise failed: not gradable."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.grading.course_result import CourseResult, CourseTest
from autograder.platforms import prairielearn
from autograder.platforms.package import PL_GRADER, build_prairielearn
from gradelib import rubric
from gradelib.handin_contract import HANDIN_FILES

from support import REPO, SOLUTIONS

pytestmark = pytest.mark.slow

PROBLEMS = rubric.load()
COURSE_POINTS = sum(p.points for p in PROBLEMS.values())
ATTENTION_POINTS = PROBLEMS["attention"].points
# The keys PrairieLearn's question schema knows (apps/prairielearn/src/schemas/infoQuestion.ts: a strict object).
INFO_KEYS = {"comment", "uuid", "type", "title", "topic", "tags", "authors", "clientFiles", "clientTemplates",
             "template", "gradingMethod", "singleVariant", "showCorrectAnswer", "partialCredit", "options",
             "externalGradingOptions", "dependencies", "workspaceOptions", "sharingSets", "sharePublicly",
             "shareSourcePublicly", "preferences"}
GRADING_KEYS = {"comment", "enabled", "image", "entrypoint", "serverFilesCourse", "timeout", "enableNetworking",
                "environment"}


def pl_package(out: Path) -> dict:
    """`make prairielearn`'s folders in `out`: the course, the question, the image's folder, the info.json."""
    question, image = build_prairielearn(out)
    return {"course": out / "course", "question": question, "image": image,
            "info": json.loads((question / "info.json").read_text())}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return pl_package(tmp_path_factory.mktemp("prairielearn"))


def host_reads(returncode: int, results: Path, said: str = "") -> dict:
    """What PrairieLearn's host makes of a job: the job must exit 0 and leave a results.json of at most 1 MB."""
    assert returncode == 0, said[-4000:]
    raw = results.read_bytes()
    assert len(raw) <= 1024 * 1024, len(raw)
    data = json.loads(raw)
    if data.get("gradable", True):
        assert isinstance(data["score"], (int, float)) and 0.0 <= data["score"] <= 1.0, data.get("score")
    else:
        assert "score" not in data and data["format_errors"], data
    return data


def lay_out(grade: Path, package: dict, files: dict[str, bytes]) -> list[str]:
    """A job's folder as PrairieLearn's host lays it out (the serverFilesCourse entries, again under shared/, tests/,
    student/, data/data.json); the entrypoint made executable, as the host does; the entrypoint's words."""
    options = package["info"]["externalGradingOptions"]
    for entry in options["serverFilesCourse"]:
        for top in ("serverFilesCourse", "shared"):
            shutil.copytree(package["course"] / "serverFilesCourse" / entry, grade / top / entry)
    for sub in ("tests", "student", "data"):
        (grade / sub).mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (grade / "student" / name).write_bytes(data)
    submitted = {"_files": [{"name": n, "contents": base64.b64encode(d).decode()} for n, d in files.items()]}
    (grade / "data" / "data.json").write_text(json.dumps({"params": {}, "submitted_answers": submitted}))
    argv = shlex.split(options["entrypoint"])
    (grade / argv[0].removeprefix("/grade/")).chmod(0o755)
    return argv


def run_job(tmp_path: Path, package: dict, files: dict[str, bytes], change=None) -> tuple[int, Path, str]:
    """A job laid out (lay_out; `change` then changes it), its entrypoint run here as info.json says: its exit
    status, where its results.json goes, and what it printed."""
    grade = tmp_path / "grade"
    argv = lay_out(grade, package, files)
    if change:
        change(grade)
    env = {**os.environ, "PL_GRADE_ROOT": str(grade), "AUTOGRADER_PYTHON": sys.executable}
    proc = subprocess.run([str(grade / argv[0].removeprefix("/grade/")), *argv[1:]], capture_output=True, text=True,
                          timeout=package["info"]["externalGradingOptions"]["timeout"], env=env)
    return proc.returncode, grade / "results" / "results.json", proc.stdout + proc.stderr


def job(tmp_path: Path, package: dict, files: dict[str, bytes], change=None) -> dict:
    """run_job, and what the host reads back."""
    return host_reads(*run_job(tmp_path, package, files, change))


def test_the_question_is_what_prairielearn_reads(package):
    info = package["info"]
    assert set(info) <= INFO_KEYS and re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", info["uuid"])
    assert info["type"] == "v3" and info["gradingMethod"] == "External"
    options = info["externalGradingOptions"]
    assert set(options) <= GRADING_KEYS and options["enabled"] is True and not options.get("enableNetworking")
    assert 0 < options["timeout"] <= 600 and f"--job-timeout {options['timeout']}" in options["entrypoint"]
    entry = shlex.split(options["entrypoint"])[0]
    assert entry == f"/grade/serverFilesCourse/{PL_GRADER}/run" and options["serverFilesCourse"] == [f"{PL_GRADER}/"]
    grader = package["course"] / "serverFilesCourse" / PL_GRADER
    assert (grader / "run").stat().st_mode & 0o111 and (grader / "autograder" / "platforms" / "runtime.py").is_file()
    assert any((grader / "fixtures" / "attention" / "hidden").iterdir())
    assert not (grader / "autograder" / "build").exists() and not (package["question"] / "tests").exists()
    page = (package["question"] / "question.html").read_text()
    upload = re.search(r'<pl-file-upload optional-file-names="([^"]+)"></pl-file-upload>', page)
    assert upload and upload.group(1).split(", ") == list(HANDIN_FILES)
    assert "<pl-external-grader-results>" in page and "@" not in page
    subprocess.run(["bash", "-n", str(grader / "run")], check=True)


def test_the_image_folder_builds_from_debian_12_with_the_grading_requirements(package):
    folder = package["image"]
    lines = (folder / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    instructions = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    assert instructions[0] == "FROM debian:bookworm-slim" and "bubblewrap" in instructions[1]
    for ins in instructions:
        word, _, rest = ins.partition(" ")
        if word == "COPY":
            assert (folder / rest.split()[0]).exists(), rest
        elif word == "RUN":
            assert subprocess.run(["bash", "-n", "-c", rest]).returncode == 0, rest
    assert not any(ins.startswith("USER") for ins in instructions)  # the entrypoint runs as root, as the docs say
    script = (folder / "install-grader.sh").read_text()
    assert "-r \"$build/requirements-grading.txt\"" in script and "download.pytorch.org/whl/cpu" in script
    assert subprocess.run(["sh", "-n", str(folder / "install-grader.sh")]).returncode == 0
    assert (folder / "requirements-grading.txt").read_bytes() == (REPO / "requirements-grading.txt").read_bytes()


def test_an_upload_make_handin_refuses_is_not_gradable_in_make_handins_words(package, tmp_path):
    from gradelib.handin import collect

    broken = b"class Attention(:\n    pass\n"
    data = job(tmp_path / "job", package, {"attention.py": broken,
                                           "01_mlm_and_next_token.ipynb": b'{"cells": ['})
    assert data["gradable"] is False and "fix" in data["message"]
    # make handin, on a handout folder holding the same files, says the same after its "(from <path>)".
    folder = tmp_path / "handout"
    folder.mkdir()
    (folder / "attention.py").write_bytes(broken)
    (folder / "01_mlm_and_next_token.ipynb").write_bytes(b'{"cells": [')
    said = [re.sub(r" \(from [^)]*\)", "", p) for p in collect(folder, "", "", partial=True).problems]
    assert data["format_errors"] == said and len(said) == 2, (data["format_errors"], said)
    assert said[0].startswith("attention.py does not parse: line 1")


def test_a_partial_handin_is_graded_and_hidden_messages_are_withheld(package, tmp_path):
    buggy = (SOLUTIONS / "attention.py").read_text().replace(
        "d_k = self.W_k.shape[1]\n        future", "d_k = self.W_v.shape[1]\n        future")
    assert buggy != (SOLUTIONS / "attention.py").read_text()
    data = job(tmp_path, package, {"attention.py": buggy.encode()})
    attention = [t for t in data["tests"] if t["name"].startswith("attention: ")]
    points = sum(t["points"] for t in attention)
    assert 0 < points < ATTENTION_POINTS and data["score"] == pytest.approx(points / COURSE_POINTS)
    assert sum(t["max_points"] for t in data["tests"]) == pytest.approx(COURSE_POINTS)
    lost = [t for t in attention if t["points"] < t["max_points"] and t["name"].endswith("[hidden]")]
    # Gradescope's feedback words: a hidden line's message withheld, or said to fail as its public twin does.
    assert lost and {t["message"] for t in lost} <= {prairielearn.WITHHELD, prairielearn.TWIN_FAILS}, lost
    assert "the same line fails on the hidden cases too" in data["output"]
    assert "dk_ne_dv" not in json.dumps(data)  # the failing hidden case is never named
    assert "The handin lacks" in data["output"] and "Traceback" not in json.dumps(data)


def test_a_grader_that_refuses_fails_the_job_with_no_results_json(package, tmp_path):
    """A course set-up the grader refuses (here: hidden cases lost from serverFilesCourse): the job fails (exit 1,
    no results.json), which PrairieLearn's host records as a failed job and PrairieLearn as not gradable, with no
    score and no attempt used; why is in the job's output, which the staff read."""
    def lose_hidden_cases(grade: Path) -> None:
        (grade / "serverFilesCourse" / PL_GRADER / "fixtures" / "attention" / "hidden" / "cases.json").unlink()

    code, results, said = run_job(tmp_path, package, {"attention.py": (SOLUTIONS / "attention.py").read_bytes()},
                                  lose_hidden_cases)
    assert code == 1 and not results.exists(), said[-3000:]
    assert "NOT GRADED" in said and "no hidden case" in said and "Traceback" not in said, said[-3000:]


def test_a_problem_not_graded_or_a_grader_bug_fails_the_job_and_is_never_a_score(tmp_path, monkeypatch, capsys):
    """A problem the grader failed on (a run killed from outside, say) and a bug of the grader: exit 1 and no
    results.json, an older one removed; why on stdout."""
    from autograder.batch import regrade, results_json
    from autograder.grading import rubric_check

    from support import FIXTURES

    result = CourseResult(submission="s", problems=("attention", "losses"))
    for pid, score in (("attention", 0.0), ("losses", PROBLEMS["losses"].points)):
        result.tests.append(CourseTest(pid, f"{pid}: all", score, PROBLEMS[pid].points, "public", "x"))
        result.max_points[pid] = PROBLEMS[pid].points
    result.mark_not_graded("attention", "the sandboxed run of attention_child.py was killed by SIGKILL")
    data = results_json.to_json(
        result, regrade.current_records(rubric_check.load(), ["attention", "losses"], FIXTURES))
    root = tmp_path / "grade"
    (root / "student").mkdir(parents=True)
    (root / "student" / "attention.py").write_bytes((SOLUTIONS / "attention.py").read_bytes())
    (root / "results").mkdir()
    target = root / "results" / "results.json"
    monkeypatch.setattr(prairielearn, "_grade", lambda *a, **k: (data, ["attention", "losses"]))
    target.write_text("{}")  # an older file there goes too
    assert prairielearn.grade_job(root, 30.0, 600.0) == 1 and not target.exists()
    said = capsys.readouterr().out
    assert "NOT GRADED" in said and "attention: the sandboxed run of attention_child.py was killed by SIGKILL" in said
    monkeypatch.setattr(prairielearn, "_grade", lambda *a, **k: 1 / 0)
    assert prairielearn.grade_job(root, 30.0, 600.0) == 1 and not target.exists()
    assert "internal error: ZeroDivisionError" in capsys.readouterr().out


def _result(tests: list[CourseTest]) -> CourseResult:
    result = CourseResult(submission="s", tests=tests, problems=tuple(dict.fromkeys(t.problem for t in tests)))
    for t in tests:
        result.max_points[t.problem] = result.max_points.get(t.problem, 0.0) + t.max_score
    return result


def test_results_stay_under_a_megabyte_whatever_the_messages_hold():
    tests = [CourseTest("attention", f"attention: line {i} [public]", 0.0, 1.0, "public", "x" * 20_000)
             for i in range(200)]
    data = prairielearn.results_json(_result(tests), PROBLEMS, "y" * 3_000_000)
    assert prairielearn.size(data) <= prairielearn.BUDGET < 1024 * 1024
    assert data["score"] == 0.0 and data["gradable"] is True


def test_the_standing_image_shows_a_withheld_figure_only_as_the_points_imply_it():
    full, zero = (float(PROBLEMS["prediction"].settings[k]) for k in ("full_credit_nll", "zero_credit_nll"))
    secret = 1.0123456
    nll = CourseTest("prediction", "prediction: prediction NLL on the hidden targets [hidden]", 6.0, 12.0, "hidden",
                     f"prediction NLL {secret}", "nll", figures={"prediction_nll": secret}, shown="after_published")
    row = prairielearn._standing(nll, "prediction_nll", PROBLEMS)
    assert row[3] == pytest.approx((full + zero) / 2) and "points" in row[4]  # half the points: half-way
    data = prairielearn.results_json(_result([nll]), PROBLEMS, "")
    assert "1.0123" not in json.dumps(data) and data["tests"][0]["message"] == prairielearn.WITHHELD
    png = base64.b64decode(data["images"][0]["url"].removeprefix("data:image/png;base64,"))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    nll.shown = "visible"  # the rubric shows hidden messages at once: the measured figure itself
    assert prairielearn._standing(nll, "prediction_nll", PROBLEMS)[3] == secret
