"""The notebooks' `grader.check` and `make checks`: the local grader's public lines, graded in the student's kernel
with the local grader's calls (the child harnesses, run here), comparisons and messages: the two cannot disagree."""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import inspect
import signal
import sys
import tempfile
import textwrap
import threading
import types
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from .problems import lm_functions, notebook_functions
from .problems.handin_runs import SKIP_TAGS
from .rubric import load
from .safeio import quote
from .scoring import group_results, line_cases, load_cases, observed_from_child

CHILD = Path(__file__).resolve().parent / "child"
ROOT = Path(__file__).resolve().parent.parent
# The problems the notebooks check -> (their spec, case folder, child script).
CHECKED = {**{pid: (spec, "notebooks", "notebook_child") for pid, spec in notebook_functions.SPECS.items()},
           **{pid: (lm_functions.SPEC, lm_functions.CASE_FOLDER, "lm_child") for pid in ("prediction", "generation")}}


def Notebook(nb_path: str | None = None, **kwargs):  # noqa: N802 (stands in for the class otter.Notebook)
    """otter.Notebook without its log file (.OTTER_LOG): checks run offline and leave nothing behind."""
    import otter

    class QuietNotebook(otter.Notebook):
        def _log_event(self, *args, **kwargs) -> None:
            return None

    return QuietNotebook(nb_path, **kwargs)


def case_root() -> Path:
    """The public cases: under tests/ beside gradelib/ in the handout (the course repository keeps them elsewhere)."""
    found = [ROOT / n for n in ("tests", "fixtures") if (ROOT / n / "notebooks" / "public" / "cases.json").is_file()]
    if not found:
        raise FileNotFoundError(f"no public cases under {ROOT} (tests or fixtures): download the handout again")
    return found[0]


@functools.cache
def harness(name: str):
    """A private copy of the child script `name` (notebook_child or lm_child), imported once per process."""
    shared = ("child_common", "notebook_child", "lm_child")
    saved, path = {n: sys.modules.pop(n) for n in shared if n in sys.modules}, list(sys.path)
    sys.path.insert(0, str(CHILD))
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = path  # the scripts put their folder first too
        for n in shared:
            sys.modules.pop(n, None)
        sys.modules.update(saved)


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
        cells = base.code_cells(notebook)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    skipped, bound = {}, set()
    for text, tags, label in cells:
        if tags & set(SKIP_TAGS):
            for name in base.skipped_names(text):
                skipped.setdefault(name, f"{label} (`{base.first_line(text)}`)")
        else:
            bound.update(base.skipped_names(text))
    return {name: where for name, where in skipped.items() if name not in bound}


def _globals_of(obj) -> list[dict]:
    """The namespaces a function or a class's methods (static, class, properties) run in."""
    members = list(vars(obj).values()) if isinstance(obj, type) else [obj]
    found = [getattr(m, "fget", None) or getattr(m, "__func__", m) for m in members]
    return [f.__globals__ for f in found if isinstance(f, types.FunctionType)]


@contextlib.contextmanager
def _as_the_grader_runs(base, objects, skipped: dict[str, str]):
    """Within: calls run under the child's time limit (none outside the main thread: no timer can interrupt them there),
    without the names only skip-grading cells bind (the kernel ran those cells, the grader does not) in the namespaces
    `objects` run in; after, the kernel's names, signal handlers, timers and torch random state are back."""
    spaces = {id(space): space for obj in objects for space in _globals_of(obj)}
    removed = {(key, name): space.pop(name) for key, space in spaces.items() for name in skipped if name in space}
    in_main = threading.current_thread() is threading.main_thread()
    timers = in_main and hasattr(signal, "setitimer")  # without them (Windows) a thread interrupts a call
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGALRM, signal.SIGPROF)} if timers else {}
    old_limit, torch = base.time_limit, sys.modules.get("torch")
    rng = torch.get_rng_state() if torch is not None else None
    if not in_main:
        base.time_limit = lambda *_args, **_kwargs: contextlib.nullcontext()
    try:
        yield
    finally:
        base.time_limit = old_limit
        if timers:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if rng is not None:
            torch.set_rng_state(rng)
        for (key, name), value in removed.items():
            spaces[key][name] = value


