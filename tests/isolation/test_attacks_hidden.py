"""Attacks on what a hidden case may reveal: a run prints the inputs it has at hand and exits badly, raises
a message that names its cases with a forged score line inside, and puts a forged record on the audit pipe
(tests/isolation/attacks/hidden_inputs_in_output.py); hidden inputs and the characters revealed to the model's run
stashed wherever a later run of the same submission might look, for a later public run to raise (stash_*.py,
raise_stashed_cell.py); a model.pt over make handin's cap; a notebook within the caps that json.loads would inflate
to gigabytes in the grader's own process.

What must hold: nothing of a run that had a hidden input at hand reaches a visible channel (the notes,
i.e. results.json's top-level output, the public tests, feedback.txt, which Autolab prints) but the grader's
own words, at every level: every public run of a submission comes before any hidden run, and a run writes only in
its own folder; a submission's message stays on one line, so no forged line starts a line; the course grader
refuses what `make handin` refuses, with its words; the grader's own process reads a notebook within a fixed
budget. The reporting and the grader's own reading are the same at every level, so graded once, at the machine's
own; what a run carries to the next is graded at every level.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autograder.tools.demo import reference_handin
from gradelib import handin, rubric

from attack_tools import attack_source, only_at, outputs, run_cli
from support import FIXTURES, SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks

HIDDEN_CASES = [c["name"] for c in json.loads((FIXTURES / "attention" / "hidden" / "cases.json").read_text())]
FORGED = re.compile(r'^(TOTAL\s+120|\{"scores")', re.MULTILINE)


def test_a_run_that_prints_hidden_inputs_and_exits_3_shows_none(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="hidden_inputs_in_output")
    result = attack_batch["results"]["hidden_inputs_in_output"]
    notes = result["output"]  # results.json's top-level output: always visible
    public = "\n".join(t["output"] for t in result["tests"] if t["visibility"] == "visible")
    hidden = "\n".join(t["output"] for t in result["tests"] if t["visibility"] != "visible")
    feedback = (attack_batch["out"] / "hidden_inputs_in_output" / "feedback.txt").read_text()  # Autolab prints it
    visible = "\n".join([notes, public, feedback])
    # Nothing of the hidden run is visible: no hidden case's name, its record on the pipe named, not quoted.
    assert not [c for c in HIDDEN_CASES if c in visible], visible
    # The attack ran in both runs: the public run's output is quoted in the notes, its message on a public line,
    # the hidden run's message on a hidden line (shown once the grades are published).
    assert "LEAKED-INPUT single_batch.npz" in notes and "exited with code 3" in notes, notes
    assert "LEAKED-INPUT ['batched.npz'" in public and "LEAKED-INPUT ['dk_ne_dv.npz'" in hidden, (public, hidden)
    assert "on the hidden cases ended early (its exit code and output are not shown" in notes, notes
    assert "an autograd call the grader's harness recorded" in public, public
    # No forged line at the start of a line anywhere: the messages are kept to one line.
    shown = "\n".join([visible, hidden])
    assert not FORGED.search(shown), FORGED.search(shown)


# ---------------------------------------------------------------- hidden inputs carried into a later public run
# The red team's attack, as a hostile handin: attention.py stashes the name and first values of every case at hand,
# and a thread a notebook-3 cell starts copies every character revealed to the model's run on the hidden rows, into
# the template's temp folder (../tmp), the submission's folder, /tmp, /var/tmp and /dev/shm; the first cells of
# notebooks 1 and 3 raise whatever they find there, two hidden ids a letter, in six parts. With the attention run on
# hidden cases before notebook 1's public run, and the model's run before notebook 3's, this showed all 8 hidden case
# names and all 2,560 hidden target ids (of 128 rows x 20 steps) in the notes at once, and the same weak model with a
# lookup of them scored NLL 0.0000 and 12 of 12. Its model is the reference's with a zero output layer: uniform
# logits, NLL ln 30 = 3.4012 nats/char, 0 of 12, however the lookup cell (last in notebook 3) fills its table.
STASHED = re.compile(r"STASHED(\d):(.*?):END")
PARTS = 6
GRADED = ("attention", "losses", "prediction")  # attention's runs, notebook 1's, notebook 3's and the model's


def carrying_handin(folder: Path, marker: str) -> None:
    """The reference handin with the attack's sources and the weak model (see above)."""
    import nbformat
    import torch

    reference_handin(folder)
    raising = [attack_source("raise_stashed_cell", PART=k, MARKER=marker) for k in range(PARTS)]
    (folder / "attention.py").write_text(attack_source("stash_hidden_inputs", MARKER=marker)
                                         + SOLUTIONS.joinpath("attention.py").read_text())
    thief = attack_source("stash_reveals_cell", MARKER=marker)
    lookup = attack_source("lookup_cell", TABLE="{}", PROMPT=30)
    for name, first, last in (("01_mlm_and_next_token.ipynb", raising, []),
                              ("03_language_model.ipynb", [thief, *raising], [lookup])):
        nb = nbformat.read(SOLUTIONS / name, as_version=4)
        nb.cells = [*map(nbformat.v4.new_code_cell, first), *nb.cells, *map(nbformat.v4.new_code_cell, last)]
        (folder / name).write_text(nbformat.writes(nb))
    checkpoint = torch.load(FIXTURES / "lm" / "reference_model.pt", weights_only=True)
    checkpoint["state_dict"]["fc.weight"] = torch.zeros_like(checkpoint["state_dict"]["fc.weight"])
    torch.save(checkpoint, folder / "model.pt")


