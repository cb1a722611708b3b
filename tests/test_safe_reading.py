"""The grader reads what a submission controls safely and always writes valid results.

- the course grader's reader (autograder/isolation/safe_reading.py, installed for every
  course grading) refuses links, FIFOs and devices planted in place of a child's
  meta.json or .npy; gradelib/safeio.py refuses files over their cap and .npy headers
  that would make the grader allocate or misread (objects, structured, subarray,
  complex, long double, shapes larger than the data);
- scores are finite numbers: a non-finite NLL scores 0 with a message, and results.json,
  the Autolab line and report.html stay valid whatever one submission did;
- two submissions never share an output folder, and a resumed run keeps each grade
  with its own student;
- text from a submission reaches no terminal or file with its control characters.

Hostile child processes (planted links, escape codes in exceptions) are in
tests/isolation/test_attacks_files.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autograder.batch.atomic import write_json_atomic
from autograder.batch.autolab import autolab_line
from autograder.batch.gradebook import write_gradebook
from autograder.batch.records import read_row, source_key, submission_names
from autograder.batch.regrade import write_merged
from autograder.batch.report import write_report
from autograder.batch.results_json import gradescope_test
from autograder.batch.results_json import to_json as to_results_json
from autograder.grading.course_result import CourseResult
from autograder.grading.course_result import CourseTest as Line  # the course records every test as one
from autograder.isolation import safe_reading
from gradelib import safeio
from gradelib.safeio import SafeReadError, clean_text
from gradelib.scoring import load_meta, observed_from_child, read_array

from support import REPO, SOLUTIONS, grade_files

CLI = REPO / "autograder" / "autograder.py"
PREDICTION_SHAPE = (128, 20, 30)
SECRET = "SECRET-7f3a9c-not-for-students"


def strict_loads(text: str):
    """json.loads that fails on NaN/Infinity, as every JSON reader outside Python does."""
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")
    return json.loads(text, parse_constant=refuse)


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail (not hang) when the body blocks, e.g. on a FIFO."""
    def expired(_signum, _frame):
        raise TimeoutError(f"blocked for more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def raw_npy(header: str, data: bytes = b"") -> bytes:
    """A .npy file with a header written by hand (what np.save would never write)."""
    head = header.encode("latin1")
    head += b" " * (63 - (10 + len(head)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + data


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


@pytest.fixture(autouse=True)
def course_reader():
    """The course grader's reader, as every course grading has it (autograder/isolation/install.py)."""
    before = safeio.install(safe_reading.READER)
    yield
    safeio.install(before)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file the child must never get read: valid JSON that would forge a note if followed."""
    path = tmp_path / "other_student" / "feedback.txt"
    path.parent.mkdir()
    path.write_text(json.dumps({"quantities": {"Q": {"present": True, "type": "torch.Tensor", "note": SECRET}}}))
    return path


@pytest.fixture
def case_dir(tmp_path) -> Path:
    """A child's scratch folder with one case written the way child_common.Recorder writes it."""
    case = tmp_path / "scratch" / "outputs" / "case1"
    case.mkdir(parents=True)
    np.save(case / "Q.npy", np.arange(6.0).reshape(2, 3))
    (case / "meta.json").write_text(json.dumps({"quantities": {"Q": {"present": True, "type": "torch.Tensor"}}}))
    return case


# --- a child's outputs replaced by links, FIFOs and devices ---------------------------------------

def _plant(target: Path, kind: str, secret: Path) -> None:
    target.unlink()
    if kind == "symlink_to_other_student":
        target.symlink_to(secret)
    elif kind == "symlink_to_root_only":
        target.symlink_to("/etc/shadow")
    elif kind == "symlink_to_proc_cmdline":
        target.symlink_to(f"/proc/{os.getpid()}/cmdline")
    elif kind == "symlink_to_dev_zero":
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "hard_link_to_other_student":
        os.link(secret, target)
    else:
        raise AssertionError(kind)


PLANTS = ["symlink_to_other_student", "symlink_to_root_only", "symlink_to_proc_cmdline", "symlink_to_dev_zero", "fifo",
          "hard_link_to_other_student"]
EXPECTED_REASON = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "hard_link_to_other_student": "has 2 hard links",
}


@pytest.mark.parametrize("kind", PLANTS)
def test_planted_meta_json_is_refused_without_blocking_or_following(case_dir, secret, kind):
    _plant(case_dir / "meta.json", kind, secret)
    root = case_dir.parent.parent
    start = time.monotonic()
    with deadline(5):
        meta, why = load_meta(case_dir / "meta.json", root=root)
    assert time.monotonic() - start < 2
    assert meta is None
    assert EXPECTED_REASON.get(kind, "is a symbolic link, not a regular file") in why, why
    assert SECRET not in why


@pytest.mark.parametrize("kind", PLANTS)
def test_planted_npy_is_refused_and_the_reason_reaches_the_note(case_dir, secret, kind):
    np.save(secret.parent / "answer.npy", np.arange(6.0).reshape(2, 3))
    target = case_dir / "Q.npy"
    if kind in ("symlink_to_other_student", "hard_link_to_other_student"):
        secret = secret.parent / "answer.npy"  # a valid array: followed, it would be loaded
    _plant(target, kind, secret)
    meta = json.loads((case_dir / "meta.json").read_text())
    with deadline(5):
        obs = observed_from_child(case_dir, meta, "Q", "not produced", root=case_dir.parent.parent)
    assert obs.present and obs.array is None
    assert "Q.npy " + EXPECTED_REASON.get(kind, "is a symbolic link, not a regular file") in obs.note, obs.note


def test_a_linked_case_folder_is_not_followed(case_dir, tmp_path):
    """The child owns every folder below its scratch, not only the files in them."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "meta.json").write_text(json.dumps({"quantities": {}, "note": SECRET}))
    for p in case_dir.iterdir():
        p.unlink()
    case_dir.rmdir()
    case_dir.symlink_to(elsewhere, target_is_directory=True)
    meta, why = load_meta(case_dir / "meta.json", root=case_dir.parent.parent)
    assert meta is None and "symbolic link" in why and SECRET not in why, why
    # Without a root only the last component is guarded: the walk is what stops this.
    assert safe_reading.read_json(case_dir / "meta.json", 1000)["note"] == SECRET


def test_a_sparse_8_gb_file_is_refused_by_its_size_before_reading(tmp_path):
    path = tmp_path / "meta.json"
    with open(path, "wb") as fh:
        fh.truncate(8 * 2**30)  # sparse: no disk used
    start = time.monotonic()
    with pytest.raises(SafeReadError) as info:
        safeio.read_json(path, 1_000_000)
    assert time.monotonic() - start < 1
    assert info.value.reason == "size" and "more than the 1000000" in str(info.value)


def test_a_folder_in_place_of_a_file_is_refused(case_dir):
    (case_dir / "meta.json").unlink()
    (case_dir / "meta.json").mkdir()
    meta, why = load_meta(case_dir / "meta.json", root=case_dir.parent.parent)
    assert meta is None and "is a folder, not a regular file" in why


def test_meta_json_with_nan_or_not_an_object_is_refused(case_dir):
    (case_dir / "meta.json").write_text('{"quantities": NaN}')
    assert load_meta(case_dir / "meta.json")[0] is None
    (case_dir / "meta.json").write_text("[1, 2]")
    meta, why = load_meta(case_dir / "meta.json")
    assert meta is None and "holds list" in why


def test_a_missing_file_is_reported_as_missing(tmp_path):
    with pytest.raises(SafeReadError) as info:
        safeio.read_npy(tmp_path / "nothing.npy", max_bytes=100)
    assert info.value.reason == "missing" and str(info.value) == "nothing.npy is missing"


# --- .npy headers -----------------------------------------------------------------------------------

REFUSED_DTYPES = {
    "float128": (npy_bytes(np.full(3, np.longdouble("1e4000"))), "long double"),
    "complex": (npy_bytes(np.ones(3, dtype=np.complex128)), "complex dtype complex128"),
    "objects": (npy_bytes(np.array([{"a": 1}], dtype=object)), "Python objects (a pickle)"),
    "structured": (npy_bytes(np.zeros(3, dtype=[("a", "<f8"), ("b", "<i4")])), "structured dtype"),
    "text": (npy_bytes(np.array(["abc"])), "has dtype <U3, expected"),
    "datetime": (npy_bytes(np.zeros(2, dtype="M8[s]")), "has dtype datetime64[s], expected"),
    "subarray": (
        raw_npy("{'descr': ('<f8', (1000, 1000)), 'fortran_order': False, 'shape': (1400,), }", bytes(64)),
        "subarray dtype",
    ),
    "structured_subarray": (
        raw_npy("{'descr': [('a', '<f8', (1000, 1000))], 'fortran_order': False, 'shape': (1400,), }"),
        "structured dtype",
    ),
    "huge_shape": (
        raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 1000000000000), }"),
        "values), more than the",
    ),
    "negative_shape": (raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }"), "invalid shape (-1,)"),
    "truncated": (npy_bytes(np.ones(100))[:-80], "is truncated: shape (100,) of float64 needs 800 bytes"),
    "expression_in_header": (
        raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (10**12,), }"),
        "is not a .npy array",
    ),
    "version_3": (b"\x93NUMPY\x03\x00" + bytes(60), "format version 3.0"),
    "not_npy": (b"PK\x03\x04 a zip", "is not a .npy array"),
}


@pytest.mark.parametrize("reader", ["course", "kit"])
@pytest.mark.parametrize("case", sorted(REFUSED_DTYPES))
def test_npy_headers_the_grader_must_not_load_are_refused_with_a_message(tmp_path, case, reader):
    if reader == "kit":  # the student's own laptop: the same words
        safeio.install(None)
    data, needle = REFUSED_DTYPES[case]
    path = tmp_path / "x.npy"
    path.write_bytes(data)
    with pytest.raises(SafeReadError) as info:
        safeio.read_npy(path, max_bytes=10**6, max_elements=10**6)
    message = str(info.value)
    assert message.startswith("x.npy ") and needle in message, message
    assert "Traceback" not in message


def test_refusal_happens_before_allocating_under_a_memory_cap(tmp_path):
    """A subarray header that once made the grader allocate 11 GiB, read under a 1 GiB address-space cap."""
    path = tmp_path / "x.npy"
    path.write_bytes(REFUSED_DTYPES["subarray"][0])
    code = ("import sys; from gradelib import safeio\n"
            "try:\n    safeio.read_npy(sys.argv[1], max_bytes=10**9)\n"
            "except safeio.SafeReadError as exc:\n    print('refused:', exc)\n")
    cap = 2**30

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60, cwd=REPO,
                          preexec_fn=limit)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: x.npy has a subarray dtype" in proc.stdout, proc.stdout


@pytest.mark.parametrize("arr", [
    np.arange(6.0).reshape(2, 3),
    np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    np.arange(5, dtype=">i8"),
    np.ones((2, 2), dtype=np.float16),
    np.array([True, False]),
    np.zeros((0, 30), dtype=np.float32),
    np.array(2.5),
], ids=["float64", "fortran_int32", "big_endian", "float16", "bool", "empty", "scalar"])
@pytest.mark.parametrize("reader", ["course", "kit"])
def test_plain_arrays_are_read_exactly_as_native_owned_c_arrays(tmp_path, arr, reader):
    if reader == "kit":
        safeio.install(None)
    path = tmp_path / "a.npy"
    np.save(path, arr)
    got = safeio.read_npy(path, max_bytes=10**6)
    assert got.shape == arr.shape and np.array_equal(got, arr)
    assert got.dtype == arr.dtype.newbyteorder("=") and got.dtype.isnative
    assert got.flags.c_contiguous and got.flags.writeable and got.flags.owndata


def test_an_array_over_the_byte_cap_names_its_shape_without_reading_it(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.zeros((128, 20, 300), dtype=np.float32))
    with pytest.raises(SafeReadError) as info:
        safeio.read_npy(path, max_bytes=100_000)
    assert info.value.reason == "size" and info.value.shape == (128, 20, 300)
    assert read_array(path)[0] is not None  # the child's cap is larger


# --- clean_text ------------------------------------------------------------------------------------

def test_clean_text_removes_escapes_bells_c1_and_bidi_but_keeps_newlines_and_tabs():
    dirty = "a\x1b[2J\x07b\r\nc\td\x9b31m\u202eevil\u2066\x00\x7f\ud800 é ✓"
    assert clean_text(dirty) == "a[2Jb\nc\td31mevil é ✓"
    assert clean_text(ValueError("x\x1b]0;title\x07")) == "x]0;title"


# --- scores are numbers, JSON is strict ----------------------------------------------------------------

def test_a_non_finite_score_is_recorded_as_zero_and_json_stays_strict(tmp_path):
    result = CourseResult("s\x1b[31m", problems=("p",), max_points={"p": 2.0})
    result.tests += [Line("p", "nan line", float("nan"), 1.0, "public", "x"),
                     Line("p", "inf line", float("inf"), 1.0, "hidden", "y\x07")]
    assert [t.score for t in result.tests] == [0.0, 0.0]
    assert "not a finite number" in result.tests[0].output
    write_merged(result, tmp_path / "out", {}, ["p"], merge_old=False)
    data = strict_loads((tmp_path / "out" / "results.json").read_text())
    assert data["score"] == 0.0 and all(t["score"] == 0.0 for t in data["tests"])
    assert strict_loads(autolab_line(read_row(tmp_path / "out" / "results.json", "s"), ["p"])) == {"scores": {"p": 0.0}}
    text = (tmp_path / "out" / "feedback.txt").read_text()
    assert "\x1b" not in text and "\x07" not in text
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "bad.json", {"x": float("nan")})
    assert not (tmp_path / "bad.json").exists()


def _predictions(value, dtype) -> bytes:
    rng = np.random.default_rng(0)
    arr = rng.standard_normal(PREDICTION_SHAPE).astype(dtype)
    arr[0, 0, 0] = value
    return npy_bytes(arr)


@pytest.mark.skipif(not np.isfinite(np.longdouble("1e4000")), reason="this platform's long double is float64")
def test_float128_predictions_score_zero_with_a_clear_message(tmp_path):
    result = grade_files(tmp_path, {"predictions.npy": _predictions(np.longdouble("1e4000"), np.longdouble)},
                         only=["prediction"])
    fmt = [t for t in result.tests if t.line == "format"]
    assert fmt and all(t.score == 0.0 for t in fmt)
    for t in fmt:
        assert "long double" in t.output and "expected a float dtype (e.g. float32)" in t.output, t.output
    assert all(t.score == 0.0 for t in result.tests if t.line == "nll")  # no model.pt: nothing to grade
    strict_loads(json.dumps(to_results_json(result, {}), allow_nan=False))


def test_a_models_extreme_logits_score_zero_and_results_stay_strict_json(tmp_path):
    """Logits as far apart as float32 allows, a confident wrong pick at every step: a finite, huge NLL, 0 points."""
    from autograder.grading import model_quality
    from autograder.isolation import Limits
    from gradelib import rubric
    from gradelib.context import GradeContext
    from gradelib.problems import lm_model
    from gradelib.scoring import lines

    targets = np.load(REPO / "fixtures" / "lm" / "hidden" / "prediction_test_out.npz")["out"]
    logits = np.full(targets.shape + (30,), -3e38, dtype=np.float32)
    logits[..., 2] = 3e38
    assert not (targets == 2).all()
    vis = ("public", "hidden")
    ctx = GradeContext(tmp_path, REPO / "fixtures", vis, Limits())
    ctx.cache[("lm_model", vis)] = lm_model.ModelRun(teacher_forced={"test": logits}, targets={"test": targets})
    problem = rubric.load()["prediction"]
    line = next(ln for ln in lines(problem, vis) if ln.group.id == "nll")
    test = model_quality._score_nll(ctx, problem, line)
    assert test.score == 0.0 and "prediction NLL" in test.output, test.output
    strict_loads(json.dumps(gradescope_test(test, "1.1"), allow_nan=False))


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.skipif(not np.isfinite(np.longdouble("1e4000")), reason="this platform's long double is float64")
def test_float128_predictions_leave_valid_results_autolab_line_and_report(tmp_path):
    subs = tmp_path / "subs"
    bad, subarray, good = subs / "float128", subs / "subarray", subs / "plain"
    for folder in (bad, subarray, good):
        folder.mkdir(parents=True)
    (bad / "predictions.npy").write_bytes(_predictions(np.longdouble("1e4000"), np.longdouble))
    (subarray / "predictions.npy").write_bytes(REFUSED_DTYPES["subarray"][0])
    (good / "predictions.npy").write_bytes(_predictions(0.0, np.float32))
    out = tmp_path / "grades"
    # The worker's own address space is capped: a regression that allocates fails its worker, not this machine.
    common = ["--timeout", "20", "--only", "prediction", "--worker-memory-mb", "3072"]
    single = run_cli(str(bad), "--out", str(tmp_path / "single"), *common)
    assert single.returncode == 0, single.stderr[-2000:]
    assert strict_loads(single.stdout.strip().splitlines()[-1]) == {"scores": {"prediction": 0.0}}
    batch = run_cli(str(bad), str(subarray), str(good), "--out", str(out), *common)
    assert batch.returncode == 0, batch.stderr[-2000:]
    for name, needle in (("float128", "long double"), ("subarray", "subarray dtype")):
        raw = (out / name / "results.json").read_text()
        data = strict_loads(raw)
        assert data["score"] == 0.0
        feedback = (out / name / "feedback.txt").read_text()
        for text in (raw, feedback, batch.stdout, batch.stderr):
            assert "Traceback" not in text and "internal grader error" not in text
        assert needle in feedback, feedback
    # The plain float32 array beside them is read and judged well formed (it scores 0 only for want of a model.pt).
    plain = strict_loads((out / "plain" / "results.json").read_text())
    fmt = next(t for t in plain["tests"] if t["extra_data"]["line"] == "format")
    assert "predictions.npy is well formed" in fmt["output"] and "model.pt is missing" in fmt["output"], fmt["output"]
    report = (out / "report.html").read_text()
    assert "float128" in report and "subarray" in report
    assert re.search(r"(?i)>\s*-?(nan|inf)\s*<", report) is None
    assert (out / "grades.csv").read_text().count("\n") == 4


# --- the class report survives any one results.json ---------------------------------------------------------

BROKEN_RESULTS = {
    "not_json": b"{ this is not json",
    "nan_score": b'{"score": NaN, "tests": [{"name": "t", "score": NaN, "max_score": 1, "tags": ["attention"]}]}',
    "inf_in_test": b'{"score": 0, "tests": [{"name": "t", "score": 1e400, "max_score": 1, "tags": ["attention"]}]}',
    "a_list": b"[1, 2, 3]",
    "text_scores": b'{"score": "ten", "tests": [{"name": "t", "score": "1", "max_score": 1, "tags": ["attention"]}]}',
    "tests_not_a_list": b'{"score": 1, "tests": {"name": "t"}}',
    "binary": bytes(range(256)),
}


def test_report_and_gradebook_are_written_whatever_one_results_json_holds(tmp_path, secret):
    out = tmp_path / "grades"
    good = CourseResult("good", problems=("attention",), max_points={"attention": 1.0},
                            tests=[Line("attention", "t", 1.0, 1.0, "public", "ok")])
    write_merged(good, out / "good", {}, ["attention"], merge_old=False)
    names = ["good"]
    for name, data in BROKEN_RESULTS.items():
        (out / name).mkdir(parents=True)
        (out / name / "results.json").write_bytes(data)
        names.append(name)
    (out / "linked").mkdir()
    (out / "linked" / "results.json").symlink_to(secret)
    (out / "fifo").mkdir()
    os.mkfifo(out / "fifo" / "results.json")
    names += ["linked", "fifo", "never_written"]
    with deadline(10):
        rows = [read_row(out / n / "results.json", n) for n in names]
    by_name = {r.submission: r for r in rows}
    assert by_name["good"].total == 1.0 and by_name["good"].scores == {"attention": 1.0}
    for name in names[1:]:
        row = by_name[name]
        assert row.total == 0.0 and row.scores == {} and "could not be read" in row.notes, (name, row.notes)
        assert SECRET not in row.notes
    write_gradebook(out / "grades.csv", rows, ["attention"])
    write_report(out / "report.html", rows, ["attention"], "Class")
    html = (out / "report.html").read_text()
    assert html.count("could not be read") == len(names) - 1
    assert SECRET not in html
    assert re.search(r"(?i)>\s*-?(nan|inf)\s*<", html) is None  # no score cell reads nan or inf
    assert re.search(r"mean 0\.\d\d,", html)
    assert (out / "grades.csv").read_text().count("\n") == len(names) + 1


# --- submission folders ------------------------------------------------------------------------------------

def test_plain_names_are_kept_and_changed_names_cannot_collide():
    paths = [Path("/c/a b"), Path("/c/a_b"), Path("/c/a?b"), Path("/c/alice"), Path("/c/bob/handin.tar"),
             Path("/c/carol.tar.gz"), Path("/s1/dave"), Path("/s2/dave"), Path("/c/Eve"), Path("/c/eve"),
             Path("/c/grades.csv")]
    names = submission_names(paths)
    assert len({n.casefold() for n in names}) == len(names), names
    assert names[1] == "a_b" and names[3:6] == ["alice", "bob", "carol"]
    assert names[0].startswith("a_b-") and names[2].startswith("a_b-")
    assert names[6].startswith("dave-") and names[7].startswith("dave-")
    assert names[10] != "grades.csv"
    # Each name depends on its own path only: any order, any subset gives the same folder.
    for order in (paths[::-1], paths[3:] + paths[:3]):
        assert dict(zip(order, submission_names(order))) == dict(zip(paths, names))
    assert submission_names([Path("/c/a b")]) == [names[0]]
    # A folder and the handin.tar in it are the same submission, in the same folder.
    assert source_key(Path("/c/bob/handin.tar")) == source_key(Path("/c/bob"))
    assert submission_names([Path("/c/bob")]) == submission_names([Path("/c/bob/handin.tar")]) == ["bob"]


def _grades(out: Path) -> dict[str, float]:
    import csv

    with open(out / "grades.csv", newline="") as fh:
        return {row["submission"]: float(row["total"]) for row in csv.DictReader(fh)}


def test_a_b_and_a_underscore_b_keep_their_own_grades_across_a_resumed_run(tmp_path):
    full = (SOLUTIONS / "attention.py").read_text()
    subs = tmp_path / "subs"
    spaced, underscored, namesake = subs / "a b", subs / "a_b", tmp_path / "other" / "a_b"
    for folder, source in ((spaced, full), (underscored, "raise ImportError('not done')\n"), (namesake, full)):
        folder.mkdir(parents=True)
        (folder / "attention.py").write_text(source)
    out = tmp_path / "grades"
    common = ["--out", str(out), "--timeout", "30", "--only", "attention"]
    first = run_cli(str(spaced), *common)  # graded alone, then interrupted before a_b
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = run_cli(str(underscored), str(spaced), *common)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "graded 1 of 2" in resumed.stdout and "1 up to date" in resumed.stdout, resumed.stdout
    spaced_name, underscored_name = submission_names([spaced, underscored])
    assert underscored_name == "a_b" and spaced_name != "a_b"
    got = {n: strict_loads((out / n / "results.json").read_text())["score"] for n in (spaced_name, underscored_name)}
    assert got[spaced_name] > 0 and got[underscored_name] == 0.0, got
    assert _grades(out) == {spaced_name: got[spaced_name], "a_b": 0.0}
    # Another student named a_b, from another folder, graded into the same output: not taken for the first.
    other = run_cli(str(namesake), *common)
    assert other.returncode == 0 and "already graded" not in other.stderr, other.stderr[-2000:]
    assert strict_loads(other.stdout.strip().splitlines()[-1])["scores"]["attention"] > 0
    again = run_cli(str(underscored), *common)
    assert "already graded" not in again.stderr
    assert strict_loads(again.stdout.strip().splitlines()[-1]) == {"scores": {"attention": 0.0}}
    assert (out / "a_b" / ".source").read_text() == str(underscored.resolve())
