"""The student loop wherever students work: macOS and Windows (simulated: what their Python lacks is made
absent, tests/platform_sim.py), the other Pythons students bring (3.10, 3.12, 3.13: `make pythons`), and
nothing Linux-only where the student side can reach it at import time or unguarded (read as source)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import FIXTURES, HANDOUT, REPO, SOLUTIONS

pytestmark = pytest.mark.pythons

SIM = Path(__file__).with_name("platform_sim.py")
NB1 = "01_mlm_and_next_token.ipynb"
NOTEBOOKS = (NB1, "02_attention_and_masks.ipynb", "03_language_model.ipynb")
RUNID, EPOCH = "20260101-120000", "3"
# A problem's header in the report: its score, then how many of its lines pass (passing lines are folded).
ROW = re.compile(r"^(?P<problem>[a-z_]+) (?P<got>[\d.]+) / (?P<max>[\d.]+): (?:all \d+|\d+ of \d+) lines pass$")


def solved_handout(dest: Path, notebooks: tuple[str, ...] = NOTEBOOKS, run: bool = True) -> Path:
    """The handout as a student leaves it who solved everything and trained notebook 3 (the reference's files)."""
    shutil.copytree(HANDOUT, dest, ignore=shutil.ignore_patterns("experiments", "handin.tar", "__pycache__"))
    shutil.copyfile(SOLUTIONS / "attention.py", dest / "attention.py")
    for name in notebooks:
        shutil.copyfile(SOLUTIONS / name, dest / name)
    if run:
        folder = dest / "experiments" / RUNID
        folder.mkdir(parents=True)
        lm = FIXTURES / "lm"
        for src, name in (
            ("reference_model.pt", f"model_{EPOCH}.pt"),
            ("reference_predictions.npy", f"predictions_test_{EPOCH}.npy"),
            ("reference_generated.npy", f"generated_{EPOCH}.npy"),
            ("reference_generated.txt", f"generated_{EPOCH}.txt"),
        ):
            shutil.copyfile(lm / src, folder / name)
    return dest


def rows_of(stdout: str) -> list[dict]:
    return [m.groupdict() for m in map(ROW.match, stdout.splitlines()) if m]


def simulated(
    target: str, folder: Path, *entry: str, timeout: float = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SIM), target, str(folder), "--", *entry], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def full_public_marks(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rows_of(proc.stdout)
    assert rows and "[hidden]" not in proc.stdout, proc.stdout[-3000:]
    assert all(r["got"] == r["max"] for r in rows), [r for r in rows if r["got"] != r["max"]]
    assert "Traceback" not in proc.stdout + proc.stderr and "internal grader error" not in proc.stdout
    return rows


# ---------------------------------------------------------------- macOS and Windows, simulated

# Each platform grades once (one warm process per grading, as on Linux): macOS the folder as
# `python autograder.py` reads it, Windows the handin.tar `make handin`'s entry point packs; both pack it.
@pytest.mark.parametrize("target", ["darwin", "win32"])
def test_the_solved_handout_is_packed_and_gets_full_public_marks_at_the_portable_level(tmp_path, target):
    folder = solved_handout(tmp_path / "handout")
    packed = simulated(
        target, folder, "-m", "gradelib.handin", "--runid", RUNID, "--epoch", EPOCH, "--out", "handin.tar"
    )
    assert packed.returncode == 0, packed.stdout + packed.stderr
    assert (folder / "handin.tar").is_file() and "Traceback" not in packed.stderr
    proc = simulated(target, folder, "autograder.py", *(("--handin", "handin.tar") if target == "win32" else ()))
    rows = full_public_marks(proc)
    assert {r["problem"] for r in rows} == {"attention", "losses", "masks", "prediction", "generation"}
    assert "Your code ran in a separate process with time, CPU, output and memory limits." in proc.stdout, proc.stdout[
        -2000:
    ]


# The kernel's side of the notebooks' checks, on its own (no test helper of the course's): run the solved
# notebook's code cells as a kernel would before its checks, then every grader.check cell of the handout's
# notebook (the masters hold their tests as plain asserts instead).
CHECKS = r"""
import json, re
from pathlib import Path
from gradelib.notebook_check import Notebook
from gradelib.problems.handin_runs import OTTER_CELL
out = {{}}
for name in {names!r}:
    ns = {{"__name__": "__main__"}}
    for cell in json.loads(Path({solutions!r}, name).read_text())["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code" or "skip-grading" in cell["metadata"].get("tags", []):
            continue
        if re.search(OTTER_CELL, text, re.MULTILINE) or "BEGIN TEST CONFIG" in text:
            continue
        exec(compile(text, "<cell>", "exec"), ns)
    questions = [re.search(r'grader\.check\("(\w+)"\)', "".join(c["source"])).group(1)
                 for c in json.loads(Path({handout!r}, name).read_text())["cells"]
                 if c["cell_type"] == "code" and "".join(c["source"]).startswith("grader.check(")]
    grader = Notebook(name)
    out[name] = [[q, r.passed, r.message] for q in questions for r in grader.check(q, global_env=ns).test_case_results]
print("CHECKS" + json.dumps(out))
"""


def check_results(proc: subprocess.CompletedProcess) -> dict[str, list]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("CHECKS"))
    return json.loads(line[len("CHECKS"):])


