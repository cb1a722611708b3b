"""Batch-grading figures for `make bench`: a whole class, one complete handin, and otter run on a notebook.

- class: the 57 handins of autograder/tools/classgen.py graded with --jobs 2
  (--timeout 10, as in tests/test_class_grading.py): submissions per minute
  and each submission's grading time (results.json's execution_time), by kind;
- one complete handin (reference attention.py and notebooks, well-formed
  predictions.npy and generated.npy), every problem on public and hidden
  cases, pinned to one core (`taskset -c 0`, --jobs 1): the Gradescope target
  is under 60 s;
- notebook 1 graded by us (--only losses) next to `otter run` on the same
  solved notebook with the autograder zip `otter assign` makes from its
  master: the ratio ours / otter.

    python -m autograder.tools.bench_class [--runs N]
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
from pathlib import Path

import numpy as np

from autograder.tools.classgen import make_class
from autograder.tools.demo import reference_handin
from gradelib.handin_contract import GENERATION_SHAPE, PREDICTION_SHAPE

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, str(REPO / "autograder" / "autograder.py")]
NOTEBOOK_1 = "01_mlm_and_next_token.ipynb"


class BenchError(RuntimeError):
    """A benchmarked command failed; the figures would mean nothing."""


def _run(cmd: list[str], cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchError(
            f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
        )
    return wall, proc.stdout


def class_figures(work: Path, jobs: int = 2, timeout: str = "10") -> dict:
    expected = make_class(work)
    subs = [str(work / "submissions" / name) for name in expected]
    wall, stdout = _run(
        [*CLI, *subs, "--jobs", str(jobs), "--timeout", timeout, "--out", str(work / "grades"), "--force"]
    )
    if f"graded {len(subs)} of {len(subs)}" not in stdout:
        raise BenchError(f"not every submission was graded:\n{stdout[-1500:]}")
    per_kind: dict[str, list[float]] = {}
    for path in sorted((work / "grades").glob("*/results.json")):
        kind = path.parent.name.split("_")[0]
        per_kind.setdefault(kind, []).append(json.loads(path.read_text())["execution_time"])
    every = [t for times in per_kind.values() for t in times]
    return {"n": len(subs), "wall_s": wall, "per_minute": 60 * len(subs) / wall, "each": every, "per_kind": per_kind}


def complete_handin(dest: Path) -> tuple[Path, str]:
    """The reference handin of `make demo`; before the reference model's outputs exist, its code and
    notebooks with well-formed LM arrays (grading costs the same, only the LM scores differ)."""
    try:
        return reference_handin(dest), "the reference handin of make demo"
    except FileNotFoundError:
        dest.mkdir(parents=True, exist_ok=True)
    for name in (
        "attention.py",
        "01_mlm_and_next_token.ipynb",
        "02_attention_and_masks.ipynb",
        "03_language_model.ipynb",
    ):
        if (REPO / "solutions" / name).exists():
            shutil.copyfile(REPO / "solutions" / name, dest / name)
    rng = np.random.default_rng(0)
    np.save(dest / "predictions.npy", rng.standard_normal(PREDICTION_SHAPE).astype(np.float32))
    np.save(dest / "generated.npy", rng.integers(2, 30, size=GENERATION_SHAPE))
    return dest, "reference code and notebooks, random well-formed LM arrays (no reference model outputs yet)"


def one_core_seconds(work: Path, runs: int) -> tuple[list[float], str]:
    handin, what = complete_handin(work / "complete")
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    times = [
        _run([*pin, *CLI, str(handin), "--jobs", "1", "--out", str(work / "one"), "--force"])[0] for _ in range(runs)
    ]
    return times, what


def notebook_vs_otter(work: Path, runs: int) -> tuple[list[float], list[float]]:
    """Our hidden grading of notebook 1 alone, and otter run on the same solved notebook."""
    from autograder.tools.notebooks import run_assign

    staff = run_assign((NOTEBOOK_1,), work / "assign")[NOTEBOOK_1] / "autograder"
    # The masters do not ask otter assign for a zip; `otter generate` makes it from the tests.
    _run([sys.executable, "-m", "otter", "generate", "-t", "tests"], staff)
    zip_path = staff / "autograder.zip"
    solved = staff / NOTEBOOK_1
    handin = work / "nb1"
    handin.mkdir()
    shutil.copyfile(REPO / "solutions" / NOTEBOOK_1, handin / NOTEBOOK_1)
    ours = [
        _run([*CLI, str(handin), "--only", "losses", "--out", str(work / "nb1_grades"), "--force"])[0]
        for _ in range(runs)
    ]
    out = work / "otter_out"
    out.mkdir()
    otter = [
        _run(
            [sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(zip_path), "-o", str(out), str(solved)], work
        )[0]
        for _ in range(runs)
    ]
    return ours, otter


def _stats(times: list[float]) -> str:
    q = statistics.quantiles(times, n=10, method="inclusive")[-1] if len(times) > 1 else times[0]
    return f"median {statistics.median(times):5.2f} s, p90 {q:5.2f} s, max {max(times):5.2f} s"


def print_class_figures(runs: int = 3) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        work = Path(tmp)
        c = class_figures(work / "class")
        one, what = one_core_seconds(work, runs)
        ours, otter = notebook_vs_otter(work, runs)
    load = os.getloadavg()
    print(f"batch grading: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"  class of {c['n']} handins, --jobs 2, --timeout 10: {c['wall_s']:.1f} s wall, "
          f"{c['per_minute']:.1f} submissions per minute")
    print(f"  grading time per submission: {_stats(c['each'])}")
    for kind, times in sorted(c["per_kind"].items()):
        print(f"    {kind:<8} ({len(times):2d}): {_stats(times)}")
    print(f"  one complete handin, every problem, hidden + public, one core: median {statistics.median(one):.1f} s "
          f"of {runs} [{min(one):.1f} .. {max(one):.1f}]  (target < 60 s)\n    handin: {what}")
    ratio = statistics.median(ours) / statistics.median(otter)
    print(f"  notebook 1, ours (--only losses): median {statistics.median(ours):.2f} s; otter run: median "
          f"{statistics.median(otter):.2f} s; ratio ours / otter {ratio:.2f}")
    return {"handins": c["n"], "jobs": 2, "wall_s": round(c["wall_s"], 2), "per_minute": round(c["per_minute"], 1),
            "per_submission_median_s": round(statistics.median(c["each"]), 2),
            "one_core_complete_s": round(statistics.median(one), 2), "notebook_1_s": round(statistics.median(ours), 2),
            "notebook_1_otter_s": round(statistics.median(otter), 2), "notebook_1_ratio_otter": round(ratio, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Batch-grading figures.")
    ap.add_argument("--runs", type=int, default=3, help="runs of the one-handin and notebook figures (default 3)")
    args = ap.parse_args(argv)
    print_class_figures(args.runs)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"bench_class: {exc}")
