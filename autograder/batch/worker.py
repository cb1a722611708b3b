"""Grade one submission to disk, in a process of its own.

    python -m autograder.batch.worker --name=NAME --out=DIR [--only=ID ...] [--merge]
                                [--timeout=S] [--memory-mb=M] [--isolation=best|strict|portable]
                                [--scratch-root=DIR] [--rubric=FILE] [--case-root=DIR] -- SUBMISSION

(The pool passes every value after `=` and the submission after `--`, so a name or path that starts
with `-` is never read as an option.)

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

from autograder import isolation as sandbox
from autograder.grading import rubric_check as rubric_mod
from autograder.isolation import kernel
from autograder.isolation.levels import ISOLATION_CHOICES
from gradelib import rubric
from gradelib.grade import grade_submission
from gradelib.problems import GRADERS

from ..grading import course_side
from ..grading.uploads import open_upload
from .regrade import current_records, write_merged

CASE_ROOT = Path(__file__).resolve().parents[2] / "fixtures"


def grade_hidden(path: Path, *, case_root: Path = CASE_ROOT, **kwargs):
    """Grade as the course grader does: public and hidden cases, every shape of upload, the model-quality lines
    (generations scored by the oracle)."""
    kwargs.setdefault("visibilities", ("public", "hidden"))
    kwargs["problems"] = kwargs.get("problems") or rubric.load()  # what grade_submission reads by default (None too)
    with sandbox.installed():  # the problems' runs go through the isolation levels
        result = grade_submission(path, case_root=case_root, course=course_side, open_upload=open_upload, **kwargs)
        result.isolation = sandbox.ISOLATING.level()
    return result.recorded(kwargs["problems"])


def _kill_children_and_exit(signum: int, _frame) -> None:
    # The run in progress (its namespace, or its uid's processes), then any session we lead.
    sandbox.abort_active()
    # Everything still below us (orphans of a run come here: we are a subreaper), stopped first and then
    # killed, so a chain of processes in sessions of their own is ended whole.
    kernel.kill_tree(lambda: kernel.children_of(os.getpid()), 5.0)
    os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.batch.worker", description="Grade one submission to disk.")
    ap.add_argument("submission", type=Path)
    ap.add_argument("--name", required=True, help="folder name under --out")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--only", action="extend", nargs="+", default=None, help="problem ids (repeat --only=ID or list them)"
    )
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--memory-mb", type=int, default=3072)
    ap.add_argument("--isolation", choices=ISOLATION_CHOICES, default="best",
                    help="strict: refuse to run submission code without namespaces")
    ap.add_argument("--rubric", type=Path, default=None, help="rubric file (default: gradelib/rubric.toml)")
    ap.add_argument("--case-root", type=Path, default=CASE_ROOT, help="folder of the cases (default: fixtures/)")
    ap.add_argument("--merge", action="store_true",
                    help="replace only the graded problems' tests in the results.json already there, keep the others'")
    ap.add_argument("--scratch-root", type=Path, default=None,
                    help="folder for scratch files (the batch removes it whatever happens to this process)")
    args = ap.parse_args(argv)
    if args.isolation == "strict" and sandbox.isolation_level() != "namespaces":
        print(f"--isolation strict: namespaces are unavailable here ({sandbox.isolation_reason()})", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _kill_children_and_exit)
    problems = rubric_mod.load(args.rubric)
    result = grade_hidden(
        args.submission,
        case_root=args.case_root,
        problems=problems,
        only=args.only or None,
        limits=sandbox.Limits(timeout_s=args.timeout, memory_mb=args.memory_mb, min_isolation=args.isolation),
        name=args.name,
        scratch_root=args.scratch_root,
    )
    order = [p for p in problems if p in GRADERS]
    write_merged(
        result,
        args.out / args.name,
        current_records(problems, list(result.problems), args.case_root),
        order,
        args.merge,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
