"""Grade one submission to disk, in a process of its own.

    python -m autograder.batch.worker SUBMISSION --name NAME --out DIR [--only ID ...]
                                [--timeout S] [--memory-mb M]

The batch grader (cli.py) starts one of these per submission, so whatever
goes wrong while grading one handin -- a crash of the grader itself, a
memory blow-up, a hang -- ends this process only. It exits 0 once
DIR/NAME/results.json and feedback.txt are written (each atomically), and
otherwise writes nothing there. On SIGTERM or SIGINT it kills the sandboxed
processes it started before it exits, so an interrupted run leaves nothing
running.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from gradelib import sandbox
from gradelib.grade import grade_submission
from gradelib.results import write_submission

from ..oracle.oracles import load_oracle

CASE_ROOT = Path(__file__).resolve().parents[2] / "fixtures"


def grade_hidden(path: Path, *, case_root: Path = CASE_ROOT, **kwargs):
    """Grade as the course grader does: public and hidden cases, generations scored by the oracle."""
    kwargs.setdefault("visibilities", ("public", "hidden"))
    return grade_submission(path, case_root=case_root, oracle_loader=load_oracle, **kwargs)


def _kill_children_and_exit(signum: int, _frame) -> None:
    # Sandboxed children lead their own sessions; kill each session whole.
    for pid in sandbox._children_of(os.getpid()):
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.batch.worker", description="Grade one submission to disk.")
    ap.add_argument("submission", type=Path)
    ap.add_argument("--name", required=True, help="folder name under --out")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--memory-mb", type=int, default=3072)
    args = ap.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _kill_children_and_exit)
    result = grade_hidden(
        args.submission,
        only=args.only or None,
        limits=sandbox.Limits(timeout_s=args.timeout, memory_mb=args.memory_mb),
        name=args.name,
    )
    write_submission(result, args.out / args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
