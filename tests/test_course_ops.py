"""Course operations: safe regrades, --only merges, a gradebook that never shrinks, the regrade log.

The end-to-end test grades two small handins with --only attention (a few seconds each);
everything else runs the pure functions on hand-written results.json files.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch import regrade
from gradelib import results as results_mod
from gradelib import rubric as rubric_mod

from support import FIXTURES, HANDOUT, REPO, SOLUTIONS

RUBRIC = REPO / "gradelib" / "rubric.toml"
ORDER = ["attention", "losses", "masks", "prediction", "generation"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


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
    data = {"tests": [], "extra_data": {"grader": {"format": 1, "problems": regrade.current_records(now, ORDER, FIXTURES)}}}
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
    data = {"tests": [], "extra_data": {"grader": {"format": 1, "problems": regrade.current_records(now, ORDER, FIXTURES)}}}
    points = rubric_mod.load(_rubric_with(tmp_path, 'quantities = ["A_w"]\npoints = 2', 'quantities = ["A_w"]\npoints = 3'))
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
    assert regrade.stale_problems(partial, {"attention": now["attention"], "masks": now["masks"]}) == {"masks": "not graded yet (masks)"}


def _result(name: str, scores: dict[str, list[float]], notes: dict[str, list[str]] | None = None,
            general: list[str] | None = None, flags: dict[str, dict[str, str]] | None = None) -> results_mod.SubmissionResult:
    r = results_mod.SubmissionResult(submission=name, problems=tuple(p for p in ORDER if p in scores))
    for pid, values in scores.items():
        for i, v in enumerate(values):
            r.tests.append(results_mod.TestResult(pid, f"{pid}: line {i}", v, 2.0, "public" if i % 2 == 0 else "hidden", line=f"l{i}"))
        r.max_points[pid] = 2.0 * len(values)
        r.problem_notes[pid] = list((notes or {}).get(pid, []))
        r.problem_flags[pid] = list((flags or {}).get(pid, {}))
        r.flags.update((flags or {}).get(pid, {}))
        r.problem_seconds[pid] = 1.5
    r.notes = list(general or []) + [n for pid in r.problems for n in r.problem_notes[pid]]
    return r


def test_merge_replaces_only_the_regraded_problem_and_recomputes_the_score(tmp_path):
    old = _result("alice", {"attention": [2.0, 2.0], "prediction": [1.0, 0.5]},
                  notes={"prediction": ["old prediction note"], "attention": ["attention note"]}, general=["handin lacks x"],
                  flags={"prediction": {"predictions_do_not_match_model": "old"}})
    folder = tmp_path / "alice"
    records = regrade.current_records(rubric_mod.load(), ORDER, FIXTURES)
    regrade.write_merged(old, folder, {p: records[p] for p in old.problems}, ORDER, merge_old=False)
    new = _result("alice", {"prediction": [2.0, 1.25]}, notes={"prediction": ["new prediction note"]})
    regrade.write_merged(new, folder, {"prediction": records["prediction"]}, ORDER, merge_old=True)
    data = json.loads((folder / "results.json").read_text())
    got = [(t["tags"][0], t["score"], t["number"]) for t in data["tests"]]
    assert got == [("attention", 2.0, "1.1"), ("attention", 2.0, "1.2"), ("prediction", 2.0, "2.1"), ("prediction", 1.25, "2.2")]
    assert data["score"] == 2.0 + 2.0 + 2.0 + 1.25
    assert data["output"].splitlines() == ["handin lacks x", "attention note", "new prediction note"]
    assert "flags" not in data["extra_data"]  # the old prediction flag went with the old prediction tests
    assert set(data["extra_data"]["grader"]["problems"]) == {"attention", "prediction"}
    assert regrade.stale_problems(data, {p: records[p] for p in ("attention", "prediction")}) == {}
    feedback = (folder / "feedback.txt").read_text()
    assert "new prediction note" in feedback and "old prediction note" not in feedback and "TOTAL" in feedback


def test_results_json_stays_gradescope_json():
    r = _result("bob", {"attention": [1.0]})
    data = regrade.to_results_json(r, regrade.current_records(rubric_mod.load(), ["attention"], FIXTURES))
    assert set(data) == {"score", "execution_time", "output", "output_format", "visibility", "stdout_visibility", "tests", "extra_data"}
    json.dumps(data, allow_nan=False)
    for t in data["tests"]:
        assert set(t) <= {"name", "number", "score", "max_score", "status", "output", "visibility", "tags", "extra_data"}


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
    policy = rubric_mod.late_policy(path)
    assert [policy.penalty(d) for d in (0, 1, 2, 3)] == [0.0, 0.25, 0.5, 1.0]
    assert rubric_mod.late_policy(RUBRIC) is None


# ---------------------------------------------------------------- end to end, --only attention


def test_reruns_regrade_exactly_what_is_stale_merge_only_and_keep_every_row(tmp_path):
    subs = tmp_path / "subs"
    for name, source in (("alice", SOLUTIONS / "attention.py"), ("carol", HANDOUT / "attention.py"), ("late", SOLUTIONS / "attention.py")):
        (subs / name).mkdir(parents=True)
        shutil.copyfile(source, subs / name / "attention.py")
    out = tmp_path / "grades"
    two = [str(subs / "alice"), str(subs / "carol")]
    first = _cli(*two, "--out", str(out), "--only", "attention", "--jobs", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "grading 2 new submissions" in first.stdout
    assert float(_rows(out)["alice"]["attention"]) == 30 and float(_rows(out)["carol"]["attention"]) == 0

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
    changed = _cli(*two, "--out", str(out), "--only", "attention", "--rubric", str(rubric))
    assert "regrading 2 of 2: rubric changed (attention: points)" in changed.stdout, changed.stdout
    assert "1 score(s) changed by the regrade" in changed.stdout
    assert float(_rows(out)["alice"]["attention"]) == 32
    with open(out / "regrades.csv", newline="") as fh:
        log = list(csv.DictReader(fh))
    assert [(r["submission"], r["problem"], r["old_score"], r["new_score"], r["reason"]) for r in log] == [
        ("alice", "attention", "30", "32", "rubric changed (attention: points)")]

    # --only losses on graded handins: attention's tests stay, losses' are added, every column stays.
    merged = _cli(*two, "--out", str(out), "--only", "losses", "--rubric", str(rubric))
    assert merged.returncode == 0, merged.stderr[-2000:]
    alice = json.loads((out / "alice" / "results.json").read_text())
    assert {t["tags"][0] for t in alice["tests"]} == {"attention", "losses"}
    assert alice["score"] == 32.0
    assert list(_rows(out)["alice"]) == ["submission", *ORDER, "total", "max", "days_late", "penalty", "final"]

    # A late handin graded alone into the class folder: the gradebook keeps every row.
    late = _cli(str(subs / "late"), "--out", str(out), "--only", "attention", "--rubric", str(rubric))
    assert late.returncode == 0, late.stderr[-2000:]
    assert late.stdout.strip().splitlines()[-1].startswith('{"scores":{"attention":32.0')
    assert sorted(_rows(out)) == ["alice", "carol", "late"]
    assert "3 submissions" in (out / "report.html").read_text()

    forced = _cli(*two, "--out", str(out), "--only", "attention", "--rubric", str(rubric), "--force")
    assert "regrading 2 of 2: --force" in forced.stdout and "graded 2 of 2" in forced.stdout
    assert {t["tags"][0] for t in json.loads((out / "alice" / "results.json").read_text())["tests"]} == {"attention", "losses"}
