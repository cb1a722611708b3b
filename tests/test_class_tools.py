"""Class tools that one submission cannot break or bend: the class files, submission times, names, the attention list.

Each test is a case a red team or a head TA found: a notebook nested 200,000 deep in a --similarity run, a
submission_metadata.json planted in a handin, a submission named like an option, a mistyped command line,
and handins the report's attention list used to miss. The gradebook cases use results.json files written
here (their folders marked as graded from their paths, so nothing is graded again); the others grade
attention (and notebook 1's problem) with the instructor CLI.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch import regrade, results_json
from autograder.batch.records import read_row, source_key, submission_names
from autograder.grading import rubric_check as rubric_mod
from autograder.grading.course_result import CourseResult, CourseTest
from autograder.tools.classgen import BUGS, _edit
from gradelib import results as results_mod

from support import FIXTURES, REPO, SOLUTIONS

pytestmark = pytest.mark.slow

RUBRIC = REPO / "gradelib" / "rubric.toml"
ORDER = ["attention", "losses", "masks", "prediction", "generation"]
NB1 = "01_mlm_and_next_token.ipynb"
REFERENCE = (SOLUTIONS / "attention.py").read_text()
ATTENTION_MAX = sum(g.points for g in rubric_mod.load()["attention"].groups)
FORMULA_STARTS = ("=", "+", "-", "@")


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as fh:
        return {r["submission"]: r for r in csv.DictReader(fh)}


def _handin(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _attention_list(out: Path) -> dict[str, str]:
    """Submission -> its 'why' cell in report.html's list of submissions to open (HTML-escaped text)."""
    html = (out / "report.html").read_text()
    table = html[html.index('<table id="failed"'):]
    table = table[: table.index("</table>")]
    return dict(
        re.findall(r'<tr><td><a href="[^"]*">([^<]*)</a></td><td>[^<]*</td><td><pre>(.*?)</pre></td></tr>', table, re.S)
    )


# ---------------------------------------------------------------- one submission cannot stop the class files


def test_a_notebook_nested_200000_deep_costs_its_handin_only_in_a_similarity_run(tmp_path):
    subs = tmp_path / "subs"
    honest = [_handin(subs / name, {"attention.py": REFERENCE}) for name in ("ann", "ben")]
    deep = _handin(subs / "deep", {"attention.py": REFERENCE, NB1: "[" * 200_000 + "]" * 200_000})
    out = tmp_path / "grades"
    proc = _cli(*map(str, [*honest, deep]), "--out", str(out), "--only", "attention", "--similarity", "--jobs", "2",
                "--timeout", "30")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "similarity: 3 submissions" in proc.stdout, proc.stdout
    rows = _rows(out)
    assert sorted(rows) == ["ann", "ben", "deep"] and all(float(r["attention"]) == ATTENTION_MAX for r in rows.values())
    assert len(_csv(out / "scores.csv")) == 4
    notes = json.loads((out / "similarity.json").read_text())["notes"]
    assert any(NB1 in n and "not valid notebook JSON" in n and "recursion" in n for n in notes["deep"]), notes
    # The other files of the deep handin were still compared: ann, ben and deep share the reference attention.py.
    pairs = {(r[0], r[1]) for r in _csv(out / "similarity.csv")[1:] if r[2] == "attention.py"}
    assert {("ann", "deep"), ("ben", "deep")} <= pairs | {(b, a) for a, b in pairs}
    why = _attention_list(out)
    assert "similarity:" in why.get("deep", "") and NB1 in why["deep"], why


def test_a_gradebook_row_whose_times_cannot_be_used_costs_that_row_only():
    from autograder.batch import gradebook
    from autograder.batch.records import Row

    rows = [Row("ann", {"attention": 30.0}, 30.0, 30.0), Row("zed", {"attention": 30.0}, 30.0, 30.0)]
    policy = rubric_mod.LatePolicy(penalty_per_day=0.1, max_days=3)
    far_future = {"created_at": "2025-03-02T00:00:00+00:00", "assignment": {"due_date": "9999-12-31T23:59:59+00:00"}}
    book = gradebook.build(
        rows,
        ["attention"],
        policy=policy,
        extensions={"zed": 5},
        submitted_at={"ann": gradebook.parse_time("2025-03-02T00:00:00+00:00", "t")},
        due=None,
        metadata={"ann": {"assignment": {"due_date": "2025-03-01T00:00:00+00:00"}}, "zed": far_future},
    )
    by = {e.row.submission: e for e in book.entries}
    assert (by["ann"].days_late, str(by["ann"].final)) == (1, "27.00")
    assert by["zed"].days_late is None and str(by["zed"].final) == "30.00"
    assert "late policy not applied" in book.notes["zed"][0] and "OverflowError" in book.notes["zed"][0]
    assert "zed: late policy not applied" in gradebook.summary(book, roster=False)


