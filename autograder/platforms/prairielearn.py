"""Grading one PrairieLearn external-grading job, and PrairieLearn's results.json (results_json, the one writer).

PrairieLearn's host copies the question's files into the job's folder (docs/externalGrading.md in
PrairieLearn's repository) and runs the question's entrypoint (platform_files/prairielearn/run) in the image:
    /grade/serverFilesCourse/<grader>/   this package: the grader and the hidden cases
    /grade/student/                      the files pl-file-upload took, by name
    /grade/data/data.json                the question's data (not needed here)
    /grade/results/results.json          written here: at most 1 MB, or PrairieLearn drops it

Three outcomes:
- graded: results.json with `score`, the fraction of the rubric's points; one test per rubric line (points,
  max_points, its message where a student may see it: feedback.shown_at_once, as in Gradescope's feedback);
  `output`, the feedback table; an image of the language model's standing against the thresholds;
- an upload `make handin` would refuse (a file that does not parse, a notebook that is not one): results.json with
  `gradable: false` and a `format_errors` entry per problem in make handin's words; PrairieLearn shows it "invalid,
  not gradable" and counts no attempt and no points;
- not graded, the grader's own failure (a refusal of the course's set-up, a problem it could not grade, a bug): no
  results.json and exit status 1, why on stdout. PrairieLearn's host records a failed job, with that output in its
  log for the staff; PrairieLearn makes a failed job's submission not gradable: no points, no attempt used.
  Never a score, and never "invalid" in the student's name (results_json.no_results writes it, as for Gradescope).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import sys
import tempfile
from pathlib import Path

from gradelib.handin import check_file
from gradelib.handin_contract import HANDIN_FILES
from gradelib.problems import graded
from gradelib.rubric_schema import Problem
from gradelib.safeio import clean_text

from ..batch.atomic import write_text_atomic
from ..batch.feedback import WITHHELD, shown_at_once
from ..batch.results_json import from_json, no_results
from ..grading.course_result import CourseResult, CourseTest
from .runtime import Refused, _grade, course_rubric, not_graded, student_text

MAX_BYTES = 1024 * 1024  # PrairieLearn's cap on results.json
BUDGET = 900_000  # what this writer allows itself
MESSAGE_CHARS = 2000  # a test's message when results.json must shrink to fit
OUTPUT_CHARS = 20_000  # the top-level output, likewise
MARGIN_S = 30.0  # of the question's timeout, left for starting, reading and writing
TWIN_FAILS = "fails on the hidden cases too; the public line's message says why"
REFUSED_TEXT = "Not graded: fix what is listed and submit again (an invalid submission costs no attempt)."
# A line whose figure has a credit ramp: (problem, full-credit setting, zero-credit setting, axis, log scale,
# the reference model's figure in fixtures/lm/calibration.json).
RAMPS = {"prediction_nll": ("prediction", "full_credit_nll", "zero_credit_nll", "NLL on the hidden rows (nats/char)",
                            False, "test_nll"),
         "generation_perplexity": ("generation", "full_credit_perplexity", "zero_credit_perplexity",
                                   "perplexity of the generations under the oracle", True, "generation_perplexity")}
CALIBRATION = Path(__file__).resolve().parents[2] / "fixtures" / "lm" / "calibration.json"


def upload_errors(student: Path) -> list[str]:
    """make handin's words for each uploaded handin file it would refuse; one line when nothing was uploaded."""
    present = [name for name in HANDIN_FILES if (student / name).exists() or (student / name).is_symlink()]
    if not present:
        return [f"No handin file was uploaded. Expected some of: {', '.join(HANDIN_FILES)}."]
    return [f"{name} {problem}" for name in present for problem in check_file(name, student / name)]


def not_gradable(message: str, errors: list[str]) -> dict:
    """PrairieLearn's results.json for a submission it must not score: `gradable` false, and why."""
    errors = [clean_text(e)[:MESSAGE_CHARS] for e in errors[:50]]
    return {"gradable": False, "message": message, "format_errors": errors, "output": "\n".join(errors)}


