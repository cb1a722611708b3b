"""Local autograder for this handout: grades your files on the public cases.

    python autograder.py [--only PROBLEM ...] [--handin handin.tar]

Generated from the course repository; see README.md.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gradelib.local import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(HERE))
