"""Course operations: safe regrades, --only merges, a gradebook that never shrinks, the regrade log.

The end-to-end test grades two small handins with --only attention (a few seconds each);
everything else runs the pure functions on hand-written results.json files.
"""

from __future__ import annotations

import csv
import json
import math
import random
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from autograder.batch import gradebook, regrade, results_json
from autograder.grading import rubric_check as rubric_mod
from autograder.grading.course_result import CourseResult, CourseTest

from support import FIXTURES, HANDOUT, REPO, SOLUTIONS

pytestmark = pytest.mark.slow

RUBRIC = REPO / "gradelib" / "rubric.toml"
ORDER = ["attention", "losses", "masks", "prediction", "generation"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def _rows(out: Path, name: str = "grades.csv") -> dict[str, dict[str, str]]:
    with open(out / name, newline="") as fh:
        return {r["submission"]: r for r in csv.DictReader(fh)}


def _rubric_with(tmp_path: Path, old: str, new: str) -> Path:
    text = RUBRIC.read_text()
    assert text.count(old) >= 1, old
    path = tmp_path / "rubric.toml"
    path.write_text(text.replace(old, new, 1))
    return path


# ---------------------------------------------------------------- pure functions


def test_a_changed_threshold_makes_exactly_that_problem_stale_and_says_which_setting(tmp_path):
    now = rubric_mod.load()
    data = {
        "tests": [],
        "extra_data": {"grader": {"format": 1, "problems": regrade.current_records(now, ORDER, FIXTURES)}},
    }
    assert regrade.stale_problems(data, regrade.current_records(now, ORDER, FIXTURES)) == {}
    changed = rubric_mod.load(_rubric_with(tmp_path, "full_credit_nll = 0.85", "full_credit_nll = 0.8"))
    why = regrade.stale_problems(data, regrade.current_records(changed, ORDER, FIXTURES))
    assert why == {"prediction": "rubric changed (prediction: full_credit_nll 0.85 -> 0.8)"}
    # The [late] table is the gradebook's business: it never makes a result stale.
    late = tmp_path / "late.toml"
    late.write_text(RUBRIC.read_text() + "\n[late]\npenalty_per_day = 0.1\nmax_days = 3\n")
    assert regrade.stale_problems(data, regrade.current_records(rubric_mod.load(late), ORDER, FIXTURES)) == {}


def test_points_tolerance_and_fixture_changes_are_named(tmp_path):
    now = rubric_mod.load()
    data = {
        "tests": [],
        "extra_data": {"grader": {"format": 1, "problems": regrade.current_records(now, ORDER, FIXTURES)}},
    }
    points = rubric_mod.load(
        _rubric_with(tmp_path, 'quantities = ["A_w"]\npoints = 2', 'quantities = ["A_w"]\npoints = 3')
    )
    assert regrade.stale_problems(data, regrade.current_records(points, ORDER, FIXTURES)) == {
        "attention": "rubric changed (attention: points)"}
    # A fixture file of the notebooks changes: both notebook problems read that folder, nothing else does.
    cases = tmp_path / "cases"
    cases.mkdir()
    lines = (FIXTURES / "MANIFEST.sha256").read_text().splitlines()
    lines = [("0" * 64 + line[64:]) if line.endswith("notebooks/hidden/cases.json") else line for line in lines]
    (cases / "MANIFEST.sha256").write_text("\n".join(lines) + "\n")
    why = regrade.stale_problems(data, regrade.current_records(now, ORDER, cases))
    assert why == {"losses": "fixtures changed (losses)", "masks": "fixtures changed (masks)"}


def test_results_without_a_record_or_missing_a_problem_are_stale():
    now = regrade.current_records(rubric_mod.load(), ORDER, FIXTURES)
    assert regrade.stale_problems({"tests": [], "score": 3.0}, now) == dict.fromkeys(ORDER, regrade.OLDER_GRADER)
    partial = {"tests": [], "extra_data": {"grader": {"format": 1, "problems": {"attention": now["attention"]}}}}
    assert regrade.stale_problems(partial, {"attention": now["attention"], "masks": now["masks"]}) == {
        "masks": "not graded yet (masks)"
    }


def _result(
    name: str,
    scores: dict[str, list[float]],
    notes: dict[str, list[str]] | None = None,
    general: list[str] | None = None,
    flags: dict[str, dict[str, str]] | None = None,
) -> CourseResult:
    r = CourseResult(submission=name, problems=tuple(p for p in ORDER if p in scores))
    for pid, values in scores.items():
        for i, v in enumerate(values):
            r.tests.append(
                CourseTest(
                    pid, f"{pid}: line {i}", v, 2.0, "public" if i % 2 == 0 else "hidden", line=f"l{i}"
                )
            )
        r.max_points[pid] = 2.0 * len(values)
        r.problem_notes[pid] = list((notes or {}).get(pid, []))
        r.problem_flags[pid] = list((flags or {}).get(pid, {}))
        r.flags.update((flags or {}).get(pid, {}))
        r.problem_seconds[pid] = 1.5
    r.notes = list(general or []) + [n for pid in r.problems for n in r.problem_notes[pid]]
    return r


def test_merge_replaces_only_the_regraded_problem_and_recomputes_the_score(tmp_path):
    old = _result(
        "alice",
        {"attention": [2.0, 2.0], "prediction": [1.0, 0.5]},
        notes={"prediction": ["old prediction note"], "attention": ["attention note"]},
        general=["handin lacks x"],
        flags={"prediction": {"predictions_do_not_match_model": "old"}},
    )
    folder = tmp_path / "alice"
    records = regrade.current_records(rubric_mod.load(), ORDER, FIXTURES)
    regrade.write_merged(old, folder, {p: records[p] for p in old.problems}, ORDER, merge_old=False)
    new = _result("alice", {"prediction": [2.0, 1.25]}, notes={"prediction": ["new prediction note"]})
    regrade.write_merged(new, folder, {"prediction": records["prediction"]}, ORDER, merge_old=True)
    data = json.loads((folder / "results.json").read_text())
    got = [(t["tags"][0], t["score"], t["number"]) for t in data["tests"]]
    assert got == [
        ("attention", 2.0, "1.1"),
        ("attention", 2.0, "1.2"),
        ("prediction", 2.0, "2.1"),
        ("prediction", 1.25, "2.2"),
    ]
    assert data["score"] == 2.0 + 2.0 + 2.0 + 1.25
    assert data["output"].splitlines() == ["handin lacks x", "attention note", "new prediction note"]
    assert "flags" not in data["extra_data"]  # the old prediction flag went with the old prediction tests
    assert set(data["extra_data"]["grader"]["problems"]) == {"attention", "prediction"}
    assert regrade.stale_problems(data, {p: records[p] for p in ("attention", "prediction")}) == {}
    feedback = (folder / "feedback.txt").read_text()
    assert "new prediction note" in feedback and "old prediction note" not in feedback and "TOTAL" in feedback


def test_results_json_stays_gradescope_json():
    r = _result("bob", {"attention": [1.0]})
    data = results_json.to_json(r, regrade.current_records(rubric_mod.load(), ["attention"], FIXTURES))
    assert set(data) == {
        "score",
        "execution_time",
        "output",
        "output_format",
        "visibility",
        "stdout_visibility",
        "tests",
        "extra_data",
    }
    json.dumps(data, allow_nan=False)
    for t in data["tests"]:
        assert set(t) <= {
            "name",
            "number",
            "score",
            "max_score",
            "status",
            "output",
            "visibility",
            "tags",
            "extra_data",
        }


def test_a_late_table_is_validated_like_every_other_value(tmp_path):
    base = RUBRIC.read_text()
    for table, fragment in [
        ("[late]\npenalty_per_day = 1.5\nmax_days = 3\n", "penalty_per_day must be a fraction between 0 and 1"),
        ("[late]\npenalty_per_day = 0.1\nmax_days = -1\n", "max_days must be >= 0"),
        ("[late]\npenalty_per_day = 0.1\n", "missing required key 'max_days'"),
        ("[late]\npenalty_per_day = 0.1\nmax_days = 3\ngrace = 2\n", "unknown key(s) ['grace']"),
        ("[late]\npenalty_per_day = '10%'\nmax_days = 3\n", "key 'penalty_per_day' must be number"),
    ]:
        path = tmp_path / "r.toml"
        path.write_text(base + "\n" + table)
        with pytest.raises(rubric_mod.RubricError, match=None) as info:
            rubric_mod.load(path)
        assert fragment in str(info.value), (table, str(info.value))
    path.write_text(base + "\n[late]\npenalty_per_day = 0.25\nmax_days = 2\n")
    policy = rubric_mod.read(path).late
    assert [policy.penalty(d) for d in (0, 1, 2, 3)] == [0.0, 0.25, 0.5, 1.0]
    assert rubric_mod.read(RUBRIC).late is None


# ---------------------------------------------------------------- end to end, --only attention


def test_reruns_regrade_exactly_what_is_stale_merge_only_and_keep_every_row(tmp_path):
    subs = tmp_path / "subs"
    for name, source in (
        ("alice", SOLUTIONS / "attention.py"),
        ("carol", HANDOUT / "attention.py"),
        ("late", SOLUTIONS / "attention.py"),
    ):
        (subs / name).mkdir(parents=True)
        shutil.copyfile(source, subs / name / "attention.py")
    out = tmp_path / "grades"
    two = [str(subs / "alice"), str(subs / "carol")]
    first = _cli(*two, "--out", str(out), "--only", "attention", "--jobs", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "grading 2 new submissions" in first.stdout
    assert (
        float(_rows(out)["alice"]["attention"]) == rubric_mod.load()["attention"].points
        and float(_rows(out)["carol"]["attention"]) == 0
    )

    again = _cli(*two, "--out", str(out), "--only", "attention")
    assert "graded 0 of 2" in again.stdout and "2 up to date" in again.stdout

    # One results.json from an older grader (no record): only it is regraded.
    data = json.loads((out / "carol" / "results.json").read_text())
    del data["extra_data"]["grader"]
    (out / "carol" / "results.json").write_text(json.dumps(data))
    older = _cli(*two, "--out", str(out), "--only", "attention")
    assert f"regrading 1 of 2: {regrade.OLDER_GRADER}" in older.stdout and "1 up to date" in older.stdout, older.stdout

    # The rubric changes: both are regraded, the one whose score changed is logged.
    rubric = _rubric_with(tmp_path, 'quantities = ["A_w"]\npoints = 2', 'quantities = ["A_w"]\npoints = 4')
    changed = _cli(*two, "--out", str(out), "--only", "attention", "--rubric", str(rubric), "--jobs", "2")
    assert "regrading 2 of 2: rubric changed (attention: points)" in changed.stdout, changed.stdout
    assert "1 score(s) changed by the regrade" in changed.stdout
    attention = rubric_mod.load()["attention"].points  # alice's before; the changed line is worth 2 more now
    assert float(_rows(out)["alice"]["attention"]) == attention + 2
    with open(out / "regrades.csv", newline="") as fh:
        log = list(csv.DictReader(fh))
    assert [(r["submission"], r["problem"], r["old_score"], r["new_score"], r["reason"]) for r in log] == [
        ("alice", "attention", f"{attention:g}", f"{attention + 2:g}", "rubric changed (attention: points)")]

    # --only losses on graded handins: attention's tests stay, losses' are added, every column stays.
    merged = _cli(*two, "--out", str(out), "--only", "losses", "--rubric", str(rubric), "--jobs", "2")
    assert merged.returncode == 0, merged.stderr[-2000:]
    alice = json.loads((out / "alice" / "results.json").read_text())
    assert {t["tags"][0] for t in alice["tests"]} == {"attention", "losses"}
    assert alice["score"] == attention + 2
    assert list(_rows(out)["alice"]) == ["submission", *ORDER, "total", "max", "days_late", "penalty", "final"]

    # A late handin graded alone into the class folder: the gradebook keeps every row.
    late = _cli(str(subs / "late"), "--out", str(out), "--only", "attention", "--rubric", str(rubric))
    assert late.returncode == 0, late.stderr[-2000:]
    assert late.stdout.strip().splitlines()[-1].startswith('{"scores":{"attention":32.0')
    assert sorted(_rows(out)) == ["alice", "carol", "late"]
    assert "3 submissions" in (out / "report.html").read_text()

    forced = _cli(*two, "--out", str(out), "--only", "attention", "--rubric", str(rubric), "--force", "--jobs", "2")
    assert "regrading 2 of 2: --force" in forced.stdout and "graded 2 of 2" in forced.stdout
    assert {t["tags"][0] for t in json.loads((out / "alice" / "results.json").read_text())["tests"]} == {
        "attention",
        "losses",
    }


# ---------------------------------------------------------------- gradebook: rounding, roster, late policy, exports


def _half_up_cents(x: Fraction) -> Fraction:
    return Fraction(math.floor(x * 100 + Fraction(1, 2)), 100)


def test_rounded_columns_always_add_up_to_the_rounded_total():
    # Rounded one by one (half up) these give 1.34 + 2.34 + 3.34 = 7.02, but their sum 7.005 rounds to 7.01.
    cols, total = gradebook.round_columns([1.335, 2.335, 3.335])
    assert [str(c) for c in cols] == ["1.34", "2.34", "3.33"] and str(total) == "7.01"
    cols, total = gradebook.round_columns([0.125, 0.125, 0.125, 0.125])  # naive: 4 x 0.13 = 0.52 against 0.50
    assert [str(c) for c in cols] == ["0.13", "0.13", "0.12", "0.12"] and str(total) == "0.50"
    rng = random.Random(7)
    for _ in range(2000):
        values = [round(rng.uniform(0, 30), rng.choice((2, 3, 4))) for _ in range(5)]
        cols, total = gradebook.round_columns(values)
        exact = [Fraction(repr(v)) for v in values]
        assert sum(cols) == total
        assert Fraction(str(total)) == _half_up_cents(sum(exact)), values
        assert all(abs(Fraction(str(c)) - e) < Fraction(1, 100) for c, e in zip(cols, exact)), (values, cols)


def _synthetic_results(folder: Path, scores: dict[str, float], records: dict[str, dict]) -> None:
    """A results.json as the grader writes it: one test per problem, with the grader record."""
    r = CourseResult(submission=folder.name, problems=tuple(ORDER))
    points = {p: rubric_mod.load()[p].points for p in ORDER}
    for pid in ORDER:
        r.tests.append(CourseTest(pid, f"{pid}: all", scores.get(pid, 0.0), points[pid], "hidden"))
        r.max_points[pid] = points[pid]
    regrade.write_merged(r, folder, records, ORDER, merge_old=False)


def test_a_class_of_60_with_roster_late_policy_extensions_and_canvas_export(tmp_path):
    from autograder.batch.records import source_key

    problems = rubric_mod.load()
    records = regrade.current_records(problems, ORDER, FIXTURES)
    full = {p: problems[p].points for p in ORDER}  # every point of the rubric
    top = sum(full.values())
    odd = {"attention": 1.335, "losses": 2.335, "masks": 3.335}
    subs, out = tmp_path / "subs", tmp_path / "grades"
    times = {"s01": "2025-03-02T00:00:00+00:00",  # one minute late: one day
             "s02": "2025-03-03T00:59:00+00:00",  # 25 hours: two days
             "s03": "2025-03-05T23:58:00+00:00",  # 3 days 23:59 late: four started days, past max_days
             "s04": "2025-03-03T11:59:00+00:00",  # 1.5 days, with a 2-day extension
             "s06": "2025-03-02T10:00:00+00:00"}  # one day
    names = [f"s{i:02d}" for i in range(60)] + ["stranger"]
    # s05 in Gradescope's layout: its upload in s05/submission/, the platform's metadata beside it.
    paths = {name: subs / name / "submission" if name == "s05" else subs / name for name in names}
    for i, name in enumerate(names):
        paths[name].mkdir(parents=True)
        if name == "s59":
            continue  # on the roster, never handed in
        scores = odd if name == "s06" else full if i < 10 else {"attention": i / 3, "losses": 20 - i / 7, "masks": 10.0}
        _synthetic_results(out / name, scores, records)
        (out / name / ".source").write_text(source_key(paths[name]))
    # s05: Gradescope's metadata, submitted 30 hours after its own due date (two days).
    (subs / "s05" / "submission_metadata.json").write_text(json.dumps({
        "created_at": "2025-03-03T05:59:00.000000+00:00",
        "assignment": {"due_date": "2025-03-01T23:59:00.000000+00:00", "title": "HW3"},
        "users": [{"email": "s05@uni.edu", "name": "Student 05", "sid": "1005"}],
    }))
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student ID,Name,Email,Submission,Section\n"
        + "".join(
            f"{1000 + i},Student {i:02d},s{i:02d}@uni.edu,{f's{i:02d}.tar' if i == 7 else f's{i:02d}'},A{i % 2}\n"
            for i in range(60)
        )
    )
    (tmp_path / "ext.csv").write_text("student,days\n1004,2\n")
    (tmp_path / "times.csv").write_text("submission,submitted_at\n" + "".join(f"{k},{v}\n" for k, v in times.items()))
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(RUBRIC.read_text() + "\n[late]\npenalty_per_day = 0.1\nmax_days = 3\n")
    proc = _cli(
        *[str(paths[n]) for n in names if n != "s59"],
        "--out",
        str(out),
        "--rubric",
        str(rubric),
        "--roster",
        str(roster),
        "--extensions",
        str(tmp_path / "ext.csv"),
        "--submitted-at",
        str(tmp_path / "times.csv"),
        "--due",
        "2025-03-01T23:59:00+00:00",
        "--assignment-title",
        "HW3 (1234)",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "graded 0 of 60" in proc.stdout and "60 up to date" in proc.stdout
    assert "roster: 59 of 60 students have results" in proc.stdout
    assert "no results for: 1059 (s59)" in proc.stdout and "not on the roster: stranger" in proc.stdout

    rows = _rows(out)
    assert len(rows) == 60
    def late(days: int) -> tuple[str, str, str, str]:  # 10% of the total per day, all of it past max_days (3)
        penalty = top if days > 3 else top * days / 10
        return f"{top:.2f}", str(days), f"{penalty:.2f}", f"{top - penalty:.2f}"

    expected = {  # total, days late, penalty, final: by hand from the policy
        "s00": (f"{top:.2f}", "", "0.00", f"{top:.2f}"),  # no submission time known: no penalty, and the run says so
        "s01": late(1),
        "s02": late(2),
        "s03": late(4),
        "s04": late(0),
        "s05": late(2),
        "s06": ("7.01", "1", "0.70", "6.31"),
        "s10": ("", "", "0.00", ""),
    }
    for name, (total, days, penalty, final) in expected.items():
        row = rows[name]
        assert (row["days_late"], row["penalty"]) == (days, penalty), (name, row)
        if total:
            assert (row["total"], row["final"]) == (total, final), (name, row)
    assert [rows["s06"][p] for p in ORDER] == ["1.34", "2.34", "3.33", "0.00", "0.00"]
    for row in rows.values():
        cents = sum(round(float(row[p]) * 100) for p in ORDER)
        assert cents == round(float(row["total"]) * 100), row
    assert rows["s07"]["student_id"] == "1007" and rows["stranger"]["student_id"] == ""
    assert "late policy: no submission or due time for 54 submissions (no penalty applied)" in proc.stdout
    assert (
        "late: 6 submissions, 5 with a penalty" not in proc.stdout
        and "late: 5 submissions, 5 with a penalty" in proc.stdout
    )

    with open(out / "canvas.csv", newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "Section", "HW3 (1234)"]
    assert canvas[1] == ["Points Possible", "", "", "", f"{top:.2f}"]
    assert len(canvas) == 62
    assert canvas[2 + 3] == ["Student 03", "", "1003", "A1", "0.00"]
    assert canvas[2 + 1] == ["Student 01", "", "1001", "A1", late(1)[3]]
    assert canvas[2 + 59] == ["Student 59", "", "1059", "A1", ""]
    with open(out / "scores.csv", newline="") as fh:
        scores = {r["id"]: r["score"] for r in csv.DictReader(fh)}
    # stranger (i = 60): 60/3 + (20 - 60/7) + 10 = 41.428...
    assert scores["1002"] == late(2)[3] and scores["stranger"] == "41.43" and len(scores) == 60


def test_bad_bookkeeping_files_stop_the_run_before_grading_with_a_clear_message(tmp_path):
    sub = tmp_path / "alice"
    sub.mkdir()
    cases = [
        ("roster.csv", "id,name\n1,A\n", "--roster", "no column for email, submission"),
        (
            "roster.csv",
            "student id,name,email,submission\n1,A,a@x,a\n1,B,b@x,b\n",
            "--roster",
            "student id '1' appears twice",
        ),
        ("ext.csv", "student,days\n1,two\n", "--extensions", "extra days 'two' is not a number"),
        ("times.csv", "submission,time\nalice,yesterday\n", "--submitted-at", "'yesterday' is not an ISO 8601 time"),
    ]
    for fname, text, flag, fragment in cases:
        (tmp_path / fname).write_text(text)
        proc = _cli(str(sub), "--out", str(tmp_path / "out"), flag, str(tmp_path / fname))
        assert proc.returncode == 2 and fragment in proc.stderr, (fragment, proc.stderr[-800:])
        assert "Traceback" not in proc.stderr
    proc = _cli(str(sub), "--out", str(tmp_path / "out"), "--due", "Friday")
    assert proc.returncode == 2 and "--due: 'Friday' is not an ISO 8601 time" in proc.stderr
    assert not (tmp_path / "out" / "alice").exists()


# ---------------------------------------------------------------- hidden cases that rotate per term


def _files(root: Path, folder: str, vis: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / folder / vis).iterdir())}


