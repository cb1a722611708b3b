"""The student's local autograder (`python autograder.py --help`): the same checks and messages, public cases only.
Its exit code is 0 whether tests pass or fail: the score table is the result."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .grade import grade_submission
from .handin import check_folder, collect, runs, runs_text, short_run
from .intake import HandinError, open_upload
from .problems import graded
from .results import SubmissionResult, wrapped
from .rubric import Problem, RubricError, load
from .runner import RAN_AS
from .runner.limits import Limits
from .safeio import clean_text

# What students call the parts of the handout -> problem ids.
NB1, NB2, NB3 = ("losses",), ("masks",), ("prediction", "generation")
ALIASES = {"attention.py": ("attention",), "nb1": NB1, "notebook1": NB1, "01_mlm_and_next_token.ipynb": NB1,
           "nb2": NB2, "notebook2": NB2, "02_attention_and_masks.ipynb": NB2,
           "nb3": NB3, "notebook3": NB3, "03_language_model.ipynb": NB3}


def handin_check_text(handin: Path, scratch: Path) -> str:
    """What the grader will find in a built handin: each file's problems, before any test runs."""
    try:
        notes = open_upload(handin, scratch).notes
    except HandinError as exc:
        return clean_text(f"{handin} cannot be opened by the grader: {exc}")
    lines = [f"{handin}: what the grader will find"] + [f"  note: {n}" for n in notes]
    for name, problems in check_folder(scratch).items():
        lines.append(f"  PROBLEM {name}: {'; '.join(problems)}" if problems else f"  ok      {name}")
    return clean_text("\n".join(lines)) + "\n"


def stakes(result: SubmissionResult, problems: dict[str, Problem]) -> str:
    """What the public points are out of, and what the course grader adds on hidden cases."""
    lines = ["", "What is at stake (the course grader adds the hidden cases and the model-quality lines):"]
    total_public = total_hidden = 0.0
    for pid in result.problems:
        public, hidden = problems[pid].max_points(("public",)), problems[pid].max_points(("hidden",))
        got = sum(t.score for t in result.tests if t.problem == pid)
        total_public, total_hidden = total_public + public, total_hidden + hidden
        lines.append(f"  {pid:<12} public {got:6.2f} / {public:6.2f}   hidden: {hidden:6.2f} more points")
    course = sum(p.points for p in problems.values())
    lines.append(f"  {'all':<12} public {result.score:6.2f} / {total_public:6.2f}   hidden: {total_hidden:6.2f} more "
                 f"points   (course maximum {course:g})")
    return "\n".join(lines)


CHOOSE = "pass --runid <id> --epoch <n> to python autograder.py, or runid=<id> epoch=<n> to make"


def choose_run(handout: Path, runid: str | None, epoch: str | None) -> tuple[str, str, str]:
    """(runid, epoch, a line saying which run is graded); ('', '', line) when there is none to grade."""
    found = runs(handout)
    if epoch and not runid:
        if not found:
            return "", "", (f"No trained run under experiments/ yet, so no epoch {epoch} to grade: train in "
                            "notebook 3 first.")
        runid = next(iter(found))  # the newest run
        if not epoch.isdigit() or int(epoch) not in found[runid]:
            return "", "", (f"The newest run, experiments/{runid}, has no checkpoint for epoch {epoch}, so the "
                            f"language-model files are not graded; {runs_text(handout)} ({CHOOSE}).")
        return runid, epoch, f"Grading the newest run, experiments/{runid}, epoch {epoch}."
    if runid and epoch:
        if runid in found and (not epoch.isdigit() or int(epoch) not in found[runid]):
            return runid, epoch, (f"experiments/{runid} has no checkpoint for epoch {epoch}: its language-model "
                                  f"files are missing below; {runs_text(handout)}.")
        return runid, epoch, (f"Grading experiments/{runid}, epoch {epoch}: what `make handin runid={runid} "
                              f"epoch={epoch}` packs.")
    if runid:
        if not found.get(runid):
            return runid, "", f"experiments/{runid} holds no checkpoint; {runs_text(handout)}"
        last = found[runid][-1]
        return runid, str(last), (f"Grading experiments/{runid}, its last epoch {last} (pass an epoch to choose: "
                                  f"{CHOOSE}).")
    if not found:
        return "", "", ("No trained run under experiments/ yet: the language-model files are graded once notebook 3 "
                        "has trained.")
    # The newest full run: a short one (MAX_STEPS, a quick LM_TRAIN_STEPS try) only when there is nothing else.
    full = [r for r in found if short_run(r) is None]
    newest = full[0] if full else next(iter(found))
    last = found[newest][-1]
    if short_run(newest) is not None:
        return newest, str(last), (f"Grading the newest run, experiments/{newest}, epoch {last}: a short run of "
                                   f"{short_run(newest)} steps, whose model earns few of the model-quality points (to "
                                   f"choose another, {CHOOSE}).")
    skipped = list(found)[:list(found).index(newest)]  # newer runs than the one chosen: short ones
    also = f"; newer short runs not chosen: {', '.join(skipped)}" if skipped else ""
    return newest, str(last), (f"Grading the newest full run, experiments/{newest}, epoch {last} (to choose another, "
                               f"{CHOOSE}{also}).")


