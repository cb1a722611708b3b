"""The code's layout: no import circles (function-level imports included), short modules, one name per module.

Read from the source with `ast`, never by importing it. handout/ is a generated copy of gradelib/ and is left
out. Each check runs once per top-level package.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from support import REPO

PACKAGES = ("gradelib", "autograder")
MAX_MODULE_LINES = 500


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages (a package is its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The dotted name a relative `from` import in `module` refers to."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` imports anywhere in its file: at the top, in a function, under a
    condition."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:  # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {module: imports_of(module, path, set(files)) for module, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules (Tarjan), as one circle through it, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # recursive: the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def circle_through(group: list[str], graph: dict[str, set[str]]) -> str:
    """'a -> b -> a': a shortest import path from the group's first module back to it, for the message."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return " -> ".join(paths[v] + [start])
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return " -> ".join(group)


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert circle_through(["a", "b", "c"], graph) == "a -> b -> c -> a"
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_and_relative_imports_are_read(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(
        "from . import sibling\nfrom .other import name\n\ndef f():\n    from ..top import deep\n    import x.y\n"
    )
    known = {"pkg.sub.sibling", "pkg.sub.other", "pkg.top.deep", "x.y"}
    assert imports_of("pkg.sub.mod", path, known) == known


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    graph = import_graph()
    found = [g for g in cycles(graph) if g[0].split(".")[0] == package]
    assert not found, "import circles:\n" + "\n".join(f"  {circle_through(g, graph)}" for g in found)


# The layers, lowest first: a module imports from its own layer and those below it, never from one above (the kit,
# gradelib, from nothing of the course's; the runner, isolation, from no grading; the oracle from no fixture maker
# and no reference model). A module not in a named package is in the top layer, `autograder` itself.
LAYERS = ("gradelib", "autograder.isolation", "autograder.oracle", "autograder.grading", "autograder.fixturegen",
          "autograder.reference", "autograder.batch", "autograder.tools", "autograder.platforms", "autograder")
# Imports that point up, each with why: the model oracle loads a checkpoint of the reference
# model's class, which lives with its training (reference/), above the oracle.
UPWARD = {("autograder.oracle.oracles", "autograder.reference.model")}


def layer(module: str) -> int:
    return next(i for i, name in enumerate(LAYERS) if module == name or module.startswith(f"{name}."))


def upward(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for each import of `graph` from a module to one of a higher layer."""
    return sorted(f"{a} -> {b}" for a, found in graph.items() for b in found if layer(b) > layer(a))


def test_the_layer_rule_finds_an_import_that_points_up():
    graph = {"autograder.isolation.install": {"autograder.grading.rubric_check", "gradelib.safeio"},
             "autograder.batch.cli": {"autograder.grading.rubric_check"}, "gradelib.grade": {"autograder.batch.pool"}}
    assert upward(graph) == ["autograder.isolation.install -> autograder.grading.rubric_check",
                             "gradelib.grade -> autograder.batch.pool"]


def test_layers_only_point_down():
    graph = import_graph()
    up = upward(graph)
    assert [f"{a} -> {b}" for a, b in sorted(UPWARD) if b not in graph[a]] == [], "UPWARD lists an import gone"
    assert up == sorted(f"{a} -> {b}" for a, b in UPWARD), f"imports that point up a layer ({LAYERS}): {up}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_500_lines(package):
    long = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in module_files().items()
            if m.split(".")[0] == package}
    over = sorted((n, m) for m, n in long.items() if n > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines: " + ", ".join(f"{m} ({n})" for n, m in over)


@pytest.mark.parametrize("package", PACKAGES)
def test_module_names_are_unique_and_each_module_says_what_it_holds(package):
    """An empty __init__.py only marks a package and needs no docstring."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for module, path in module_files().items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name[path.stem].append(module)
    twice = {n: ms for n, ms in by_name.items() if len(ms) > 1 and any(m.split(".")[0] == package for m in ms)}
    assert not twice, f"module names used twice across {PACKAGES}: {twice}"
    trees = {
        m: ast.parse(p.read_text(encoding="utf-8")) for m, p in module_files().items() if m.split(".")[0] == package
    }
    silent = [m for m, tree in trees.items() if tree.body and not (ast.get_docstring(tree) or "").strip()]
    assert not silent, f"modules without a docstring saying what they hold: {silent}"


# The student kit (gradelib/, copied into the handout) grades and runs code in a plain child with limits; the
# isolation that holds hostile code is the course grader's (autograder/isolation/) and never ships.
ISOLATION_IMPORTS = {"ctypes", "fcntl", "pwd", "grp", "autograder"}
ISOLATION_WORDS = re.compile(r"landlock|seccomp|bwrap|bubblewrap|prctl|setuid|setgroups|cgroup", re.IGNORECASE)
KIT_MAX_LINES = 5000


def kit_files() -> list[Path]:
    return sorted((REPO / "gradelib").rglob("*.py"))


def test_the_student_kit_holds_no_isolation_code():
    found = []
    for path in kit_files():
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(REPO)}: import {n}" for n in names if n.split(".")[0] in ISOLATION_IMPORTS]
        code = "\n".join(line.split("#")[0] for line in text.splitlines())  # what runs, not what a comment says
        found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in ISOLATION_WORDS.finditer(code)]
    assert found == [], found


def test_the_student_kit_is_at_most_5000_lines():
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in kit_files())
    assert lines <= KIT_MAX_LINES, f"the student kit is {lines} lines of Python"


MAX_FUNCTION_LINES = 60


def long_functions(module: str, tree: ast.AST) -> dict[str, int]:
    """'module.Class.function' -> lines (from its `def` to its last line), for each function over the limit,
    nested ones included."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}.{getattr(child, 'name', '')}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[name] = lines
                visit(child, name)
            else:
                visit(child, name if isinstance(child, ast.ClassDef) else prefix)

    visit(tree, module)
    return found


def test_the_length_rule_counts_from_the_def_to_the_last_line_and_sees_methods_and_nested_functions():
    body = "\n".join(["    x = 1"] * (MAX_FUNCTION_LINES - 1))
    deeper = "\n".join(["        x = 1"] * MAX_FUNCTION_LINES)
    source = f"def fits():\n{body}\n\nclass C:\n    def over(self):\n{deeper}\n"
    source += f"\ndef outer():\n    def inner():\n{deeper}\n"
    assert long_functions("m", ast.parse(source)) == {
        "m.C.over": MAX_FUNCTION_LINES + 1, "m.outer": MAX_FUNCTION_LINES + 2, "m.outer.inner": MAX_FUNCTION_LINES + 1}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_over_60_lines(package):
    found = {}
    for module, path in module_files().items():
        if module.split(".")[0] == package:
            found |= long_functions(module, ast.parse(path.read_text(encoding="utf-8")))
    over = sorted(f"{name} ({n})" for name, n in found.items())
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them): " + ", ".join(over)
