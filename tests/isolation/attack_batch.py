"""The attack batch: one instructor-CLI run (two jobs) that grades the reference solution, every attack of
BATCH_ATTACKS, and the reference again, then one that grades each notebook cell of CELL_ATTACKS, with listeners
and a root-only file on the host for the attacks to aim at, then notes what is left behind.

conftest.py's `attack_batch` fixture runs it once per test session, shared by the workers; the tests that read
it live in the test_attacks_*.py file of what each attack goes for. Each attack reports what it managed
(or why it could not) in the exception it raises, so a test also sees that the attack really ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

from attack_tools import (
    NOTEBOOK_1,
    attack_source,
    leftover_cgroups,
    leftover_scratch,
    notebook_with_first_cell,
    processes_named,
    run_cli,
    sandbox_uid_processes,
)
from support import REPO, SOLUTIONS

# Per problem run: the infinite loop spends it, and the hidden run half of it again. The clock leaves out a run's waits
# for a CPU (test_load.py), and the reference's run needs under 2 CPU-seconds, so 10 s holds at any load.
BATCH_TIMEOUT_S = 10
DAEMON_SLEEP_S = 3
CELL_MEMORY_MB = 16384  # the cell attacks' memory limit (run_batch)

PROGRAM_STARTED = "program-started-by-"  # beside the batch's grades: the mark another program leaves as it starts
# Each an attention.py, graded in this order: name in the batch -> (source in tests/isolation/attacks/, or a tuple of
# sources joined, its own fills).
BATCH_ATTACKS: dict[str, tuple[str, dict[str, str]]] = {
    **{name: (name, {}) for name in (
        "forged_results", "exit_at_import", "infinite_loop", "huge_allocation", "patch_comparisons", "lying_tensor",
        "search_for_answers", "resource_counts", "network", "host_processes", "root_only_files",
        "hidden_inputs_in_output")},
    # log.txt swapped for a link to another submission's feedback or to a root-only file, a FIFO, a link to /dev/zero.
    "log_symlink_feedback": ("log_swap", {"SWAP": "@OUT@/reference_before/feedback.txt"}),
    "log_symlink_secret": ("log_swap", {"SWAP": "@SECRET@"}),
    "log_fifo": ("log_swap", {"SWAP": "fifo"}),
    "log_dev_zero": ("log_swap", {"SWAP": "/dev/zero"}),
    # Autograd out of the harness's reach: a graph in a new thread run by a new engine (with a saved-tensors
    # hook pushed over the grader's first, or not); another program, started by subprocess, by execv through
    # ctypes (refused), or with no audit event at all (_posixsubprocess.fork_exec; multiprocessing's spawn).
    "autograd_in_a_thread": (("autograd_in_a_thread", "autograd_forward"), {"HOOK": "none"}),
    "autograd_hook_pushed": (("autograd_in_a_thread", "autograd_forward"), {"HOOK": "push"}),
    **{f"autograd_by_{how}": (("autograd_in_another_program", "autograd_forward"),
                              {"HOW": how, "MARK": f"@OUT@/../{PROGRAM_STARTED}{how}"})
       for how in ("subprocess", "execv", "fork_exec", "spawn")},
    # Forward-mode autograd (dual numbers, torch.func.jvp under vmap) on the hidden cases alone (on every case:
    # test_attacks_autograd.py, at the machine's level); the audit hooks emptied through ctypes or /proc/self/mem
    # (refused); every closure-held tripwire dodged from Python; each way to the guards tried (after the reference).
    "autograd_forward_hidden": (("autograd_forward_mode", "autograd_forward"), {"WHEN": "hidden"}),
    "audit_hooks_emptied": (("audit_hooks_emptied", "autograd_forward"), {"HOW": "each"}),
    "autograd_tripwires_dodged": (("autograd_tripwires_dodged", "autograd_forward"), {}),
    "guards_reached": ("guards_reached", {}),
}

# Attacks on the kernel, through ctypes: the first cell of notebook 1 (a run without attention's guards, which refuse
# ctypes), beside the reference attention.py, graded by a second CLI run (--only losses). The kernel's layers stop them.
CELL_ATTACKS: dict[str, tuple[str, dict[str, str]]] = {
    name: (name, {}) for name in ("late_daemon", "keyring", "setsid_chain", "shared_memory")}


# Attacks whose forward is honest, and keeps its points: they go for the backward points alone.
BACKWARD_ONLY = ("autograd_in_a_thread", "autograd_hook_pushed", "autograd_by_subprocess", "autograd_by_execv",
                 "autograd_by_fork_exec", "autograd_by_spawn", "autograd_forward_hidden", "audit_hooks_emptied",
                 "autograd_tripwires_dodged")
# Attacks on the grader's comparisons and reports, which work alike at every level (the harness runs in the
# child, the comparisons in the grader): graded once, at the machine's own level.
SAME_AT_EVERY_LEVEL = ("exit_at_import", "patch_comparisons", "lying_tensor", "hidden_inputs_in_output")
# Attacks appended to the reference attention.py: they need a run that computes every result first.
WITH_REFERENCE = ("hidden_inputs_in_output", "guards_reached")
# What the fallback level is checked against: what a run may reach and how it is ended.
FALLBACK_ATTACKS = tuple(name for name in {**BATCH_ATTACKS, **CELL_ATTACKS} if name not in SAME_AT_EVERY_LEVEL)
# What the portable level promises, and so what its batch holds: limits on time, output and memory, and every
# process of a run ended with it. It isolates nothing: a run can read and change what the grader's user can. The
# programs started below the audit layer are there to measure what it does not stop.
PORTABLE_ATTACKS = ("infinite_loop", "huge_allocation", "late_daemon", "setsid_chain", "log_fifo", "log_dev_zero",
                    "autograd_in_a_thread", "autograd_hook_pushed", "autograd_by_subprocess", "autograd_by_execv",
                    "autograd_by_fork_exec",
                    "autograd_by_spawn", "autograd_forward_hidden", "audit_hooks_emptied", "autograd_tripwires_dodged",
                    "guards_reached")


def run_batch(root: Path, level: str = "", attacks: tuple[str, ...] | None = None) -> dict:
    """Grade reference, every attack, reference again -- one CLI run, two jobs -- then each cell attack (a second
    run), with submissions and grades under `root`: the results by submission and what was seen on the host during
    and after the runs. `level`: the machine's own (""), or "fallback" or "portable" (attack_tools.run_cli)."""
    out = root / "grades"
    marker = "zz" + uuid.uuid4().hex[:10]  # comm names hold 15 characters
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    chosen = attacks or (*BATCH_ATTACKS, *CELL_ATTACKS)
    order = ["reference_before", *(a for a in chosen if a in BATCH_ATTACKS), "reference_after"]
    cells = [a for a in chosen if a in CELL_ATTACKS]
    with host_listeners(marker) as host:
        common = {
            "OUT": out,
            "REPO": REPO,
            "MARKER": marker,
            "SLEEP": DAEMON_SLEEP_S,
            "UDPPORT": host["udp_port"],
            "TCPPORT": host["tcp_port"],
            "SOCK": host["sock"],
            "ROOTSOCK": host["root_sock"],
            "SECRET": host["secret"],
            "SHMKEY": host["shm_key"],
        }
        paths = []
        for name in order:
            folder = root / "submissions" / name
            folder.mkdir(parents=True)
            if name.startswith("reference"):
                text = reference
            else:
                source, own = BATCH_ATTACKS[name]
                prefix = reference if name in WITH_REFERENCE else ""
                text = prefix + attack_source(*(source if isinstance(source, tuple) else (source,)), **own, **common)
            (folder / "attention.py").write_text(text)
            paths.append(str(folder))
        cell_paths = []
        for name in cells:
            folder = root / "cells" / name
            folder.mkdir(parents=True)
            source, own = CELL_ATTACKS[name]
            (folder / "attention.py").write_text(reference)
            (folder / NOTEBOOK_1).write_text(notebook_with_first_cell(attack_source(source, **own, **common)))
            cell_paths.append(str(folder))
        scratch_before = set(Path("/tmp").glob("autograder-scratch-*"))
        # One job at a time at the portable level: nothing there shares the CPU out between runs, so the setsid
        # chain's 80 spinning processes would starve the run graded beside it past its time limit.
        jobs = "1" if level == "portable" else "2"

        def grade(folders: list[str], grades: Path, problem: str, *more: str) -> subprocess.CompletedProcess:
            return run_cli(*folders, "--out", str(grades), "--jobs", jobs, "--timeout", str(BATCH_TIMEOUT_S),
                           "--only", problem, *more, level=level,
                           timeout=BATCH_TIMEOUT_S + 60 * len(folders))  # a busy machine grades one in 10 to 30 s

        start = time.monotonic()
        proc = grade(paths, out, "attention")
        wall = time.monotonic() - start
        # Where memory is the sum of each process's resident set (fallback, portable), the setsid chain's 80 copies
        # of the notebook's process count 4 GB: room enough that its notebook ends and says what the cell did.
        cell_proc = grade(cell_paths, out / "cells", "losses", "--memory-mb", str(CELL_MEMORY_MB)) if cells else None
        alive_after = processes_named(marker)
        time.sleep(DAEMON_SLEEP_S + 1)  # past the moment the daemon would write
        received = host["received"]()
        left = {
            "dev_shm": [p.name for p in Path("/dev/shm").iterdir() if marker in p.name],
            "sysv_shm": sysv_segment_present(host["shm_key"]),
            "tmp": [p.name for p in Path("/tmp").iterdir() if marker in p.name and p.name != Path(host["secret"]).name
                    and p.name != Path(host["sock"]).name and p.name != Path(host["root_sock"]).parent.name],
            "scratch": leftover_scratch(scratch_before),
            "uid_processes": sandbox_uid_processes(),
            "cgroups": leftover_cgroups(),
        }
    results = {}
    for name in [*order, *cells]:
        path = out / ("cells" if name in cells else "") / name / "results.json"
        results[name] = json.loads(path.read_text()) if path.exists() else None
    return {"proc": proc, "cell_proc": cell_proc, "wall": wall, "out": out, "marker": marker, "results": results,
            "level": level, "alive_after": alive_after, "alive_later": processes_named(marker), "received": received,
            "left": left}


