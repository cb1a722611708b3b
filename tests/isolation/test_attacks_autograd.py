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

import json
import re
import time
from pathlib import Path

import pytest

from autograder.isolation.guards import GRAPH_LABEL, THREAD

from attack_batch import PROGRAM_STARTED
from attack_tools import attack_source, batch_level, only_at, outputs, run_cli
from support import SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks


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


def test_the_static_check_reads_every_mode_of_automatic_differentiation():
    """Forward mode and torch.func's transforms, spelled plainly, are read as autograd too (at run time their
    entry points are tripwires whatever the spelling)."""
    from gradelib.problems.autograd_source import autograd_uses

    for line in ("import torch.autograd.forward_ad as fw", "with fw.dual_level():\n    pass", "d = fw.make_dual(x, t)",
                 "y = torch.func.jvp(f, (x,), (t,))", "from functorch import vmap", "g = torch.vmap(f)(x)",
                 "h = func.hessian(f)(x)", "out, jvp_fn = func.linearize(f, x)", "import torch._functorch.apis",
                 "from torch import func", "g = torch.func.grad(f)(x)", "from torch.func import jacrev, jacfwd"):
        assert autograd_uses(line + "\n"), line


def test_a_self_test_under_a_plain_main_guard_still_costs_nothing():
    """The benefit of the doubt stays for honest files: only a module that could rebind __name__ loses it (the
    course grader's check; the kit's own skips the guarded blocks)."""
    from autograder.grading.course_side import CourseSide

    autograd_uses = CourseSide().autograd_uses
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

# Attack of the batch -> what the list of autograd uses must name.
OUT_OF_REACH = {
    "autograd_in_a_thread": (THREAD,),
    "autograd_hook_pushed": ("a saved-tensors hook pushed over the grader's", THREAD),
    "autograd_by_subprocess": ("another program (subprocess.Popen, refused)",),
    "autograd_by_execv": ("a way to the grader's guards (ctypes, refused)",),
}