def grade_line(problem_id: str, line: str, namespace: dict, context: dict | None = None):
    """The TestResult that rubric line `line` earns on the public cases, with the notebook's objects in `namespace`
    (`context`, e.g. the notebook's names: the other functions of an edge line, which do not count here but verify
    it as in the grader)."""
    if problem_id not in CHECKED:
        raise ValueError(f"no notebook check for problem {problem_id!r}")
    problem, (spec, folder, child) = load()[problem_id], CHECKED[problem_id]
    group = next((g for g in problem.groups if g.id == line), None)
    if group is None:
        raise ValueError(f"problem {problem.id!r} has no rubric line {line!r}")
    # The line's quantities, and those they are computed from (another function passed): a failure there is said.
    upstream = lm_functions.UPSTREAM if folder != "notebooks" else {q: v.upstream for q, v in spec.quantities.items()}
    needed = {*group.quantities, *(u for q in group.quantities for u in upstream.get(q, ()))}
    namespace, own = {**{k: v for k, v in (context or {}).items() if callable(v)}, **namespace}, set(namespace)
    calls = [c for c in spec.calls if c.function in namespace and set(c.outputs) & needed]
    made, own = {q for c in calls for q in c.outputs}, {q for c in calls if c.function in own for q in c.outputs}
    kept = tuple(q for q in group.quantities if q in made)
    if not own & set(kept):
        raise ValueError(f"none of the functions passed produces a quantity of line {line!r}")
    # This line alone, on its public cases, restricted to what the functions passed make.
    sub = replace(problem, groups=(replace(group, quantities=kept, visibilities=("public",)),))
    base = harness(child) if child == "notebook_child" else harness(child).notebook_child
    root = case_root()
    loaded = load_cases(root, folder, ("public",), problem_id if folder == "notebooks" else None)
    cases = line_cases(problem, group, loaded, "public", ordinary=True)
    if not cases:
        raise FileNotFoundError(f"no public {problem_id} cases under {root / folder}")
    # The saved notebook: in the folder the kernel runs in (where grader.check runs), else beside gradelib/.
    skipped = next((skipped_only(where / spec.notebook) for where in (Path.cwd(), ROOT)
                    if (where / spec.notebook).is_file()), {})
    report = {"functions": {c.function: {"placeholder": placeholder(namespace[c.function])} for c in calls},
              "skipped_defs": skipped}
    timeout = float(problem.settings.get("call_timeout_s", 10.0))
    outcomes, objects = [], [namespace[c.function] for c in calls]
    with tempfile.TemporaryDirectory() as tmp, _as_the_grader_runs(base, objects, skipped):
        for case in cases:
            with np.load(case.path, allow_pickle=False) as data:
                inputs = {k: data[k] for k in data.files if not k.startswith("expected_")}
            # The child's own recorder (an absolute name puts its folder in tmp), read back as the grader reads it.
            rec = base.Recorder(str(Path(tmp) / case.name))
            for c in calls:
                base.call_and_record(rec, asdict(c), inputs, dict(namespace), report, timeout)

            def observe(q: str, rec=rec):
                return observed_from_child(rec.dir, rec.meta, q, quote(rec.meta["errors"].get(q, "not produced"), 800))

            judge = (functools.partial(notebook_functions.judge_case, sub, spec) if folder == "notebooks"
                     else functools.partial(lm_functions.judge_case, sub))
            outcomes.append(judge(case, observe, wanted=needed & made))
            # A context function's failure is not this check's; it verifies nothing either (trivial, not right).
            outcomes[-1].checks.update({q: replace(c, passed=True, trivial=True)
                                        for q, c in outcomes[-1].checks.items() if q not in own and not c.passed})
    return group_results(sub, outcomes, ("public",))[0]


def check(problem_id: str, line: str, context: dict | None = None, **namespace) -> None:
    """Raise AssertionError with the grader's message unless rubric line `line` passes on every public case for the
    functions in `namespace` (grade_line's `context`: the other functions of an edge line, which verify it)."""
    missing = sorted(name for name, value in namespace.items() if not callable(value))
    if missing:
        one = len(missing) == 1
        raise AssertionError(
            f"{', '.join(f'`{n}`' for n in missing)} {'is' if one else 'are'} not defined where grader.check looked: "
            "it reads the global names of the code that calls it. In the notebook, run the cell that defines "
            f"{'it' if one else 'them'} first. In a plain Python session or script, define {'it' if one else 'them'} "
            "at the top level (not inside a function), or call grader.check(question, global_env=globals()) with a "
            "namespace that holds them.")
    result = grade_line(problem_id, line, namespace, context)
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
    """`make checks`: run the check cells of `argv`'s notebooks (default: the handout's three); 1 if one fails."""
    ap = argparse.ArgumentParser(prog="python -m gradelib.notebook_check", description=(
        "Run the notebooks' grader.check cells headless: each notebook in a fresh kernel, without the cells tagged "
        "skip-grading (notebook 3's training: no run is made); nothing is written. Exit status 1 if a check fails."))
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: the handout's three notebooks")
    notebooks = ap.parse_args(argv).notebooks or sorted(Path.cwd().glob("0[1-3]_*.ipynb"))
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
