"""Attacks on the host around the sandbox: the hidden fixtures and the grader's /proc entries, files only
root may read, the host's processes, its network listeners, shared memory, kernel keyrings and user
namespaces; and the isolation itself: the paths a run is granted, the mounts of the namespace level, and
--isolation strict on a machine without namespaces (autograder/isolation/levels, namespaces, fallback,
interpreter, kernel).

What must hold: a run reads no hidden answer and no file or process of the host, reaches no listener,
keeps no key, namespace or shared memory past its end, and a grading that asks for namespaces where there
are none refuses to grade instead of grading with less.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from autograder import isolation as sandbox
from autograder.isolation.slots import UID_BASE, block

from attack_tools import CLI, PYTHON, attack_text, batch_level, needs_landlock, needs_root, only_at, outputs
from support import FIXTURES, REPO, SOLUTIONS

pytestmark = pytest.mark.attacks

# ---------------------------------------------------------------- the hidden answers and the host's files


@needs_landlock
@needs_root
def test_search_for_answers_finds_nothing(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="search_for_answers")
    text = outputs(attack_batch["results"]["search_for_answers"])
    assert "found 0 answer files" in text, text
    for probe in ("ppid_cwd", "ppid_environ", "ppid_maps", "ppid_mem", "ppid_root", "init_root",
                  "proc_root_0", "listdir_root", "listdir_tmp", "listdir_up"):
        assert f"{probe}=EACCES" in text, (probe, text)
    # The repository is denied by Landlock, or not mounted at all inside the namespaces.
    refused = "(EACCES|ENOENT)" if batch_level(attack_batch) == "namespaces" else "EACCES"
    for probe in ("listdir_hidden0", "open_dk_ne_dv0", "open_single_step0"):
        assert re.search(rf"{probe}={refused}\b", text), (probe, text)
    # Listing the grader's descriptor numbers is allowed to uid 0; opening any of them is not.
    assert "ppid_fd_open=EACCES" in text, text


def test_fixtures_are_outside_every_sandbox_path():
    """Landlock grants the child the interpreter's folders; none may hold the fixtures."""
    from autograder.isolation.fallback import READ_ONLY_SYSTEM_PATHS
    from autograder.isolation.interpreter import python_mounts, python_paths

    hidden = (FIXTURES / "attention" / "hidden").resolve()
    for granted in (*READ_ONLY_SYSTEM_PATHS, *python_paths(), *python_mounts()[0]):
        assert not hidden.is_relative_to(Path(granted).resolve()), granted


@needs_root
def test_root_only_files_stay_unreadable(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="root_only_files")
    text = attack_text(attack_batch, "root_only_files")
    uid = int(re.search(r"uid=(\d+)", text).group(1))
    assert uid in block(), text  # a real unprivileged uid of this grader's block, not uid 0
    assert ":read:" not in text and "TOPSECRET" not in text, text
    assert re.search(r"secret:(ENOENT|EACCES)\b", text) and re.search(r"shadow:(ENOENT|EACCES)\b", text), text
    # /proc/1/environ is root's (and, at the fallback, outside the /proc paths Landlock grants).
    assert re.search(r"init_environ:EACCES\b", text), text


# ---------------------------------------------------------------- the host's processes, network and shared memory


@needs_root
def test_host_processes_are_invisible(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="host_processes")
    text = attack_text(attack_batch, "host_processes")
    if batch_level(attack_batch) == "fallback":  # the host's /proc, of which Landlock grants the run's own folder only
        assert "proc listing:EACCES" in text, text
        return
    found = re.search(r"proc visible=(\d+) host_visible=(\d+)", text)
    assert found, text
    visible, host = map(int, found.groups())
    assert host == 0 and 0 < visible <= 4, text  # the namespace's init and the child itself


@needs_root
def test_network_reaches_nothing_on_the_host(attack_batch):
    """socket() is refused (EPERM, the seccomp filter) at both levels, so neither a listener on the host's
    network nor a UNIX socket of the host, a root daemon's included, is reached."""
    only_at(attack_batch, "namespaces", "fallback", attack="network")
    text = attack_text(attack_batch, "network")
    for label in ("udp", "unix", "rootsock", "tcp"):
        assert re.search(rf"{label}:EPERM\b", text), (label, text)
    assert "net udp:" in text, text  # sent or refused, it must not arrive
    assert attack_batch["received"] == []


@needs_root
def test_shared_memory_is_gone_after_the_run(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", attack="shared_memory")
    text = attack_text(attack_batch, "shared_memory")
    assert "devshm:written" in text and "sysv:attached" in text, text  # private ones: allowed, and dropped
    assert attack_batch["left"]["dev_shm"] == []
    assert attack_batch["left"]["sysv_shm"] is False


# ---------------------------------------------------------------- the kernel: keyrings and user namespaces


def test_no_run_can_add_or_read_a_kernel_key(attack_batch):
    """add_key and keyctl fail with EPERM (the sandbox's seccomp filter), and no key with the marker exists."""
    only_at(attack_batch, "namespaces", "fallback", attack="keyring")
    text = attack_text(attack_batch, "keyring")
    assert "keyring add_key=-1 errno=1 search=-1 errno=1 exec=" in text, text
    # No program starts to escape the filter: subprocess is refused by the boot's audit hook, and the C
    # library's execv, past every audit hook, by the filter itself (EPERM).
    assert "exec=refused execv=1 " in text, text


def test_no_run_can_make_a_user_namespace(attack_batch):
    """unshare, clone with CLONE_NEWUSER and setns fail with EPERM; clone3 (whose flags a filter cannot
    read) with ENOSYS, so the C library falls back to clone() for threads; unshare(1) from a shell cannot
    even start (no run starts another program). io_uring (kernel surface of the same kind) fails with EPERM."""
    only_at(attack_batch, "namespaces", "fallback", attack="keyring")
    text = attack_text(attack_batch, "keyring")
    assert "namespaces unshare=-1/1 clone=-1/1 clone3=-1/38 setns=-1/1 io_uring=-1/1 shell=refused" in text, text
    assert attack_batch["marker"] not in Path("/proc/keys").read_text()


# ---------------------------------------------------------------- the isolation levels


def test_strict_isolation_refuses_to_grade_without_namespaces(tmp_path):
    folder = tmp_path / "honest"
    folder.mkdir()
    (folder / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text())
    env = {**os.environ, "GRADELIB_SANDBOX": "landlock"}  # as on a machine without bubblewrap
    proc = subprocess.run([PYTHON, str(CLI), str(folder), "--out", str(tmp_path / "grades"), "--isolation", "strict",
                           "--only", "attention"], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "--isolation strict: not grading, namespaces are unavailable" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "grades" / "honest").exists()


def test_an_interpreter_under_tmp_is_mounted_over_the_private_tmp(monkeypatch, tmp_path):
    """A checkout (and its .venv) under /tmp must stay visible inside the namespace: /tmp is mounted first."""
    from autograder.isolation import namespaces

    venv = "/tmp/some-checkout/.venv"
    monkeypatch.setattr(namespaces, "python_mounts", lambda: ([venv], f"{venv}/bin/python"))
    argv, _, _ = namespaces.bwrap_argv(tmp_path, UID_BASE, sandbox.Limits())
    tmpfs = next(i for i in range(len(argv) - 1) if argv[i] == "--tmpfs" and argv[i + 1] == "/tmp")
    bind = next(i for i in range(len(argv) - 2) if argv[i] == "--ro-bind" and argv[i + 1] == venv)
    assert tmpfs < bind
