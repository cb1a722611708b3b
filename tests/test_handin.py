"""`make handin` in the handout packs exactly the handin files, refuses what the grader could not use, and
`python autograder.py --handin` reads the result the way the course grader does."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from gradelib import handin, rubric
from gradelib.handin_contract import GENERATION_SHAPE, HANDIN_FILES, PREDICTION_SHAPE

from support import HANDOUT, SOLUTIONS

pytestmark = pytest.mark.slow

NOTEBOOKS = ("01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb", "03_language_model.ipynb")


@pytest.fixture
def student(tmp_path) -> Path:
    """A copy of the handout with a solved attention.py, three notebooks and an experiment at epoch 3."""
    root = tmp_path / "handout"
    shutil.copytree(HANDOUT, root, ignore=shutil.ignore_patterns("experiments", "handin.tar", "__pycache__"))
    shutil.copyfile(SOLUTIONS / "attention.py", root / "attention.py")
    for name in NOTEBOOKS:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
        nbformat.write(nb, root / name)
    run = root / "experiments" / "run1"
    run.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.save(run / "predictions_test_3.npy", rng.standard_normal(PREDICTION_SHAPE).astype(np.float32))
    np.save(run / "generated_3.npy", rng.integers(2, 30, size=GENERATION_SHAPE))
    (run / "generated_3.txt").write_text("THE CAT SAT\n")
    torch.save({"config": {}, "state_dict": {"w": torch.zeros(2)}}, run / "model_3.pt")
    (run / "losses.csv").write_text("not handed in\n")
    return root


def make_handin(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "handin", f"PYTHON={sys.executable}", *args], cwd=root, capture_output=True, text=True
    )


def pack(root: Path, capsys, *args: str) -> tuple[int, str, str]:
    """What `make handin` runs, in this process (importing nbformat once keeps the tests fast)."""
    rc = handin.main(["--root", str(root), "--out", str(root / "handin.tar"), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_handin_holds_exactly_the_contract_files(student):
    proc = make_handin(student, "runid=run1", "epoch=3")
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(student / "handin.tar") as tar:
        names = tar.getnames()
        generated = tar.extractfile("generated.npy").read()
    assert names == list(HANDIN_FILES)
    assert generated == (student / "experiments" / "run1" / "generated_3.npy").read_bytes()
    assert "wrote handin.tar" in proc.stdout


def test_handin_is_byte_identical_when_built_twice(student, capsys):
    pack(student, capsys, "--runid", "run1", "--epoch", "3")
    first = (student / "handin.tar").read_bytes()
    (student / "handin.tar").unlink()
    pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert (student / "handin.tar").read_bytes() == first


def _break(student: Path, what: str) -> str:
    """Break handin file `what` names in the student's folder; the words the check must say of it."""
    kind = what.split("_")[0]
    breaker = {"predictions": _break_predictions, "generated": _break_generated}.get(kind, _break_sources)
    return breaker(student, student / "experiments" / "run1", what)