@pytest.mark.parametrize("target", ["darwin", "win32"])
def test_every_grader_check_cell_passes_on_the_solved_notebooks(tmp_path, target):
    folder = solved_handout(tmp_path / "handout", run=False)
    results = check_results(
        simulated(target, folder, "-c", CHECKS.format(solutions=str(SOLUTIONS), handout=str(HANDOUT), names=NOTEBOOKS))
    )
    assert set(results) == set(NOTEBOOKS)
    for name, checks in results.items():
        assert checks, name
        assert all(ok for _q, ok, _m in checks), [(q, m) for q, ok, m in checks if not ok]


def test_the_simulation_makes_absent_what_it_says():
    """The simulated systems lack what the real ones lack: a test that passes under a simulation that
    removed nothing would prove nothing."""
    probe = ("import os, signal, ctypes, sys\n"
             "missing = [n for n in ('O_NOFOLLOW', 'fork', 'geteuid') if hasattr(os, n)]\n"
             "missing += [n for n in ('setitimer', 'SIGALRM') if hasattr(signal, n)]\n"
             "try:\n    import fcntl\n    missing.append('fcntl')\nexcept ImportError:\n    pass\n"
             "try:\n    ctypes.CDLL(None)\n    missing.append('CDLL(None)')\nexcept TypeError:\n    pass\n"
             "try:\n    os.listdir('/proc')\n    missing.append('/proc')\nexcept FileNotFoundError:\n    pass\n"
             "print(sys.platform, missing)\n")
    proc = simulated("win32", REPO, "-c", probe, env={"PLATFORM_SIM_PRELOAD": ""})
    assert proc.stdout.strip() == "win32 []", proc.stdout + proc.stderr
    mac = ("import ctypes, os, sys\n"
           "try:\n    ctypes.CDLL(None).prctl\n    print('prctl found')\nexcept AttributeError as e:\n    print(e)\n"
           "print(sys.platform, os.path.exists('/proc/self'))\n")
    proc = simulated("darwin", REPO, "-c", mac, env={"PLATFORM_SIM_PRELOAD": ""})
    assert proc.stdout.splitlines() == ["dlsym(RTLD_DEFAULT, prctl): symbol not found", "darwin False"], proc.stdout


# ---------------------------------------------------------------- the other Pythons