def shown_hidden_ids(text: str, targets) -> int:
    """How many hidden target ids (targets: rows x steps) the STASHED parts of `text` show in place."""
    best = 0
    for start in [m.start() for m in re.finditer("STASHED0:", text)]:
        parts: dict[int, str] = {}
        for k, said in STASHED.findall(text[start:]):
            parts.setdefault(int(k), said)
        whole = "".join(parts.get(k, "").ljust(280) for k in range(PARTS))
        ids = np.full(targets.size, -1)
        for i, letter in enumerate(whole[4:targets.size // 2 + 4] if whole.startswith("IDS:") else ""):
            if 0 <= ord(letter) - 0x4E00 < 900:
                ids[2 * i], ids[2 * i + 1] = divmod(ord(letter) - 0x4E00, 30)
        best = max(best, int((ids == targets.T.reshape(-1)).sum()))
    return best


@pytest.mark.parametrize("level", ["machine", "fallback", "portable"])
def test_hidden_inputs_stashed_for_a_later_public_run_show_nothing_and_gain_nothing(tmp_path, level):
    where = "" if level == "machine" else level
    if where == "fallback":
        from container import available

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
    marker = "zc" + uuid.uuid4().hex[:10]
    carrying_handin(tmp_path / "carry", marker)
    reference_handin(tmp_path / "reference")
    out = tmp_path / "grades"
    try:
        # One job at a time at the portable level, as the attack batch: nothing there shares the CPU out between runs.
        # generation is left out for time: prediction reads the same model run on the hidden rows.
        proc = run_cli(str(tmp_path / "carry"), str(tmp_path / "reference"), "--out", str(out), "--jobs",
                       "1" if where == "portable" else "2", "--timeout", "60", "--only", *GRADED, level=where,
                       timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        result = json.loads((out / "carry" / "results.json").read_text())
        visible = "\n".join([result["output"], *(t["output"] for t in result["tests"] if t["visibility"] == "visible"),
                             (out / "carry" / "feedback.txt").read_text()])
        with np.load(FIXTURES / "lm" / "hidden" / "prediction_test_out.npz") as data:
            targets = data["out"][:, :20]
        # The attack ran in the public runs of notebooks 1 and 3, after runs with hidden inputs at hand ...
        assert visible.count("STASHED0:IDS:") >= 2 and visible.count("STASHED5:") >= 2, result["output"][:3000]
        # ... and they showed nothing hidden: no hidden case's name (nor its values), no revealed character.
        assert [c for c in HIDDEN_CASES if c in visible] == [], visible[:5000]
        assert shown_hidden_ids(visible, targets) == 0
        assert all(said.startswith("IDS: ") for k, said in STASHED.findall(visible) if k == "0"), visible[:5000]
        if where == "portable":  # a run there may write where the next reads: only the public cases were carried
            assert "batched.npz=" in visible, result["output"][:3000]
        # The lookup had nothing to look up: the weak model's NLL, ln 30 (uniform logits), and none of the 12 points.
        nll = next(t for t in result["tests"] if t["name"].startswith("prediction: prediction NLL"))
        figure = re.search(r"prediction NLL (\d+\.\d+) nats/char", nll["output"])
        assert figure and float(figure.group(1)) == round(math.log(30), 4) and nll["score"] == 0, nll["output"]
        honest = json.loads((out / "reference" / "results.json").read_text())
        assert honest["score"] == sum(rubric.load()[p].points for p in GRADED), \
            [(t["name"], t["output"][:300]) for t in honest["tests"] if t["score"] < t["max_score"]]
        left = [f"{at}/{name}" for at in ("/tmp", "/var/tmp", "/dev/shm") for name in os.listdir(at) if marker in name]
        assert where == "portable" or left == [], left  # the portable level removes nothing: it isolates nothing
    finally:
        for folder in ("/tmp", "/var/tmp", "/dev/shm"):
            for name in os.listdir(folder):
                if marker in name:
                    Path(folder, name).unlink(missing_ok=True)


# ---------------------------------------------------------------- what the model's run wrote before a reveal
# The model's run on the hidden rows also calls predict() and generate() and runs the causality probe, and the notes
# and public lines say how those came out (how many rows of predictions.npy differ, whether the model is causal,
# whether it loaded). A thread of notebook 3 (rewrite_after_reveal_cell.py) rewrites those files after the first
# character is revealed, as that character says; the grader reads them as they were before the first reveal.
def test_what_the_model_run_rewrites_after_a_reveal_changes_nothing_shown(tmp_path):
    import nbformat

    nb = nbformat.read(SOLUTIONS / "03_language_model.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(attack_source("rewrite_after_reveal_cell")))
    lm = FIXTURES / "lm"
    files = {"03_language_model.ipynb": nbformat.writes(nb), "model.pt": (lm / "reference_model.pt").read_bytes(),
             "predictions.npy": (lm / "reference_predictions.npy").read_bytes(),
             "generated.npy": (lm / "reference_generated.npy").read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction", "generation"], timeout_s=120)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    for rewritten in ("rows differ", "not what model.pt", "not causal", "not shown here", "LEAKED", "Traceback"):
        assert rewritten not in said, said[:3000]
    # The reference model, graded in full: its predictions and generations as it wrote them before the reveal.
    assert result.score == result.max_score, [(t.name, t.output[:200]) for t in result.tests if not t.passed]


def test_which_autograd_call_a_hidden_run_records_is_named_to_the_staff_only(tmp_path):
    """attention.py makes one autograd call on the hidden cases only, the one a hidden input chooses
    (autograd_on_hidden_cases.py): its backward points are withheld, and the lines and notes, shown at once for the
    public lines, say only that it used automatic differentiation on the hidden cases; the flag for the staff names
    the call."""
    with np.load(FIXTURES / "attention" / "hidden" / "dk_ne_dv.npz") as data:
        chosen = "torch.autograd.grad" if float(data["X"].ravel()[0]) > 0 else "Tensor.backward"
    source = SOLUTIONS.joinpath("attention.py").read_text() + attack_source("autograd_on_hidden_cases",
                                                                           HIDDEN="dk_ne_dv")
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=60)
    backward = [t for t in result.tests if "backward" in t.name]
    assert backward and all(t.score == 0.0 for t in backward), [(t.name, t.score) for t in backward]
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "used automatic differentiation (or tampered with its record) on the hidden cases" in said, said[:3000]
    assert "torch.autograd.grad" not in said and "Tensor.backward" not in said, said[:3000]
    assert chosen in result.flags["attention_backward_by_autograd"], result.flags
    assert all(t.passed for t in result.tests if "forward" in t.name)  # its honest forward keeps its points


# ---------------------------------------------------------------- how a hidden run ended

# How the hidden run ends (tests/isolation/attacks/hidden_end.py's HOW) -> the words its note must use. "leak" exits
# with the first hidden input's first value: "exited with code N" showed 8 bits of a hidden input a resubmission.
HIDDEN_ENDS = {"exit_1": ("1", "ended early"), "leak": ("leak", "ended early"),
               "sigsegv": ("signal 11", "ended early"), "memory": ("memory", "ran out of memory")}
HIDDEN_NOTE = ("attention: the submission's process on the hidden cases {} (its exit code and output are not shown: "
               "that run had the hidden cases at hand).")


@pytest.mark.parametrize("level", ["machine", "fallback", "portable"])
def test_a_hidden_run_says_how_it_ended_by_kind_alone(tmp_path, level):
    """The note on a hidden run said "exited with code 70" (8 bits of a hidden input a resubmission: the "leak"
    attack exits with one), the signal that killed it, the MB it held when stopped for memory. Now: that it ended
    early or ran out of memory (or time), in the same words whatever the code or signal, at every level; the
    hidden tests' messages (shown once the grades are published) say no more. The public run, honest here,
    keeps its detailed words (test_exit_at_import_is_reported)."""
    if level == "fallback":
        from container import available

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
    public = ",".join(c["name"] for c in json.loads((FIXTURES / "attention" / "public" / "cases.json").read_text()))
    paths = []
    for name, (how, _words) in HIDDEN_ENDS.items():
        folder = tmp_path / "submissions" / name
        folder.mkdir(parents=True)
        (folder / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text()
                                             + attack_source("hidden_end", HOW=how, PUBLIC=public))
        paths.append(str(folder))
    out = tmp_path / "grades"
    proc = run_cli(*paths, "--out", str(out), "--jobs", "2", "--timeout", "60", "--memory-mb", "1024", "--only",
                   "attention", level="" if level == "machine" else level, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = {}
    for name, (_how, words) in HIDDEN_ENDS.items():
        result = json.loads((out / name / "results.json").read_text())
        feedback = (out / name / "feedback.txt").read_text()
        assert result["output"].splitlines()[0] == HIDDEN_NOTE.format(words), result["output"]
        text = "\n".join([outputs(result), feedback]).replace(name, "NAME")
        assert not re.search(r"code \d|SIG|\d+ MB", text), text
        said[name] = text
    # Every exit code and signal: the same text, every word of it (the public run is the same honest one).
    assert said["exit_1"] == said["leak"] == said["sigsegv"], [said[n] for n in ("exit_1", "leak", "sigsegv")]
    with np.load(FIXTURES / "attention" / "hidden" / f"{sorted(HIDDEN_CASES)[0]}.npz") as data:
        leaked = int(abs(float(data["X"].ravel()[0])) * 1000) % 256  # what the leak's exit code was
    assert leaked != 1 and f"code {leaked}" not in said["leak"]


@pytest.mark.parametrize("fields, words", [
    ({"returncode": 70}, "ended early"),
    ({"returncode": 0}, "ended early"),  # before it finished its cases
    ({"returncode": -11}, "ended early"),
    ({"returncode": -9, "output_capped_mb": 32}, "ended early"),
    ({"returncode": -9, "events_capped_mb": 1}, "ended early"),
    ({"returncode": None, "timed_out": True}, "ran out of time"),
    ({"returncode": -24}, "ran out of time"),  # SIGXCPU: the CPU-time limit
    ({"returncode": -9, "memory_limit_mb": 1024, "memory_used_mb": 1100, "memory_where": " (in /dev/shm)"},
     "ran out of memory"),
], ids=["exit_70", "exit_0", "sigsegv", "output_cap", "audit_pipe_cap", "wall_clock", "cpu_time", "memory"])
def test_every_way_a_hidden_run_ends_is_said_by_kind(fields, words):
    """Each way a run ends, as the isolation levels record it, in a hidden run's words: one of three kinds. The
    same run without hidden inputs at hand says more (the code, the signal, the MB, the cap)."""
    from autograder.isolation.pipes import IsolatedRun

    run = IsolatedRun(**{"returncode": None, "timed_out": False, "wall_s": 12.5, "log_tail": "", **fields}, hidden=True)
    assert run.describe() == words
    assert replace(run, hidden=False).describe() not in ("ended early", "ran out of time", "ran out of memory")


def test_notebook_3s_model_on_the_hidden_rows_runs_as_a_hidden_run(tmp_path, monkeypatch):
    """The run of the handed-in model on the hidden rows (model_quality.model_run) is a hidden run too: its limits
    say so (Limits.hidden), so the words of its end are by kind alone, as test_a_hidden_run_says_how_it_ended_by_
    kind_alone checks for attention's and the notebooks' runs (CourseSide.run_sets)."""
    from autograder.grading import model_quality
    from autograder.isolation import Limits
    from gradelib.context import GradeContext
    from gradelib.problems import lm_model

    (tmp_path / "model.pt").write_bytes(b"x")
    (tmp_path / "03_language_model.ipynb").write_bytes(SOLUTIONS.joinpath("03_language_model.ipynb").read_bytes())
    ran = []
    monkeypatch.setattr(lm_model, "run_model", lambda ctx, *args, **kwargs: ran.append(ctx.limits))
    ctx = GradeContext(tmp_path, FIXTURES, ("public", "hidden"), Limits(timeout_s=30))
    model_quality.model_run(ctx, {})
    assert [limits.hidden for limits in ran] == [True] and not ctx.limits.hidden, ran


def test_the_course_grader_refuses_a_model_over_the_handin_cap(tmp_path):
    big = b"\0" * (handin.contract.MAX_CHECKPOINT_BYTES + 1)
    (tmp_path / "model.pt").write_bytes(big)
    said = handin.check_file("model.pt", tmp_path / "model.pt")
    result = grade_files(tmp_path, {"model.pt": big}, only=["prediction"], timeout_s=30)
    text = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert said == ["is larger than 32 MB; hand in the model's state_dict saved with torch.save"], said
    assert f"model.pt {said[0]}." in text, text
    assert result.score == 0, result.score


# ---------------------------------------------------------------- a notebook that inflates the grader's own process
# 95 MB of empty objects, within the handin's caps: json.loads made 2.4 GB of them in the grader's worker. Graded
# in a process of its own, capped at 1.5 GB of address space (a regression fails there, bounded), by problem
# `losses`; the notebook is refused before any run, so no level's sandbox is involved.
INFLATE = r"""
import resource, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from autograder.isolation.safe_reading import READER
from gradelib import safeio
from gradelib.grade import grade_submission
from gradelib.runner import Limits
safeio.install(READER)  # as installed() does for every course grading
result = grade_submission(Path({handin!r}), case_root=Path({fixtures!r}), only=["losses"],
                          limits=Limits(timeout_s=30, memory_mb=1024))
# VmHWM, the peak of this process image: ru_maxrss would keep the forked pytest worker's peak across exec.
print("PEAK_MB", next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) // 1024)
print("SAID", json.dumps([t.output for t in result.tests]))
""".replace("import resource, sys", "import json, resource, sys")


def test_a_notebook_within_the_caps_does_not_inflate_the_grader(tmp_path):
    import resource
    import subprocess
    import sys

    from support import REPO

    handin_dir = tmp_path / "handin"
    handin_dir.mkdir()
    head = (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "metadata": {}, '
            b'"source": "import matplotlib", "execution_count": 1, "outputs": [], "junk": [')
    with open(handin_dir / "01_mlm_and_next_token.ipynb", "wb") as fh:
        fh.write(head)
        for _ in range(95):
            fh.write(b"{}," * (2**20 // 3))
        fh.write(b"{}]}]}")

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))

    code = INFLATE.format(repo=str(REPO), handin=str(handin_dir), fixtures=str(FIXTURES))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, preexec_fn=cap)
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("PEAK_MB", "SAID")))
    assert proc.returncode == 0 and "SAID" in said, proc.stdout[-2000:] + proc.stderr[-2000:]
    outputs = json.loads(said["SAID"])
    assert all("could not be read as a notebook (it holds up to" in o and "clear its outputs" in o for o in outputs), (
        outputs
    )
    assert int(said["PEAK_MB"]) < 300, said["PEAK_MB"]  # the notebook alone is 95 MB: none of it was held whole