def _break_predictions(student: Path, run: Path, what: str) -> str:
    rng = np.random.default_rng(1)
    if what == "predictions_shape":
        np.save(run / "predictions_test_3.npy", np.zeros((128, 20, 29), np.float32))
        return "has shape (128, 20, 29), expected (128, 20, 30)"
    if what == "predictions_int":
        np.save(run / "predictions_test_3.npy", np.zeros(PREDICTION_SHAPE, np.int64))
        return "expected a float dtype"
    if what == "predictions_nan":
        arr = rng.standard_normal(PREDICTION_SHAPE).astype(np.float32)
        arr[5, 6, 7] = np.nan
        np.save(run / "predictions_test_3.npy", arr)
        return "NaN or infinite values (first at index (5, 6, 7))"
    if what == "predictions_pickle":
        np.save(run / "predictions_test_3.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
        return "holds Python objects"
    raise AssertionError(what)


def _break_generated(student: Path, run: Path, what: str) -> str:
    rng = np.random.default_rng(1)
    if what == "generated_eos":
        arr = rng.integers(2, 30, size=GENERATION_SHAPE)
        arr[9, 2] = 0
        np.save(run / "generated_3.npy", arr)
        return "holds <eos> (id 0) 1 times (first at index (9, 2))"
    if what == "generated_pad":
        arr = rng.integers(2, 30, size=GENERATION_SHAPE)
        arr[0, 0] = 1
        np.save(run / "generated_3.npy", arr)
        return "holds <pad> (id 1)"
    if what == "generated_out_of_vocab":
        np.save(run / "generated_3.npy", np.full(GENERATION_SHAPE, 31))
        return "outside the vocabulary 0..29"
    if what == "generated_float":
        np.save(run / "generated_3.npy", np.full(GENERATION_SHAPE, 3.0))
        return "expected an integer dtype"
    if what == "generated_missing":
        (run / "generated_3.npy").unlink()
        return "generated.npy: experiments/run1/generated_3.npy is missing"
    raise AssertionError(what)


def _break_sources(student: Path, run: Path, what: str) -> str:
    if what == "notebook_broken":
        (student / "02_attention_and_masks.ipynb").write_text("{ not json")
        return "02_attention_and_masks.ipynb (from 02_attention_and_masks.ipynb) is not a notebook"
    if what == "notebook_invalid":
        (student / "01_mlm_and_next_token.ipynb").write_text(
            '{"cells": 3, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
        )
        return "is not a valid notebook"
    if what == "attention_syntax":
        (student / "attention.py").write_text("def forward(self, X)\n    pass\n")
        return "attention.py (from attention.py) does not parse: line 1"
    raise AssertionError(what)


@pytest.mark.parametrize("what", [
    "predictions_shape", "predictions_int", "predictions_nan", "predictions_pickle", "generated_eos", "generated_pad",
    "generated_out_of_vocab", "generated_float", "generated_missing", "notebook_broken", "notebook_invalid",
    "attention_syntax",
])
def test_a_file_the_grader_cannot_use_stops_the_handin_with_what_to_fix(student, capsys, what):
    message = _break(student, what)
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc == 1
    assert "handin.tar was NOT written" in err
    assert message in err, err
    assert not (student / "handin.tar").exists()


def test_a_refused_handin_renames_an_earlier_handin_tar_and_says_so(student, capsys):
    """A handin.tar left by an earlier `make handin` could be uploaded for this one: a refusal renames it."""
    assert pack(student, capsys, "--runid", "run1", "--epoch", "3")[0] == 0
    earlier = (student / "handin.tar").read_bytes()
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "7")
    assert rc == 1 and not (student / "handin.tar").exists()
    assert (student / "handin.earlier.tar").read_bytes() == earlier
    assert "The handin.tar of an earlier `make handin` is now handin.earlier.tar: it is not what you asked for." in (
        " ".join(err.split())), err


def test_runid_and_epoch_are_required_unless_partial(student, capsys):
    rc, _, err = pack(student, capsys)
    assert rc == 1 and "runid= and epoch= are required" in err and "partial=1" in err
    assert "experiments/ holds: runid=run1 (epoch 3)" in err, err  # the runs to choose from
    proc = make_handin(student, "partial=1")
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(student / "handin.tar") as tar:
        assert tar.getnames() == ["attention.py", *NOTEBOOKS]


def test_wrong_epoch_names_the_missing_files(student, capsys):
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "7")
    assert rc == 1
    assert (
        "experiments/run1 has nothing for epoch 7, so predictions.npy, generated.npy and model.pt cannot be packed"
        in err
    )
    assert "experiments/ holds: runid=run1 (epoch 3)" in err


