"""The student's local autograder: the same checks and messages, public cases only.

    python autograder.py                 grade the files in this folder
    python autograder.py --only attention
    python autograder.py --handin handin.tar

The exit code is 0 whether tests pass or fail: the score table is the result.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from .grade import grade_submission
from .manifest import HANDIN_FILES, check_folder
from .rubric import load
from .safeio import clean_text
from .sandbox import Limits
from .intake import HandinError, open_handin
from .problems import GRADERS


def handin_check_text(handin: Path, scratch: Path) -> str:
    """What the grader will find in a built handin: each file's problems, before any test runs."""
    try:
        notes = open_handin(handin, scratch)
    except HandinError as exc:
        return clean_text(f"{handin} cannot be opened by the grader: {exc}")
    lines = [f"{handin}: what the grader will find"] + [f"  note: {n}" for n in notes]
    for name, problems in check_folder(scratch).items():
        lines.append(f"  {'ok     ' if not problems else 'PROBLEM'} {name}" + (f": {'; '.join(problems)}" if problems else ""))
    return clean_text("\n".join(lines)) + "\n"


def main(handout: Path, argv: list[str] | None = None) -> int:
    problems = load()
    known = [p for p in problems if p in GRADERS]
    ap = argparse.ArgumentParser(prog="autograder.py", description="Grade your work on the public test cases.")
    ap.add_argument("--only", nargs="+", choices=known, metavar="PROBLEM", help=f"problems to grade: {', '.join(known)}")
    ap.add_argument("--handin", type=Path, help="grade a built handin.tar the way the course's grader reads it")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds your code may run per problem (default 30)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="local-handin-") as tmp:
        if args.handin:
            submission = args.handin
            print(handin_check_text(args.handin, Path(tmp) / "unpacked"))
        else:
            submission = Path(tmp) / "handin"
            submission.mkdir()
            for name in HANDIN_FILES:
                if (handout / name).is_file():
                    shutil.copyfile(handout / name, submission / name)
        result = grade_submission(
            submission,
            case_root=handout / "tests",
            visibilities=("public",),
            problems=problems,
            only=args.only,
            limits=Limits(timeout_s=args.timeout),
            name=str(args.handin) if args.handin else "this folder",
        )
    print(result.table())
    print("\nPublic cases only; hidden cases are graded after you submit.")
    return 0
