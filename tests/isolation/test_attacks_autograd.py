"""Attacks on the autograd tripwires of the attention problem: gradients taken by automatic
differentiation and hidden from the grader, by clearing the harness's record, calling the engine directly,
hiding under a forged main guard, taking the saved-tensors hook off, or by what the submission sends on the
audit pipe (padding events, junk, a record-shaped prefix, a flood) (gradelib/problems/attention.py,
gradelib/runner/streams).

What must hold: each loses the backward points and is reported for what it used, while the forward it
computed honestly keeps its points; every record on the audit pipe is read, whatever precedes it, bytes
that are not the hook's own records mark the channel as tampered with, and a flood is stopped at 1 MB, not
at the time limit. An honest self-test under a plain main guard costs nothing.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from attack_batch import PROGRAM_STARTED
from attack_tools import attack_source, batch_level, only_at
from support import SOLUTIONS, grade_files


def test_autograd_hidden_by_clearing_the_record_is_still_caught(tmp_path):
    result = grade_files(tmp_path, {"attention.py": attack_source("autograd_hidden")}, only=["attention"], timeout_s=60)
    by_name = {t.name: t for t in result.tests}
    forward = [t for name, t in by_name.items() if "forward" in name]
    backward = [t for name, t in by_name.items() if "backward" in name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward]  # honest forward points stay
    assert backward and all(t.score == 0.0 for t in backward)
    text = "\n".join(t.output for t in backward)
    assert "Backward points withheld" in text and "torch.autograd.grad" in text, text
    # The source hides the names from the static check: the runtime record alone caught it.
    assert "uses automatic differentiation" not in text, text


def test_taking_the_saved_tensors_hook_off_is_itself_reported(tmp_path):
    source = attack_source("autograd_without_the_hook", "autograd_forward")
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=60)
    backward = [t for t in result.tests if "backward" in t.name]
    assert backward and all(t.score == 0.0 for t in backward)
    assert "a call removing the grader's saved-tensors hook" in backward[0].output, backward[0].output
    assert "uses automatic differentiation" not in backward[0].output  # the runtime record alone caught it


@pytest.mark.parametrize("attack", ["the engine, called directly", "a forged main guard"])
def test_autograd_by_the_engine_or_under_a_forged_main_guard_loses_the_backward_points(tmp_path, attack):
    """Both took 30 / 30. The engine is now audited wherever it is reached from, a graph recorded for
    backward is reported by a saved-tensors hook whatever runs it, and a file that rebinds __name__
    has its main-guard blocks read like the rest."""
    first = "autograd_by_the_engine" if attack.startswith("the engine") else "autograd_under_a_forged_main_guard"
    source = attack_source(first, "autograd_forward")
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=60)
    forward = [t for t in result.tests if "forward" in t.name]
    backward = [t for t in result.tests if "backward" in t.name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward]
    assert backward and all(t.score == 0.0 for t in backward)
    text = backward[0].output
    assert "Backward points withheld" in text, text
    # The engine's method is not repeated: a record's text is the run's, and only the grader's own labels are shown.
    assert "the autograd engine" in text and "an autograd graph (tensors that require grad)" in text, text
    if attack == "a forged main guard":
        assert "uses automatic differentiation" in text and "from torch.autograd.variable import Variable" in text, text


def test_the_static_check_reads_imported_names_and_local_holders():
    """The import names once took the place of the holders of the file's own instances: a helper held in a local
    variable (`sm = self.softmax; sm.backward(...)`) was taken for autograd (17 / 30), and `from torch import
    Tensor; Tensor.backward(out, g)` for the file's own method."""
    from gradelib.problems.autograd_source import autograd_uses

    helper = (Path(__file__).resolve().parents[1] / "attention_variants" / "helper_class_backward.py").read_text()
    local = helper.replace(
        "        dLdA_w = self.softmax.backward(", "        sm = self.softmax\n        dLdA_w = sm.backward("
    )
    assert "sm.backward(" in local and autograd_uses(local) == []
    tensor = "from torch import Tensor\n\n\ndef vjp(out, g):\n    Tensor.backward(out, g)\n"
    assert autograd_uses(tensor + local) == ["line 5: Tensor.backward(out, g)"]
    # A name an import binds is not only ever the file's own instance, whatever is assigned to it elsewhere.
    hits = autograd_uses("from torch import Tensor as sm\n" + local)
    assert any("= sm.backward(" in h for h in hits), hits


