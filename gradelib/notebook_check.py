"""The notebooks' `grader.check` cells: the course grader's public cases and comparisons, run in the kernel.

Every public otter test of the three notebooks is one call of `check`, e.g.

    check("losses", "token_nll", token_nll=token_nll)

which grades rubric line `token_nll` of problem `losses` on the public case files
of the handout (tests/notebooks/public/, tests/lm_functions/public/) the way
`python autograder.py` grades it: the same calls with the same arguments
(child/notebook_child.py and child/lm_child.py, run here in the student's kernel
instead of a sandboxed process), the same comparisons (problems/notebook_functions.py,
problems/lm_functions.py) and the same message. It raises AssertionError with that
message when the line would lose its points, so a check and the local grader's
public line cannot disagree. A line whose functions belong to two questions
(notebook 3's collate_and_loss) is checked on the quantities of the functions
passed in.

`Notebook(path)` is otter's client without its event log: `grader.check` writes no
.OTTER_LOG file into the student's folder.

`python -m gradelib.notebook_check [NOTEBOOK ...]` (the handout's `make checks`) runs every check cell
headless: each notebook in a fresh kernel, without the cells tagged skip-grading (notebook 3's training),
so no run is made and nothing is written.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import json
import signal
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from .compare import Observed
from .problems import lm_functions, notebook_functions
from .problems.handin_runs import SKIP_TAGS
from .rubric import Problem, load
from .safeio import clean_text
from .scoring import group_results, load_cases

CHILD = Path(__file__).resolve().parent / "child"
ROOT = Path(__file__).resolve().parent.parent
# Where the public cases are: under tests in the handout, under fixtures in the course repository.
CASE_ROOTS = ("tests", "fixtures")


def Notebook(nb_path: str | None = None, **kwargs):  # noqa: N802 (stands in for the class otter.Notebook)
    """otter.Notebook without its log file (.OTTER_LOG): checks run offline and leave nothing behind."""
    import otter

    class QuietNotebook(otter.Notebook):
        def _log_event(self, *args, **kwargs) -> None:
            return None

    return QuietNotebook(nb_path, **kwargs)


def case_root() -> Path:
    """The handout's case folder: the first of CASE_ROOTS with the notebooks' public cases (else FileNotFoundError)."""
    for name in CASE_ROOTS:
        if (ROOT / name / "notebooks" / "public" / "cases.json").is_file():
            return ROOT / name
    raise FileNotFoundError(f"no public cases under {ROOT} ({' or '.join(CASE_ROOTS)}): download the handout again")


_HARNESS: dict[str, object] = {}


def harness(name: str):
    """A private copy of the child script `name` (notebook_child or lm_child), imported once per process."""
    if name not in _HARNESS:
        shared = ("child_common", "notebook_child", "lm_child")
        saved = {n: sys.modules.pop(n, None) for n in shared}
        sys.path.insert(0, str(CHILD))
        try:
            _HARNESS[name] = importlib.import_module(name)
            _HARNESS[f"{name}:child_common"] = sys.modules["child_common"]
        finally:
            sys.path.remove(str(CHILD))
            for n in shared:
                sys.modules.pop(n, None)
                if saved[n] is not None:
                    sys.modules[n] = saved[n]
    return _HARNESS[name]


class MemoryRecorder:
    """child_common.Recorder's interface, kept in memory: what one case's calls returned."""

    def __init__(self, common):
        self.common = common
        self.meta: dict = {"quantities": {}, "errors": {}, "flags": {}}
        self.arrays: dict[str, np.ndarray] = {}

    def record(self, name: str, obj, *, convert) -> None:
        entry = {"present": obj is not None, "type": self.common.type_name(obj) if obj is not None else None}
        if obj is not None:
            try:
                arr = convert(obj)
            except BaseException as exc:  # noqa: BLE001 (as the child: any object may raise anything)
                arr = None
                entry["note"] = f"could not be read back: {self.common.short_exception(exc)}"
            if arr is not None:
                if arr.dtype.kind in "biuf":
                    self.arrays[name] = np.array(arr, copy=True)
                else:
                    entry["note"] = f"has non-numeric dtype {arr.dtype}"
        self.meta["quantities"][name] = entry

    def observe(self, q: str) -> Observed:
        """As the grader reads a quantity back from the child (scoring.observed_from_child)."""
        entry = self.meta["quantities"].get(q)
        if not isinstance(entry, dict) or not entry.get("present"):
            return Observed(False, note=clean_text(str(self.meta["errors"].get(q, "not produced"))[:800]))
        type_name = clean_text(entry["type"])[:200] if entry.get("type") is not None else None
        return Observed(True, type_name, self.arrays.get(q), clean_text(entry.get("note", ""))[:500])


def placeholder(obj) -> bool:
    """Whether a function's source still holds `...` or raises NotImplementedError (as the child decides)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(harness("notebook_child").placeholder_functions(tree).values())


