"""`make mutants`, the notebooks' checks: for each mutant the oracle finds wrong, which question's check fails first.

    python -m autograder.tools.mutants_checks [--only losses masks prediction generation] [--every N] [--start K]

A student runs the check cells in notebook order, so the first one that fails is where a slip is seen. Each check
of a question is one public otter test of the master notebook (`check(problem, line, **functions)`, the call
`grader.check` makes), called here on the mutated notebook's functions in notebook order; the question whose check
fails first should be the mutated function's own (the question whose solution cell it is in). The mutants and the
oracle's verdicts are mutants_notebooks.py's (the grader kills exactly the oracle's non-equivalent mutants there).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import time
from pathlib import Path

import nbformat
import torch

from autograder.tools import mutants as mm
from autograder.tools import mutants_notebooks as nbm
from autograder.tools.measured import host_record

TEST_CELL = '""" # BEGIN TEST CONFIG'


def questions(notebook: Path) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """(cell index -> the question it belongs to, [(question, a public test's source)] in notebook order)."""
    owner, tests, current = {}, [], ""
    for i, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            current = cell.source.split("name:", 1)[1].split()[0]
        elif cell.cell_type == "raw" and cell.source.startswith("# END QUESTION"):
            current = ""
        elif cell.cell_type == "code" and cell.source.startswith(TEST_CELL):
            if "hidden: true" not in cell.source.split("# END TEST CONFIG")[0]:
                tests.append((current, cell.source))
        elif cell.cell_type == "code":
            owner[i] = current
    return owner, tests


def first_failing(tests: list[tuple[str, str]], namespace: dict) -> str:
    """The question of the first test that fails (raises) on the notebook's `namespace`, '' if every one passes."""
    for question, text in tests:
        scope: dict = {}
        exec(compile(text, "<check>", "exec"), scope)  # the master's own test cell
        name = next(n for n in scope if n.startswith("test_"))
        params = [a.arg for a in next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)).args.args]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                scope[name](*(namespace if p == "env" else namespace.get(p) for p in params))  # otter's way
        except Exception:  # noqa: BLE001 (a failed check is an AssertionError; a missing name fails too)
            return question
    return ""


def summary(found: list[tuple[str, str]], every: int = 1) -> dict:
    """(own question, first failing question) of each killed mutant -> the counts of the report."""
    return {"own_check_first": sum(own == first for own, first in found), "own_check_of": len(found),
            "no_check_fails": sum(not first for _, first in found), "every": every}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=mm.REPO / "fixtures")
    ap.add_argument("--solutions", type=Path, default=mm.REPO / "solutions")
    ap.add_argument("--only", nargs="*", default=None, help="problem ids (losses, masks, prediction, generation)")
    ap.add_argument("--every", type=int, default=1, metavar="N", help="every N-th mutant of each target")
    ap.add_argument("--start", type=int, default=0, metavar="K", help="from the K-th (with --every: a sample)")
    ap.add_argument("--out", type=Path, default=mm.REPO / "build" / "mutants_checks.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start, load = time.time(), os.getloadavg()
    found: dict[str, list[dict]] = {}
    for target in (t for t in nbm.TARGETS if not args.only or t.problem in args.only):
        notebook = args.solutions / target.notebook
        problem, all_cases = nbm.problem_of(target), nbm.cases(target, args.fixtures)
        owner, tests = questions(notebook)
        chosen = nbm.mutants(target, notebook)[args.start :: args.every]
        for i, m in enumerate(chosen, 1):
            expected = mm.failing_lines(problem, nbm.judge(target, notebook, m, all_cases))
            if not expected:  # equivalent: no line to lose, no check to fail
                continue
            texts = [m.text if c == nbm.cell_of(m) else t for c, t, graded in nbm.cells(notebook) if graded]
            row = {"name": m.name, "own": owner[nbm.cell_of(m)], "first": first_failing(tests, nbm.run_cells(texts)),
                   "expected": sorted(expected), "diff": m.diff}
            found.setdefault(target.problem, []).append(row)
            print(f"[{target.problem} {i}/{len(chosen)}] {m.name}: first failing check {row['first'] or 'none'} "
                  f"(own: {row['own']})" + ("" if row["first"] == row["own"] else "\n   " + m.diff.replace(
                      "\n", "\n   ").rstrip()), flush=True)
        report = {k: summary([(r["own"], r["first"]) for r in rows], args.every) for k, rows in found.items()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"recorded": host_record("python -m autograder.tools.mutants_checks", load),
                                        "seconds": round(time.time() - start), "checks": report,
                                        "mutants": found}, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
