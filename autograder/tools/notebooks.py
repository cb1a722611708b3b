"""Student notebooks from the otter-assign masters in solutions/ (part of `make handout`).

For each master in NOTEBOOKS, `otter assign` runs offline in a scratch folder and
its output is split in two:

- for students (handout/): the notebook with solutions replaced by
  `raise NotImplementedError("TODO ...")` and outputs cleared, and the public
  tests as handout/tests/<question>.py, where `grader.check("<question>")` looks
  for them when the notebook runs from handout/. Each public test calls
  gradelib.notebook_check.check on one rubric line: the course grader's public
  cases and comparison, run in the kernel. The init cell uses otter's client
  without its log file;
- for the course staff (build/otter/<notebook>/, never in handout/): otter's
  autograder folder -- the solutions notebook and the tests with hidden cases.

Otter stamps new cells with random ids; the student notebook is normalised
(sequential cell ids, no outputs or execution counts, sorted JSON) so that
building twice gives the same bytes.

    python -m autograder.tools.notebooks             # write build/otter/ and print what handout/ would get
    python -m autograder.tools.notebooks --execute   # re-run the masters in place so their plots render

Master notebook conventions: see the first markdown cell of each master; cells
tagged `skip-grading` (plots, demos) are not run by the hidden grader.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from .handout_facts import corpus_facts, fill_facts

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
STAFF_OUT = REPO / "build" / "otter"
NOTEBOOKS = ("01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb", "03_language_model.ipynb")
# Masters re-run by --execute; notebook 3 trains for minutes, so its master is kept without outputs.
EXECUTED = NOTEBOOKS[:2]
ASSIGN_TIMEOUT_S = 300


class AssignError(RuntimeError):
    """otter assign failed; the message carries its output."""


def normalise(nb: nbformat.NotebookNode) -> str:
    """The notebook as text that depends only on its cells' content."""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
        if cell.cell_type == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.nbformat, nb.nbformat_minor = 4, 5
    # The kernel that last ran a master records its Python version; students need none of it.
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


# Otter's init cell, as `otter assign` writes it, and what the student notebook gets instead: the same
# client without its event log (gradelib/notebook_check.py), so grader.check leaves no .OTTER_LOG behind.
OTTER_INIT = '# Initialize Otter\nimport otter\ngrader = otter.Notebook("{name}")'
QUIET_INIT = (
    '# Initialize Otter: grader.check("...") runs the public cases the way `python autograder.py` grades them\n'
    'from gradelib.notebook_check import Notebook\n\ngrader = Notebook("{name}")'
)


def quiet_init(nb: nbformat.NotebookNode, name: str) -> None:
    """Replace otter's init cell with QUIET_INIT (exactly one is expected)."""
    found = [c for c in nb.cells if c.cell_type == "code" and c.source.strip() == OTTER_INIT.format(name=name)]
    if len(found) != 1:
        raise AssignError(f"{name}: expected one otter init cell, found {len(found)}")
    found[0].source = QUIET_INIT.format(name=name)


def run_assign(names: tuple[str, ...], workdir: Path) -> dict[str, Path]:
    """Run otter assign on each master (in parallel); return name -> its output folder."""
    procs = {}
    for name in names:
        folder = workdir / Path(name).stem
        folder.mkdir(parents=True)
        shutil.copyfile(SOLUTIONS / name, folder / name)
        cmd = [sys.executable, "-m", "otter", "assign", "--no-pdfs", "--no-run-tests", name, "dist"]
        # otter assign writes the tests into a temporary folder it never removes: one under `workdir`, removed with it
        env = {**os.environ, "TMPDIR": str(folder)}
        procs[name] = (folder, subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT))
    out = {}
    for name, (folder, proc) in procs.items():
        log, _ = proc.communicate(timeout=ASSIGN_TIMEOUT_S)
        if proc.returncode != 0:
            raise AssignError(f"otter assign failed on solutions/{name}:\n{log.decode(errors='replace')[-3000:]}")
        out[name] = folder / "dist"
    return out


def build(staff_out: Path | None = STAFF_OUT) -> dict[str, bytes]:
    """handout-relative path -> bytes for the student side, corpus facts filled in (handout_facts.py's
    placeholders); staff output goes to `staff_out`."""
    facts = corpus_facts()
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="otter-assign-") as tmp:
        dists = run_assign(NOTEBOOKS, Path(tmp))
        for name, dist in dists.items():
            student = nbformat.read(dist / "student" / name, as_version=4)
            quiet_init(student, name)
            files[name] = fill_facts(normalise(student), facts, name, json_string=True).encode()
            for test in sorted((dist / "student" / "tests").glob("*.py")):
                rel = f"tests/{test.name}"
                if rel in files:
                    raise AssignError(f"question name {test.stem!r} is used by two notebooks; names must be unique")
                files[rel] = test.read_bytes()
            if staff_out is not None:
                dest = staff_out / Path(name).stem
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(dist / "autograder", dest)
    return files


def coalesce_streams(nb: nbformat.NotebookNode) -> None:
    """Join adjacent stdout/stderr chunks: how the kernel splits them depends on timing, not on the code."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged: list = []
        for out in cell.outputs:
            last = merged[-1] if merged else None
            if last is not None and out.output_type == last.output_type == "stream" and out.name == last.name:
                last.text += out.text
            else:
                merged.append(out)
        cell.outputs = merged


def execute_masters(timeout_s: int = 120) -> None:
    """Run each master top to bottom and save it with its outputs (plots included)."""
    from nbclient import NotebookClient

    for name in EXECUTED:
        path = SOLUTIONS / name
        nb = nbformat.read(path, as_version=4)
        NotebookClient(
            nb, timeout=timeout_s, kernel_name="python3", record_timing=False,
            resources={"metadata": {"path": str(SOLUTIONS)}},
        ).execute()
        coalesce_streams(nb)
        nb.metadata.pop("widgets", None)
        nb.metadata["language_info"] = {"name": "python"}
        path.write_text(nbformat.writes(nb) + "\n")
        print(f"executed solutions/{name}")


def main() -> None:
    ap = argparse.ArgumentParser(description="Build the student notebooks with otter assign.")
    ap.add_argument("--execute", action="store_true", help="re-run the masters in place so their outputs render")
    args = ap.parse_args()
    if args.execute:
        execute_masters()
        return
    files = build()
    for rel, data in sorted(files.items()):
        print(f"handout/{rel}: {len(data)} bytes")
    print(f"staff output (solutions notebooks, hidden otter tests): {STAFF_OUT}")


if __name__ == "__main__":
    main()