# ------------------------------------------------- submission times only from the platform or the instructor


def _graded(out: Path, name: str, path: Path, scores: dict[str, float]) -> None:
    """A results.json as the grader writes it, in out/name, marked as graded from `path`."""
    records = regrade.current_records(rubric_mod.load(), ORDER, FIXTURES)
    r = CourseResult(submission=name, problems=tuple(ORDER))
    points = {p: rubric_mod.load()[p].points for p in ORDER}
    for pid in ORDER:
        r.tests.append(CourseTest(pid, f"{pid}: all", scores.get(pid, 0.0), points[pid], "hidden"))
        r.max_points[pid] = points[pid]
    regrade.write_merged(r, out / name, records, ORDER, merge_old=False)
    (out / name / ".source").write_text(source_key(path))


def _metadata(created: str, due: str, own_due: str | None = None) -> str:
    user = {"email": "s@uni.edu", "name": "S", "sid": "1", **({"assignment": {"due_date": own_due}} if own_due else {})}
    return json.dumps({"created_at": created, "assignment": {"due_date": due, "title": "HW3"}, "users": [user]})


@pytest.fixture
def late_rubric(tmp_path) -> Path:
    path = tmp_path / "rubric.toml"
    path.write_text(RUBRIC.read_text() + "\n[late]\npenalty_per_day = 0.25\nmax_days = 3\n")
    return path


