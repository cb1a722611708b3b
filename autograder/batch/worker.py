"""Grade one submission to disk, in a process of its own.

    python -m autograder.batch.worker --name=NAME --out=DIR [--only=ID ...] [--merge]
                                [--timeout=S] [--memory-mb=M] [--isolation=best|strict|portable]
                                [--scratch-root=DIR] [--rubric=FILE | --rubric-on-stdin] [--case-root=DIR]
                                -- SUBMISSION

(The pool passes every value after `=` and the submission after `--`, so a name or path that starts
with `-` is never read as an option; and the rubric its command read, on stdin (--rubric-on-stdin), so no worker
reads the rubric again.)

The batch grader (cli.py) starts one of these per submission, so whatever
goes wrong while grading one handin -- a crash of the grader itself, a
memory blow-up, a hang -- ends this process only. It exits 0 once
DIR/NAME/results.json and feedback.txt are written (each atomically), and
otherwise writes nothing there; FAULT_EXIT once they are written with a
problem not graded because a run was lost to a fault (the batch retries it),
WRITE_FAILED_EXIT when it could not write them (a full disk: the batch
stops). On SIGTERM or SIGINT it kills the sandboxed processes it started
and removes its scratch folder before it exits, so an interrupted run leaves
nothing running and nothing in the temp folder.
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import sys
from pathlib import Path

from autograder import isolation as sandbox
from autograder.grading import rubric_check as rubric_mod
from autograder.isolation import kernel
from autograder.isolation.levels import ISOLATION_CHOICES
from gradelib import rubric
from gradelib.grade import grade_submission
from gradelib.problems import graded

from ..grading.course_side import CourseSide
from ..grading.uploads import open_upload
from .regrade import current_records, write_merged

CASE_ROOT = Path(__file__).resolve().parents[2] / "fixtures"
FAULT_EXIT = 3  # results written, a problem not graded: a run was lost to a fault (isolation.FAULTS); retry it
WRITE_FAILED_EXIT = 4  # results not written: the grader's own write failed (a full disk); retrying cannot help
_scratch: list[Path] = []  # the --scratch-root, removed on SIGTERM and SIGINT


def grade_hidden(path: Path, *, case_root: Path = CASE_ROOT, **kwargs):
    """Grade as the course grader does: public and hidden cases, every shape of upload, the model-quality lines
    (generations scored by the oracle)."""
    kwargs.setdefault("visibilities", ("public", "hidden"))
    kwargs["problems"] = kwargs.get("problems") or rubric.load()  # what grade_submission reads by default (None too)
    with sandbox.installed():  # the problems' runs go through the isolation levels
        result = grade_submission(path, case_root=case_root, course=CourseSide(), open_upload=open_upload, **kwargs)
        result.isolation = sandbox.ISOLATING.level()
    return result.recorded(kwargs["problems"])


def _kill_children_and_exit(signum: int, _frame) -> None:
    # The run in progress (its namespace, or its uid's processes), then any session we lead.
    sandbox.abort_active()
    # Everything still below us (orphans of a run come here: we are a subreaper), stopped first and then
    # killed, so a chain of processes in sessions of their own is ended whole.
    kernel.kill_tree(lambda: kernel.children_of(os.getpid()), 5.0)
    for folder in _scratch:  # the unpacked handin and the runs' files (the batch, if alive, would remove it too)
        try:
            sandbox.uncap_folder(folder)
            sandbox.remove_tree(folder)
        except OSError:
            pass
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
    ap.add_argument("--rubric-on-stdin", action="store_true",
                    help="the rubric already read and checked, pickled on stdin by the pool (in place of --rubric)")
    ap.add_argument("--case-root", type=Path, default=CASE_ROOT, help="folder of the cases (default: fixtures/)")
    ap.add_argument("--merge", action="store_true",
                    help="replace only the graded problems' tests in the results.json already there, keep the others'")
    ap.add_argument("--scratch-root", type=Path, default=None,
                    help="folder for scratch files (the batch removes it whatever happens to this process)")
    args = ap.parse_args(argv)
    if args.isolation == "strict" and sandbox.isolation_level() != "namespaces":
        print(f"--isolation strict: namespaces are unavailable here ({sandbox.isolation_reason()})", file=sys.stderr)
        return 2
    _scratch[:] = [args.scratch_root] if args.scratch_root else []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _kill_children_and_exit)
    problems = (_rubric_from_pool() if args.rubric_on_stdin else rubric_mod.read(args.rubric)).problems
    result = grade_hidden(
        args.submission,
        case_root=args.case_root,
        problems=problems,
        only=args.only or None,
        limits=sandbox.Limits(timeout_s=args.timeout, memory_mb=args.memory_mb, min_isolation=args.isolation),
        name=args.name,
        scratch_root=args.scratch_root,
    )
    order = list(graded(problems))
    try:
        write_merged(result, args.out / args.name, current_records(problems, list(result.problems), args.case_root),
                     order, args.merge)
    except OSError as exc:  # the grader's own write (a full disk): nothing half-written stays (atomic.py)
        _say(f"the grader could not write {args.out / args.name}: {exc}")
        return WRITE_FAILED_EXIT
    if sandbox.FAULTS:
        _say("\n".join(["runs lost to a fault (the problems are marked not graded):", *sandbox.FAULTS]))
        return FAULT_EXIT
    return 0


def _rubric_from_pool() -> rubric_mod.Rubric:
    """The rubric the pool read and checked, pickled on stdin (pool.py, its one writer); stdin is /dev/null after."""
    rubric = pickle.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if not isinstance(rubric, rubric_mod.Rubric):
        raise TypeError(f"--rubric-on-stdin: expected a pickled Rubric on stdin, got {type(rubric).__name__}")
    return rubric


def _say(text: str) -> None:
    """A line for the staff's log, which may sit on the full disk itself."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
