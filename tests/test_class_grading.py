"""A whole class graded end to end with --jobs 2: nothing lost, attacks get 0, runs repeat and resume.

The class (autograder/tools/classgen.py) has 57 handins: correct ones packed
every way, typical attention bugs, attacks, unsafe and malformed archives,
missing files and malformed language-model arrays. It is graded once, whole,
with --force; then 12 of its handins (of every kind) are graded three times
into another folder -- stopped by SIGINT, stopped by SIGTERM, then finished --
and must get exactly the grades of the whole run.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.batch.records import submission_names
from autograder.batch.report import SCRIPT
from autograder.tools.classgen import make_class
from gradelib import rubric

from support import FIXTURES, REPO

pytestmark = pytest.mark.slow

CLI = [sys.executable, str(REPO / "autograder" / "autograder.py")]
# Per problem run. The grader's clock leaves out the time a run waits for a CPU (tests/isolation/test_load.py), so the
# spinning attack is stopped by its CPU time and the sleeping one by the wall clock, at any load. A correct
# attention.py's run needs under 2 CPU-seconds (27 s on the wall clock at a load of 18 on 2 cores, in time): 8 s is
# generous, and each hanging attack costs 8 s, not the course's 60.
TIMEOUT_S = "8"
ATTENTION_MAX = sum(g.points for g in rubric.load()["attention"].groups)
# Handins graded in the interrupted runs (the whole class is graded once): every kind, and attacks
# that hang by sleeping, not by spinning (the whole run and the attack batch, tests/isolation/attack_batch.py,
# grade the spinners; three more gradings of each would burn 30 CPU-seconds apiece on a busy machine).
SUBSET = ("correct_folder", "correct_top_folder.tar", "bug_no_causal_mask.tar", "attack_sleeps_forever",
          "attack_forged_lines_then_raise", "attack_memory_blow_up", "attack_orphaned_sleepers", "archive_symlink.tar",
          "archive_fifo.tar", "archive_only_a_folder.tar", "archive_zero_bytes.tar", "missing_empty_folder")


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _processes_under(root: Path) -> list[str]:
    """Processes whose working directory lies under `root` (sandboxed children run in scratch folders there)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(root)):
                found.append(f"{entry} in {cwd}")
    return found


