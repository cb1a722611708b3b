"""Runs a notebook's code cells in one namespace like "Run All" (a failing cell is recorded, the next runs anyway),
each under a time limit, but skip-tagged cells and otter's own; then calls its graded functions on each case."""

from __future__ import annotations

import _thread
import ast
import json
import linecache
import os
import re
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from child_common import OUTPUTS, SCRATCH, Recorder, clock, load_arrays, load_task, save, short_exception  # noqa: E402

CALLS_SHARE = 0.4  # of the whole time budget, kept for calling the graded functions


class OfflineGrader:
    """Stands in for otter's `grader` when a check call shares a cell with student code: does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class GradingTimeout(BaseException):
    """Raised in student code when its time is up (`except Exception` cannot catch it); `wall`: on the wall clock."""

    def __init__(self, wall: bool = False):
        super().__init__()
        self.wall = wall

    def describe(self, limit: time_limit) -> str:
        """The limit that stopped the code, in words."""
        if self.wall:
            return f"{limit.wall_s:.1f} s on the wall clock (it waited rather than computed)"
        return f"{limit.seconds:g} s of CPU time"


class time_limit:
    """Interrupt the block after `seconds` of CPU time (a busy machine costs it nothing) or, if it waits instead, after
    3 x `seconds` + 2 s (`wall_s` at most) on the `clock()`, and again every 0.2 s if the code swallows it. Without
    interval timers (Windows) a thread interrupts the main thread on the wall clock."""

    def __init__(self, seconds: float, wall_s: float | None = None):
        self.seconds = max(0.05, seconds)
        self.wall_s = max(self.seconds, min(self.seconds * 3 + 2, float("inf") if wall_s is None else wall_s))

    def _on_timer(self, signum, frame):
        if signum == signal.SIGALRM and self.ends - clock() >= 0.01:  # it waited for a CPU: not up on clock() yet
            return signal.setitimer(signal.ITIMER_REAL, self.ends - clock(), 0.2)
        raise GradingTimeout(signum == signal.SIGALRM)

    def __enter__(self):
        if hasattr(signal, "setitimer"):
            self.ends = clock() + self.wall_s
            signal.signal(signal.SIGPROF, self._on_timer)
            signal.signal(signal.SIGALRM, self._on_timer)
            signal.setitimer(signal.ITIMER_PROF, self.seconds, 0.2)
            signal.setitimer(signal.ITIMER_REAL, self.wall_s, 0.2)
            return self
        self.done, self.fired = threading.Event(), False
        def watch() -> None:
            while not self.done.wait(0.2 if self.fired else self.wall_s):
                self.fired = True
                _thread.interrupt_main()
        threading.Thread(target=watch, daemon=True).start()
        return self

    def __exit__(self, kind, value, tb):
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
        else:
            self.done.set()
            if self.fired and kind is KeyboardInterrupt:
                raise GradingTimeout(True) from None


def first_line(source: str) -> str:
    """The first non-blank line of `source`, at most 60 characters."""
    text = next((line.strip() for line in source.splitlines() if line.strip()), "(empty)")
    return text if len(text) <= 60 else text[:57] + "..."


def placeholder_functions(tree: ast.AST, names: set[str] | None = None) -> dict[str, bool]:
    """A cell's top-level functions (in `names`, if given) -> whether each holds `...` or raises NotImplementedError."""
    return {node.name: any(map(_placeholder, ast.walk(node))) for node in getattr(tree, "body", [])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (names is None or node.name in names)}