def test_a_metadata_file_inside_the_upload_sets_no_submission_time(tmp_path, late_rubric):
    export, out = tmp_path / "export", tmp_path / "grades"
    due = "2025-03-01T23:59:00+00:00"
    forged = _metadata("2025-03-01T12:00:00+00:00", due)  # "on time", written by the student
    # alice, in Gradescope's layout: her upload (holding a forged copy) and the platform's metadata beside it,
    # 3 days late.
    alice = _handin(export / "alice" / "submission", {"attention.py": REFERENCE, "submission_metadata.json": forged})
    (export / "alice" / "submission_metadata.json").write_text(_metadata("2025-03-04T12:00:00+00:00", due))
    # bob: a folder handin holding a forged copy, and no platform metadata at all; dave: the copy one folder down.
    bob = _handin(export / "bob", {"attention.py": REFERENCE, "submission_metadata.json": forged})
    dave = _handin(export / "dave", {})
    _handin(dave / "handin", {"attention.py": REFERENCE, "submission_metadata.json": forged})
    carol = _handin(export / "carol", {"attention.py": REFERENCE})
    subs = {"alice": alice, "bob": bob, "carol": carol, "dave": dave}
    for name, path in subs.items():
        _graded(out, name, path, {"attention": ATTENTION_MAX})
    proc = _cli(
        str(bob), str(carol), str(dave), str(alice), "--out", str(out), "--rubric", str(late_rubric), "--due", due
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(out)
    assert (rows["bob"]["days_late"], rows["bob"]["final"]) == ("", "30.00")  # no time known: listed, no penalty
    assert (rows["alice"]["days_late"], rows["alice"]["final"]) == ("3", "7.50")  # 30.00 with the forged file
    assert "graded 0 of 4" in proc.stdout, proc.stdout  # alice's folder is hers: named "alice", up to date
    assert "no submission or due time for 3 submissions" in proc.stdout and "bob, carol, dave" in proc.stdout
    said = [ln for ln in proc.stdout.splitlines() if "inside the upload was ignored" in ln]
    assert sorted(ln.split(":")[0].strip() for ln in said) == ["alice", "bob", "dave"], proc.stdout
    why = _attention_list(out)
    assert all("inside the upload was ignored" in why[n] for n in ("alice", "bob", "dave")) and "carol" not in why


def test_due_dates_and_extensions_are_read_back_from_the_kept_copy(tmp_path, late_rubric):
    export, out = tmp_path / "export", tmp_path / "grades"
    due = "2025-03-01T23:59:00+00:00"
    paths = {}
    for name, created, own_due in (
        ("dana", "2025-03-03T00:30:00+00:00", "2025-03-03T23:59:00+00:00"),  # 2-day extension
        ("eve", "2025-03-03T00:30:00+00:00", None),  # two started days late
        ("finn", "2025-03-01T20:00:00+00:00", None),
    ):  # on time
        paths[name] = _handin(export / name / "submission", {"attention.py": REFERENCE})
        (export / name / "submission_metadata.json").write_text(_metadata(created, due, own_due))
        _graded(out, name, paths[name], {"attention": ATTENTION_MAX})
    proc = _cli(*map(str, paths.values()), "--out", str(out), "--rubric", str(late_rubric))  # no --due: the metadata's
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(out)
    assert {n: (r["days_late"], r["final"]) for n, r in rows.items()} == {
        "dana": ("0", "30.00"), "eve": ("2", "15.00"), "finn": ("0", "30.00")}
    assert "no submission or due time" not in proc.stdout, proc.stdout
    kept = json.loads((out / "dana" / "submission_metadata.json").read_text())
    assert kept["users"][0]["assignment"]["due_date"] == "2025-03-03T23:59:00+00:00"
    # The class files are rebuilt from the kept copies alone: a late handin graded into the folder keeps every time.
    late = _handin(export / "gus", {"attention.py": REFERENCE})
    _graded(out, "gus", late, {"attention": ATTENTION_MAX})
    again = _cli(str(late), "--out", str(out), "--rubric", str(late_rubric))
    assert again.returncode == 0, again.stderr[-2000:]
    assert _rows(out)["eve"]["final"] == "15.00" and _rows(out)["dana"]["days_late"] == "0"


def test_a_copy_kept_by_an_older_grader_is_not_trusted(tmp_path, late_rubric):
    out = tmp_path / "grades"
    subs = [_handin(tmp_path / "subs" / n, {"attention.py": REFERENCE}) for n in ("hal", "ivy")]
    for path in subs:
        _graded(out, path.name, path, {"attention": ATTENTION_MAX})
    # What the older grader kept from a file inside hal's folder: a time on the due date, due read nowhere.
    (out / "hal" / "submission_metadata.json").write_text(json.dumps(
        {"created_at": "2025-03-01T00:00:00+00:00", "due_date": "2025-03-01T23:59:00+00:00", "users": []}))
    # Rebuilt with only ivy on the command line (hal's copy stays as the older grader left it).
    proc = _cli(str(subs[1]), "--out", str(out), "--rubric", str(late_rubric), "--due", "2025-02-01T00:00:00+00:00")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _rows(out)["hal"]["days_late"] == ""
    assert "kept by an older grader was not used" in (out / "report.html").read_text()


# ---------------------------------------------------------------- any file name is a safe submission name


ODD_NAMES = (
    "-A1-A1",
    "--out",
    'O\'Brien "Ann"',
    '=HYPERLINK("http:x")',
    "+1 555",
    "@SUM(1)",
    "Zoë Ñúñez",
    "semi;colon,comma",
)


def test_a_submission_has_one_name_whatever_its_archive_type(tmp_path):
    """`broken_zip.zip` is `broken_zip`, as `broken_truncated.tar` is `broken_truncated`; results an older grader
    kept under the .zip's file name move to that name (never two rows for one submission)."""
    from autograder.batch.records import adopt_zip_folders

    paths = [tmp_path / n for n in ("broken_zip.zip", "broken_truncated.tar", "gz.tar.gz", "t.tgz", "alice",
                                    "bob/handin.zip", "carol/handin.tar")]
    assert submission_names(paths) == ["broken_zip", "broken_truncated", "gz", "t", "alice", "bob", "carol"]
    assert source_key(tmp_path / "bob" / "handin.zip") == source_key(tmp_path / "bob")
    out = tmp_path / "grades"
    _graded(out, "broken_zip.zip", paths[0], {"attention": 7.0})
    _graded(out, "other.zip", tmp_path / "elsewhere.zip", {"attention": 1.0})  # another submission's: stays
    adopt_zip_folders(out, [paths[0], tmp_path / "other.zip"], ["broken_zip", "other"])
    assert sorted(p.name for p in out.iterdir()) == ["broken_zip", "other.zip"]
    assert read_row(out / "broken_zip" / "results.json", "broken_zip").scores["attention"] == 7.0


def test_any_file_name_is_graded_normally_and_written_safely(tmp_path):
    subs = [_handin(tmp_path / "subs" / name, {"attention.py": REFERENCE}) for name in ODD_NAMES]
    out = tmp_path / "grades"
    proc = _cli("--out", str(out), "--only", "attention", "--jobs", "2", "--timeout", "30", "--", *map(str, subs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = submission_names(subs)
    assert f"graded {len(subs)} of {len(subs)}" in proc.stdout and "0 could not be graded" in proc.stdout, proc.stdout
    for name in names:
        data = json.loads((out / name / "results.json").read_text())
        assert data["score"] == ATTENTION_MAX, (name, data["output"][:500])
    grades = _csv(out / "grades.csv")
    shown = [r[0] for r in grades[1:]]
    assert sorted(shown) == sorted("'" + n if n.startswith(FORMULA_STARTS) else n for n in names)
    assert "'-A1-A1" in shown and "'--out" in shown and "Zoë_Ñúñez-" in "".join(shown)
    for path in ("grades.csv", "scores.csv"):
        cells = [c for row in _csv(out / path) for c in row]
        assert not [c for c in cells if c.startswith(FORMULA_STARTS)], (path, cells)
    assert [float(r[1]) for r in _csv(out / "scores.csv")[1:]] == [ATTENTION_MAX] * len(subs)


def test_a_mistyped_command_line_grades_nothing(tmp_path):
    sub = _handin(tmp_path / "alice", {"attention.py": REFERENCE})
    # The options after `--` are submissions: --out and grades do not exist, so nothing is graded anywhere.
    proc = _cli("--", str(sub), "--out", "grades", "--only", "attention", cwd=tmp_path)
    assert proc.returncode == 2 and "no such submission: --out, grades, --only, attention" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice"]
    proc = _cli(str(sub), str(tmp_path / "bob"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2 and f"no such submission: {tmp_path / 'bob'}" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the attention list and the top-level output line


@pytest.fixture(scope="module")
def small_class(tmp_path_factory) -> Path:
    """Seven handins of attention.py and notebook 1, graded: three good ones and four a TA should open."""
    base = tmp_path_factory.mktemp("small_class")
    nb1 = (SOLUTIONS / NB1).read_text()
    handins = {
        "good1": {"attention.py": REFERENCE, NB1: nb1},
        "good2": {"attention.py": REFERENCE, NB1: nb1},
        "good3": {"attention.py": REFERENCE, NB1: nb1},
        "no_parse": {"attention.py": REFERENCE.replace("def forward(self, X):", "def forward(self, X)"), NB1: nb1},
        "no_scaling": {"attention.py": _edit(REFERENCE, BUGS["no_scaling"]), NB1: nb1},
        "corrupt_notebook": {"attention.py": REFERENCE, NB1: nb1[: len(nb1) // 2]},
        "flagged": {"attention.py": REFERENCE, NB1: nb1},
    }
    subs = [_handin(base / "subs" / name, files) for name, files in handins.items()]
    out = base / "grades"
    proc = _cli(*map(str, subs), "--out", str(out), "--only", "attention", "losses", "--jobs", "2", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # An integrity flag, as the grader records one (the model-run checks raise them; no model is graded here).
    data = json.loads((out / "flagged" / "results.json").read_text())
    data.setdefault("extra_data", {})["flags"] = {
        "predictions_do_not_match_model": "predictions.npy is not what model.pt predicts"
    }
    (out / "flagged" / "results.json").write_text(json.dumps(data))
    again = _cli(*map(str, subs), "--out", str(out), "--only", "attention", "losses")
    assert again.returncode == 0 and "graded 0 of 7" in again.stdout, again.stdout + again.stderr[-2000:]
    return out


def test_every_results_json_says_at_the_top_what_happened_to_a_handin_not_graded_normally(small_class):
    from autograder.isolation import isolation_level

    said = {name: json.loads((small_class / name / "results.json").read_text())["output"].splitlines()
            for name in ("good1", "no_parse", "no_scaling", "corrupt_notebook")}
    # Every output ends with the level that graded it, the one line of a handin graded normally.
    assert all(lines[-1] == f"Sandbox: {isolation_level()}" for lines in said.values()), said
    output = {name: "\n".join(lines[:-1]) for name, lines in said.items()}
    assert output["good1"] == "" and output["no_scaling"] == ""  # graded normally: the lines say what was wrong
    assert output["no_parse"].startswith("attention: not graded normally: attention.py does not parse: line"), output
    assert output["corrupt_notebook"].startswith(f"losses: not graded normally: {NB1} could not be read as a notebook")


def test_the_attention_list_holds_every_submission_to_open_and_says_why(small_class):
    why = _attention_list(small_class)
    assert sorted(why) == ["corrupt_notebook", "flagged", "no_parse", "no_scaling"], why
    assert (
        "a file did not parse or load: attention: not graded normally: attention.py does not parse" in why["no_parse"]
    )
    assert "a file did not parse or load: losses: not graded normally:" in why["corrupt_notebook"]
    assert "integrity flag: predictions_do_not_match_model" in why["flagged"]
    # The missing scale keeps the projections, the raw scores and the three edge lines (which leave a failure the
    # ordinary cases share to the ordinary lines); the class median is full marks.
    att = rubric_mod.load()["attention"]
    kept = sum(g.points for g in att.groups if g.id in ("forward_projections", "forward_scores") or g.edge)
    assert f"score far below the class: attention {kept:g}, under half the class median {att.points:g}" in why[
        "no_scaling"], why["no_scaling"]


def test_the_list_says_each_kind_of_trouble_in_its_own_words(tmp_path):
    from autograder.batch.records import Row, TestRow
    from autograder.batch.triage import needs_look

    def row(name: str, notes: str = "", total: float = 50.0, scores: dict | None = None) -> Row:
        return Row(name, scores or {"attention": 30.0, "losses": 20.0}, total, 50.0, notes=notes,
                   tests=[TestRow("attention: a [public]", "attention", 1.0, 1.0, True)])

    rows = [row(f"ok{i}") for i in range(4)] + [
        row(
            "died",
            "This submission could not be graded: the grader's own process exited with code 1 on each of 3 attempts.",
        ),
        row(
            "crashed",
            "losses: not graded normally: internal grader error (KeyError: 'x'); please tell the course staff.",
        ),
        row("slow", "attention: the submission's process was stopped after the 60 s time limit."),
        row("zero", total=0.0, scores={"attention": 0.0, "losses": 0.0}),
    ]
    got = needs_look(
        rows, ["attention", "losses"], {"ok0": ["a submission_metadata.json inside the upload was ignored"]}
    )
    assert got["died"][0].startswith("infrastructure error: ")
    assert got["crashed"][0].startswith("internal grader error: ")
    assert got["slow"][0].startswith("time-out: ")
    assert got["zero"] == ["scored 0 on every test"]
    assert got["ok0"] == ["class run: a submission_metadata.json inside the upload was ignored"]
    assert not {"ok1", "ok2", "ok3"} & set(got)
    unread = tmp_path / "unread.json"
    unread.write_text("[" * 100_000 + "]" * 100_000)
    broken = read_row(unread, "broken")
    assert broken.total == 0 and "results.json could not be read" in broken.notes
    assert needs_look([*rows, broken], ["attention"])["broken"][0].startswith(
        "no usable results.json: results.json could not be read"
    )


def test_the_class_files_are_written_whatever_one_results_json_holds(tmp_path):
    out = tmp_path / "grades"
    good = _handin(tmp_path / "subs" / "good", {"attention.py": REFERENCE})
    _graded(out, "good", good, {"attention": ATTENTION_MAX})
    _graded(out, "odd", good.parent / "odd", {"attention": 1.0})
    # Valid JSON, but a score of 401 digits: no float holds it (OverflowError, not ValueError).
    (out / "odd" / "results.json").write_text(json.dumps(
        {"score": 1, "tests": [{"name": "attention: x", "score": 10**400, "max_score": 1, "tags": ["attention"]}]}))
    shutil.copytree(out / "good", out / "deep")
    (out / "deep" / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    proc = _cli(str(good), "--out", str(out), "--only", "attention")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert sorted(_rows(out)) == ["deep", "good", "odd"]
    why = _attention_list(out)
    assert "results.json could not be read" in why["deep"] and "results.json could not be read" in why["odd"]


def test_the_top_line_says_only_what_the_notes_and_the_visible_lines_do_not():
    def result(message: str, visibilities=("public", "hidden"), notes=()) -> results_mod.SubmissionResult:
        r = results_mod.SubmissionResult("s", problems=("attention",), notes=list(notes))
        r.tests = [
            results_mod.TestResult("attention", f"attention: line [{v}]", 0.0, 1.0, v, message) for v in visibilities
        ]
        return r

    crashed = "internal grader error (KeyError: 'x'); please tell the course staff."
    assert results_json.not_graded_normally(result(crashed)) == [f"attention: not graded normally: {crashed}"]
    # Hidden lines only: their outputs are not shown before the course publishes them, so neither is the line.
    assert results_json.not_graded_normally(result(crashed, ("hidden",))) == []
    # A missing file the top note already names, or the note itself repeated on every line: nothing more to say.
    lacks = "The handin lacks attention.py, model.pt; what is missing scores 0. Expected ...: attention.py, model.pt."
    missing = "attention.py is missing from the handin; add it and submit again."
    assert results_json.not_graded_normally(result(missing, notes=[lacks])) == []
    assert results_json.not_graded_normally(result(missing)) == [f"attention: not graded normally: {missing}"]
    opened = "The handin could not be opened: x.tar is not a tar archive"
    assert results_json.not_graded_normally(result("not graded: x.tar is not a tar archive", notes=[opened])) == []
    # Lines that failed for different reasons were graded normally: they say what was wrong, each.
    mixed = result("failed on 4 of 4 public cases")
    mixed.tests[1].output = "failed on 5 of 6 hidden cases"
    assert results_json.not_graded_normally(mixed) == []


def test_a_worker_stopped_mid_write_leaves_no_temporary_file(tmp_path):
    """atomic.write_text_atomic writes beside the file and renames; a worker killed between the two leaves the
    temporary file, which the batch removes when the worker has ended (the old results stay whole)."""
    from autograder.batch.atomic import remove_partial_writes

    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "results.json").write_text("{}")
    (folder / ".feedback.txt.k2j4.tmp").write_text("half of a feedb")
    (folder / ".results.json.x9.tmp").write_text("")
    remove_partial_writes(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["results.json"]
    remove_partial_writes(tmp_path / "never-graded")  # a handin with no folder yet: nothing to do


def test_a_problem_the_grader_failed_on_reads_not_graded_in_the_class_files(tmp_path):
    """An internal failure is no grade: its cells and its final score say `not graded` (blank where a number is
    imported), never 0."""
    import csv

    from autograder.batch import gradebook
    from autograder.batch.records import Row

    rows = [
        Row("ok", {"attention": 30.0}, 30.0, 30.0),
        Row("failed", {"attention": 0.0}, 0.0, 30.0, flags={"not graded: attention": "the grader's own process died"}),
    ]
    book = gradebook.build(rows, ["attention"])
    gradebook.write_grades(tmp_path / "grades.csv", book, ["attention"], roster=False)
    gradebook.write_scores(tmp_path / "scores.csv", book)
    grades = {r["submission"]: r for r in csv.DictReader((tmp_path / "grades.csv").open())}
    scores = {r["id"]: r["score"] for r in csv.DictReader((tmp_path / "scores.csv").open())}
    assert (grades["failed"]["attention"], grades["failed"]["final"], scores["failed"]) == (
        "not graded",
        "not graded",
        "",
    )
    assert (grades["ok"]["attention"], scores["ok"]) == ("30.00", "30.00")
