"""Command line of the instructor grader (see autograder/autograder.py).

Each submission is graded by a worker process of its own (autograder/batch/worker.py),
at most --jobs at a time, so one handin's crash, hang or memory blow-up ends
its own worker only. A worker that dies is started again up to --retries
times; after that, or when it runs past its deadline, the submission is
recorded as graded 0 with a message saying why -- it is never lost and never
retried forever. Results are written atomically, so a run stopped at any
point (Ctrl-C, SIGTERM) leaves every submission either graded or not; the
same command run again grades only what is missing or stale: each results.json
records the rubric and fixtures that graded each of its problems (regrade.py),
and a problem whose rubric or fixtures changed since is regraded, its tests
merged into the results already there (--force regrades all). The class files
(grades.csv, report.html) are rebuilt from every results.json under --out, and
each score a regrade changed is appended to regrades.csv.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gradelib import rubric as rubric_mod
from gradelib import safeio, sandbox
from gradelib.problems import GRADERS
from gradelib.results import SubmissionResult, write_text_atomic
from gradelib.safeio import SafeReadError, clean_text
from gradelib.sandbox import cgroups, kernel, processes, slots
from gradelib.sandbox.kernel import PR_SET_PDEATHSIG
from gradelib.sandbox.limits import ISOLATION_CHOICES
from gradelib.scoring import all_zero

from . import gradebook, regrade
from .report import Row, read_row, thresholds_of, write_report
from .worker import CASE_ROOT

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.05
TERM_GRACE_S = 5.0


# The class outputs beside the per-submission folders.
RESERVED = {"grades.csv", "report.html", "regrades.csv", "canvas.csv", "scores.csv"}
REGRADE_LOG = "regrades.csv"
REGRADE_LOG_HEADER = ["time", "submission", "problem", "old_score", "new_score", "reason"]
SOURCE_FILE = ".source"  # in each submission's folder: the path it was graded from


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


ARCHIVE_EXTENSIONS = (".tar.gz", ".tgz", ".tar")
HANDIN_ARCHIVES = tuple(f"handin{ext}" for ext in ARCHIVE_EXTENSIONS)


def _base_name(p: Path) -> str:
    base = p.name
    for ext in ARCHIVE_EXTENSIONS:
        if base.endswith(ext):
            base = base[: -len(ext)]
            break
    if base == "handin" and p.parent.name:
        base = p.parent.name
    return base


def source_key(p: Path) -> str:
    """What identifies a submission across runs: its resolved path, a handin archive by its folder
    (so `student/` and `student/handin.tar` are the same submission, as their name says)."""
    path = p.resolve()
    key = str(path.parent if path.name in HANDIN_ARCHIVES else path)
    return key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")  # a name not in UTF-8 still has one


def submission_names(paths: list[Path]) -> list[str]:
    """A distinct, filesystem-safe folder name per submission (handin.tar -> its folder's name).

    A plain name is kept as it is. A name that had to change gets a short hash of the
    original ("a b" -> "a_b-<hash>"), so it cannot take the folder of a student really
    named "a_b"; names that still coincide (the same name in two folders, or names equal
    but for case, which a case-insensitive disk would merge) each get a hash of their path.
    The result depends on each path, not on the order or the company it comes in, so a
    resumed run finds every submission in the folder it had before.
    """
    names = []
    for p in paths:
        base = _base_name(p)
        clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in base).strip(".") or "submission"
        if clean != base or clean.lower() in RESERVED:
            clean = f"{clean}-{_digest(base)}"
        names.append(clean)
    folded = Counter(n.casefold() for n in names)
    names = [f"{n}-{_digest(source_key(p))}" if folded[n.casefold()] > 1 else n for n, p in zip(names, paths)]
    seen: set[str] = set()
    for i, n in enumerate(names):  # left: the very same path listed twice
        name, k = n, 2
        while name.casefold() in seen:
            name, k = f"{n}-{k}", k + 1
        seen.add(name.casefold())
        names[i] = name
    return names


def _source_of(folder: Path) -> str | None:
    try:
        return safeio.read_text(folder / SOURCE_FILE, 64 * 1024)
    except SafeReadError:
        return None


def already_graded(path: Path, folder: Path) -> bool:
    """Whether `folder` holds results of this very submission (not of another that once had its name)."""
    return (folder / "results.json").is_file() and _source_of(folder) == source_key(path)


def claim(path: Path, folder: Path) -> None:
    """Mark `folder` as the one of `path`; results there of any other submission are removed first."""
    source = source_key(path)
    if _source_of(folder) != source:
        for stale in ("results.json", "feedback.txt", "submission_metadata.json"):
            (folder / stale).unlink(missing_ok=True)
        write_text_atomic(folder / SOURCE_FILE, source)


def selected_problems(only: list[str] | None, rubric: Path | None = None) -> list[rubric_mod.Problem]:
    problems = rubric_mod.load(rubric)
    return [p for p in problems.values() if p.id in GRADERS and (not only or p.id in only)]


def ungraded_result(name: str, only: list[str] | None, message: str, rubric: Path | None = None) -> SubmissionResult:
    """Every test 0 with `message`: what a submission gets when the grader could not finish it."""
    vis = ("public", "hidden")
    selected = selected_problems(only, rubric)
    result = SubmissionResult(
        submission=name,
        problems=tuple(p.id for p in selected),
        max_points={p.id: sum(p.share(g, v) for g in p.groups for v in vis if v in g.visibilities) for p in selected},
        notes=[message],
    )
    for p in selected:
        result.tests += all_zero(p, vis, message)
    return result


@dataclass
class Job:
    path: Path
    name: str
    only: list[str] | None = None  # problems to grade (None: all)
    merge: bool = False  # replace only those problems' tests in the results already there
    reasons: dict[str, str] = field(default_factory=dict)  # problem -> why it is regraded
    attempts: int = 0
    proc: subprocess.Popen | None = None
    started: float = 0.0
    scratch: Path | None = None


class Batch:
    """Runs worker processes for a list of jobs; see the module docstring."""

    def __init__(self, args: argparse.Namespace, jobs: list[Job], deadline_s: float):
        self.args = args
        self.queue: deque[Job] = deque(jobs)
        self.active: list[Job] = []
        self.deadline_s = deadline_s
        self.stop_signal: int | None = None
        self.graded = 0
        self.failed: list[str] = []
        self.logs = args.out / ".logs"
        # Every worker's scratch lives under here, so the batch can remove what a killed worker left.
        sweep_scratch()
        cgroups.sweep()  # and the run cgroups of graders that were killed before this batch
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        self.scratch.chmod(0o711)  # a fallback child, as a sandbox uid, must traverse it to its own folder

    def _preexec(self) -> None:  # in the worker, between fork and exec
        import resource

        cap = self.args.worker_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        # The worker ends when this process does, however this process ends.
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    def _start(self, job: Job) -> None:
        job.attempts += 1
        job.scratch = Path(tempfile.mkdtemp(prefix=f"{job.name[:40]}-", dir=self.scratch))
        job.scratch.chmod(0o711)  # a fallback child running as `nobody` must traverse it
        argv = [
            sys.executable, "-m", "autograder.batch.worker", str(job.path.resolve()),
            "--name", job.name, "--out", str(self.args.out.resolve()),
            "--timeout", str(self.args.timeout), "--memory-mb", str(self.args.memory_mb),
            "--isolation", self.args.isolation, "--scratch-root", str(job.scratch),
            "--case-root", str(self.args.fixtures.resolve()),
        ]
        if self.args.rubric:
            argv += ["--rubric", str(self.args.rubric.resolve())]
        if job.only:
            argv += ["--only", *job.only]
        if job.merge:
            argv.append("--merge")
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{job.name}.log", "ab") as log:
            log.write(f"--- attempt {job.attempts}\n".encode())
            log.flush()
            job.proc = subprocess.Popen(
                argv, cwd=PACKAGE_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._preexec,
            )
        job.started = time.monotonic()
        self.active.append(job)

    def _log_tail(self, job: Job) -> str:
        text = clean_text(safeio.read_tail(self.logs / f"{job.name}.log", 600)).strip().splitlines()
        return "\n".join(f"    {line}" for line in text[-5:])

    def _record_failure(self, job: Job, why: str) -> None:
        message = (
            f"This submission could not be graded: the grader's own process {why}. It was recorded as 0 so that "
            f"nothing is lost; please tell the course staff, who can regrade it with --force."
        )
        tail = self._log_tail(job)
        result = ungraded_result(job.name, job.only, message + (f"\n  last output:\n{tail}" if tail else ""), self.args.rubric)
        problems = rubric_mod.load(self.args.rubric)
        records = regrade.current_records(problems, list(result.problems), self.args.fixtures)
        regrade.write_merged(result, self.args.out / job.name, records, [p for p in problems if p in GRADERS], job.merge)
        self.failed.append(job.name)

    def _finished(self, job: Job, returncode: int | None, bar) -> None:
        self.active.remove(job)
        self._clean(job)
        if self.stop_signal is not None:
            return
        if returncode == 0 and (self.args.out / job.name / "results.json").is_file():
            self.graded += 1
            bar.update(1)
            return
        if returncode is None:
            self._record_failure(job, f"ran past the {self.deadline_s:.0f} s limit for one submission")
        elif job.attempts <= self.args.retries:
            self.queue.appendleft(job)
            return
        else:
            self._record_failure(job, f"{_describe_exit(returncode)} on each of {job.attempts} attempts")
        bar.update(1)

    def _kill(self, job: Job, sig: int) -> None:
        try:
            os.killpg(job.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _clean(self, job: Job) -> None:
        """Nothing of a worker that ended, however it ended, stays: its sandboxed processes, then its files."""
        workers = {j.proc.pid for j in self.active}
        self._reap_orphans(self._before, workers)
        slots.sweep_free()
        cgroups.sweep()
        if job.scratch is not None:
            remove_scratch(job.scratch)
            job.scratch = None

    def _reap_orphans(self, before: set[int], workers: set[int] | None = None) -> None:
        # Sandboxed processes of a worker that died are re-parented here (we are a subreaper).
        workers = {j.proc.pid for j in self.active} if workers is None else workers
        for pid in kernel.children_of(os.getpid()) - before - workers:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def run(self, bar) -> None:
        processes.become_subreaper()
        before = self._before = kernel.children_of(os.getpid())
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while (self.queue or self.active) and self.stop_signal is None:
                while self.queue and len(self.active) < max(1, self.args.jobs) and self.stop_signal is None:
                    self._start(self.queue.popleft())
                time.sleep(POLL_S)
                ended = False
                for job in list(self.active):
                    rc = job.proc.poll()
                    if rc is None and time.monotonic() - job.started > self.deadline_s:
                        self._kill(job, signal.SIGTERM)
                        try:
                            job.proc.wait(TERM_GRACE_S)
                        except subprocess.TimeoutExpired:
                            self._kill(job, signal.SIGKILL)
                            job.proc.wait()
                        self._finished(job, None, bar)
                        ended = True
                    elif rc is not None:
                        self._finished(job, rc, bar)
                        ended = True
                if ended:
                    self._reap_orphans(before)
        finally:
            for job in self.active:
                self._kill(job, signal.SIGTERM)
            limit = time.monotonic() + TERM_GRACE_S
            for job in self.active:
                try:
                    job.proc.wait(max(0.0, limit - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._kill(job, signal.SIGKILL)
                    job.proc.wait()
            for job in self.active:
                self._clean(job)
            self.active.clear()
            self._reap_orphans(before)
            slots.sweep_free()
            cgroups.sweep()
            remove_scratch(self.scratch)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _on_signal(self, signum: int, _frame) -> None:
        self.stop_signal = signum


SCRATCH_PREFIX = "autograder-scratch-"


def remove_scratch(folder: Path) -> None:
    """Remove a scratch folder with the capped tmpfs mounts a worker made in it."""
    sandbox.uncap_folder(folder)
    sandbox.remove_tree(folder)


def sweep_scratch() -> int:
    """Remove the scratch folders of batches that were killed (SIGKILL skips their cleanup); how many."""
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        owner = folder.name[len(SCRATCH_PREFIX):].split("-")[0]
        if (owner.isdigit() and not kernel.process_alive(int(owner)) and not folder.is_symlink() and folder.is_dir()
                and folder.stat().st_uid == os.geteuid()):
            remove_scratch(folder)
            removed += 1
    return removed


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="autograder.py", description="Grade handins on public and hidden cases, each in an isolated process."
    )
    ap.add_argument(
        "submissions", nargs="+", type=Path,
        help="handins: .tar, .tar.gz or .zip files, or folders (of handin files, or holding one archive)",
    )
    ap.add_argument("--out", type=Path, default=Path("grades"), help="output folder (default: grades/)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--similarity", action="store_true",
                    help="also compare every pair of submissions' code (similarity.csv/.html, pairs in report.html)")
    ap.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds per problem run (default 60)")
    ap.add_argument("--memory-mb", type=int, default=3072, help="address-space cap of a submission's process")
    ap.add_argument("--only", nargs="+", metavar="PROBLEM", help="grade only these problem ids")
    ap.add_argument("--force", action="store_true", help="regrade submissions that already have results.json")
    ap.add_argument("--retries", type=int, default=2, help="restarts of a grader process that died (default 2)")
    ap.add_argument(
        "--submission-timeout", type=float, default=None,
        help="wall-clock cap on grading one submission (default: (problems + 1) x --timeout + 60 s)",
    )
    ap.add_argument("--worker-memory-mb", type=int, default=8192, help="address-space cap of a grader process")
    ap.add_argument("--title", default="Class report", help="heading of report.html")
    ap.add_argument("--rubric", type=Path, default=None, help="rubric file (default: gradelib/rubric.toml)")
    book = ap.add_argument_group("gradebook (grades.csv, scores.csv, canvas.csv; the late policy is the rubric's [late] table)")
    book.add_argument("--roster", type=Path, help="CSV: student id, name, email, submission (folder or file name) [, section, canvas id]")
    book.add_argument("--extensions", type=Path, help="CSV: student id or submission, extra days")
    book.add_argument("--submitted-at", type=Path, help="CSV: submission, ISO time (else submission_metadata.json in the submission folder)")
    book.add_argument("--due", help="due time, ISO 8601 (else the due date in submission_metadata.json)")
    book.add_argument("--assignment-title", default="Self-attention and language modeling", help="the assignment's column in canvas.csv")
    ap.add_argument("--fixtures", type=Path, default=CASE_ROOT,
                    help="folder of the public and hidden cases and MANIFEST.sha256 (default: fixtures/)")
    ap.add_argument(
        "--isolation", choices=ISOLATION_CHOICES, default="best",
        help="best: namespaces where the machine allows, else the fallback (Landlock, seccomp, a sandbox uid; "
        "recorded per submission), and refuse where neither can be made; strict: refuse to grade without "
        "namespaces; portable: grade even where only the portable level runs (a plain child process: it stops "
        "runaway code, not a hostile submission)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    args = parse_args(argv)
    try:
        known = [p for p in rubric_mod.load(args.rubric) if p in GRADERS]
    except rubric_mod.RubricError as exc:
        print(f"The rubric cannot be used, so nothing was graded: {exc}", file=sys.stderr)
        return 2
    if args.only:
        unknown = [p for p in args.only if p not in known]
        if unknown:
            print(f"unknown problem id(s) {unknown}; known: {known}", file=sys.stderr)
            return 2
    problem_ids = [p for p in known if not args.only or p in args.only]
    try:
        args.book = read_book_inputs(args)
    except (gradebook.BookError, rubric_mod.RubricError) as exc:
        print(f"nothing was graded: {exc}", file=sys.stderr)
        return 2
    if {"prediction", "generation"} & set(problem_ids):
        from ..reference.provenance import refusal

        why = refusal(Path(args.fixtures) / "lm", args.rubric)
        if why:
            print(f"Not grading: {why}.", file=sys.stderr)
            return 2
    if args.isolation == "strict" and sandbox.isolation_level() != "namespaces":
        print(
            f"--isolation strict: not grading, namespaces are unavailable on this machine ({sandbox.isolation_reason()}). "
            "Expected: root with bubblewrap and setpriv installed (make setup installs bubblewrap); "
            "or run without --isolation strict to use the fallback.",
            file=sys.stderr,
        )
        return 2
    if args.isolation == "best" and sandbox.isolation_level() == "portable":
        print(f"Not grading: neither namespaces nor the fallback can be made here ({sandbox.isolation_reason()}), "
              "and the portable level isolates nothing: a submission could read or change this user's files, "
              "the hidden cases and other students' results included. Expected: Linux as root with an "
              "interpreter every user can read (or Landlock when not root); or pass --isolation portable to grade "
              "here anyway, trusting the submissions.", file=sys.stderr)
        return 2
    names = submission_names(args.submissions)
    args.out.mkdir(parents=True, exist_ok=True)
    jobs, plan = plan_jobs(args, names, problem_ids)
    before = {job.name: read_row(args.out / job.name / "results.json", job.name) for job in jobs if job.reasons}
    for job in jobs:
        claim(job.path, args.out / job.name)
    for path, name in zip(args.submissions, names):
        gradebook.keep_metadata(path, args.out / name)
    if plan:
        print(plan, file=sys.stderr if len(names) == 1 else sys.stdout, flush=True)
    deadline = args.submission_timeout or (len(problem_ids) + 1) * args.timeout + 60.0
    batch = Batch(args, jobs, deadline)
    start = time.monotonic()
    with tqdm(total=len(jobs), unit="handin", file=sys.stderr, disable=len(jobs) < 2, dynamic_ncols=True) as bar:
        batch.run(bar)
    wall = time.monotonic() - start
    if batch.stop_signal is not None:
        done = sum((args.out / n / "results.json").is_file() for n in names)
        print(
            f"stopped by {signal.Signals(batch.stop_signal).name}: {done} of {len(names)} submissions have results; "
            "run the same command again to grade the rest",
            file=sys.stderr,
        )
        return 128 + batch.stop_signal
    changed = log_regrades(args.out, jobs, before)
    if len(names) == 1:
        feedback = args.out / names[0] / "feedback.txt"
        if not jobs:
            print(f"{names[0]} was already graded (use --force to regrade)", file=sys.stderr)
        try:
            text = safeio.read_text(feedback, 64 * 1024 * 1024)
        except SafeReadError as exc:
            text = f"{names[0]}: {exc}"
        print(clean_text(text).rstrip("\n"))
        if len(_class_folders(args.out)) > 1:  # a late handin graded into a class's folder: the class files follow
            book_lines = write_class_files(args, known)[1]
            if book_lines:
                print(book_lines, file=sys.stderr)
        print(read_row(args.out / names[0] / "results.json", names[0]).autolab_line(problem_ids), flush=True)
        return 0
    similar = ""
    if args.similarity:
        from .similarity import run_class, summary_line

        similar = "\n" + summary_line(run_class(list(args.submissions), args.out, jobs=max(1, args.jobs)), args.out)
    book, book_lines = write_class_files(args, known)
    exports = f"\nexports:   {args.out / 'scores.csv'}" + (f", {args.out / 'canvas.csv'}" if args.roster else "")
    changes = f"; {changed} score(s) changed by the regrade: {args.out / REGRADE_LOG}" if changed else ""
    print(
        f"graded {batch.graded + len(batch.failed)} of {len(names)} submissions in {wall:.1f} s "
        f"({len(names) - len(jobs)} up to date, {len(batch.failed)} could not be graded{changes})\n"
        f"gradebook: {args.out / 'grades.csv'} ({book} rows: every results.json under {args.out})\n"
        f"report:    {args.out / 'report.html'}{exports}{similar}" + (f"\n{book_lines}" if book_lines else "")
    )
    return 0


def plan_jobs(args: argparse.Namespace, names: list[str], problem_ids: list[str]) -> tuple[list[Job], str]:
    """Who is graded and why: new submissions, stale problems of graded ones (merged), or all with --force.

    Returns the jobs and the lines saying so ("regrading 12 of 60: rubric changed (...)", "48 up to date").
    """
    problems = rubric_mod.load(args.rubric)
    current = regrade.current_records(problems, problem_ids, args.fixtures)
    only = list(args.only) if args.only else None
    jobs, new, stale, up_to_date, graded_before = [], [], Counter(), 0, 0
    for path, name in zip(args.submissions, names):
        folder = args.out / name
        if not already_graded(path, folder):
            jobs.append(Job(path, name, only=only))
            new.append(name)
            continue
        graded_before += 1
        if args.force:
            jobs.append(Job(path, name, only=only, merge=bool(only), reasons=dict.fromkeys(problem_ids, "--force")))
            stale["--force"] += 1
            continue
        data = regrade.read_results(folder / "results.json")
        why = (dict.fromkeys(problem_ids, "results.json could not be read") if data is None
               else regrade.stale_problems(data, current))
        if not why:
            up_to_date += 1
            continue
        ids = [p for p in problem_ids if p in why]
        whole = ids == [p for p in problems if p in GRADERS]
        jobs.append(Job(path, name, only=None if whole else ids, merge=True, reasons=why))
        stale["; ".join(dict.fromkeys(why[p] for p in ids))] += 1
    lines = []
    if new:
        lines.append(f"grading {len(new)} new submission{'s' if len(new) != 1 else ''}")
    if stale:
        n = sum(stale.values())
        if len(stale) == 1:
            lines.append(f"regrading {n} of {graded_before}: {next(iter(stale))}")
        else:
            parts = "; ".join(f"{k} ({v})" for k, v in stale.most_common())
            lines.append(f"regrading {n} of {graded_before}: {parts}")
    if graded_before and (stale or up_to_date):
        lines.append(f"{up_to_date} up to date")
    return jobs, "\n".join(lines)


def log_regrades(out: Path, jobs: list[Job], before: dict[str, Row]) -> int:
    """Append to out/regrades.csv each problem score a regrade changed; return how many changed."""
    stamp = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    lines = []
    for job in jobs:
        old = before.get(job.name)
        if old is None or old.notes.startswith("results.json could not be read"):
            continue
        new = read_row(out / job.name / "results.json", job.name)
        for pid, reason in job.reasons.items():
            if pid in old.scores and abs(new.scores.get(pid, 0.0) - old.scores[pid]) > 1e-9:
                lines.append([stamp, job.name, pid, f"{old.scores[pid]:g}", f"{new.scores.get(pid, 0.0):g}", reason])
    if lines:
        import csv
        import io

        path = out / REGRADE_LOG
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if not path.is_file():
            writer.writerow(REGRADE_LOG_HEADER)
        writer.writerows(lines)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
    return len(lines)


def _class_folders(out: Path) -> list[Path]:
    """The submission folders under `out` that hold a results.json, whichever run graded them."""
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "results.json").is_file())


def class_rows(out: Path) -> list[Row]:
    """A row per submission folder under `out` that holds a results.json."""
    return [read_row(p / "results.json", p.name) for p in _class_folders(out)]


def read_book_inputs(args: argparse.Namespace) -> dict:
    """The roster, extensions, times, due time and late policy, read and checked before anything is graded."""
    return {
        "roster": gradebook.read_roster(args.roster) if args.roster else None,
        "extensions": gradebook.read_extensions(args.extensions) if args.extensions else {},
        "submitted_at": gradebook.read_submitted_at(args.submitted_at) if args.submitted_at else {},
        "due": gradebook.parse_time(args.due, "--due") if args.due else None,
        "policy": rubric_mod.late_policy(args.rubric),
    }


def write_class_files(args: argparse.Namespace, problem_ids: list[str]) -> tuple[int, str]:
    """grades.csv, scores.csv, canvas.csv (with a roster) and report.html from every results.json under --out.

    Returns the number of rows and the lines that say who is missing, unknown or late.
    """
    rows = class_rows(args.out)
    inputs = args.book
    metadata = {}
    for r in rows:
        try:
            metadata[r.submission] = safeio.read_json(args.out / r.submission / gradebook.METADATA, 1024 * 1024)
        except SafeReadError:
            pass
    sources = {r.submission: _source_of(args.out / r.submission) or "" for r in rows}
    problems = rubric_mod.load(args.rubric)
    book = gradebook.build(rows, problem_ids, sources=sources, metadata=metadata,
                           max_points=sum(problems[p].points for p in problem_ids), **inputs)
    gradebook.write_grades(args.out / "grades.csv", book, problem_ids, roster=inputs["roster"] is not None)
    gradebook.write_scores(args.out / "scores.csv", book)
    if inputs["roster"] is not None:
        gradebook.write_canvas(args.out / "canvas.csv", book, inputs["roster"], args.assignment_title)
    write_report(args.out / "report.html", rows, problem_ids, args.title, thresholds_of(problems))
    return len(rows), gradebook.summary(book, inputs["roster"] is not None)