def _placeholder(node: ast.AST) -> bool:
    if isinstance(node, ast.Raise) and node.exc is not None:
        node = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(node, ast.Name) and node.id == "NotImplementedError"
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def run_cells(task: dict, budget_s: float) -> tuple[dict, dict]:
    """(namespace, report) of running the notebook's code cells within `budget_s` seconds; the report holds the per-cell
    log and, per graded function, its defining cell and whether it is a placeholder. Torch is left on one thread."""
    OUTPUTS.mkdir(exist_ok=True)
    # What a notebook prints is never shown: dropped here, so a loop that prints without end meets its time limit,
    # not the runner's output cap.
    sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__, "grader": OfflineGrader()}
    report: dict = {"read_error": None, "cells": [], "functions": {}, "skipped_defs": {}}
    try:
        cells = code_cells(SCRATCH / task["notebook"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report["read_error"] = f"{type(exc).__name__}: {exc}"[:500]
        return namespace, report
    skip_tags = set(task.get("skip_tags", []))
    skip_patterns = [re.compile(p, re.MULTILINE) for p in task.get("skip_patterns", [])]
    graded = set(task["functions"])
    deadline = clock() + budget_s
    for code_index, (source, tags, label) in enumerate(cells, 1):
        entry = {"cell": code_index, "label": label, "first_line": first_line(source), "status": "ran", "message": ""}
        report["cells"].append(entry)
        for name in set(re.findall(r"^def\s+(\w+)\s*\(", source, flags=re.MULTILINE)) & graded:
            report["functions"].setdefault(name, {})["cell"] = entry  # the last cell that defines it
        tagged = skip_tags & tags
        if tagged:
            entry.update(status="skipped", message=f"tagged {', '.join(sorted(tagged))}")
            for name in skipped_names(source):
                report["skipped_defs"].setdefault(name, f"{label} (`{entry['first_line']}`)")
            continue
        if any(p.search(source) for p in skip_patterns):
            entry.update(status="skipped", message="otter's own cell")
            continue
        # Tracebacks name the cell as the report does (In [n], as Jupyter shows it), unless an earlier cell of this
        # notebook has that name (linecache keeps the names of a warm process's earlier runs: not asked).
        unique = [c["label"] for c in report["cells"]].count(label) == 1
        filename = f"<{label}>" if unique else f"<code cell {code_index}>"
        # IPython-only lines (%magic, !shell) are not Python: blanked, keeping line numbers.
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        try:
            tree = ast.parse(source, filename)
            code = compile(tree, filename, "exec")
        except SyntaxError as exc:
            entry.update(status="syntax error", message=f"line {exc.lineno}: {exc.msg}")
            continue
        for name, marked in placeholder_functions(tree, graded).items():
            report["functions"].setdefault(name, {})["placeholder"] = marked
        remaining = max(deadline - clock(), 0.5)
        limit = time_limit(min(float(task["cell_timeout_s"]), remaining), wall_s=remaining)
        try:
            with limit:
                exec(code, namespace)
        except GradingTimeout as exc:
            entry.update(status="timed out", message=f"stopped after {exc.describe(limit)}")
        except BaseException as exc:  # the notebook goes on after a failing cell, as the student saw it
            entry.update(status="raised", message=short_exception(exc) + skipped_rule(exc, report, "this cell"))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)  # the notebook may have asked for more
    return namespace, report


def code_cells(path) -> list[tuple[str, set[str], str]]:
    """(source, tags, label) of each code cell of the notebook file `path`, the label as Jupyter shows the cell (In
    [12] when the notebook was saved after running it); OSError, ValueError, KeyError or TypeError if unreadable."""
    with open(path, encoding="utf-8") as fh:
        cells = [c for c in json.load(fh)["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    facts = []
    for index, cell in enumerate(cells, 1):
        source, count = cell.get("source", ""), cell.get("execution_count")
        tags = cell.get("metadata", {}).get("tags", []) if isinstance(cell.get("metadata"), dict) else []
        facts.append(("".join(source) if isinstance(source, list) else str(source),
                      set(map(str, tags)) if isinstance(tags, list) else set(),
                      f"cell [{count}]" if type(count) is int else f"code cell {index} (not run when saved)"))
    return facts


def skipped_names(source: str) -> list[str]:
    """Names a cell binds at its top level: def, class, assignment and import (read, never run)."""
    names = [a or b for a, b in re.findall(r"^(?:def|class)\s+(\w+)|^(\w+)\s*=[^=]", source, flags=re.MULTILINE)]
    for module, alias in re.findall(r"^import\s+([\w.]+)(?:\s+as\s+(\w+))?", source, flags=re.MULTILINE):
        names.append(alias or module.split(".")[0])
    for imported in re.findall(r"^from\s+[\w.]+\s+import\s+\(?([\w\s,]+)", source, flags=re.MULTILINE):
        names += [part.split(" as ")[-1].strip() for part in imported.split(",") if part.strip()]
    return [n for n in names if n.isidentifier()]


def skipped_rule(exc: BaseException, report: dict, who: str) -> str:
    """For a NameError whose name only a skip-grading cell defines: where it is, and what to do."""
    missing = getattr(exc, "name", None) if isinstance(exc, NameError) else None
    where = report.get("skipped_defs", {}).get(missing) if missing else None
    if not where:
        return ""
    return (f"; `{missing}` is defined in {where}, a cell tagged skip-grading, which the grader does not run: "
            f"{who} must not use anything defined there, so move it to a cell without that tag")


def convert(obj):
    """A returned value as an ndarray, for the types the grader accepts; None otherwise."""
    if type(obj) is np.ndarray:
        return obj
    if isinstance(obj, np.generic) or type(obj) in (bool, int, float):
        return np.asarray(obj)
    torch = sys.modules.get("torch")
    return obj.detach().cpu().numpy() if torch is not None and type(obj) is torch.Tensor else None


def argument(spec: str, inputs: dict):
    """'kind:key' -> the input `key` as a numpy array, torch tensor or Python int."""
    kind, key = spec.split(":", 1)
    if kind == "array":
        return inputs[key].copy()
    if kind == "tensor":
        import torch
        return torch.from_numpy(inputs[key].copy())
    if kind == "int":
        return int(inputs[key])
    raise ValueError(f"unknown argument kind {kind!r}")


def call_and_record(rec: Recorder, call: dict, inputs: dict, namespace: dict, report: dict, timeout_s: float,
                    wall_s: float | None = None) -> None:
    """Call `call`'s function on the case's `inputs` under a time limit; record its outputs or why they are missing."""
    name, outputs = call["function"], call["outputs"]
    info = report["functions"].get(name, {})
    placeholder, why, value, fn, cell = info.get("placeholder", False), "", None, namespace.get(name), info.get("cell")
    try:
        if not callable(fn):  # which cell should have defined it, and what happened to it
            why = (f"`{name}` is not defined: no code cell defines it (was the cell deleted or the function renamed?)"
                   if cell is None else f"`{name}` is not defined after running the notebook: {cell['label']} "
                   f"(`{cell['first_line']}`) {cell['status']}{': ' if cell['message'] else ''}{cell['message']}")
        else:
            args = [argument(a, inputs) for a in call.get("args", [])]
            kwargs = {k: argument(v, inputs) for k, v in call.get("kwargs", {}).items()}
            limit = time_limit(timeout_s, wall_s)
            with limit:
                value = fn(*args, **kwargs)
    except GradingTimeout as exc:
        why = f"`{name}` did not return within {exc.describe(limit)}{'' if exc.wall else ' (an endless loop?)'}"
    except NotImplementedError as exc:
        why = f"not attempted: `{name}` raises NotImplementedError({str(exc)[:200]!r})"
    except BaseException as exc:
        why = (f"not attempted: `{name}` still has a `...` placeholder and raised {short_exception(exc)}" if placeholder
               else f"`{name}` raised {short_exception(exc)}{skipped_rule(exc, report, 'a graded function')}")
    if not why and (value is None or value is Ellipsis):
        why = (f"not attempted: `{name}` still has a `...` placeholder and returned {value!r}" if placeholder
               else f"`{name}` returned {value!r}; it must return a value (did you forget `return`?)")
    for quantity, index in outputs.items():
        fits = not why and (index is None or isinstance(value, tuple) and len(value) > index)
        if not fits:
            what = f"a tuple of {len(value)}" if isinstance(value, tuple) else f"a {type(value).__name__}"
            rec.meta["errors"][quantity] = why or (
                f"`{name}` returned {what}; expected a tuple of {len(outputs)} ({', '.join(outputs)})")
        rec.record(quantity, (value if index is None else value[index]) if fits else None, convert=convert)


def main() -> None:
    task = load_task()
    started = clock()
    budget = float(task.get("budget_s", 60.0))
    namespace, report = run_cells(task, budget * (1 - CALLS_SHARE))
    save(OUTPUTS / "notebook.json", report)
    if report["read_error"]:
        return
    for case in task["cases"]:
        rec = Recorder(case["name"])
        inputs = load_arrays(case["inputs"])
        for call in task["calls"]:
            # A quarter of what is left, at most, so calls that wait (and use no CPU) never run the process
            # past its time limit: each later call still has its turn.
            quarter = max((budget - (clock() - started)) / 4, 0.5)
            call_and_record(rec, call, inputs, namespace, report, min(float(task["call_timeout_s"]), quarter), quarter)
        rec.write()


if __name__ == "__main__":
    main()