def _line_message(t: CourseTest, public_failed: set[str]) -> str:
    """What a student reads of line `t`: its message, or what Gradescope's feedback says in its place."""
    if shown_at_once(t):
        return t.output
    if t.passed:
        return "passed on the hidden cases"
    if t.name.rsplit(" [", 1)[0] in public_failed:
        return TWIN_FAILS
    return WITHHELD


def results_json(result: CourseResult, problems: dict[str, Problem], feedback_text: str) -> dict:
    """PrairieLearn's results.json of a graded submission: the score as a fraction, a test per rubric line, the
    feedback table as output, the standing image; within BUDGET bytes whatever the messages hold."""
    public_failed = {t.name.rsplit(" [", 1)[0] for t in result.tests if t.visibility == "public" and not t.passed}
    tests = [{"name": t.name, "description": problems[t.problem].title if t.problem in problems else t.problem,
              "points": round(t.score, 4), "max_points": round(t.max_score, 4),
              "message": clean_text(_line_message(t, public_failed)), "output": ""} for t in result.tests]
    total = result.max_score
    data = {"gradable": True, "score": min(1.0, max(0.0, result.score / total)) if total > 0 else 0.0,
            "message": f"{result.score:.2f} / {total:.2f} points", "output": clean_text(feedback_text),
            "tests": tests, "images": [img for img in [standing_image(result, problems)] if img]}
    return fit(data)


def size(data: dict) -> int:
    return len(json.dumps(data, separators=(",", ":"), allow_nan=False).encode())


def fit(data: dict) -> dict:
    """`data` within BUDGET bytes: the images dropped first, then the messages and the output shortened."""
    if size(data) > BUDGET:
        data["images"] = []
    for chars in (MESSAGE_CHARS, 200, 0):
        if size(data) <= BUDGET:
            break
        for t in data.get("tests", []):
            t["message"] = _cut(t["message"], chars)
        data["output"] = _cut(data["output"], OUTPUT_CHARS if chars else 2000)
    if size(data) > BUDGET:  # more lines than a rubric holds: the score stays, the lines go
        data["tests"] = []
        data["output"] = _cut(data["output"], 2000)
    return data


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + f"... ({len(text) - chars} more characters not shown)"


def _standing(t: CourseTest, key: str, problems: dict[str, Problem]) -> tuple | None:
    """(axis, full, zero, value, how it is known, log scale, reference) of a ramp line; None when it has no figure.
    Where its message is not shown, the value is what its points imply (exact between the thresholds)."""
    pid, full_key, zero_key, axis, log, ref_key = RAMPS[key]
    if key not in t.figures or pid not in problems or t.max_score <= 0:
        return None
    full, zero = float(problems[pid].settings[full_key]), float(problems[pid].settings[zero_key])
    frac = min(1.0, max(0.0, t.score / t.max_score))
    if shown_at_once(t):
        value, how = t.figures[key], "your model"
    elif 0.0 < frac < 1.0:
        lo, hi = (math.log(full), math.log(zero)) if log else (full, zero)
        value, how = hi - frac * (hi - lo), "where your points place your model"
        value = math.exp(value) if log else value
    else:
        value = full if frac >= 1.0 else zero
        how = f"your points: at or {'below' if frac >= 1.0 else 'above'} this"
    try:
        models = json.loads(CALIBRATION.read_text())["models"]
        ref = next(float(m[ref_key]) for m in models if str(m.get("model", "")).startswith("reference model"))
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        ref = None
    return axis, full, zero, value, how, log, ref


