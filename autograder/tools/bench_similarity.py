"""Similarity figures for `make bench`: a generated class of 300 handins compared, with the time each phase took."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from autograder.batch.compared_code import FILES, NOTEBOOKS, PY_FILE
from autograder.batch.similarity import run_class

REPO = Path(__file__).resolve().parents[2]


def _student_cells(master: dict) -> list[str]:
    """The code cells of a master notebook as a student holds them: no tests, no prompts, no markers."""
    cells, in_tests = [], False
    for cell in master["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "raw":
            in_tests = text.startswith("# BEGIN TESTS") or (in_tests and not text.startswith("# END TESTS"))
        elif cell["cell_type"] == "code" and not in_tests:
            text = re.sub(r'\n\s*""" # BEGIN PROMPT.*?""" # END PROMPT', "", text, flags=re.S)
            cells.append(text)
    return cells


def _vary(text: str, rng: np.random.Generator) -> str:
    """One student's version: each solution block kept (minus some lines, plus some of their own) or rewritten."""
    out, block, keep = [], False, True
    for line in text.split("\n"):
        if "# BEGIN SOLUTION" in line:
            block, keep = True, rng.random() < 0.5
            continue
        if "# END SOLUTION" in line:
            block = False
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if block and (not keep or rng.random() < 0.25):
            line = ""
        if block and (not keep or rng.random() < 0.25):
            a, b, c = rng.integers(0, 1000, 3)
            op = "+-*/"[int(rng.integers(4))]
            line += f"\n{indent}tmp{a} = x{b}.reshape({a}, -1)[:{c}] {op} y{c}.sum({b % 3})"
        out.append(line)
    return "\n".join(out)


def make_bench_class(dest: Path, n: int, seed: int = 0) -> list[Path]:
    """n handin folders derived from the solutions, each with its own changes: a class where most pairs share code."""
    rng = np.random.default_rng(seed)
    reference = (REPO / "solutions" / PY_FILE).read_text(encoding="utf-8")
    masters = {
        nb: _student_cells(json.loads((REPO / "solutions" / nb).read_text(encoding="utf-8"))) for nb in NOTEBOOKS
    }
    paths = []
    for k in range(n):
        folder = dest / f"student{k:03d}"
        folder.mkdir(parents=True)
        (folder / PY_FILE).write_text(_vary(reference, rng), encoding="utf-8")
        for nb, cells in masters.items():
            doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                   "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                              "source": _vary(c, rng)} for c in cells]}
            (folder / nb).write_text(json.dumps(doc), encoding="utf-8")
        paths.append(folder)
    return paths


def _cpu_seconds() -> float:
    """User + system time of this process and its reaped children (the worker pools)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def print_similarity_figures(n: int = 300, jobs: int = 2) -> dict:
    """`make bench`: the whole run (open, fingerprint, compare, write) on n generated submissions; its figures."""
    with tempfile.TemporaryDirectory(prefix="similarity-bench-") as tmp:
        paths = make_bench_class(Path(tmp) / "class", n)
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        run = run_class(paths, Path(tmp) / "out", jobs=jobs)
        run_class_s = time.perf_counter() - started
        run.phases["write csv, html, json"] = run_class_s - run.seconds
        wall = run_class_s
        cpu = _cpu_seconds() - cpu_before
    print(
        f"similarity: {n} generated submissions, {run.pairs:,} pairs x {len(FILES)} files, --jobs {jobs}: "
        f"{wall:.1f} s wall (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores), {cpu:.1f} CPU-s "
        f"(~{cpu / jobs:.0f} s on {jobs} idle cores), "
        f"{len(run.rows):,} rows listed, {run.flagged:,} pairs flagged; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in run.phases.items())
    )
    return {"submissions": n, "pairs": run.pairs, "files": len(FILES), "jobs": jobs, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "flagged": run.flagged, "phases_s": {k: round(v, 2) for k, v in run.phases.items()}}
