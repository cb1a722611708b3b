"""One verdict everywhere: the student kit's runner and the course grader's isolation give the same lines,
points and first messages on the public cases, for the reference, the blank handout, planted bugs and a
student-pattern variant (gradelib/runner/ against autograder/isolation/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_attention_bugs import BUGS, edit

from autograder.batch.worker import grade_hidden
from autograder.tools.demo import reference_handin
from gradelib.grade import grade_submission
from gradelib.runner.limits import Limits

from support import FIXTURES, REPO, SOLUTIONS

LIMITS = dict(timeout_s=60.0)  # generous under load; the verdicts compared do not depend on time


def _attention(source: str):
    return lambda folder: (folder / "attention.py").write_text(source)


def _blank(folder: Path) -> None:
    for path in [REPO / "handout" / "attention.py", *sorted((REPO / "handout").glob("0*.ipynb"))]:
        shutil.copyfile(path, folder / path.name)


HANDINS = {
    "reference": lambda folder: reference_handin(folder),
    "blank handout": _blank,
    **{f"bug {b}": _attention(edit((SOLUTIONS / "attention.py").read_text(), BUGS[b][0])) for b in ("no_scaling",)},
    "variant float32_helper": _attention((REPO / "tests" / "attention_variants" / "float32_helper.py").read_text()),
}


def verdict(result) -> list[tuple]:
    return [
        (t.problem, t.line, t.name, t.visibility, round(t.score, 6), t.output.split("\n", 1)[0]) for t in result.tests
    ]


@pytest.mark.parametrize("name", sorted(HANDINS))
def test_the_kit_and_the_course_grader_give_the_same_verdict(tmp_path, name):
    folder = tmp_path / "handin"
    folder.mkdir()
    made = HANDINS[name](folder)
    handin = made if isinstance(made, Path) else folder
    kit = grade_submission(
        handin, case_root=FIXTURES, visibilities=("public",), limits=Limits(**LIMITS)
    )
    course = grade_hidden(handin, case_root=FIXTURES, visibilities=("public",), limits=Limits(**LIMITS))
    assert course.isolation in ("namespaces", "fallback", "portable")
    assert verdict(kit) and verdict(kit) == verdict(course)
    assert kit.score == course.score