def skipped_only(notebook: Path) -> dict[str, str]:
    """Names that only cells tagged skip-grading bind in the saved notebook -> where (as the grader
    words it), read from the file: the grader never runs those cells, the kernel has."""
    base = harness("notebook_child")
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    skipped: dict[str, str] = {}
    bound: set[str] = set()
    index = 0
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        index += 1
        text, tags, label = base.cell_facts(cell, index)
        if isinstance(tags, list) and set(map(str, tags)) & set(SKIP_TAGS):
            for name in base.skipped_names(text):
                skipped.setdefault(name, f"{label} (`{base.first_line(text)}`)")
        else:
            bound.update(base.skipped_names(text))
    return {name: where for name, where in skipped.items() if name not in bound}


def _functions_of(obj) -> list:
    """The plain functions behind a function or a class (its methods, static and class methods, properties)."""
    import types

    if isinstance(obj, types.FunctionType):
        return [obj]
    found = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, property):
                found += [f for f in (value.fget, value.fset) if isinstance(f, types.FunctionType)]
            elif isinstance(getattr(value, "__func__", value), types.FunctionType):
                found.append(getattr(value, "__func__", value))
    return found


@contextlib.contextmanager
def _as_the_grader_runs_it(objects, skipped: dict[str, str]):
    """Within: the names only skip-grading cells bind are gone from the namespace the notebook's functions
    run in (the kernel ran those cells, the grader does not), so a use raises the grader's NameError."""
    spaces = {id(f.__globals__): f.__globals__ for obj in objects for f in _functions_of(obj)}
    removed = {(key, name): space.pop(name) for key, space in spaces.items() for name in skipped if name in space}
    try:
        yield
    finally:
        for (key, name), value in removed.items():
            spaces[key][name] = value


def _spec(problem_id: str):
    if problem_id in ("losses", "masks"):
        return notebook_functions.SPECS[problem_id], "notebooks", "notebook_child"
    if problem_id in ("prediction", "generation"):
        return lm_functions.SPEC, lm_functions.CASE_FOLDER, "lm_child"
    raise ValueError(f"no notebook check for problem {problem_id!r}")


def line_problem(problem: Problem, line: str, quantities: set[str]) -> Problem:
    """`problem` with only rubric line `line`, on its public cases, restricted to `quantities`; an edge line keeps,
    after it, the ordinary lines made of its quantities, which decide whether a failure it shares with them is
    theirs (scoring.group_results)."""
    groups = [g for g in problem.groups if g.id == line]
    if not groups:
        raise ValueError(f"problem {problem.id!r} has no rubric line {line!r}")
    group = groups[0]
    kept = tuple(q for q in group.quantities if q in quantities)
    if not kept:
        raise ValueError(f"none of the functions passed produces a quantity of line {line!r}")
    covering = [replace(g, visibilities=("public",)) for g in problem.groups
                if group.edge and not g.edge and g.quantities and set(g.quantities) <= set(kept)]
    return replace(problem, groups=(replace(group, quantities=kept, visibilities=("public",)), *covering))


