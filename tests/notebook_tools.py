"""Helpers for the notebook tests: edit a master notebook's cells, grade it, read the result."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gradelib import rubric
from gradelib.results import SubmissionResult

from support import SOLUTIONS

NB1 = "01_mlm_and_next_token.ipynb"
NB2 = "02_attention_and_masks.ipynb"
NB3 = "03_language_model.ipynb"
PROBLEM_OF = {NB1: "losses", NB2: "masks"}


def load(name: str) -> dict:
    return json.loads((SOLUTIONS / name).read_text())


def student_form(name: str) -> dict:
    """The master in the shape students submit: otter's raw marker cells gone, each tests block a grader.check cell."""
    nb = copy.deepcopy(load(name))
    cells, in_tests, question = [], False, None
    for cell in nb["cells"]:
        text = source(cell)
        if cell["cell_type"] == "raw":
            if text.startswith("# BEGIN QUESTION"):
                question = text.split("name:")[1].split()[0]
            elif text.startswith("# BEGIN TESTS"):
                in_tests = True
            elif text.startswith("# END TESTS"):
                in_tests = False
                cells.append({"cell_type": "code", "execution_count": None, "id": f"check-{question}",
                              "metadata": {}, "outputs": [], "source": f'grader.check("{question}")'})
            continue
        if not in_tests:
            cells.append(cell)
    init = {"cell_type": "code", "execution_count": None, "id": "otter-init", "metadata": {}, "outputs": [],
            "source": f'# Initialize Otter\nimport otter\ngrader = otter.Notebook("{name}")'}
    nb["cells"] = [init, *cells]
    return nb


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def function_cell(nb: dict, function: str) -> dict:
    """The code cell that defines `function` or class `function` (the solution cell, not a test)."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"
             and (f"def {function}(" in source(c) or f"class {function}(" in source(c))]
    assert len(cells) == 1, f"{len(cells)} cells define {function}"
    return cells[0]


def edited(name: str, function: str, old: str | tuple[str, ...], new: str | tuple[str, ...]) -> str:
    """The master notebook `name` with each `old` replaced by its `new` once in `function`'s cell, as JSON text."""
    nb = student_form(name)
    cell = function_cell(nb, function)
    src = source(cell)
    olds, news = (old, new) if isinstance(old, tuple) else ((old,), (new,))
    for o, n in zip(olds, news, strict=True):
        assert src.count(o) == 1, f"{o!r} occurs {src.count(o)} times in the cell of {function}"
        src = src.replace(o, n)
    cell["source"] = src
    return json.dumps(nb)


def failing(result: SubmissionResult, problem_id: str) -> set[tuple[str, str]]:
    """(group id, visibility) of every failed test of the problem."""
    problem = rubric.load()[problem_id]
    by_name = {f"{problem.id}: {g.title} [{v}]": (g.id, v) for g in problem.groups for v in g.visibilities}
    return {by_name[t.name] for t in result.tests if t.problem == problem_id and not t.passed}


def all_groups(problem_id: str) -> set[tuple[str, str]]:
    problem = rubric.load()[problem_id]
    return {(g.id, v) for g in problem.groups for v in g.visibilities}


def message(result: SubmissionResult, problem_id: str, group_id: str, visibility: str) -> str:
    problem = rubric.load()[problem_id]
    title = next(g.title for g in problem.groups if g.id == group_id)
    return next(t.output for t in result.tests if t.name == f"{problem_id}: {title} [{visibility}]")


def with_problem_settings(problem_id: str, **settings) -> dict:
    """The rubric with `settings` overridden for one problem (e.g. a shorter cell timeout)."""
    import dataclasses

    problems = rubric.load()
    p = problems[problem_id]
    problems[problem_id] = dataclasses.replace(p, settings={**p.settings, **settings})
    return problems


def notebook_path(name: str) -> Path:
    return SOLUTIONS / name


def grade(
    tmp_path: Path, files: dict[str, str], only: list[str], problems: dict | None = None, timeout_s: float = 30.0
):
    """Grade a handin made of `files` on public and hidden cases, like support.grade_files, with a rubric override."""
    from autograder.batch.worker import grade_hidden
    from autograder.isolation import Limits

    from support import FIXTURES

    sub = tmp_path / "handin"
    sub.mkdir(exist_ok=True)
    for name, text in files.items():
        (sub / name).write_text(text)
    return grade_hidden(
        sub, case_root=FIXTURES, visibilities=("public", "hidden"), problems=problems, only=only,
        limits=Limits(timeout_s=timeout_s),
    )