def test_a_self_test_under_a_plain_main_guard_still_costs_nothing():
    """The benefit of the doubt stays for honest files: only a module that could rebind __name__ loses it (the
    course grader's check; the kit's own skips the guarded blocks)."""
    from autograder.grading.course_side import autograd_uses

    honest = SOLUTIONS.joinpath("attention.py").read_text() + (
        "\n\nif __name__ == '__main__':\n    import torch\n    x = torch.ones(2, requires_grad=True)\n"
        "    x.sum().backward()\n"
    )
    assert autograd_uses(honest) == []
    for rebinding in ("__name__ = '__main__'\n", "globals()['__name__'] = '__main__'\n",
                      "import sys\nsetattr(sys.modules[__name__], 'x', 1)\n"):
        hits = autograd_uses(rebinding + honest)
        assert any("requires_grad=True" in h for h in hits), (rebinding, hits)


# ---------------------------------------------------------------- out of the harness's reach

# Attack of the batch -> what the list of autograd uses must name (none: it is refused by the kernel alone).
OUT_OF_REACH = {
    "autograd_in_a_thread": ("a new autograd engine", "an autograd graph (tensors that require grad)"),
    "autograd_hook_pushed": ("a saved-tensors hook pushed over the grader's", "a new autograd engine",
                             "an autograd graph (tensors that require grad)"),
    "autograd_by_subprocess": ("another program (subprocess.Popen, refused)",),
    "autograd_by_execv": (),
}


@pytest.mark.parametrize("attack", list(OUT_OF_REACH))
def test_autograd_out_of_the_harness_reach_loses_the_backward_points(attack_batch, attack):
    """All scored 30 / 30 with nothing recorded (execv: 27, past the time limit on a hidden case): a graph
    rebuilt in a new thread (saved-tensors hooks are per thread) run by a new engine object, with an identity
    hook pushed over the grader's first or not; the gradients taken by a fresh interpreter. Now anomaly mode
    (one switch for the whole process) reports every graph whatever thread records it, a new engine and a
    pushed hook are tripwires, and no other program starts (an audit hook at every level, seccomp's execve at
    the Linux levels). The honest forward keeps its points; the staff's report lists the handin."""
    levels = ("namespaces", "fallback") if attack == "autograd_by_execv" else ("namespaces", "fallback", "portable")
    only_at(attack_batch, *levels, attack=attack)
    result = attack_batch["results"][attack]
    assert not started(attack_batch, attack)  # another program never started
    backward = [t for t in result["tests"] if "backward" in t["name"]]
    forward = [t for t in result["tests"] if "forward" in t["name"]]
    assert forward and all(t["score"] == t["max_score"] for t in forward), [t["output"] for t in forward]
    assert backward and all(t["score"] == 0.0 for t in backward), [t["output"] for t in backward]
    text = "\n".join(t["output"] for t in backward)
    if not OUT_OF_REACH[attack]:  # the C library's execv, past every audit hook: refused by the kernel (EPERM)
        assert "execv failed: exit 101" in text, text
        return
    assert "Backward points withheld" in text, text
    for label in OUT_OF_REACH[attack]:
        assert label in text, (label, text)
    assert "attention_backward_by_autograd" in result["extra_data"]["flags"], result.get("extra_data")
    report = (attack_batch["out"] / "report.html").read_text()
    # In the list of handins to open, on this handin's own row.
    assert re.search(rf">{attack}</a>(?:(?!</tr>).)*integrity flag: attention_backward_by_autograd", report, re.S), \
        report[-3000:]


def started(batch: dict, attack: str) -> bool:
    """Whether the other program of an autograd_by_* attack started: it leaves its mark first thing."""
    return (batch["out"].parent / f"{PROGRAM_STARTED}{attack.removeprefix('autograd_by_')}").exists()


@pytest.mark.parametrize("attack", ["autograd_by_fork_exec", "autograd_by_spawn"])
def test_a_program_started_below_the_audit_layer(attack_batch, attack):
    """_posixsubprocess.fork_exec, which multiprocessing calls to spawn a process, raises no audit event: the hook
    that refuses subprocess, os.exec* and os.posix_spawn never sees it. At the Linux levels seccomp refuses
    execve: the other program never starts (the forked child exits 255), and the backward points are lost (17 of
    30). At the portable level nothing stops it: the program starts (its mark is there) and, given the time to
    import torch, scores the backward points (30 of 30 with a 120 s limit; on a loaded machine the batch's 20 s may
    not be enough, so its points are not checked here), as docs/isolation.md says of that level."""
    only_at(attack_batch, "namespaces", "fallback", "portable", attack=attack)
    result = attack_batch["results"][attack]
    forward = [t for t in result["tests"] if "forward" in t["name"]]
    assert forward and all(t["score"] == t["max_score"] for t in forward), [t["output"] for t in forward]
    if batch_level(attack_batch) == "portable":
        assert started(attack_batch, attack)
        return
    assert not started(attack_batch, attack)
    backward = [t for t in result["tests"] if "backward" in t["name"]]
    assert backward and all(t["score"] == 0.0 for t in backward), [t["output"] for t in backward]
    assert "the other program failed: exit 255" in "\n".join(t["output"] for t in backward)


