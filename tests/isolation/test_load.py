"""The machine's load never changes a verdict: a run that computes is stopped by its CPU time, however long it
waited for a CPU, and a run that waits (sleeps) is still stopped on the wall clock.

Each run is pinned to one CPU beside three busy processes pinned there too (so it waits for the CPU about three
quarters of the time, more if the machine is busy besides) and computes 0.3 CPU seconds under a 1 s limit: the
course grader's fresh interpreter and template, the kit's runner and a notebook's time limit (notebook_child).
Each then sleeps past the limit with no busy process beside it. The CPU such a test costs is the busy processes'
few seconds; its verdict holds at any load up to LOAD_STRETCH."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autograder.isolation.kernel import is_linux

from support import REPO

pytestmark = pytest.mark.slow

LIMIT_S = 1.0  # each run's time limit, and each notebook block's (wall clock and CPU time)
COMPUTE_S = 0.3  # CPU seconds each computing run uses (its interpreter's start takes about as much again)
HOGS = 3  # busy processes beside each computing run

# Each way a run is timed, in a process of its own pinned to one CPU: what each says (the wall clock it took
# measured here, whether it was stopped, its output).
RUNS = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
sys.path[:0] = [{repo!r}, {children!r}]
from autograder import isolation as sandbox
from gradelib.runner import portable
from notebook_child import GradingTimeout, time_limit
what = {what!r}
code = ("import time\nt = time.process_time()\nwhile time.process_time() - t < {compute}: pass\nprint('computed')\n"
        if what == "compute" else "import time\ntime.sleep(30)\nprint('woke')\n")
root = Path(tempfile.mkdtemp(prefix="load-"))
os.chmod(root, 0o711)
limits = sandbox.Limits(timeout_s={limit}, min_isolation="portable")
said = {{}}
print("READY", flush=True)
sys.stdin.readline()  # the busy processes are running

def timed(name, run):
    work = root / name
    work.mkdir()
    (work / "harness.py").write_text(code)
    start = time.monotonic()
    done = run(work)
    said[name] = {{"wall": time.monotonic() - start, "clock": done.wall_s, "timed_out": done.timed_out,
                  "log": done.log_tail[-300:]}}

timed("fresh", lambda work: sandbox.run(["harness.py"], work, limits))
with sandbox.session(root, limits, preload=()):
    timed("template", lambda work: sandbox.run(["harness.py"], work, limits))
timed("kit", lambda work: portable.run(["harness.py"], work, limits, None))
start, stopped = time.monotonic(), False
try:
    with time_limit({limit}, wall_s={limit}):
        exec(code.replace("print(", "str("))
except GradingTimeout as exc:
    stopped = exc.wall or "cpu"
said["cell"] = {{"wall": time.monotonic() - start, "timed_out": stopped,
                 "log": "" if stopped else {{"compute": "computed", "sleep": "woke"}}[what]}}
shutil.rmtree(root)
print("RUNS" + json.dumps({{"level": sandbox.isolation_level(), "runs": said}}))
"""


def pinned_runs(what: str, cpu: int, hogs: int = 0) -> dict:
    """What each way of running says of the harness `what` ("compute" or "sleep"), run in a process pinned to `cpu`
    (once it has imported what it needs) beside `hogs` busy processes pinned there too."""
    script = RUNS.format(repo=str(REPO), children=str(REPO / "gradelib" / "child"), what=what, compute=COMPUTE_S,
                         limit=LIMIT_S)
    pin = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pin)
    busy = []
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()[-3000:]
        # Each busy process in a session of its own (its own scheduling group where the kernel groups by session),
        # ending by itself after a minute should this test die first.
        busy = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 60\n"
                                  "while time.monotonic() < end: pass"], start_new_session=True, preexec_fn=pin)
                for _ in range(hogs)]
        out, err = proc.communicate("go\n", timeout=300)
    finally:
        for p in [*busy, proc]:
            p.kill()
            p.wait()
    line = next((x for x in out.splitlines() if x.startswith("RUNS")), None)
    assert line, out[-2000:] + err[-3000:]
    return json.loads(line[4:])


@pytest.mark.skipif(not is_linux(), reason="pins processes to one CPU with sched_setaffinity (Linux)")
def test_a_run_that_waits_for_a_cpu_is_not_stopped_and_one_that_sleeps_is():
    cpu = max(os.sched_getaffinity(0))
    busy = pinned_runs("compute", cpu, HOGS)
    for name, run in busy["runs"].items():
        # It waited (the test shows something: more than its limit on the wall clock) and was not stopped.
        assert run["wall"] > LIMIT_S, (name, run)
        assert run["timed_out"] is False and "computed" in run["log"], (busy["level"], name, run)
    idle = pinned_runs("sleep", cpu)
    for name, run in idle["runs"].items():
        assert run["timed_out"] is True and "woke" not in run["log"], (idle["level"], name, run)
        assert LIMIT_S <= run["wall"] < LIMIT_S + 5, (name, run)  # stopped by its limit, long before it woke