def standing_image(result: CourseResult, problems: dict[str, Problem]) -> dict | None:
    """A PNG, as a data URL, of each language-model line's figure against its full- and zero-credit thresholds;
    None when no line measured one or the drawing fails (an image is never worth a grade)."""
    rows = [s for t in result.tests for key in RAMPS if (s := _standing(t, key, problems))]
    if not rows:
        return None
    try:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6.4, 0.4 + 1.3 * len(rows)), dpi=80, layout="constrained")
        for ax, (axis, full, zero, value, how, log, ref) in zip(fig.subplots(len(rows), 1, squeeze=False)[:, 0], rows):
            points = [full, zero, value] + ([ref] if ref else [])
            lo, hi = min(points), max(points)
            if log:
                ax.set_xscale("log")
                lo, hi = lo / 1.5, hi * 1.5
            else:
                lo, hi = lo - 0.15 * (hi - lo), hi + 0.15 * (hi - lo)
            ax.axvspan(lo, full, color="#b7e4c7")
            ax.axvspan(full, zero, color="#ffe8a3")
            ax.axvspan(zero, hi, color="#f4b6b6")
            ax.axvline(value, color="black", linewidth=2.5, label=how)
            if ref:
                ax.axvline(ref, color="#1f5fa8", linestyle="--", label="the reference model")
            ax.set_xlim(lo, hi)
            ax.set_yticks([])
            ax.set_xlabel(f"{axis}: full credit at <= {full:g}, none at >= {zero:g}", fontsize=9)
            ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    except Exception as exc:  # noqa: BLE001 - a drawing failure drops the picture, never the grade
        print(f"prairielearn: no standing image ({type(exc).__name__}: {clean_text(exc)[:200]})", file=sys.stderr)
        return None
    return {"label": "Your language model against the rubric's thresholds",
            "url": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()}


def write(target: Path, data: dict) -> None:
    write_text_atomic(target, json.dumps(data, separators=(",", ":"), allow_nan=False))


class NotGraded(Exception):
    """The grader failed on this submission, not the submission: why, for the staff."""


def grade_job(root: Path, timeout: float, job_timeout: float) -> int:
    """Grade root/student into root/results/results.json and exit 0; exit 1 with no results.json when the grader
    failed (PrairieLearn's host reads results.json only from a job that exits 0)."""
    target = root / "results" / "results.json"
    target.unlink(missing_ok=True)
    try:
        data = _job(root / "student", timeout, job_timeout)
    except NotGraded as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug of the grader is said, and never becomes a score
        why = f"internal error: {type(exc).__name__}: {clean_text(exc)[:500]}"
    else:
        write(target, data)
        said = "not gradable" if not data.get("gradable", True) else f"score {data['score']:.4f}"
        print(f"prairielearn: {said}; wrote {target} ({size(data)} bytes)", file=sys.stderr)
        return 0
    return no_results(target, why, "PrairieLearn records a failed job and no score (the submission costs the "
                                   "student no attempt). Fix the cause, then regrade the submission.")


def _job(student: Path, timeout: float, job_timeout: float) -> dict:
    errors = upload_errors(student)
    if errors:
        return not_gradable(REFUSED_TEXT, errors)
    # One attempt, stopped before the question's timeout (a grader that died is reported, never retried past it);
    # each problem's time limit as the batch grader sizes its deadline, so code that hangs everywhere scores 0 in
    # time, never "not graded".
    deadline = max(10.0, job_timeout - MARGIN_S)
    options = ("--retries", "0", "--submission-timeout", f"{deadline:.0f}")
    try:
        rubric = course_rubric()  # read once, for the whole job
        problems = graded(rubric.problems)
        timeout = max(5.0, min(timeout, (deadline - 60.0) / (1.5 * len(problems) + 1)))
        with tempfile.TemporaryDirectory(prefix="prairielearn-") as tmp:
            results, problem_ids = _grade(student, Path(tmp), timeout, *options, rubric=rubric)
    except Refused as exc:
        raise NotGraded(f"The grader refused to run, for a reason of the course's set-up: {exc}") from None
    failed = not_graded(results)
    if failed:  # a problem the grader could not grade: any score would lack its points
        raise NotGraded("\n".join(["Problems the grader failed on:", *failed]))
    result = from_json(results, "this submission", problem_ids)
    return results_json(result, problems, student_text(results, problem_ids))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.platforms.prairielearn",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/grade"), help="the job's folder (default /grade)")
    ap.add_argument("--job-timeout", type=float, default=600.0, help="the question's timeout, seconds (default 600)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per problem run, at most (default 60)")
    args = ap.parse_args(argv)
    return grade_job(args.root, args.timeout, args.job_timeout)


if __name__ == "__main__":
    sys.exit(main())
