"""Attacks through files and streams: results files forged wherever a grader might read one, forged score
lines on stdout, a flood of output, log.txt swapped for a link or a FIFO, links, FIFOs and devices planted
in a child's outputs, control characters in what it reports, .npy outputs padded with holes, folders nested
past the recursion limit (gradelib/safeio.py, gradelib/runner/limits.py, autograder/isolation/scratch.py).

What must hold: a child writes nowhere but its own scratch; the grader reads what it left only as plain
files of bounded size, never following a link or blocking on a FIFO, and reads the child's output from its
own pipe; no forged line or control character reaches a terminal, a report or a results file; the attack
scores 0 for what it did not compute, quickly, and honest code beside it keeps its points.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

import pytest

from autograder import isolation as sandbox
from gradelib import rubric

from attack_tools import (
    POINTS,
    attack_source,
    attack_text,
    forged_files,
    needs_landlock,
    notebook_with_first_cell,
    only_at,
    outputs,
    run_cli,
)
from support import SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks

# ---------------------------------------------------------------- what a child writes


@needs_landlock
def test_forged_results_files_are_refused(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="forged_results")
    out, marker = attack_batch["out"], attack_batch["marker"]
    text = outputs(attack_batch["results"]["forged_results"])
    # The attack ran: it could write its own scratch folder, and nothing else.
    assert "forgery" in text and "cwd:written" in text, text
    for label in ("parent", "grandparent", "own_out", "other_out", "out_root", "tmp"):
        # Landlock answers EACCES; inside the namespaces the root above /scratch is also read-only (EROFS).
        assert re.search(rf"{label}:\w+/(EACCES|EROFS)\b", text), (label, text)
    assert not (out / "results.json").exists()
    assert not Path(f"/tmp/forged-{marker}.json").exists()
    assert forged_files(out) == []


def test_forged_stdout_does_not_reach_the_autolab_line(tmp_path):
    folder = tmp_path / "forger"
    folder.mkdir()
    (folder / "attention.py").write_text(attack_source("forged_stdout"))
    proc = run_cli(
        str(folder), "--out", str(tmp_path / "grades"), "--timeout", "30", "--only", "attention", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"scores": {"attention": 0.0}}
    assert lines[-1] == '{"scores":{"attention":0.0}}'
    # The forged text reaches the report only inside the grader's message, never as a line of its own.
    forged = [line for line in lines[:-1]
              if (line.startswith('{"scores"') and "999" in line) or "30.00 /  30.00" in line]
    assert forged == [], proc.stdout
    assert "999" not in proc.stderr
    result = json.loads((tmp_path / "grades" / "forger" / "results.json").read_text())
    assert result["score"] == 0.0


@pytest.mark.parametrize("where", ["attention.py", "a notebook cell"])
def test_a_flood_of_output_is_stopped_at_its_cap_not_at_the_time_limit(tmp_path, where):
    """Printing without end is stopped once the output passes Limits.output_mb, in a plain run and in a
    run forked from the template (attention.py with a notebook), long before the 60 s limit; the
    forged score lines gain nothing and the honest problem beside it keeps its points."""
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    flood = attack_source("output_flood")
    if where == "attention.py":
        files, only = {"attention.py": flood + reference}, ["attention"]
    else:
        files, only = (
            {"attention.py": reference, "01_mlm_and_next_token.ipynb": notebook_with_first_cell(flood)},
            ["attention", "losses"],
        )
    start = time.monotonic()
    result = grade_files(tmp_path, files, only=only, timeout_s=60)
    wall = time.monotonic() - start
    assert wall < 40, wall  # (a run stopped at its time limit alone would take 60 s; 8 s on a loaded machine is usual)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    cap = sandbox.Limits().output_mb
    assert f"was stopped when its output passed {cap} MB" in said, said
    by_problem = {p: sum(t.score for t in result.tests if t.problem == p) for p in only}
    if where == "attention.py":
        assert by_problem == {"attention": 0.0}
    else:
        assert by_problem == {"attention": rubric.load()["attention"].points, "losses": 0.0}, by_problem


# ---------------------------------------------------------------- what the grader reads back


@pytest.mark.parametrize("attack", ["log_symlink_feedback", "log_symlink_secret", "log_fifo", "log_dev_zero"])
def test_replaced_log_file_is_never_read(attack_batch, attack):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack=attack)
    text = attack_text(attack_batch, attack)
    # What the child printed came back over the grader's pipe ...
    assert "attack-printed-this" in text and "exited with code 3" in text, text
    # ... and whatever the child left at log.txt was not read.
    assert "Submission: reference_before" not in text and "TOPSECRET" not in text, text
    assert "\x00" not in text and len(text) < 200_000


SAFEIO_SECRET = "SECRET-of-another-student-" + uuid.uuid4().hex[:8]
SAFEIO_TIMEOUT_S = 20


def _reader_refuses_planted(top: Path, secret: Path, array: Path) -> None:
    """The grader's reader (gradelib/safeio.py with autograder/isolation/safe_reading.py) on a case folder
    where this process, outside any sandbox, planted what the attack would: a link and a FIFO at meta.json,
    links at a .npy."""
    import numpy as np

    from autograder.isolation import safe_reading
    from gradelib import safeio
    from gradelib.scoring import load_meta, observed_from_child

    case = top / "outputs" / "case1"
    case.mkdir(parents=True)
    np.save(case / "Q.npy", np.arange(6.0).reshape(2, 3))
    meta = {"quantities": {"Q": {"present": True, "type": "torch.Tensor"}}}
    before = safeio.install(safe_reading.READER)
    try:
        for plant, reason in ((lambda p: p.symlink_to(secret), "is a symbolic link, not a regular file"),
                              (os.mkfifo, "is a FIFO (named pipe), not a regular file")):
            (case / "meta.json").unlink(missing_ok=True)
            plant(case / "meta.json")
            start = time.monotonic()
            read, why = load_meta(case / "meta.json", root=top)
            assert time.monotonic() - start < 5  # a FIFO opened for reading would block
            assert read is None and f"meta.json {reason}" in why and SAFEIO_SECRET not in why, why
        for target in ("/dev/zero", array):
            (case / "Q.npy").unlink()
            (case / "Q.npy").symlink_to(target)
            obs = observed_from_child(case, meta, "Q", "not produced", root=top)
            assert obs.present and obs.array is None, obs
            assert "Q.npy is a symbolic link, not a regular file" in obs.note, obs.note
    finally:
        safeio.install(before)


def test_links_and_fifos_planted_in_a_childs_outputs_are_refused_unread(tmp_path):
    import numpy as np

    secret = tmp_path / "other_student" / "feedback.txt"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"quantities": {q: {"present": True, "type": "torch.Tensor", "note": SAFEIO_SECRET}
                                                 for q in ("Q", "K", "V", "X_new")}, "errors": {}, "flags": {}}))
    array = secret.parent / "array.npy"
    np.save(array, np.zeros((2, 2)))
    source = SOLUTIONS.joinpath("attention.py").read_text() + attack_source("plant_outputs", SECRET=secret, ARRAY=array)
    folder = tmp_path / "planter"
    folder.mkdir()
    (folder / "attention.py").write_text(source)
    out = tmp_path / "grades"
    start = time.monotonic()
    proc = run_cli(
        str(folder), "--out", str(out), "--timeout", str(SAFEIO_TIMEOUT_S), "--only", "attention", timeout=180
    )
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert wall < SAFEIO_TIMEOUT_S + 30, wall  # a FIFO read would have blocked until the deadline
    raw = (out / "planter" / "results.json").read_text()
    result = json.loads(raw)
    feedback = (out / "planter" / "feedback.txt").read_text()
    text = outputs(result)
    refused = re.search(r"planting refused: os\.symlink:(\w+) os\.mkfifo:(\w+)", text)
    # The guards refuse a link inside attention's run at the Linux levels.
    assert refused or sandbox.isolation_level() == "portable", text
    if refused:
        # The attack planted a FIFO in its first case, then met the refusal, said so and stopped.
        assert refused.group(1) == "PermissionError", text
        if refused.group(2) == "planted":
            assert "meta.json is a FIFO (named pipe), not a regular file" in text, text
        else:
            assert refused.group(2) == "PermissionError", text
        # The reader's own defence, on the links (and FIFO) the child could not plant, planted from outside.
        _reader_refuses_planted(tmp_path / "scratch", secret, array)
    else:
        # Planting works: the grader's reader meets the links and the FIFO and refuses each unread.
        assert "meta.json is a symbolic link, not a regular file" in text, text
        assert "meta.json is a FIFO (named pipe), not a regular file" in text, text
        assert ".npy is a symbolic link, not a regular file" in text, text
    assert result["score"] == 0.0
    for where in (raw, feedback, proc.stdout, proc.stderr):
        assert SAFEIO_SECRET not in where
        assert "Traceback" not in where
    assert json.loads(secret.read_text())["quantities"]["Q"]["note"] == SAFEIO_SECRET  # untouched


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"
ESCAPE_ATTACKS = ("escape_in_exception", "escape_in_type_name")


def _no_control_characters(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\x9b\u202e")


def _strings(value):
    """Every string inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_control_characters_from_a_submission_reach_no_terminal_or_file(tmp_path):
    folders = []
    sources = {
        "reference": SOLUTIONS.joinpath("attention.py").read_text(),
        **{n: attack_source(n) for n in ESCAPE_ATTACKS},
    }
    for name, source in sources.items():
        folder = tmp_path / "subs" / name
        folder.mkdir(parents=True)
        (folder / "attention.py").write_text(source)
        folders.append(str(folder))
    out = tmp_path / "grades"
    batch = run_cli(*folders, "--out", str(out), "--timeout", str(SAFEIO_TIMEOUT_S), "--only", "attention", timeout=240)
    assert batch.returncode == 0, batch.stderr[-3000:]
    single = run_cli(folders[1], "--out", str(tmp_path / "single"), "--timeout", str(SAFEIO_TIMEOUT_S),
                     "--only", "attention", timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "cleared your screen" in single.stdout  # the message arrives, without its escapes
    assert json.loads(single.stdout.strip().splitlines()[-1]) == {"scores": {"attention": 0.0}}
    texts = {"batch stdout": batch.stdout, "batch stderr": batch.stderr, "single stdout": single.stdout,
             "single stderr": single.stderr, "report.html": (out / "report.html").read_text(),
             "grades.csv": (out / "grades.csv").read_text()}
    for name in ESCAPE_ATTACKS:
        texts[f"{name}/feedback.txt"] = (out / name / "feedback.txt").read_text()
        raw = (out / name / "results.json").read_text()
        texts[f"{name}/results.json"] = raw
        texts[f"{name}/results.json strings"] = "\n".join(_strings(json.loads(raw)))
    for where, text in texts.items():
        assert _no_control_characters(text), (where, [c for c in text if c in ESCAPES])
        assert "\\u001b" not in text.lower() and "\\u0007" not in text, where
    type_text = texts["escape_in_type_name/feedback.txt"]
    assert "got attention.Evil[2J" in type_text and "red[0m bell" in type_text, type_text


# ---------------------------------------------------------------- what a child leaves in its scratch


@pytest.mark.parametrize("attack", ["padded outputs", "deep folders"])
def test_outputs_padded_with_holes_or_folders_nested_deep_cost_the_grader_nothing(tmp_path, attack, monkeypatch):
    """Padded .npy files are refused from their header (nothing after the data is read): the submission
    loses what it padded, quickly. A tree deeper than Python's recursion limit is removed all the same,
    and the honest code beside it keeps its points."""
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    source = attack_source("padded_outputs" if attack == "padded outputs" else "deep_folders") + reference
    # A fresh interpreter per run, whose exit runs the attack's atexit padding (a run forked from the template
    # ends without the submission's exit handlers, so there the outputs stay as the harness wrote them).
    monkeypatch.setenv("GRADELIB_TEMPLATE", "off")
    # The grader's own CPU time, not the wall clock (which a busy machine stretches): reading the padding would be
    # spent in this process, which grades in-process (8 GB of reads: about 9 s of system time; refused from the
    # header: 0.2 s); the children's runs are not counted.
    start = time.process_time()
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=60)
    grader_cpu_s = time.process_time() - start
    said = "\n".join(t.output for t in result.tests)
    assert "internal grader error" not in said, said
    if attack == "padded outputs":
        assert result.score == 0.0
        assert "bytes after the" in said and "it was not read" in said, said
        assert grader_cpu_s < 5, grader_cpu_s
    else:
        assert result.score == POINTS, said


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path):
    from autograder.isolation import remove_tree

    top = tmp_path / "scratch"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(sys.getrecursionlimit() + 200):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    (top / "link").symlink_to(tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "file").write_text("x")
    remove_tree(top)
    assert not top.exists()
    assert (tmp_path / "kept" / "file").read_text() == "x"  # a link is removed, not followed