def test_a_term_seed_rotates_the_hidden_cases_only_and_the_reference_still_scores_full_marks(tmp_path):
    from autograder.batch.worker import grade_hidden
    from autograder.fixturegen import attention_cases, lm_function_cases, notebook_cases
    from autograder.isolation import Limits

    terms = {}
    for label, seed, public_too in (("a", 1, False), ("b", 2, False), ("c", 2, True)):
        out = tmp_path / label
        attention_cases.write(out, seed, public_too)
        notebook_cases.write(out, seed, public_too)
        lm_function_cases.build(out, seed, public_too)
        terms[label] = out
    a, b, c = terms["a"], terms["b"], terms["c"]
    for folder in ("attention", "notebooks", "lm_functions"):
        assert _files(a, folder, "public") == _files(b, folder, "public"), folder
        hidden_a, hidden_b = _files(a, folder, "hidden"), _files(b, folder, "hidden")
        assert sorted(hidden_a) == sorted(hidden_b)
        differ = [n for n in hidden_a if n.endswith(".npz") and hidden_a[n] != hidden_b[n]]
        assert len(differ) == sum(n.endswith(".npz") for n in hidden_a), (folder, differ)
        assert _files(c, folder, "hidden") == hidden_b  # --public-too changes the public cases, not the hidden ones
        public_c = _files(c, folder, "public")
        assert all(public_c[n] != v for n, v in _files(b, folder, "public").items() if n.endswith(".npz")), folder
    # The cases really hold other numbers (not just other bytes): a hidden input differs.
    x_a = np.load(a / "attention" / "hidden" / "dk_ne_dv.npz")["X"]
    x_b = np.load(b / "attention" / "hidden" / "dk_ne_dv.npz")["X"]
    assert x_a.shape == x_b.shape and not np.allclose(x_a, x_b)

    sub = tmp_path / "reference"
    sub.mkdir()
    shutil.copyfile(SOLUTIONS / "attention.py", sub / "attention.py")
    full = sum(g.points for g in rubric_mod.load()["attention"].groups)
    for term in (a, b):
        result = grade_hidden(sub, case_root=term, only=["attention"], limits=Limits(timeout_s=30))
        assert result.score == full, [(t.name, t.score, t.output[:200]) for t in result.tests if not t.passed]