@contextlib.contextmanager
def host_listeners(marker: str):
    """What the network and file attacks aim at on the host: UDP, TCP and UNIX listeners, a root-only file."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    sock_path = f"/tmp/{marker}.sock"  # short: a UNIX socket path holds 107 bytes
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(sock_path)
    os.chmod(sock_path, 0o777)  # the socket's own mode lets anyone connect; only the sandbox may stop it
    unix.listen(8)
    unix.setblocking(False)
    root_dir = Path(f"/tmp/{marker}-root")  # as a root daemon keeps its socket: only uid 0 may connect
    root_dir.mkdir(mode=0o700)
    root_sock_path = str(root_dir / "s")
    root_unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    root_unix.bind(root_sock_path)
    os.chmod(root_sock_path, 0o600)
    root_unix.listen(8)
    root_unix.setblocking(False)
    secret = Path(f"/tmp/{marker}-secret")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"TOPSECRET-" + marker.encode())
    os.close(fd)

    def received() -> list[str]:
        got = []
        for label, s in (("udp", udp),):
            try:
                while True:
                    got.append(f"{label}:{s.recv(100)!r}")
            except BlockingIOError:
                pass
        for label, s in (("tcp", tcp), ("unix", unix), ("rootsock", root_unix)):
            try:
                while True:
                    conn, _ = s.accept()
                    got.append(f"{label}:connection")
                    conn.close()
            except BlockingIOError:
                pass
        return got

    try:
        yield {"udp_port": udp.getsockname()[1], "tcp_port": tcp.getsockname()[1], "sock": sock_path,
               "root_sock": root_sock_path,
               "secret": str(secret), "shm_key": int(marker[2:9], 16), "received": received}
    finally:
        for s in (udp, tcp, unix, root_unix):
            s.close()
        Path(sock_path).unlink(missing_ok=True)
        Path(root_sock_path).unlink(missing_ok=True)
        root_dir.rmdir()
        secret.unlink(missing_ok=True)
        # At the fallback level the shared-memory attack's leftovers are real: the test removes them.
        for p in Path("/dev/shm").iterdir():
            if marker in p.name:
                p.unlink(missing_ok=True)
        key = int(marker[2:9], 16)
        if sysv_segment_present(key):
            subprocess.run(["ipcrm", "-M", str(key)], capture_output=True, check=False)


def sysv_segment_present(key: int) -> bool:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return any(line.split() and int(line.split()[0]) == key for line in lines)