def grade_line(problem_id: str, line: str, namespace: dict, root: Path | None = None):
    """The TestResult that rubric line `line` earns on the public cases, with the notebook's objects in `namespace`."""
    problem = load()[problem_id]
    spec, folder, child = _spec(problem_id)
    group = next((g for g in problem.groups if g.id == line), None)
    group_quantities = group.quantities if group is not None else ()
    calls = [c for c in spec.calls if c.function in namespace and set(c.outputs) & set(group_quantities)]
    sub = line_problem(problem, line, {q for c in calls for q in c.outputs})
    module = harness(child)
    base = harness("notebook_child") if child == "notebook_child" else module.notebook_child
    root = root or case_root()
    cases = load_cases(root, folder, ("public",), problem_id if folder == "notebooks" else None)
    # The cases the local grader grades this line on (sub holds this line alone): an ordinary line skips the edge
    # cases other lines take; an edge line takes its own and the ordinary ones, which decide what is particular to it.
    taken = {g.edge for g in problem.groups if g.edge}
    cases = [c for c in cases if c.edge == sub.groups[0].edge or c.edge not in taken]
    if not cases:
        raise FileNotFoundError(f"no public {problem_id} cases under {root / folder}")
    # The saved notebook: in the folder the kernel runs in (where grader.check runs), else beside gradelib/.
    skipped = next((skipped_only(where / spec.notebook) for where in (Path.cwd(), ROOT)
                    if (where / spec.notebook).is_file()), {})
    report = {"functions": {c.function: {"placeholder": placeholder(namespace[c.function]), "cell": 0} for c in calls},
              "skipped_defs": skipped}
    timeout = float(problem.settings.get("call_timeout_s", 10.0))
    # Interval timers stop a call that runs too long; without them (Windows) a thread interrupts it.
    timers = hasattr(signal, "setitimer")
    in_main = threading.current_thread() is threading.main_thread()
    old_handlers = (
        {sig: signal.getsignal(sig) for sig in (signal.SIGALRM, signal.SIGPROF)} if in_main and timers else {}
    )
    old_limit = base.time_limit
    torch = sys.modules.get("torch")
    rng = torch.get_rng_state() if torch is not None else None
    if not in_main:
        # Outside the main thread a timer's signal cannot interrupt a call: run it without the grader's time limit.
        base.time_limit = lambda *_args, **_kwargs: contextlib.nullcontext()
    outcomes = []
    # As the grader runs the notebook: without what the cells tagged skip-grading bound (the kernel ran them).
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(_as_the_grader_runs_it([namespace[c.function] for c in calls], skipped))
        for case in cases:
            with np.load(case.path, allow_pickle=False) as data:
                inputs = {k: data[k] for k in data.files if not k.startswith("expected_")}
            rec = MemoryRecorder(_HARNESS[f"{child}:child_common"])
            for call in calls:
                as_task = {"function": call.function, "args": list(call.args), "kwargs": dict(call.kwargs),
                           "outputs": dict(call.outputs)}
                base.call_and_record(rec, as_task, inputs, dict(namespace), report, timeout)
            outcomes.append(_judge(problem_id, sub, spec, case, rec.observe))
    finally:
        stack.close()
        base.time_limit = old_limit
        if in_main and timers:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
        if rng is not None and "torch" in sys.modules:
            sys.modules["torch"].set_rng_state(rng)
    return group_results(sub, outcomes, ("public",))[0]


def _judge(problem_id: str, sub: Problem, spec, case, observe):
    if problem_id in ("losses", "masks"):
        return notebook_functions.judge_case(sub, spec, case, observe, wanted=set(sub.groups[0].quantities))
    return lm_functions.judge_case(sub, case, observe)


def check(problem_id: str, line: str, **namespace) -> None:
    """Raise AssertionError with the grader's message unless rubric line `line` passes on every public case."""
    missing = sorted(name for name, value in namespace.items() if not callable(value))
    if missing:
        names = ", ".join(f"`{n}`" for n in missing)
        raise AssertionError(
            f"{names} {'is' if len(missing) == 1 else 'are'} not defined where grader.check looked: it reads the "
            "global names of the code that calls it. In the notebook, run the cell that defines "
            f"{'it' if len(missing) == 1 else 'them'} first. In a plain Python session or script, define "
            f"{'it' if len(missing) == 1 else 'them'} at the top level (not inside a function), or call "
            "grader.check(question, global_env=globals()) with a namespace that holds them.")
    result = grade_line(problem_id, line, namespace)
    if not result.passed:
        said = f"{result.name} fails, as `python autograder.py` grades it:\n{result.output}"
        # otter shows str(exception).strip("'"): a message ending in a quoted case name ('padded_words') would
        # lose its closing quote; a newline after it keeps it (otter strips the whitespace after).
        raise AssertionError(said + "\n" if said.endswith("'") else said)


def run_headless(notebook: Path) -> list[tuple[str, str]]:
    """(question, what its grader.check cell showed) for each check cell of `notebook`, run in a fresh kernel in its
    folder as the grader runs it (every cell but those tagged skip-grading); the notebook file is not changed."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [c for c in nb.cells if not set(SKIP_TAGS) & set(c.metadata.get("tags", []))]
    NotebookClient(nb, timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(notebook.resolve().parent)}}).execute()
    shown = []
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("grader.check("):
            texts = [o.get("data", {}).get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result"]
            errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
            shown.append((cell.source.split('"')[1], "\n".join(["".join(texts), *errors]).strip()))
    return shown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gradelib.notebook_check", description=(
        "Run the notebooks' grader.check cells headless: each notebook in a fresh kernel, without the cells tagged "
        "skip-grading (notebook 3's training: no run is made); nothing is written. Exit status 1 if a check fails."))
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: the handout's three notebooks")
    args = ap.parse_args(argv)
    notebooks = args.notebooks or sorted(Path.cwd().glob("0[1-3]_*.ipynb"))
    if not notebooks:
        ap.error(f"no notebook named: give one, or run this in the handout folder (none in {Path.cwd()})")
    failed = 0
    for notebook in notebooks:
        if not notebook.is_file():
            ap.error(f"{notebook} is not a file: give the path of a notebook (.ipynb)")
        for question, text in run_headless(notebook):
            passed = text.endswith("All test cases passed!")
            failed += not passed
            print(f"{question}: passes" if passed else text, flush=True)
    print(f"{failed} check(s) failed" if failed else "every check passes")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
