"""`python -m autograder SUBMISSION... [--out DIR] [--jobs N]`: the instructor grader (batch/cli.py)."""

import sys

from autograder.batch.cli import main

sys.exit(main())
