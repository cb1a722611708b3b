"""`make bench`: how long grading takes, next to `otter run` on a trivial notebook.

Every figure is the median wall-clock time of --runs runs (default 5) of a
whole command, interpreter start included, on this machine; the commands
take turns, so a change in load affects them alike:

- local: `python autograder.py` in a copy of handout/ holding the reference
  handin (attention.py, the three solved notebooks, the reference model.pt and
  its arrays; public cases), with `--only attention` and with every problem;
- hidden: the instructor CLI grading one complete reference handin on public
  and hidden cases, every problem, pinned to one core -- and without the
  language-model problems, whose run of the handed-in model is most of it --
  and a batch of attention handins with --jobs 2 (time per handin);
- local, every problem, again on a simulated macOS and Windows
  (tests/platform_sim.py), beside Linux's figure: the kit runs the same way on each;
- each grading figure twice: with one process per submission that imports
  numpy and torch once (the course grader's template, forked per run; the
  kit's warm process, which runs each harness in turn) and with a fresh
  interpreter per run (GRADELIB_TEMPLATE=off), side by side;
- otter: `otter run` on a one-question notebook, made here with `otter assign`
  from a tiny master notebook, answered correctly; it runs offline.

Then the ratios ours / otter. Each command's output is checked (full marks
where full marks are due), so a broken grader cannot look fast.

    python -m autograder.tools.bench [--runs N] [--batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from autograder.tools.bench_class import BenchError as ClassBenchError
from autograder.tools.bench_class import print_class_figures
from autograder.tools.bench_similarity import print_similarity_figures
from autograder.tools.demo import reference_handin
from autograder.tools.measured import LoadPeak, host_record, write
from gradelib.handin import sources

REPO = Path(__file__).resolve().parents[2]
HANDOUT = REPO / "handout"
REFERENCE = REPO / "solutions" / "attention.py"
CLI = REPO / "autograder" / "autograder.py"
SIM = REPO / "tests" / "platform_sim.py"  # makes absent what macOS's or Windows' Python lacks
SIM_ENV = {"PLATFORM_SIM_PRELOAD": "numpy,psutil"}
PY = sys.executable
# Files in a handout folder that a student's work adds; not part of the handout itself.
STUDENT_WORK = ("__pycache__", ".ipynb_checkpoints", "experiments", "handin.tar")


class BenchError(RuntimeError):
    """A benchmarked command failed or printed something other than what is due."""


@dataclass
class Figure:
    """One benchmarked command; `per` divides each time (handins in a batch)."""

    label: str
    cmd: list[str]
    cwd: Path
    check: Callable[[str], None]
    target: str = ""
    per: int = 1
    env: dict[str, str] = field(default_factory=dict)
    one_core: bool = False
    times: list[float] = field(default_factory=list)


def pinned() -> None:  # in the benchmarked command, before exec: the first CPU this process may use
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


TEMPLATE_OFF = {"GRADELIB_TEMPLATE": "off"}


def both_ways(fig: Figure) -> list[Figure]:
    """The figure with the template process (the default) and with a fresh interpreter per run."""
    off = Figure(fig.label + "  [fresh interpreter per run]", fig.cmd, fig.cwd, fig.check, "", fig.per,
                 {**fig.env, **TEMPLATE_OFF}, fig.one_core)
    return [fig, off]


def run_once(fig: Figure) -> None:
    start = time.perf_counter()
    proc = subprocess.run(fig.cmd, cwd=fig.cwd, capture_output=True, text=True, env={**os.environ, **fig.env},
                          preexec_fn=pinned if fig.one_core else None)
    fig.times.append((time.perf_counter() - start) / fig.per)
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(fig.cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    fig.check(proc.stdout)


def expect(fragment: str):
    def check(stdout: str) -> None:
        if fragment not in stdout:
            raise BenchError(f"expected {fragment!r} in the output:\n{stdout[-3000:]}")

    return check


def attention_full_marks(points: str = ""):
    """The score table's attention line reads `points / points` (by default the rubric's public attention points,
    what the local grader can give)."""
    if not points:
        from gradelib import rubric

        problem = rubric.load()["attention"]
        points = f"{sum(problem.share(g, 'public') for g in problem.groups):.2f}"

    def check(stdout: str) -> None:
        line = next((ln for ln in stdout.splitlines() if ln.startswith("attention ")), "")
        if f"{points} / {points}".replace(" ", "") not in line.replace(" ", ""):
            raise BenchError(f"attention did not get {points} / {points}:\n{stdout[-3000:]}")

    return check


def total_full_marks():
    """The score table's total reads `max / max`."""
    def check(stdout: str) -> None:
        line = next((ln for ln in stdout.splitlines() if ln.lower().startswith("total")), "")
        parts = line.replace("/", " ").split()
        if len(parts) < 3 or parts[-1] != parts[-2]:
            raise BenchError(f"the complete reference handin did not get full marks:\n{stdout[-3000:]}")

    return check