# ---------------------------------------------------------------- the audit pipe

# What the submission sends on the audit pipe -> (its parts in tests/isolation/attacks/, their fills).
AUDIT_PIPE_ATTACKS = {
    "padding events": (("audit_padding_events", "autograd_hidden"), {}),
    "junk on the pipe": (
        ("audit_pipe_writer", "autograd_hidden"),
        {"FOREVER": "no", "PAYLOAD": "junk with no end of line "},
    ),
    # A record's start with no end of line, written just before the autograd call: the hook's own
    # record must not become its arguments.
    "a record-shaped prefix": (
        ("audit_pipe_writer", "autograd_hidden", "audit_just_before_the_call"),
        {"FOREVER": "no", "PAYLOAD": ""},
    ),
    "a flood on the pipe": (("audit_pipe_writer", "autograd_hidden"), {"FOREVER": "yes", "PAYLOAD": ""}),
}


@pytest.mark.parametrize("attack", list(AUDIT_PIPE_ATTACKS))
def test_the_autograd_record_survives_whatever_the_submission_sends_on_the_audit_pipe(tmp_path, attack):
    """Every record on the audit pipe is read and indexed, whatever precedes it; bytes that are not the
    hook's own records mark the channel as tampered with (backward points withheld, forward kept), and
    a flood is stopped at 1 MB, not at the time limit."""
    parts, fills = AUDIT_PIPE_ATTACKS[attack]
    source = attack_source(*parts, **fills)
    start = time.monotonic()
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=180)
    assert time.monotonic() - start < 120  # far below the limit a flood would run to; generous for a busy machine
    backward = [t for t in result.tests if "backward" in t.name]
    forward = [t for t in result.tests if "forward" in t.name]
    assert backward and all(t.score == 0.0 for t in backward), [t.output for t in backward]
    text = "\n".join(t.output for t in backward)
    assert "Backward points withheld" in text, text
    if attack in ("padding events", "a record-shaped prefix"):
        assert "torch.autograd.grad while running" in text and all(t.passed for t in forward), text
    elif attack == "junk on the pipe":
        assert "tampered with the grader's record of autograd calls (it wrote to the grader's audit pipe)" in text, text
        assert all(t.passed for t in forward), [t.output for t in forward]
    else:
        assert "was stopped when it sent more than 1 MB to the grader's audit pipe" in "\n".join(result.notes), (
            result.notes
        )


def test_audit_records_are_read_whole_wherever_the_pipe_splits_them():
    """The grader's reader of the audit pipe: a record split across reads is one record; harmless
    events in any number do not hide a harness event; a byte that is not part of a hook record marks
    the channel, even glued to the front of a real record."""
    from autograder.isolation.pipes import AuditEvents as Events
    from gradelib.runner.limits import EVENTS_KEPT

    stream = b"gradelib.boot ok\n" + b"gradelib.pad " + b"x" * 190 + b"\n"
    stream = stream[:17] + stream[17:] * 600 + b"gradelib.autograd torch.autograd.grad\n"
    for cut in (1, 5, 17, 100, 4095):
        events = Events(1 << 20)
        for i in range(0, len(stream), cut):
            events.add(stream[i : i + cut])
        assert events.by_name["autograd"] == ["torch.autograd.grad"], cut
        assert events.by_name["boot"] == ["ok"] and len(events.by_name["pad"]) == EVENTS_KEPT
        assert not events.tampered
    glued = Events(1 << 20)
    glued.add(b"gradelib.boot ok\njunk gradelib.autograd torch.autograd.grad\n")
    assert glued.tampered == "it wrote to the grader's audit pipe" and "autograd" not in glued.by_name
    # The hook starts each record with an end of line: a record-shaped fragment before it stays apart.
    framed = Events(1 << 20)
    framed.add(b"\ngradelib.boot ok\ngradelib.note \ngradelib.autograd torch.autograd.grad\n")
    assert framed.by_name["autograd"] == ["torch.autograd.grad"] and not framed.tampered
    flood = Events(1 << 20)
    for _ in range(300):  # well-formed records, 1.2 MB of them
        flood.add(b"gradelib.pad " + b"x" * 3986 + b"\n")
    assert flood.flooded and flood.tampered.startswith("it sent more than 1 MB")