@pytest.mark.parametrize("attack", list(OUT_OF_REACH))
def test_autograd_out_of_the_harness_reach_loses_the_backward_points(attack_batch, attack):
    """All scored 30 / 30 with nothing recorded (execv: 27, past the time limit on a hidden case): a graph
    rebuilt in a new thread (saved-tensors hooks are per thread) run by a new engine object, with an identity
    hook pushed over the grader's first or not; the gradients taken by a fresh interpreter. Now starting a thread
    is a tripwire (and refused at the Linux levels: seccomp), a pushed hook is one, and no other program starts
    (an audit hook at every level, seccomp's execve at the Linux levels; ctypes, which execv needs, is refused at
    every level). The honest forward keeps its points; the staff's report lists the handin."""
    only_at(attack_batch, "namespaces", "fallback", "portable", attack=attack)
    result = attack_batch["results"][attack]
    assert not started(attack_batch, attack)  # another program never started
    backward = [t for t in result["tests"] if "backward" in t["name"]]
    forward = [t for t in result["tests"] if "forward" in t["name"]]
    assert forward and all(t["score"] == t["max_score"] for t in forward), [t["output"] for t in forward]
    assert backward and all(t["score"] == 0.0 for t in backward), [t["output"] for t in backward]
    text = "\n".join(t["output"] for t in backward)
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
    import torch, scores the backward points (30 of 30 with a 120 s limit; on a loaded machine the batch's 10 s may
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


# ---------------------------------------------------------------- the guards themselves

# Attack of the batch -> what the list of autograd uses must name, at every level.
PAST_THE_GUARDS = {
    "autograd_forward_hidden": ("forward-mode autograd (a dual level)", "torch.func.jvp", "torch.func.vmap"),
    # Each way refused (ctypes' library and data types, /proc/self/mem): the graph is recorded by the hooks in place.
    "audit_hooks_emptied": ("a way to the grader's guards (ctypes, refused)", GRAPH_LABEL),
    "autograd_tripwires_dodged": ("torch.autograd.grad", GRAPH_LABEL),
}


@pytest.mark.parametrize("attack", list(PAST_THE_GUARDS))
def test_autograd_past_the_guards_loses_the_backward_points(attack_batch, attack):
    """All scored 30 / 30 with nothing recorded (the forward mode on the hidden cases alone: 23.5), at the
    namespaces level as in Docker's default container: every gradient from Jacobian-vector products (dual
    numbers; torch.func.jvp under vmap), names spelled at run time; the interpreter's audit hooks emptied
    (through ctypes calls, ctypes data types alone, or /proc/self/mem) and the harness's record told it held
    every label; the closure-held tripwires dodged from Python (the record, the originals in their closures,
    anomaly mode's format_stack swapped during the backward). Now each mode's entry point is a tripwire under
    every name a module binds it to, reporting through a hook no Python object reaches; the ways to the hooks
    are refused. The honest forward keeps its points; the staff's report lists the handin."""
    only_at(attack_batch, "namespaces", "fallback", "portable", attack=attack)
    result = attack_batch["results"][attack]
    forward = [t for t in result["tests"] if "forward" in t["name"]]
    backward = [t for t in result["tests"] if "backward" in t["name"]]
    assert forward and all(t["score"] == t["max_score"] for t in forward), [t["output"] for t in forward]
    assert backward and all(t["score"] == 0.0 for t in backward), [t["output"] for t in backward]
    text = "\n".join(t["output"] for t in backward)
    assert "Backward points withheld" in text and "uses automatic differentiation" not in text, text
    assert "attention_backward_by_autograd" in result["extra_data"]["flags"], result.get("extra_data")
    # What only the hidden run recorded is named to the staff (the flag), not in a line a student sees.
    named = result["extra_data"]["flags"]["attention_backward_by_autograd"] if attack.endswith("_hidden") else text
    for label in PAST_THE_GUARDS[attack]:
        assert label in named, (label, named)
        assert not attack.endswith("_hidden") or label not in text, text
    report = (attack_batch["out"] / "report.html").read_text()
    assert re.search(rf">{attack}</a>(?:(?!</tr>).)*integrity flag: attention_backward_by_autograd", report, re.S), \
        report[-3000:]


def test_forward_mode_on_every_case_loses_the_backward_points(tmp_path):
    """Every gradient of Q, K and V from Jacobian-vector products (dual numbers; torch.func.jvp under vmap), the
    names spelled at run time: 30 / 30 with nothing recorded. Now forward mode's dual level and torch.func's
    transforms are tripwires wherever a module binds them; the honest forward keeps its points."""
    source = attack_source("autograd_forward_mode", "autograd_forward", WHEN="always")
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=120)
    forward = [t for t in result.tests if "forward" in t.name]
    backward = [t for t in result.tests if "backward" in t.name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward]
    assert backward and all(t.score == 0.0 for t in backward)
    text = backward[0].output
    for label in ("forward-mode autograd (a dual level)", "torch.func.jvp", "torch.func.vmap"):
        assert label in text, (label, text)
    assert "uses automatic differentiation" not in text and "attention_backward_by_autograd" in result.flags, text


@pytest.mark.parametrize("level", ["", "fallback", "portable"])
def test_guards_silenced_lose_the_backward_points(tmp_path, level):
    """The audit pipe pointed at /dev/null at import, the harness's record told it held every label, every gradient
    by autograd (names spelled at run time): no record of the guards reaches the grader. At the Linux levels the
    second seccomp filter refuses the dup2, so the graph is recorded as usual; at the portable level the pipe goes
    silent, and the missing heartbeats say so. Either way the backward points are lost, with a flag."""
    if level == "fallback":
        from container import available

        if available():
            pytest.skip(f"Docker's default container cannot be reproduced here: {available()}")
    folder = tmp_path / "silenced"
    folder.mkdir()
    (folder / "attention.py").write_text(attack_source("guards_silenced", "autograd_forward"))
    proc = run_cli(str(folder), "--out", str(tmp_path / "grades"), "--timeout", "120", "--only", "attention",
                   level=level, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "grades" / "silenced" / "results.json").read_text())
    forward = [t for t in result["tests"] if "forward" in t["name"]]
    backward = [t for t in result["tests"] if "backward" in t["name"]]
    assert forward and all(t["score"] == t["max_score"] for t in forward), [t["output"] for t in forward]
    assert backward and all(t["score"] == 0.0 for t in backward), [t["output"] for t in backward]
    text = "\n".join(t["output"] for t in backward)
    assert "Backward points withheld" in text and "uses automatic differentiation" not in text, text
    assert ("ran with the grader's tripwires silenced" if level == "portable" else GRAPH_LABEL) in text, text
    assert "attention_backward_by_autograd" in result["extra_data"]["flags"], result.get("extra_data")


