"""feedback.txt, the report a student reads on Gradescope: its text (text) and its one writer (write).

The kit's table, with the messages of hidden tests withheld unless the rubric shows them at once; the staff's
report.html lists every line.
"""

from __future__ import annotations

from pathlib import Path

from gradelib.results import TestResult, wrap

from ..grading.course_result import NOT_GRADED, CourseResult
from .atomic import write_text_atomic

WITHHELD = "its message names hidden cases: not shown here"


def shown_at_once(t: TestResult) -> bool:
    """Whether a student sees test `t`'s message with its score: a public test's, or a hidden one's where the rubric
    shows hidden tests at once (hidden_tests = "visible"; t.shown)."""
    return t.visibility != "hidden" or getattr(t, "shown", "") == "visible"


def _withheld(pid: str, shown: list[TestResult], hidden: list[TestResult]) -> list[str]:
    """What feedback says of problem `pid`'s failed `hidden` tests, whose messages name hidden cases: one failing with
    its public twin, among the `shown` failures, is counted (its public message said why); one whose public twin
    passed is named, a slip only the hidden cases show."""
    public_failed = {t.name.rsplit(" [", 1)[0] for t in shown if t.visibility == "public"}
    twins = [t for t in hidden if t.name.rsplit(" [", 1)[0] in public_failed]
    lines = []
    for t in (t for t in hidden if t not in twins):
        lines += wrap(f"  FAIL {t.score:.2f} / {t.max_score:.2f} {t.name.removeprefix(f'{pid}: ')} ({WITHHELD})")
    if twins:
        said = f"same {len(twins)} lines fail" if len(twins) > 1 else "same line fails"
        lines += wrap(f"  the {said} on the hidden cases too "
                      f"({sum(t.score for t in twins):.2f} / {sum(t.max_score for t in twins):.2f})")
    return lines


class _Feedback(CourseResult):
    """The kit's table with the messages of hidden tests withheld (_withheld) unless the rubric shows them at once."""

    def failures(self, pid: str, failed: list[TestResult]) -> list[str]:
        if NOT_GRADED + pid in self.flags:  # one line: what the grader failed at, never a FAIL per line
            return wrap(f"  {self.flags[NOT_GRADED + pid]}")
        shown = [t for t in failed if shown_at_once(t)]
        return super().failures(pid, shown) + _withheld(pid, shown, [t for t in failed if t not in shown])

    def table(self) -> str:
        """The kit's table; a problem not graded, and then the total, read `not graded` instead of a score."""
        ungraded = {k[len(NOT_GRADED):] for k in self.flags if k.startswith(NOT_GRADED)}
        lines = super().table().splitlines()
        for i, line in enumerate(lines):
            pid, _, rest = line.partition(" ")
            if pid in ungraded and rest.endswith(" lines pass") and " / " in rest:
                lines[i] = f"{pid} not graded (of {self.max_points.get(pid, 0):.2f}): the grader failed, not the " \
                           "submission; the next run grades it"
            elif ungraded and line.startswith("TOTAL "):
                lines[i] = f"TOTAL not graded yet ({', '.join(sorted(ungraded))} not graded)"
        return "\n".join(lines)


def text(result: CourseResult) -> str:
    """feedback.txt, the report a student reads on Gradescope: the kit's table, a hidden test's message shown only
    where the rubric shows hidden tests at once (hidden_tests = "visible"); the staff's report.html lists every
    line."""
    unshown = sum(not t.passed and t.visibility == "hidden" and t.shown != "visible"
                  for pid in result.problems if NOT_GRADED + pid not in result.flags
                  for t in result.tests if t.problem == pid)
    said = wrap(f"The messages of the {unshown} failed hidden tests are not shown here (they name hidden "
                "cases); the course staff publish them with the grades.") if unshown else []
    shown = _Feedback(**vars(result))
    if result.isolation:  # under the submission's name: students see what ran their code, and how confined
        shown.submission += f"\nSandbox: {result.isolation}"
    return "\n".join([shown.table(), *said])


def write(folder: Path, result: CourseResult) -> None:
    """folder/feedback.txt of `result`, whole or not at all."""
    write_text_atomic(folder / "feedback.txt", text(result) + "\n")