def other_python(version: str) -> Path:
    exe = REPO / f".venv-py{version}" / "bin" / "python"
    if not (exe.is_file() and (REPO / f".venv-py{version}" / ".installed").is_file()):
        pytest.skip(f"no Python {version} environment here (`make pythons` makes one where pyenv or PATH has "
                    f"Python {version}); the student loop was not run under it")
    return exe


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_notebook_1_its_checks_and_make_handin_run_under_python(tmp_path, version):
    exe = other_python(version)
    folder = solved_handout(tmp_path / "handout", notebooks=(NB1,))
    said = subprocess.run([str(exe), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    assert said.stdout.strip() == str(tuple(int(x) for x in version.split("."))), said
    graded = subprocess.run([str(exe), "autograder.py", "--only", "nb1"], cwd=folder, capture_output=True, text=True,
                            timeout=600)
    rows = full_public_marks(graded)
    assert {r["problem"] for r in rows} == {"losses"} and sum(float(r["max"]) for r in rows) == pytest.approx(10.0)
    code = CHECKS.format(solutions=str(SOLUTIONS), handout=str(HANDOUT), names=(NB1,))
    checks = check_results(
        subprocess.run([str(exe), "-c", code], cwd=folder, capture_output=True, text=True, timeout=600)
    )
    assert checks[NB1] and all(ok for _q, ok, _m in checks[NB1]), checks
    packed = subprocess.run(
        [str(exe), "-m", "gradelib.handin", "--runid", RUNID, "--epoch", EPOCH, "--out", "handin.tar"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert packed.returncode == 0 and (folder / "handin.tar").is_file(), packed.stdout + packed.stderr


# ---------------------------------------------------------------- read as source

STUDENT_ENTRIES = ("gradelib.local", "gradelib.handin", "gradelib.notebook_check", "gradelib.runner.start")
LINUX_MODULES = {"fcntl", "pwd", "grp", "resource", "termios"}
LINUX_ATTRS = {
    "os": {
        "O_NOFOLLOW",
        "O_NONBLOCK",
        "O_CLOEXEC",
        "O_DIRECTORY",
        "O_PATH",
        "fork",
        "setsid",
        "killpg",
        "getuid",
        "geteuid",
        "setuid",
        "setgid",
        "setgroups",
        "chown",
        "lchown",
        "sched_getaffinity",
        "wait4",
        "mkfifo",
        "fchmod",
    },
    "signal": {
        "SIGALRM",
        "SIGPROF",
        "SIGKILL",
        "SIGXCPU",
        "SIGHUP",
        "setitimer",
        "ITIMER_REAL",
        "ITIMER_PROF",
        "alarm",
    },
    "socket": {"SO_PASSCRED", "SCM_CREDENTIALS", "SCM_RIGHTS", "send_fds", "recv_fds", "AF_UNIX"},
}
# The student kit has no Linux-only rooms (the course grader's isolation lives in autograder/isolation/): each
# of its modules may use a Linux-only name only behind a check (an `if` on the platform or on the name being
# there, or a try that catches its absence).
GUARDS = re.compile(r"is_linux|sys\.platform|os\.name|hasattr|getattr|NOFOLLOW_OPEN|supports_dir_fd|timers|platform")


def module_file(name: str) -> Path | None:
    path = REPO / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(name: str, tree: ast.Module) -> set[str]:
    """The gradelib modules `name` imports, anywhere in its source."""
    package = name if module_file(name).name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("gradelib") and module_file(m)}


def closure() -> dict[str, ast.Module]:
    seen: dict[str, ast.Module] = {}
    todo = list(STUDENT_ENTRIES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = ast.parse(module_file(name).read_text())
        todo += imported(name, seen[name]) - set(seen)
    return seen


def _import_time_nodes(tree: ast.Module):
    """Every node that runs when the module is imported: not inside a function or a lambda (a class body runs)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def linux_only_uses(tree: ast.Module, top_level_only: bool) -> list[tuple[int, str]]:
    """(line, what) of each Linux-only import or attribute, where it runs at import or anywhere."""
    out = []
    for node in (_import_time_nodes(tree) if top_level_only else ast.walk(tree)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and top_level_only:
            continue
        if isinstance(node, ast.Import) and {a.name for a in node.names} & LINUX_MODULES:
            out.append((node.lineno, "import " + ", ".join(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom) and node.module in LINUX_MODULES:
            out.append((node.lineno, f"from {node.module} import"))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.attr in LINUX_ATTRS.get(node.value.id, ())):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif (not top_level_only and isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith("/proc/")):  # a path read in a function (a constant alone reads nothing)
            out.append((node.lineno, node.value))
    return sorted(out)


def guarded_lines(tree: ast.Module, source: list[str]) -> set[int]:
    """Lines inside an `if`/`while` on the platform, a try that catches a name's or module's absence, or a
    function that returns early behind such a test."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)) and GUARDS.search(ast.unparse(node.test)):
            lines |= set(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.Try) and any(
            h.type is not None
            and re.search(r"ImportError|AttributeError|OSError|ModuleNotFoundError", ast.unparse(h.type))
            for h in node.handlers
        ):
            lines |= set(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body[:4]:  # an early return guard: `if not <platform test>: return`
                if isinstance(stmt, ast.If) and GUARDS.search(ast.unparse(stmt.test)) and any(
                        isinstance(s, ast.Return) for s in stmt.body):
                    lines |= set(range(stmt.end_lineno + 1, node.end_lineno + 1))
    return lines


def test_the_student_side_imports_nothing_linux_only_and_uses_it_only_behind_a_check():
    modules = closure()
    assert {"gradelib.local", "gradelib.runner.portable", "gradelib.safeio"} <= set(modules)
    at_import = {name: uses for name, tree in modules.items() if (uses := linux_only_uses(tree, top_level_only=True))}
    assert at_import == {}, at_import
    unguarded = {}
    for name, tree in modules.items():
        source = module_file(name).read_text().splitlines()
        guarded = guarded_lines(tree, source)
        uses = [(line, what) for line, what in linux_only_uses(tree, top_level_only=False) if line not in guarded]
        if uses:
            unguarded[name] = uses
    assert unguarded == {}, unguarded


def test_the_source_check_finds_what_it_looks_for(tmp_path):
    """The check above is not blind: a Linux-only import at module level, and an unguarded use in a function."""
    planted = ast.parse("import fcntl\nimport os\ndef f():\n    return os.O_NOFOLLOW\n"
                        "def g():\n    if hasattr(os, 'O_NOFOLLOW'):\n        return os.O_NOFOLLOW\n")
    assert linux_only_uses(planted, top_level_only=True) == [(1, "import fcntl")]
    uses = linux_only_uses(planted, top_level_only=False)
    assert [u for u in uses if u[0] not in guarded_lines(planted, [])] == [(1, "import fcntl"), (4, "os.O_NOFOLLOW")]


def test_no_child_runs_python_without_the_users_packages(tmp_path, monkeypatch):
    """A package the student's interpreter finds only through its user site (pip install --user) or PYTHONPATH
    is found by the graded run too (python -I leaves both off sys.path; start.py puts them back)."""
    from gradelib import runner
    from gradelib.runner import portable

    extra = tmp_path / "user-site"
    (extra / "only_here").mkdir(parents=True)
    (extra / "only_here" / "__init__.py").write_text("WHERE = 'user site'\n")
    monkeypatch.syspath_prepend(str(extra))
    assert str(extra) in portable.extra_paths()
    work = tmp_path / "run"
    work.mkdir()
    (work / "harness.py").write_text("import only_here\nprint('found in', only_here.WHERE)\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(extra, 0o755)
    done = runner.run(["harness.py"], work, runner.Limits(timeout_s=60))
    assert done.returncode == 0 and "found in user site" in done.log_tail, done


# ---------------------------------------------------------------- Linux, not root

def test_the_local_grader_gives_full_public_marks_to_a_linux_user_who_is_not_root():
    """A student's Linux laptop, no root: the kit's runner (a plain child with limits) grades the same."""
    from container import available, linux_user

    if available():
        pytest.skip(f"a user who is not root cannot be reproduced here: {available()}")
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="student-home-"))  # the test's own folder is root's alone
    try:
        folder = solved_handout(home / "handout")
        subprocess.run(["chown", "-R", "65534:65534", str(home)], check=True)
        with linux_user([sys.executable, "autograder.py"], env={"HOME": str(home), "TMPDIR": str(home)}) as cmd:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=folder)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    rows = full_public_marks(proc)
    assert {r["problem"] for r in rows} == {"attention", "losses", "masks", "prediction", "generation"}
    assert "Your code ran in a separate process with time, CPU, output and memory limits." in proc.stdout, proc.stdout[
        -2000:
    ]