# How each way to the guards ends (guards_reached.py): refused at every level where the course's boot runs (a call of
# a ctypes function pointer raises no audit event: no pointer is callable, a TypeError); the seccomp filter's own
# (signal handlers, threads, the audit pipe's descriptor) at the Linux levels only.
REFUSED_EVERYWHERE = {"ctdata": "Type", "dlopen": "Perm", "ctcall": "Type", "ctaddr": "Perm", "decref": "Runt",
                      "gc": "Perm", "trace": "Perm", "frames": "Perm", "code": "Perm", "consts": "Perm", "mem": "Perm",
                      "reopen": "Perm", "symlink": "Perm", "hook": "Runt", "testcapi": "Impo", "interp": "Impo"}
REFUSED_BY_SECCOMP = {"signal": "Perm", "dup2": "Perm", "thread": "Runt"}  # PermissionError, RuntimeError


def test_every_way_to_the_guards_is_refused_and_reported(attack_batch):
    """Each way Python code has to the grader's guards, tried in one run: ctypes (a data type's instance, a
    premature free; a library, a foreign call, an absolute address), gc's object lists, tracing, other threads'
    frames, a new code object, a tripwire's code (what it holds), /proc/self/mem, the audit pipe reopened through
    /proc/self/fd, a symbolic link, an audit hook of its own, the interpreter's test module, another
    interpreter; and at the Linux levels a signal handler, a thread and the audit pipe's descriptor. Before, each
    worked (ctypes' calls ran once recorded). Now each is refused and said on the audit pipe, and costs the backward
    points with a flag."""
    level = batch_level(attack_batch)
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="guards_reached")
    text = outputs(attack_batch["results"]["guards_reached"])
    found = re.search(r"probes ((?:\w+=\w+ ?)+)", text)
    assert found, text
    seen = dict(pair.split("=") for pair in found.group(1).split())
    expected = {**REFUSED_EVERYWHERE, **(REFUSED_BY_SECCOMP if level != "portable" else
                                         {name: "ok" for name in REFUSED_BY_SECCOMP})}
    assert seen == expected, (level, seen)
    for event in ("ctypes", "gc.get_objects", "sys.settrace", "sys._current_frames", "code.__new__",
                  "object.__getattr__", "open", "os.symlink", "sys.addaudithook", "import"):
        assert f"a way to the grader's guards ({event}, refused)" in text, (event, text)
    assert THREAD in text, text
    assert "Backward points withheld" in text, text
    assert "attention_backward_by_autograd" in attack_batch["results"]["guards_reached"]["extra_data"]["flags"]


def test_a_runs_heartbeats_must_be_signed_with_its_key_one_per_stage():
    """The grader's side of the guards' heartbeat: the key record first, then after each stage `n token`, the
    token being the first 32 hex digits of sha256(key + n as 8 little-endian bytes) (computed here by hashlib)."""
    import hashlib

    from autograder.grading.course_side import silent_guards

    key = bytes(range(16))
    signed = [f"{n} {hashlib.sha256(key + n.to_bytes(8, 'little')).hexdigest()[:32]}" for n in range(4)]
    assert silent_guards([key.hex()], signed, 4) == "" and silent_guards([key.hex()], signed[:3], 3) == ""
    assert silent_guards([key.hex()], signed[:2], 4) == "2 heartbeats for 4 stages"
    assert silent_guards([key.hex()], [], 1) == "0 heartbeats for 1 stages"
    assert silent_guards([], signed, 4) == "no key record"
    assert silent_guards([key.hex(), key.hex()], signed, 4) == "more than one key record"
    forged = [*signed[:2], f"2 {'0' * 32}", signed[3]]
    assert silent_guards([key.hex()], forged, 4) == "a heartbeat not signed with the run's key"
    assert silent_guards([(b"x" * 16).hex()], signed, 4) == "a heartbeat not signed with the run's key"
    assert silent_guards([], [], 0) == ""  # a run that ran no stage (its import failed) owes none