def test_local_check_of_a_built_handin_reads_it_like_the_grader(student):
    assert make_handin(student, "runid=run1", "epoch=3").returncode == 0
    # What `make check-handin` runs, on one problem to keep it quick; the file report covers every file.
    proc = subprocess.run(
        [sys.executable, "autograder.py", "--handin", "handin.tar", "--only", "attention"],
        cwd=student,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("attention.py", *NOTEBOOKS, "predictions.npy", "generated.npy", "generated.txt"):
        assert f"ok      {name}" in out, out[:1500]
    assert "Submission: handin.tar" in out
    assert re.search(r"^attention [\d.]+ / [\d.]+: all \d+ lines pass$", out, re.MULTILINE), out


def test_local_check_explains_an_archive_the_grader_would_refuse(student, tmp_path):
    bad = tmp_path / "handin.tar"
    with tarfile.open(bad, "w") as tar:
        info = tarfile.TarInfo("attention.py")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    proc = subprocess.run(
        [sys.executable, "autograder.py", "--handin", str(bad)], cwd=student, capture_output=True, text=True
    )
    said = " ".join(proc.stdout.split())  # the report wraps at 100 columns
    assert "cannot be opened by the grader" in said and "is a link" in said, proc.stdout


def test_the_checkpoint_is_required_and_checked(student, capsys, monkeypatch):
    ckpt = student / "experiments" / "run1" / "model_3.pt"
    assert pack(student, capsys, "--runid", "run1", "--epoch", "3")[0] == 0
    with tarfile.open(student / "handin.tar") as tar:
        assert tar.getnames()[-1] == "model.pt"
    (student / "handin.tar").unlink()
    monkeypatch.setattr(handin.contract, "MAX_CHECKPOINT_BYTES", 100)
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc != 0 and "model.pt (from experiments/run1/model_3.pt) is larger than" in err, err
    monkeypatch.undo()
    ckpt.write_bytes(b"not a checkpoint")
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc != 0 and "is not a torch.save checkpoint" in err, err
    ckpt.unlink()
    rc, _, err = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc != 0 and "model.pt: experiments/run1/model_3.pt is missing" in err, err
    assert not (student / "handin.tar").exists()

# A problem's header (its score and how many lines pass) and each failed line's (its score and title).
ROW = re.compile(
    r"^(?:(?P<problem>[a-z_]+) [\d.]+ / [\d.]+: (?:all \d+|\d+ of \d+) lines pass|  FAIL [\d.]+ / [\d.]+ .+)$"
)


def local_rows(root: Path, *args: str) -> tuple[str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "autograder.py", *args], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, [line for line in proc.stdout.splitlines() if ROW.match(line)]


def test_local_grading_of_a_run_equals_grading_its_handin(student):
    only = ("--only", "attention", "prediction")
    out, direct = local_rows(student, "--runid", "run1", "--epoch", "3", *only)
    assert "Grading experiments/run1, epoch 3" in out
    assert make_handin(student, "runid=run1", "epoch=3").returncode == 0
    _, packed = local_rows(student, "--handin", "handin.tar", *only)
    assert direct and direct == packed
    # Without runid/epoch the newest run is graded, and the output says which.
    newest, _ = local_rows(student, "--only", "prediction")
    assert "Grading the newest full run, experiments/run1, epoch 3" in newest
    total = sum(p.points for p in rubric.load().values())
    assert "What is at stake" in newest and f"course maximum {total:g}" in newest


def test_a_short_run_is_graded_by_default_only_when_no_full_run_exists(tmp_path):
    """A quick try (LM_TRAIN_STEPS=20) made after a real run must not become what `make grade` grades."""
    from gradelib.handin import runs_text
    from gradelib.local import choose_run

    for name, epochs in (("20261125-100000", (1, 2)), ("20261125-120000-steps20", (1,))):
        folder = tmp_path / "experiments" / name
        folder.mkdir(parents=True)
        for epoch in epochs:
            (folder / f"model_{epoch}.pt").write_bytes(b"x")
    os.utime(tmp_path / "experiments" / "20261125-100000", (1, 1))  # the full run is the older one
    runid, epoch, said = choose_run(tmp_path, None, None)
    assert (runid, epoch) == ("20261125-100000", "2"), said
    assert said.startswith("Grading the newest full run, experiments/20261125-100000, epoch 2") and \
        "newer short runs not chosen: 20261125-120000-steps20" in said, said
    assert "runid=20261125-120000-steps20 (epoch 1, a short run of 20 steps)" in runs_text(tmp_path)
    shutil.rmtree(tmp_path / "experiments" / "20261125-100000")
    runid, epoch, said = choose_run(tmp_path, None, None)
    assert (runid, epoch) == ("20261125-120000-steps20", "1") and "a short run of 20 steps" in said, said


def test_problem_aliases_name_the_notebooks(student):
    out, rows = local_rows(student, "--only", "nb1")
    problems = [m.group("problem") for m in map(ROW.match, rows) if m.group("problem")]
    assert problems == ["losses"], out


def test_handin_tar_is_readable_and_todos_left_are_named(student, capsys):
    shutil.copyfile(HANDOUT / "attention.py", student / "attention.py")
    rc, out, _ = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc == 0 and (student / "handin.tar").stat().st_mode & 0o777 == 0o644
    assert "attention.py still raises NotImplementedError for 2 TODO(s), which score 0: TODO 1.1 forward" in out, out


def test_a_wrong_run_lists_the_runs_that_exist(student, capsys):
    rc, _, err = pack(student, capsys, "--runid", "run2", "--epoch", "3")
    assert rc != 0 and "experiments/ holds: runid=run1 (epoch 3)" in err, err
    # A wrong epoch of a run that exists: said once (not once per file of the run), and no note about
    # the optional generated.txt of a handin that is not written.
    rc, out, err = pack(student, capsys, "--runid", "run1", "--epoch", "2")
    assert rc != 0 and err.count("experiments/ holds:") == 1, err
    assert (
        "experiments/run1 has nothing for epoch 2, so predictions.npy, generated.npy and model.pt cannot be packed"
        in err
    )
    assert "optional" not in out + err, out + err


def test_the_notebook_check_refuses_what_the_grader_cannot_read(tmp_path):
    """The handin check reads notebooks without nbformat (whose validator takes a second to import): the shipped
    notebooks pass; JSON with no list of cells, which the grader cannot run a cell of, is refused, and nbformat
    agrees that it is no notebook."""
    import copy

    from gradelib.handin import check_file

    def nbformat_rejects(data) -> bool:
        try:
            nbformat.validate(nbformat.from_dict(data))
        except Exception:  # nbformat's ValidationError and the errors of very broken input
            return True
        return False

    def checked(data) -> list[str]:
        (tmp_path / "nb.ipynb").write_text(json.dumps(data))
        return check_file("nb.ipynb", tmp_path / "nb.ipynb")

    good = [json.loads(p.read_text()) for p in [*SOLUTIONS.glob("0*.ipynb"), *HANDOUT.glob("0*.ipynb")]]
    assert len(good) == 6
    for data in good:
        assert checked(data) == [] and not nbformat_rejects(data)
    for what, data in {"cells not a list": {**copy.deepcopy(good[0]), "cells": {}}, "not an object": [1, 2]}.items():
        said = checked(data)
        assert said == ["is not a valid notebook (no list of cells); open it in Jupyter, fix it and save it"], what
        assert nbformat_rejects(data), what  # the oracle agrees that it is malformed


def test_choosing_the_run_to_grade_locally_never_grades_another_epoch_than_asked(tmp_path):
    """--epoch alone means the newest run's epoch; an epoch a run lacks is said, never swapped for another."""
    import os
    import time

    from gradelib.local import choose_run

    for run, epochs, age in (("old", (1, 2, 3), 100), ("new", (1, 2), 0)):
        folder = tmp_path / "experiments" / run
        folder.mkdir(parents=True)
        for e in epochs:
            (folder / f"model_{e}.pt").write_bytes(b"w")
        os.utime(folder, (time.time() - age, time.time() - age))
    assert choose_run(tmp_path, None, None)[:2] == ("new", "2")
    assert choose_run(tmp_path, None, "1")[:2] == ("new", "1")
    runid, epoch, said = choose_run(tmp_path, None, "3")
    assert (runid, epoch) == ("", "") and "experiments/new, has no checkpoint for epoch 3" in said
    assert "runid=old (epochs 1, 2, 3)" in said and "--runid <id> --epoch <n>" in said
    assert choose_run(tmp_path, "old", None)[:2] == ("old", "3")
    runid, epoch, said = choose_run(tmp_path, "old", "5")
    assert (runid, epoch) == ("old", "5") and "experiments/old has no checkpoint for epoch 5" in said
    assert choose_run(tmp_path, "old", "2")[:2] == ("old", "2")


def test_handing_in_a_short_run_says_so_and_what_it_costs(student, capsys):
    """A run cut short (MAX_STEPS, a quick LM_TRAIN_STEPS try) is packed, with a note of the points at stake."""
    import tomllib

    short = student / "experiments" / "20261125-120000-steps300"
    shutil.copytree(student / "experiments" / "run1", short)
    rc, out, err = pack(student, capsys, "--runid", short.name, "--epoch", "3")
    assert rc == 0, err
    rubric = tomllib.loads((HANDOUT / "gradelib" / "rubric.toml").read_text())["problems"]
    points = {(pid, g["id"]): g["points"] for pid, p in rubric.items() for g in p.get("groups", [])}
    at_stake = points["prediction", "nll"] + points["generation", "perplexity"]
    course = sum(points.values())  # a problem is worth its lines
    assert (f"note: experiments/{short.name} is a short run of 300 steps: its model earns few or none of the "
            f"{at_stake:g} of {course:g} points of the model-quality lines") in out, out
    rc, out, _ = pack(student, capsys, "--runid", "run1", "--epoch", "3")
    assert rc == 0 and "short run" not in out, out


def test_without_runid_and_epoch_the_newest_full_runs_best_validation_epoch_is_handed_in(student, capsys):
    """run1 keeps its metrics.json: epoch 3 has the lower validation NLL of its two checkpointed epochs; a newer
    short run (-steps20) is passed over."""
    run = student / "experiments" / "run1"
    for name in ("predictions_test_3.npy", "generated_3.npy", "generated_3.txt", "model_3.pt"):
        shutil.copyfile(run / name, run / name.replace("_3", "_4"))
    (run / "metrics.json").write_text(json.dumps({"step": [], "train_loss": [], "epoch": [3, 4],
                                                  "val_nll": [2.25, 2.5]}))
    short = student / "experiments" / "run2-steps20"
    shutil.copytree(run, short)
    os.utime(short, (run.stat().st_mtime + 60,) * 2)
    rc, out, err = pack(student, capsys)
    assert rc == 0, err
    said = " ".join((out + err).split())
    assert "handing in the newest full run, runid=run1, at its best validation epoch, epoch=3" in said, said
    with tarfile.open(student / "handin.tar") as tar:
        assert tar.extractfile("generated.npy").read() == (run / "generated_3.npy").read_bytes()


def test_the_kits_reader_of_a_handin_tar_says_what_the_course_grader_says(tmp_path):
    """The kit reads the student's own tar (links and paths outside refused, one top folder stripped, nested files
    skipped) with the course grader's words; both readers put the same files in place."""
    from autograder.grading import uploads
    from gradelib.intake import HandinError, open_upload

    def tar(name, members):
        with tarfile.open(tmp_path / name, "w") as out:
            for member, data, kind, link in members:
                info = tarfile.TarInfo(member)
                info.type, info.linkname, info.size = kind, link, len(data)
                out.addfile(info, io.BytesIO(data))
        return tmp_path / name

    reg = tarfile.REGTYPE
    good = tar("top.tar", [("hw/attention.py", b"x = 1\n", reg, ""), ("hw/deep/notes.txt", b"n", reg, "")])
    kit, course = open_upload(good, tmp_path / "kit"), uploads.open_upload(good, tmp_path / "course")
    assert [p.name for p in (tmp_path / "kit").iterdir()] == [p.name for p in (tmp_path / "course").iterdir()]
    assert (tmp_path / "kit" / "attention.py").read_bytes() == b"x = 1\n" and kit.notes == course.notes
    assert kit.notes == ["skipped deep/notes.txt: handin files belong at the top level of the archive"]
    for members, said in (([("attention.py", b"", tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
                          ([("../owned.py", b"x", reg, "")], "points outside the archive"),
                          ([("a.py", b"x", reg, ""), ("./a.py", b"y", reg, "")], "two members named a.py"),
                          ([], "empty archive")):
        bad = tar("bad.tar", members)
        for reader, dest in ((open_upload, "k"), (uploads.open_upload, "c")):
            with pytest.raises(HandinError, match=said):
                reader(bad, tmp_path / dest / str(len(members)))
    (tmp_path / "text.tar").write_text("not a tar\n" * 60)
    with pytest.raises(HandinError, match="is not a tar archive.*make handin"):
        open_upload(tmp_path / "text.tar", tmp_path / "t")
