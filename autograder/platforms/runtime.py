"""Grading one submission on Gradescope or Autolab, in each platform's own layout (PrairieLearn: prairielearn.py).

Gradescope (run_autograder in the zip calls this with `gradescope`):
    /autograder/submission/   what the student uploaded: handin.tar, a .zip, the loose files,
                              or a folder of them (autograder/grading/uploads.py reads each)
    /autograder/results/results.json   written here, in Gradescope's format
  The root is /autograder unless --root (or AUTOGRADER_ROOT) says otherwise.

Autolab (the autograde-Makefile calls this with `autolab handin.tar`):
  prints the score table -- hidden tests by name and score only -- and, as the
  last line on stdout, {"scores": {<problem id>: points, ...}}.

Both grade through the batch grader (cli.py), so the submission runs in a
worker process of its own and in the sandbox; nothing it prints reaches our
stdout.

A submission the grader failed on (it refused to grade, or a problem stayed
not graded after the worker's retries) gets no grade on either platform:
Gradescope gets no results.json, which it shows as "The autograder failed to
execute correctly" (the staff see why in the run's stdout and rerun it), never
a 0; Autolab's last line leaves the problem out of its scores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from gradelib.problems import graded
from gradelib.safeio import clean_text

from ..batch import cli, feedback, results_json
from ..batch.autolab import autolab_line
from ..batch.records import row_of, submission_names
from ..grading import rubric_check
from ..grading.course_result import NOT_GRADED
from ..grading.uploads import resolve_upload

NOT_GRADED_TEXT = ("This submission was NOT graded: the grader refused to run, for a reason of the course's set-up, "
                   "not of this submission (below). Its 0 is no grade: tell the course staff, who will regrade it.")


def find_handin(submission_dir: Path) -> Path:
    """The archive or folder the upload's handin is read from; grading/uploads.py decides, as for every upload."""
    return resolve_upload(submission_dir)


class Refused(Exception):
    """The grader graded nothing (a rubric, calibration or isolation level it may not use): why, in its words."""


def course_rubric() -> rubric_check.Rubric:
    """The course's rubric, read once for the run (Refused, in the batch grader's words, when it cannot be used)."""
    try:
        return rubric_check.read()
    except rubric_check.RubricError as exc:
        raise Refused(cli.RUBRIC_REFUSED.format(exc)) from None


def _grade(handin: Path, out: Path, timeout: float, *options: str,
           rubric: rubric_check.Rubric | None = None) -> tuple[dict, list[str]]:
    """Grade quietly (cli's `options` added) with `rubric` (default the course's, read here); return results.json's
    content and the graded problem ids (Refused when nothing was graded)."""
    rubric = rubric or course_rubric()
    argv = [*options, str(handin), "--out", str(out), "--timeout", str(timeout), "--force"]
    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        code = cli.main(argv, rubric)
    name = submission_names([handin])[0]
    problem_ids = list(graded(rubric.problems))
    path = out / name / "results.json"
    if code != 0 or not path.is_file():
        why = clean_text(said.getvalue()).strip()[-2000:]
        raise Refused(why or f"the grader exited with code {code} and wrote no results")
    return json.loads(path.read_text()), problem_ids


def not_graded(results: dict) -> list[str]:
    """The problems a results.json records as not graded (the grader failed there), with why."""
    flags = (results.get("extra_data") or {}).get("flags") or {}
    return [f"{k[len(NOT_GRADED):]}: {v}" for k, v in flags.items() if k.startswith(NOT_GRADED)]


def student_text(results: dict, problem_ids: list[str]) -> str:
    """The report a student may see (the feedback.txt table): messages of visible tests only."""
    result = results_json.from_json(results, "this handin", problem_ids)
    result.isolation = ""
    result.notes = str(results.get("output") or "").splitlines()
    return feedback.text(result)


def gradescope(root: Path, timeout: float) -> int:
    # The whole upload goes to the grader, so its notes can say what the upload held.
    upload = root / "submission"
    handin = find_handin(upload)
    target = root / "results" / "results.json"
    try:
        with tempfile.TemporaryDirectory(prefix="gradescope-") as tmp:
            results, _ = _grade(upload, Path(tmp), timeout)
    except Refused as exc:
        why = f"The grader refused to run, for a reason of the course's set-up: {exc}"
        return results_json.no_results(target, why)
    lost = not_graded(results)
    if lost:
        return results_json.no_results(target, "\n".join(["Problems the grader failed on (after its retries):",
                                                            *lost]))
    results_json.write(target, results)
    print(f"graded {handin}: {results['score']} points; wrote {target}")
    return 0


def autolab(handin: Path, timeout: float) -> int:
    try:
        with tempfile.TemporaryDirectory(prefix="autolab-") as tmp:
            results, problem_ids = _grade(handin, Path(tmp), timeout)
    except Refused as exc:
        # The last line stays Autolab's JSON: no score for any problem (no grade), and why.
        print(f"{NOT_GRADED_TEXT}\n\n{exc}")
        print(autolab_line(None, [], str(exc)), flush=True)
        return 0
    print(student_text(results, problem_ids))
    print(autolab_line(row_of(results, handin.name), problem_ids), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.platforms.runtime", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="platform", required=True)
    gs = sub.add_parser("gradescope", help="grade <root>/submission into <root>/results/results.json")
    gs.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    al = sub.add_parser("autolab", help="grade a handin; the last stdout line is Autolab's scores")
    al.add_argument("handin", type=Path, nargs="?", default=Path("handin.tar"))
    for p in (gs, al):
        p.add_argument("--timeout", type=float, default=60.0, help="seconds per problem run (default 60)")
    args = ap.parse_args(argv)
    if args.platform == "gradescope":
        return gradescope(args.root, args.timeout)
    return autolab(args.handin, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