def _run(args: list[str], env: dict, stop_after: int | None = None, sig: int = signal.SIGINT, out: Path | None = None):
    """Run the CLI in its own process group; with stop_after, signal the group once that many results exist."""
    proc = subprocess.Popen(CLI + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    if stop_after is not None:
        deadline = time.monotonic() + 120
        while (
            len(list(out.glob("*/results.json"))) < stop_after and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        os.killpg(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=1200)  # a hang guard only: at a load of 20 the class takes 600 s
    return proc.returncode, stdout, stderr


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    base = tmp_path_factory.mktemp("class")
    expected = make_class(base, sample=True)
    paths = [base / "submissions" / name for name in expected]
    names = dict(zip(expected, submission_names(paths)))
    # Scratch folders go under a private TMPDIR, so leftover processes can be found by their cwd.
    scratch = Path(tempfile.mkdtemp(prefix="classrun-"))
    scratch.chmod(0o711)
    env = {**os.environ, "TMPDIR": str(scratch)}
    fixtures_before = _digest(FIXTURES / "attention")
    owned_before = os.path.exists("/tmp/owned")
    resumed, fresh = base / "resumed", base / "fresh"
    start = time.monotonic()
    repeat = _run([*map(str, paths), "--jobs", "2", "--timeout", TIMEOUT_S, "--out", str(fresh), "--force"], env)
    fresh_s = time.monotonic() - start
    # The interrupted runs: a slice of every kind, stopped twice and finished.
    subset = [base / "submissions" / name for name in SUBSET]
    assert all(p in paths for p in subset), "the class no longer has every handin of SUBSET"
    common = [*map(str, subset), "--jobs", "2", "--timeout", TIMEOUT_S]
    start = time.monotonic()
    first = _run([*common, "--out", str(resumed)], env, stop_after=3, sig=signal.SIGINT, out=resumed)
    after_first = len(list(resumed.glob("*/results.json")))
    leftovers_first = _processes_under(scratch)
    second = _run([*common, "--out", str(resumed)], env, stop_after=after_first + 3, sig=signal.SIGTERM, out=resumed)
    after_second = len(list(resumed.glob("*/results.json")))
    third = _run([*common, "--out", str(resumed)], env)
    resumed_s = time.monotonic() - start
    time.sleep(0.5)
    state = {
        "base": base,
        "expected": expected,
        "names": names,
        "resumed": resumed,
        "fresh": fresh,
        "subset": {p.name: names[p.name] for p in subset},
        "runs": {"sigint": first, "sigterm": second, "finish": third, "repeat": repeat},
        "counts": (after_first, after_second),
        "leftovers_after_sigint": leftovers_first,
        "leftovers_at_end": _processes_under(scratch),
        "fixtures_changed": _digest(FIXTURES / "attention") != fixtures_before,
        "owned_created": os.path.exists("/tmp/owned") and not owned_before,
        "times": (resumed_s, fresh_s),
    }
    yield state
    shutil.rmtree(scratch, ignore_errors=True)


def _rows(folder: Path) -> dict[str, dict[str, str]]:
    with open(folder / "grades.csv", newline="") as fh:
        return {r["submission"]: r for r in csv.DictReader(fh)}


def test_class_is_large_and_covers_every_kind(graded_class):
    kinds = {k.split("_")[0] for k in graded_class["expected"]}
    assert len(graded_class["expected"]) >= 40  # the sampled class: every kind, 3 of the planted bugs
    assert kinds == {"correct", "bug", "attack", "archive", "missing", "npy"}


def test_interrupted_runs_stop_cleanly_and_the_rerun_completes(graded_class):
    runs = graded_class["runs"]
    assert runs["sigint"][0] == 128 + signal.SIGINT, runs["sigint"][2][-2000:]
    assert runs["sigterm"][0] == 128 + signal.SIGTERM, runs["sigterm"][2][-2000:]
    assert "run the same command again" in runs["sigint"][2]
    first, second = graded_class["counts"]
    total = len(graded_class["subset"])
    assert 3 <= first < second < total, (first, second, total)
    assert graded_class["leftovers_after_sigint"] == []
    assert runs["finish"][0] == 0, runs["finish"][2][-2000:]
    assert f"{second} up to date" in runs["finish"][1]


def test_every_submission_has_results_feedback_and_one_gradebook_row(graded_class):
    for out, names in (
        (graded_class["resumed"], graded_class["subset"]),
        (graded_class["fresh"], graded_class["names"]),
    ):
        rows = _rows(out)
        assert sorted(rows) == sorted(names.values())
        for name in names.values():
            data = json.loads((out / name / "results.json").read_text())
            assert data["tests"] and all(t["visibility"] in ("visible", "after_published") for t in data["tests"])
            assert (out / name / "feedback.txt").read_text().startswith(f"Submission: {name}")
        assert (out / "report.html").is_file()
        assert not list(out.rglob("*.tmp")), "a temporary file was left behind"


def test_scores_match_what_each_submission_deserves(graded_class):
    rows = _rows(graded_class["fresh"])
    wrong = []
    for sub, kind in graded_class["expected"].items():
        row = rows[graded_class["names"][sub]]
        attention, total = float(row["attention"]), float(row["total"])
        ok = {
            "full": attention == ATTENTION_MAX,
            "partial": 0 < attention < ATTENTION_MAX,
            "zero": total == 0,
        }[kind]
        if not ok:
            wrong.append(f"{sub}: expected {kind}, got attention {attention}, total {total}")
    assert not wrong, "\n".join(wrong)


def test_attacks_and_unsafe_archives_score_zero_and_say_why(graded_class):
    rows = _rows(graded_class["fresh"])
    out = graded_class["fresh"]
    for sub in graded_class["expected"]:
        if sub.startswith(("attack_", "archive_")):
            assert float(rows[graded_class["names"][sub]]["total"]) == 0, sub
    reasons = {
        "archive_absolute_path": "points outside the archive",
        "archive_dotdot_path": "points outside the archive",
        "archive_symlink": "is a link",
        "archive_hardlink": "is a link",
        "archive_char_device": "device or FIFO",
        "archive_fifo": "device or FIFO",
        "archive_too_many_members": "more than 64 members",
        "archive_gzip_bomb": "unpacks to more than",
        "archive_not_a_tar": "is not a tar archive",
        "archive_zip_not_tar": "is not a tar archive",
        "archive_zero_bytes": "is not a tar archive",
        "archive_empty_tar": "is an empty archive",
        "archive_only_a_folder": "is an empty archive",
        "archive_truncated": "damaged",
        "attack_infinite_loop_at_import": "time limit",
        "attack_floods_stdout": "was stopped when its output passed",
    }
    for sub, fragment in reasons.items():
        name = graded_class["names"][next(k for k in graded_class["expected"] if k.startswith(sub))]
        feedback = (out / name / "feedback.txt").read_text()
        assert fragment in feedback, f"{name}: {fragment!r} not in\n{feedback[:600]}"


def test_forged_score_lines_never_reach_the_grader_output(graded_class):
    stdout = graded_class["runs"]["repeat"][1]
    n = len(graded_class["expected"])
    assert '"scores"' not in stdout and "PASS" not in stdout
    assert stdout.strip().splitlines()[0] == f"grading {n} new submissions"
    assert stdout.strip().splitlines()[1].startswith(f"graded {n} of {n}")


def test_submissions_cannot_touch_the_cases_or_outlive_the_run(graded_class):
    assert not graded_class["fixtures_changed"]
    assert not graded_class["owned_created"]
    assert graded_class["leftovers_at_end"] == []


def test_repeated_and_resumed_runs_give_identical_grades(graded_class):
    resumed, fresh = graded_class["resumed"], graded_class["fresh"]
    assert len({k.split("_")[0] for k in graded_class["subset"]}) >= 4  # several kinds were interrupted
    whole = _rows(fresh)
    assert _rows(resumed) == {n: whole[n] for n in graded_class["subset"].values()}
    for name in graded_class["subset"].values():
        a = json.loads((resumed / name / "results.json").read_text())
        b = json.loads((fresh / name / "results.json").read_text())
        assert [(t["name"], t["score"]) for t in a["tests"]] == [(t["name"], t["score"]) for t in b["tests"]], name


def test_rerun_without_force_grades_nothing_again(graded_class, tmp_path):
    rc, stdout, _ = _run([*map(str, graded_class["base"].glob("submissions/*")), "--out", str(graded_class["fresh"])],
                         dict(os.environ))
    n = len(graded_class["expected"])
    assert rc == 0 and f"graded 0 of {n}" in stdout and f"({n} up to date" in stdout


def test_a_grader_process_that_keeps_dying_is_marked_not_graded_and_the_next_run_grades_it(tmp_path):
    sub = tmp_path / "student"
    sub.mkdir()
    shutil.copyfile(REPO / "solutions" / "attention.py", sub / "attention.py")
    # 60 MB of address space is too little for the grader's own process to import numpy.
    rc, stdout, stderr = _run([str(sub), "--out", str(tmp_path / "out"), "--worker-memory-mb", "60", "--retries", "1"],
                              dict(os.environ))
    assert rc == 0, stderr
    data = json.loads((tmp_path / "out" / "student" / "results.json").read_text())
    assert data["score"] is None and "not graded: attention" in data["extra_data"]["flags"]  # no score, not a 0
    assert "could not be graded" in data["output"] and "on each of 2 attempts" in data["output"]
    assert stdout.strip().splitlines()[-1] == '{"scores":{}}'  # no score at all, rather than a student's 0
    assert (tmp_path / "out" / ".logs" / "student.log").read_text().count("--- attempt") == 2
    # Marked for regrading: the same command without --force grades it, now that the grader can.
    rc, stdout, stderr = _run([str(sub), "--out", str(tmp_path / "out")], dict(os.environ))
    data = json.loads((tmp_path / "out" / "student" / "results.json").read_text())
    assert rc == 0 and data["score"] == ATTENTION_MAX and "flags" not in data.get("extra_data", {}), (
        stdout,
        stderr[-2000:],
    )


def test_a_submission_past_its_deadline_is_stopped_and_recorded_as_not_graded(tmp_path):
    sub = tmp_path / "hang"
    sub.mkdir()
    (sub / "attention.py").write_text("while True:\n    pass\n")
    start = time.monotonic()
    rc, stdout, stderr = _run(
        [str(sub), "--out", str(tmp_path / "out"), "--timeout", "180", "--submission-timeout", "2"], dict(os.environ)
    )
    assert rc == 0, stderr
    assert time.monotonic() - start < 90  # the 2 s deadline, not the run's 180 s limit (generous: a busy machine)
    data = json.loads((tmp_path / "out" / "hang" / "results.json").read_text())
    assert data["score"] is None and "ran past the 2 s limit" in data["output"]


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def _chromium() -> str:
    """Path of Debian's chromium, installing chromium and chromium-driver when missing and running as root."""
    path = shutil.which("chromium")
    if path:
        return path
    if os.geteuid() != 0:
        pytest.skip(
            "chromium is not installed and installing it needs root: apt-get install -y chromium chromium-driver"
        )
    proc = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"],
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True, text=True)
    path = shutil.which("chromium")
    if not path:
        pytest.skip(f"apt-get install chromium chromium-driver failed (exit {proc.returncode}): {proc.stderr[-300:]}")
    return path


def _render(report: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, report.as_uri()],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report_dom(graded_class, tmp_path_factory) -> str:
    """The class report's DOM as headless Chromium builds it (its script run)."""
    return _render(graded_class["fresh"] / "report.html", tmp_path_factory.mktemp("profile"), "--dump-dom").stdout


def test_report_renders_in_headless_chromium_with_every_section(graded_class, report_dom):
    dom = report_dom
    n = len(graded_class["expected"])
    assert f"{n} submissions" in dom
    for section in ('id="score-histogram"', 'id="pass-rates"', 'id="slowest"', 'id="failed"', 'id="all"'):
        assert section in dom, section
    assert dom.index('id="failed"') < dom.index('id="score-histogram"')  # what needs a TA comes first
    chart = dom[dom.index('id="score-histogram"'):]
    counts = [int(c) for c in __import__("re").findall(r'data-count="(\d+)"', chart[: chart.index("</svg>")])]
    assert sum(counts) == n
    rows = _rows(graded_class["fresh"])
    full = sum(float(r["total"]) == float(r["max"]) for r in rows.values())
    zero = sum(float(r["total"]) == 0 for r in rows.values())
    assert f"zero {zero}" in dom and f"full marks {full}" in dom
    assert "attack_steals_hidden_cases" in dom and "archive_gzip_bomb" in dom


def test_report_escapes_what_a_submission_printed(graded_class, report_dom):
    html = (graded_class["fresh"] / "report.html").read_text()
    assert "&lt;script&gt;document.title" in html  # the sleeper's output, shown as text
    dom = report_dom
    # The one script is the report's own (allowed by its hash); nothing a submission printed became markup.
    assert dom.count("<script") == 1 and SCRIPT.strip() in dom and "<img" not in dom
    assert "<title>Class report</title>" in dom


def test_report_screenshot_is_written(graded_class, tmp_path):
    shot = graded_class["base"] / "report.png"
    _render(
        graded_class["fresh"] / "report.html", tmp_path / "profile", f"--screenshot={shot}", "--window-size=1100,1800"
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def _synthetic_class(folder: Path, n: int) -> dict:
    """n results.json files with known failing tests and LM figures; what the report must show, computed here."""
    import random

    rng = random.Random(7)
    expected = {"failing": [], "nll": [], "ppl": []}
    for i in range(n):
        name = f"s{i:03d}"
        fails = i % 5 == 0
        nll, ppl = rng.uniform(0.6, 1.6), math.exp(rng.uniform(math.log(3), math.log(300)))
        tests = [
            {"name": "attention: forward [public]", "score": 0.0 if fails else 2.0, "max_score": 2.0,
             "status": "failed" if fails else "passed", "tags": ["attention"], "extra_data": {"line": "forward"}},
            {"name": "prediction: prediction NLL [hidden]", "score": 1.0, "max_score": 18.0, "status": "failed",
             "tags": ["prediction"], "extra_data": {"line": "nll", "figures": {"prediction_nll": nll}}},
            {"name": "generation: generation perplexity under the oracle [hidden]", "score": 1.0, "max_score": 18.0,
             "status": "failed", "tags": ["generation"],
             "extra_data": {"line": "perplexity", "figures": {"generation_perplexity": ppl}}},
        ]
        (folder / name).mkdir(parents=True)
        (folder / name / "results.json").write_text(json.dumps(
            {"score": sum(t["score"] for t in tests), "tests": tests, "execution_time": 1.0}))
        expected["failing"] += [name] if fails else []
        expected["nll"].append(nll)
        expected["ppl"].append(ppl)
    return expected


def test_report_for_300_students_sorts_filters_drills_down_and_draws_thresholds(tmp_path):
    import re

    from autograder.batch.records import read_row
    from autograder.batch.report import thresholds_of, write_report
    from gradelib import rubric

    n = 300
    expected = _synthetic_class(tmp_path / "out", n)
    rows = [read_row(tmp_path / "out" / f"s{i:03d}" / "results.json", f"s{i:03d}") for i in range(n)]
    problems = rubric.load()
    thresholds = thresholds_of(problems)
    report = tmp_path / "out" / "report.html"
    write_report(report, rows, list(problems), "Class report", thresholds)
    dom = _render(report, tmp_path / "profile", "--dump-dom").stdout
    # The script ran (the page's own policy allows it by hash): every sortable table counts its rows.
    assert f"{n} of {n} rows" in dom
    # Drill-down: the failing submissions of the forward test, exactly.
    row = dom[dom.index("attention: forward [public]"):]
    row = row[: row.index("</tr>")]
    assert re.findall(r'href="(s\d{3})/feedback.txt"', row) == expected["failing"]
    # The LM figures as histograms holding every submission, with the rubric's thresholds drawn.
    for key, values in (("prediction_nll", expected["nll"]), ("generation_perplexity", expected["ppl"])):
        chart = dom[dom.index(f'id="figure-{key}"'):]
        chart = chart[: chart.index("</svg>")]
        assert sum(int(c) for c in re.findall(r'data-count="(\d+)"', chart)) == len(values)
        full, zero = thresholds[key]
        assert f"full credit {full:g}" in chart and f"no credit {zero:g}" in chart and chart.count('class="mark"') == 2
    shot = tmp_path / "report.png"
    _render(report, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1100,2400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Any other script is refused by the policy: a planted one does not run.
    planted = tmp_path / "out" / "planted.html"
    planted.write_text(report.read_text().replace("</body>", "<script>document.title='pwned'</script></body>"))
    assert "<title>Class report</title>" in _render(planted, tmp_path / "profile2", "--dump-dom").stdout


def _bunched_class(folder: Path) -> dict:
    """30 results.json files as a class bunched near full marks (totals 100 to 120 of 120), one of them not graded
    (the grader lost its attention run), one scored by a run killed from outside its limits (as an older grader
    recorded it): what the report must show, computed here."""
    import random

    rng = random.Random(43)
    totals = {}
    for i in range(30):
        name = f"s{i:02d}"
        lost, touched = i == 7, i == 11
        fails = {"attention: forward [public]": i % 3 == 0, "attention: backward [hidden]": i % 10 == 0}
        rest = 120.0 - 4.0 - rng.choice([0, 0, 0, 2, 5, 8, 10, 12, 16])
        tests = [{"name": n, "score": None if lost else (0.0 if bad else 2.0), "max_score": 2.0,
                  "tags": ["attention"], "output": "x", **({} if lost else {"status": "failed" if bad else "passed"})}
                 for n, bad in fails.items()]
        tests.append({"name": "prediction: NLL [hidden]", "score": rest, "max_score": 116.0, "tags": ["prediction"],
                      "status": "passed" if rest == 116 else "failed",
                      "output": "killed by SIGKILL from outside its limits" if touched else "ok"})
        data = {"score": None if lost else sum(t["score"] for t in tests), "tests": tests, "execution_time": 1.0}
        if lost:
            data["extra_data"] = {"flags": {"not graded: attention": "the sandboxed run was killed by SIGKILL"}}
        (folder / name).mkdir(parents=True)
        (folder / name / "results.json").write_text(json.dumps(data))
        totals[name] = None if lost else data["score"]
    return totals


def test_report_leads_with_what_needs_a_ta_and_resolves_a_class_bunched_near_full_marks(tmp_path):
    """The list of submissions to open (not graded ones, and scores a fault may have touched) comes first; the
    score histogram's bins are 2.5 points wide, so no bar holds most of a class spread over 100-120; the pass rates
    come most failed first, and sort by failure rate on a click. Checked in headless Chromium, screenshot kept."""
    import re

    from autograder.batch.records import read_row
    from autograder.batch.report import write_report
    from autograder.batch.triage import needs_look

    out = tmp_path / "out"
    totals = _bunched_class(out)
    rows = [read_row(out / name / "results.json", name) for name in totals]
    report = out / "report.html"
    write_report(report, rows, ["attention", "prediction"], "Class report", needs=needs_look(rows, ["attention"]))
    dom = _render(report, tmp_path / "profile", "--dump-dom").stdout
    order = [dom.index(f'id="{section}"') for section in ("summary", "failed", "score-histogram", "pass-rates", "all")]
    assert order == sorted(order), order
    listed = dom[dom.index('<table id="failed"'):]
    listed = listed[: listed.index("</table>")]
    assert "s07" in listed and "not graded: attention: the sandboxed run was killed by SIGKILL" in listed
    assert "s11" in listed and "a fault may have touched this score: prediction: NLL [hidden]" in listed
    assert "29 submissions" not in dom and "30 submissions (1 not graded" in dom
    chart = dom[dom.index('id="score-histogram"'):]
    counts = [int(c) for c in re.findall(r'data-count="(\d+)"', chart[: chart.index("</svg>")])]
    graded = [t for t in totals.values() if t is not None]
    assert len(counts) == 48 and sum(counts) == len(graded) == 29  # 2.5-point bins; the one not graded has no total
    expected = [sum(1 for t in graded if min(int(t / 2.5), 47) == b) for b in range(48)]  # the bins, from the totals
    assert counts == expected and max(counts) < len(graded) / 2, counts
    rates = dom[dom.index('<table id="pass-rates"'):]
    rates = re.findall(r"<tr><td>([^<]*)</td><td>(\d+) / (\d+)</td><td>(\d+)%</td>", rates[: rates.index("</table>")])
    failure = [int(f) for _name, _p, _n, f in rates]
    assert failure == sorted(failure, reverse=True) and rates[0][0] == "prediction: NLL [hidden]", rates
    shot = tmp_path / "report-top.png"
    _render(report, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1100,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot of report.html's first screen: {shot}")
