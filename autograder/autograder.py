"""Instructor grader: grade one handin or a whole class on public and hidden cases.

    python autograder/autograder.py SUBMISSION... [--out DIR] [--jobs N] [--timeout S]

SUBMISSION is a handin.tar (plain or gzip) or a folder of handin files. For
each one, DIR/<name>/results.json (Gradescope's format) and feedback.txt are
written; with several, DIR/grades.csv too. With a single submission the last
line on stdout is Autolab's {"scores": {...}}.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder would shadow the `autograder` package on sys.path.
REPO = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == REPO / "autograder":
    sys.path[0] = str(REPO)

from autograder.batch.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