def main(handout: Path, argv: list[str] | None = None) -> int:
    """The local autograder of the folder `handout`: grade the public cases, print the table; the exit status."""
    try:
        problems = load()
    except RubricError as exc:
        print(f"gradelib/rubric.toml cannot be used ({exc}); download the handout again.", file=sys.stderr)
        return 2
    known = list(graded(problems))
    ap = argparse.ArgumentParser(prog="autograder.py", description="Grade your work on the public test cases.")
    ap.add_argument("--only", nargs="+", metavar="PROBLEM", help=f"problems to grade: {', '.join(known)} "
                    f"(or the file: {', '.join(sorted(ALIASES))})")
    ap.add_argument("--handin", type=Path, help="grade a built handin.tar the way the course's grader reads it")
    ap.add_argument("--runid", help="experiment folder of notebook 3 to grade (default: the newest)")
    ap.add_argument("--epoch", help="epoch of that run to grade (default: its last)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds your code may run per problem (default 30)")
    args = ap.parse_args(argv)
    unknown = [o for o in args.only or [] if o not in known and o not in ALIASES]
    if unknown:
        ap.error(f"unknown problem {unknown}; choose from {', '.join(known)} or {', '.join(sorted(ALIASES))}")
    only = list(dict.fromkeys(p for o in args.only for p in ALIASES.get(o, (o,)))) if args.only else None

    with tempfile.TemporaryDirectory(prefix="local-handin-") as tmp:
        runid = ""
        if args.handin:
            submission = args.handin
            print(wrapped(handin_check_text(args.handin, Path(tmp) / "unpacked")))
        else:
            runid, epoch, said = choose_run(handout, args.runid, args.epoch)
            if not only or {"prediction", "generation"} & set(only) or args.runid or args.epoch:
                print(wrapped(said))  # which run: only where the run's files are graded (or one was asked for)
            submission = Path(tmp) / "handin"
            submission.mkdir()
            # Exactly the files `make handin` would pack (whatever exists of them); one it would refuse is graded
            # all the same, so its lines say what is wrong with it (a syntax error and its line, not "missing").
            packed = collect(handout, runid, epoch, partial=True)
            for problem in packed.problems:
                print(wrapped(f"note: make handin would refuse {problem}"))
            for name, src in {**packed.files, **packed.refused}.items():
                shutil.copyfile(src, submission / name)
        result = grade_submission(submission, case_root=handout / "tests", visibilities=("public",), problems=problems,
                                  only=only, limits=Limits(timeout_s=args.timeout),
                                  name=str(args.handin) if args.handin else "this folder",
                                  run_expected=bool(args.handin or runid))
    print(f"{RAN_AS[0].upper()}{RAN_AS[1:]}.")
    print(result.table())
    print(stakes(result, problems))
    return 0