def test_the_guards_hold_no_state_the_submission_can_reach():
    """Each tripwire the guards make is sealed: what it holds is in its code's constants (whose reading is refused),
    with empty globals, no builtins, no closure and no defaults; the two audit hooks (which no Python object
    reaches) look up no global or builtin name, so a run that rebinds one in guards.py's module or in builtins
    changes nothing of them."""
    import dis

    from autograder.isolation import guards

    def global_names(fn) -> set[str]:
        codes, names = [fn.__code__], set()
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if hasattr(c, "co_code")]
            names |= {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        return names

    refuser, reporter = guards._refuser(99, {1}), guards._reporter(99, b"k" * 16, "a", "b")
    inner = [c.cell_contents for c in refuser.__closure__ if hasattr(c.cell_contents, "__code__")]
    assert len(inner) == 2 and all(global_names(f) == set() for f in (refuser, reporter, *inner))
    held = object()
    for source in (guards.WRAPPER.format(name="f"), guards.PACK, guards.ENGINE_GETATTR, guards.CHECK):
        made = guards._sealed(source, audit=held, record=held, data=held, sent=held, original=held, getattr=held,
                              engine=held, alive=held, hooks_on_top=held, is_on=held, modules=held, fx=held,
                              format_stack=held, pack=held, BaseException=held)
        assert made.__globals__ is guards.SEALED_GLOBALS and guards.SEALED_GLOBALS == {"__builtins__": {}}
        assert made.__closure__ is None and made.__defaults__ is None and made.__kwdefaults__ is None
        assert global_names(made) == set() and held in made.__code__.co_consts, source
        assert not [c for c in made.__code__.co_consts if isinstance(c, str) and c.startswith("@")], source


def _bpf(program, nr: int, args: tuple = (), arch: int = 0xC000003E) -> int:
    """What a classic BPF program returns for a system call (seccomp_data: nr, arch, args' low words): an
    interpreter of the instructions the grader's filters use, written from the BPF definitions."""
    data = {0: nr, 4: arch, **{16 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}}
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc, pc = data.get(k, 0), pc + 1
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x25: acc > k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def test_the_run_guard_filter_refuses_what_it_says_and_nothing_else():
    """kernel.run_guard_program, read by an interpreter of its instructions: EPERM for a signal handler, a thread
    and any change to the audit pipe's descriptor (closed, duplicated, overwritten, its flags or ioctls, a
    close_range over it); the same calls on other descriptors, a fork and every other call pass."""
    from autograder.isolation.kernel import run_guard_program

    fd, allow, eperm = 9, 0x7FFF0000, 0x00050001
    program = run_guard_program("x86_64", fd)
    refused = [(13, ()), (56, (0x3D0F00,)), (3, (fd,)), (32, (fd,)), (72, (fd, 4)), (16, (fd, 0x5421)),
               (33, (fd, 4)), (33, (4, fd)), (292, (4, fd, 0)), (436, (0, 2**32 - 1)), (436, (fd, fd)), (436, (3, fd))]
    passed = [(1, (fd, 0, 10)), (56, (0x01200011,)), (3, (fd + 1,)), (32, (4,)), (72, (4, 4)), (33, (4, 5)),
              (292, (4, 5, 0)), (436, (fd + 1, 2**32 - 1)), (436, (0, fd - 1)), (0, (fd,)), (57, ())]
    assert [_bpf(program, nr, args) for nr, args in refused] == [eperm] * len(refused)
    assert [_bpf(program, nr, args) for nr, args in passed] == [allow] * len(passed)
    assert _bpf(program, 3, (fd,), arch=0x40000003) == allow  # another ABI: the first filter refuses it all
    arm = run_guard_program("aarch64", fd)
    assert [_bpf(arm, nr, args, 0xC00000B7) for nr, args in ((134, ()), (24, (4, fd, 0)), (57, (fd,)))] == [eperm] * 3
    assert _bpf(arm, 57, (fd + 1,), 0xC00000B7) == allow