def trivial_otter_notebook(folder: Path) -> tuple[Path, Path]:
    """An otter-assign master with one question; returns (autograder zip, answered student notebook)."""
    cells = [
        new_raw_cell(
            "# ASSIGNMENT CONFIG\nname: trivial\ngenerate: true\ninit_cell: true\n"
            "check_all_cell: false\nexport_cell: false\nrun_tests: false\n"
        ),
        new_markdown_cell("# A one-question notebook"),
        new_raw_cell("# BEGIN QUESTION\nname: q1\npoints: 1"),
        new_markdown_cell("Set `x` to 2."),
        new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("x = 2 # SOLUTION"),
        new_raw_cell("# END SOLUTION"),
        new_raw_cell("# BEGIN TESTS"),
        new_code_cell("assert x == 2"),
        new_raw_cell("# END TESTS"),
        new_raw_cell("# END QUESTION"),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "master.ipynb")
    proc = subprocess.run([PY, "-m", "otter", "assign", "--no-pdfs", "master.ipynb", "dist"], cwd=folder,
                          capture_output=True, text=True)
    zips = sorted((folder / "dist" / "autograder").glob("*.zip"))
    if proc.returncode != 0 or not zips:
        raise BenchError(f"otter assign failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    student = folder / "dist" / "student" / "master.ipynb"
    answered = nbformat.read(student, as_version=4)
    for cell in answered.cells:
        if cell.cell_type == "code" and cell.source.strip() == "x = ...":
            cell.source = "x = 2"
            break
    else:
        raise BenchError("the student notebook has no `x = ...` cell to answer")
    nbformat.write(answered, student)
    return zips[0], student


def otter_full_marks(out: Path):
    def check(_stdout: str) -> None:
        results = json.loads((out / "results.json").read_text())
        score = sum(t.get("score") or 0 for t in results["tests"])
        if score != 1:
            raise BenchError(f"otter run gave {score} / 1: {json.dumps(results)[:2000]}")

    return check


def _figures(tmp: Path, batch: int) -> tuple[list[Figure], Figure, Figure]:
    """Every timed command, each with and without the template process, then `otter run`; also
    (complete handin with the template, otter) for the figures printed after the table."""
    handin = reference_handin(tmp / "handins" / "reference")
    local = shutil.copytree(HANDOUT, tmp / "handout", ignore=shutil.ignore_patterns(*STUDENT_WORK))
    # The language-model files where notebook 3's training writes them (run "bench", epoch 6).
    placed = {v: k for k, v in sources("bench", "6").items()}
    for item in handin.iterdir():
        rel = next((r for r, name in placed.items() if name == item.name), item.name)
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item, local / rel)
    figures = [
        *both_ways(Figure("local: python autograder.py --only attention", [PY, "autograder.py", "--only", "attention"],
                          local, attention_full_marks(), "target < 3 s")),
        *both_ways(Figure("local: python autograder.py, every problem (complete reference handin)",
                          [PY, "autograder.py"], local, attention_full_marks(), "target < 3 s, <= 0.3 x otter")),
        # A student's Mac or Windows laptop (no fork), simulated on this machine: the same kit, the same handin.
        # The simulation first imports only what the local grader itself imports (the tests' simulation
        # imports every package a student tool uses, seconds that a real Mac does not spend).
        *both_ways(Figure("local: every problem, simulated macOS", [PY, str(SIM), "darwin", str(local), "--",
                          "autograder.py"], local, attention_full_marks(), "<= 1.5 x Linux", env=SIM_ENV)),
        *both_ways(Figure("local: every problem, simulated Windows", [PY, str(SIM), "win32", str(local), "--",
                          "autograder.py"], local, attention_full_marks(), "<= 1.5 x Linux", env=SIM_ENV)),
    ]
    one = [PY, str(CLI), str(handin), "--out", str(tmp / "grades"), "--force"]
    many = []
    for i in range(batch):
        folder = tmp / "class" / f"student{i:02d}"
        folder.mkdir(parents=True)
        shutil.copyfile(REFERENCE, folder / "attention.py")
        many.append(str(folder))
    figures += [
        *both_ways(Figure("hidden: one handin, --only attention", [*one, "--only", "attention"], REPO,
                          attention_full_marks("30.00"), "target < 10 s")),
        *(complete := both_ways(Figure("hidden: complete handin, every problem, one core", one, REPO,
                                       total_full_marks(), "target < 20 s", one_core=True))),
        *both_ways(Figure("hidden: complete handin, all but the LM problems, one core",
                          [*one, "--only", "attention", "losses", "masks"], REPO, attention_full_marks("30.00"),
                          "target < 5 s", one_core=True)),
        *both_ways(Figure(f"hidden: batch of {batch}, --jobs 2, per handin (attention)",
                          [PY, str(CLI), *many, "--out", str(tmp / "class_grades"), "--force", "--jobs", "2",
                           "--only", "attention"], REPO, expect(f"graded {batch} of {batch}"),
                          "target < 10 s", per=batch)),
    ]
    otter_dir = tmp / "otter"
    otter_dir.mkdir()
    autograder_zip, student = trivial_otter_notebook(otter_dir)
    out = otter_dir / "out"
    out.mkdir()
    otter = Figure("otter run, one-question notebook",
                   [PY, "-m", "otter", "run", "--no-logo", "-a", str(autograder_zip), "-o", str(out), str(student)],
                   otter_dir, otter_full_marks(out))
    return [*figures, otter], complete[0], otter


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Time the local and hidden graders and `otter run`.")
    ap.add_argument("--runs", type=int, default=5, help="runs per figure; the median is reported (default 5)")
    ap.add_argument("--batch", type=int, default=8, help="handins in the batch figure (default 8)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "bench.json", help="the figures as JSON")
    args = ap.parse_args(argv)
    load_start, load_peak = os.getloadavg(), LoadPeak()

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        figures, complete, otter = _figures(Path(tmp), args.batch)
        # Round robin, so a change in the machine's load touches every figure alike.
        for _ in range(args.runs):
            for fig in figures:
                run_once(fig)

    load = os.getloadavg()
    print(f"bench: median of {args.runs} runs each, wall clock with interpreter start; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    width = max(len(f.label) for f in figures)
    for f in figures:
        spread = f"[{min(f.times):.2f} .. {max(f.times):.2f}]"
        print(f"  {f.label:<{width}}  {statistics.median(f.times):6.2f} s  {spread:<16} {f.target}")
    print("ratios ours / otter run, and template process / fresh interpreter per run:")
    otter_s, grading = statistics.median(otter.times), []
    for f, off in zip(figures[:-1:2], figures[1:-1:2]):
        mine, fresh = statistics.median(f.times), statistics.median(off.times)
        print(f"  {f.label:<{width}}  {mine / otter_s:6.2f} x otter   "
              f"{mine / fresh:5.2f} x fresh interpreters ({fresh:.2f} s)")
        grading.append({"what": f.label, "target": f.target, "template_s": round(mine, 3), "fresh_s": round(fresh, 3),
                        "times_s": [round(t, 3) for t in f.times], "ratio_otter": round(mine / otter_s, 3)})
    linux = statistics.median(figures[2].times)
    print(
        "local, every problem, the same handin: Linux "
        + f"{linux:.2f} s; "
        + "; ".join(
            f"{f.label.split(', ')[-1]} {statistics.median(f.times):.2f} s "
            f"({statistics.median(f.times) / linux:.2f} x Linux)"
            for f in (figures[4], figures[6])
        )
        + " (target <= 1.5 x)"
    )
    data = {"runs": args.runs, "otter_s": round(otter_s, 3), "grading": grading}
    print()
    data["class"] = print_class_figures(min(args.runs, 3))
    print()
    data["box"] = print_box_figures(min(args.runs, 3))
    print()
    data["model_run"] = print_model_run_figures(min(args.runs, 3), statistics.median(complete.times))  # template
    print()
    data["lm"] = print_lm_figures(args.runs)
    print()
    data["similarity"] = print_similarity_figures()
    command = "python -m autograder.tools.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    write(args.out, {"recorded": host_record(command.strip(), load_start, load_peak.stop()), **data})
    print(f"\nbench: the figures as JSON in {args.out}")


BOX_CPU_QUOTA = 0.5  # Gradescope's default autograder box: half a vCPU ...
BOX_MEMORY_MB = 768  # ... and 768 MB


def print_box_figures(runs: int) -> dict | None:
    """The complete reference handin graded inside a cgroup the size of Gradescope's default box.

    As root with cgroup v1 cpu and memory controllers: a cpu quota of half a CPU and a memory
    limit of 768 MB hold for the grader and everything it starts (the sandbox's own cgroups are
    made below the grader's). Prints the wall time and the peak memory of each run, and returns them (None when
    skipped).
    """
    from autograder.isolation.cgroups import CPU_PERIOD_US, kill, own, remove

    cpu, memory = own("cpu"), own("memory")
    if os.geteuid() != 0 or not (cpu / "cpu.cfs_quota_us").exists() or not (memory / "memory.limit_in_bytes").exists():
        print("Gradescope-sized box: skipped (needs root and cgroup v1 cpu and memory controllers)")
        return None
    with tempfile.TemporaryDirectory(prefix="bench-box-") as tmp:
        handin = reference_handin(Path(tmp) / "reference")
        boxes = [cpu / f"bench-box-{os.getpid()}", memory / f"bench-box-{os.getpid()}"]
        for box in boxes:
            box.mkdir()
        try:
            (boxes[0] / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (boxes[0] / "cpu.cfs_quota_us").write_text(str(int(CPU_PERIOD_US * BOX_CPU_QUOTA)))
            (boxes[1] / "memory.limit_in_bytes").write_text(str(BOX_MEMORY_MB * 1024 * 1024))
            procs = [str(b / "cgroup.procs") for b in boxes]

            def enter() -> None:
                for path in procs:
                    with open(path, "w") as fh:
                        fh.write(str(os.getpid()))

            times, peaks, scores = [], [], []
            for i in range(runs):
                (boxes[1] / "memory.max_usage_in_bytes").write_text("0")
                start = time.perf_counter()
                proc = subprocess.run([PY, str(CLI), str(handin), "--out", str(Path(tmp) / f"grades{i}")], cwd=REPO,
                                      capture_output=True, text=True, preexec_fn=enter)
                times.append(time.perf_counter() - start)
                peaks.append(int((boxes[1] / "memory.max_usage_in_bytes").read_text()) / 2**20)
                last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
                scores.append(sum(json.loads(last).get("scores", {}).values()) if last.startswith("{") else 0.0)
        finally:
            kill(boxes)
            for box in boxes:
                remove(box)
    print(f"Gradescope-sized box (cgroup: {BOX_CPU_QUOTA:g} CPU, {BOX_MEMORY_MB} MB), complete reference handin, "
          f"{runs} runs: wall min {min(times):.1f} s, median {statistics.median(times):.1f} s; "
          f"peak memory max {max(peaks):.0f} MB; scores {', '.join(f'{x:g}' for x in scores)}")
    return {"cpu": BOX_CPU_QUOTA, "memory_mb": BOX_MEMORY_MB, "times_s": [round(t, 2) for t in times],
            "peak_mb": round(max(peaks)), "scores": scores}


# The steps of a model run that are the handed-in model's own forward passes (its size sets their cost).
MODEL_COMPUTE_STEPS = ("teacher_forcing_test", "generate", "predict")


def print_model_run_figures(runs: int, complete_s: float | None = None) -> dict:
    """Where the run of a handed-in model spends its time: the reference handin's model run as the
    hidden grader makes it (every step the child timed), pinned to one core. With `complete_s`, the
    complete handin's one-core time of the same bench run, also the grader's own share of it: that
    time less the model's forward passes. Returns the steps' medians (and those two shares)."""
    from autograder import isolation as sandbox
    from autograder.grading.course_side import CourseSide
    from gradelib import rubric
    from gradelib.context import GradeContext
    from gradelib.grade import runs_matplotlib
    from gradelib.problems import lm_model

    settings = rubric.load()["prediction"].settings
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # the sandbox's processes inherit it
    steps: dict[str, list[float]] = {}
    try:
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="bench-model-") as tmp:
                work = Path(tmp)
                work.chmod(0o711)  # as grade.py: the sandboxed child (another uid) reaches its scratch below
                handin = reference_handin(work / "files")
                # With the course's additions, as the worker grades: its revealer answers the hidden rows step by step.
                ctx = GradeContext(handin, REPO / "fixtures", ("public", "hidden"), sandbox.Limits(), scratch_root=work,
                                   course=CourseSide())
                plots = runs_matplotlib(sorted(handin.glob("*.ipynb")))  # as grade.py decides
                with (
                    sandbox.installed(),
                    sandbox.session(work, ctx.limits, sandbox.PRELOAD + (sandbox.PRELOAD_NOTEBOOKS if plots else ())),
                ):
                    start = time.monotonic()
                    run = lm_model.model_run(ctx, settings)
                    seconds = time.monotonic() - start
            if run.problem:
                raise BenchError(f"the reference model did not run: {run.problem}")
            whole = (
                "the whole run as the grader sees it, with the template process starting (interpreter, numpy, torch)"
                + (", matplotlib" if plots else "")
            )
            for name, value in {**run.steps, whole: seconds}.items():
                steps.setdefault(name, []).append(value)
    finally:
        os.sched_setaffinity(0, before)
    print(f"model run of the reference handin, hidden grading, one core, median of {runs}:")
    for name, values in steps.items():
        print(f"  {statistics.median(values):6.2f} s  {name}")
    out: dict = {"steps_s": {name: round(statistics.median(values), 3) for name, values in steps.items()}}
    if complete_s is not None:
        model_s = sum(statistics.median(steps.get(name, [0.0])) for name in MODEL_COMPUTE_STEPS)
        print(
            f"complete handin, hidden, one core: {complete_s:.2f} s, of which the reference model's own forward passes "
            f"({' + '.join(MODEL_COMPUTE_STEPS)}) {model_s:.2f} s; the grader's own time: {complete_s - model_s:.2f} s "
            "(target <= 5 s)"
        )
        out.update(complete_s=round(complete_s, 3), model_s=round(model_s, 3), grader_s=round(complete_s - model_s, 3))
    return out


def print_lm_figures(runs: int) -> dict:
    """The language-model figures: reference training as recorded, scores next to Bayes and bigram."""
    from autograder.reference.calibrate import format_figures, lm_figures
    from autograder.reference.train import full_credit_text

    ref = json.loads((REPO / "fixtures" / "lm" / "reference_model.json").read_text())
    print(
        f"reference LM (as recorded by `make reference-model`): {ref['parameters']:,} parameters, "
        f"{ref['train_tokens_per_s']:,.0f} training tokens/s on 2 threads, trained in {ref['train_s']:.0f} s, "
        f"{full_credit_text(ref)} on both lines"
    )
    figures = lm_figures(REPO / "fixtures", repeats=runs)
    print(format_figures(figures))
    return {"reference": {k: ref[k] for k in ("parameters", "train_tokens_per_s", "train_s") if k in ref},
            "models": figures["models"], "scoring_s": figures["scoring_s"]}


if __name__ == "__main__":
    try:
        main()
    except (BenchError, ClassBenchError) as exc:
        sys.exit(f"bench: {exc}")
