"""`make mutants`: the grader's power, measured by single-point mutants of the reference attention.py.

Each mutant changes one point of solutions/attention.py's forward or backward: mutmut's own mutation
operators (numbers, names, binary and comparison operators, arguments, assignments; used as a library)
plus tensor operators (`@` -> `*`, a dropped .transpose()/.sum()/.max(), another axis, a deleted
statement). An oracle that shares no code with the grader (the equations in float64, the gradients
by torch autograd, on every case's inputs) says which rubric lines the mutant should lose, by the
rubric file's rule for edge lines; the course grader grades it. The report counts the mutants killed
(points lost where the oracle finds a line wrong), the survivors (full marks while wrong, with their
diffs), the false kills (points lost by code the oracle finds right on every case), the mutants whose
first failed line is the oracle's, and the points each loses against the oracle's.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import numpy as np
import torch
from mutmut.mutation.file_mutation import deep_replace
from mutmut.mutation.mutators import mutation_operators

from autograder.tools.measured import host_record
from gradelib import rubric

REPO = Path(__file__).resolve().parents[2]
QUANTITIES = ("Q", "K", "V", "A_w", "A_sig", "X_new", "dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv", "dLdX")
MUTATED = ("forward", "backward")


@dataclass
class Mutant:
    name: str  # operator@line, unique with its index
    text: str
    diff: str
    expected: set[tuple[str, str]] = field(default_factory=set)  # (rubric line, visibility) the oracle fails
    graded: set[tuple[str, str]] = field(default_factory=set)
    score: float | None = None
    first_line: str = ""  # the grader's first failed line, rubric order


# --- mutants ---------------------------------------------------------------------------------------------

def _tensor_operators(node: cst.CSTNode):
    """The operators mutmut does not know: tensor algebra slips."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        yield node.with_changes(operator=cst.Multiply())
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        attr = node.func.attr.value
        if attr in ("transpose", "sum", "max", "exp"):
            yield node.func.value  # the call dropped
        for i, arg in enumerate(node.args):  # another axis
            if isinstance(arg.value, (cst.Integer, cst.UnaryOperation)) and attr in ("transpose", "sum", "max"):
                text = cst.Module([]).code_for_node(arg.value)
                for other in {"-1": ("0", "1"), "1": ("0", "-1"), "2": ("0", "-2"), "0": ("1", "-1")}.get(text, ()):
                    args = list(node.args)
                    args[i] = arg.with_changes(value=cst.parse_expression(other))
                    yield node.with_changes(args=args)
    if isinstance(node, cst.SimpleStatementLine):
        yield node.with_changes(body=[cst.Pass()])  # a deleted statement


def mutants(source: str, functions: tuple[str, ...] = MUTATED) -> list[Mutant]:
    """Every single-point mutant of the `functions` of `source` (a name, or Class.method for one class's method),
    that still compiles and differs."""
    module = cst.parse_module(source)
    wrapper = cst.MetadataWrapper(module)
    positions = wrapper.resolve(cst.metadata.PositionProvider)
    module = wrapper.module
    targets = [f for f, qualname in _functions(module) if qualname in functions or f.name.value in functions]
    found: dict[str, Mutant] = {}
    for function in targets:
        for node in _walk(function.body):
            if _is_docstring(node, function):
                continue
            operators = [op for kind, op in mutation_operators if isinstance(node, kind)] + [_tensor_operators]
            for op in operators:
                for new in op(node):
                    text = deep_replace(module, node, new).code
                    if text == source or text in found:
                        continue
                    try:
                        compile(text, "<mutant>", "exec")
                    except SyntaxError:
                        continue
                    line = positions[node].start.line if node in positions else 0
                    diff = "".join(difflib.unified_diff(source.splitlines(True), text.splitlines(True), n=0))
                    found[text] = Mutant(f"{op.__name__}@{line}#{len(found)}", text, diff)
    return list(found.values())


def _functions(module: cst.Module):
    """(function, its name or Class.method) for the module's functions and its classes' methods, in source order."""
    for node in module.body:
        if isinstance(node, cst.FunctionDef):
            yield node, node.name.value
        elif isinstance(node, cst.ClassDef):
            yield from (
                (f, f"{node.name.value}.{f.name.value}") for f in node.body.body if isinstance(f, cst.FunctionDef)
            )


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _is_docstring(node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    body = function.body.body
    return bool(body) and isinstance(node, (cst.SimpleStatementLine, cst.BaseString, cst.Expr)) and (
        node is body[0] or any(node is c for c in _walk(body[0]))) and isinstance(
        body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr)


# --- the oracle --------------------------------------------------------------------------------------------

def cases(fixtures: Path) -> list[dict]:
    out = []
    for vis in ("public", "hidden"):
        for entry in json.loads((fixtures / "attention" / vis / "cases.json").read_text()):
            with np.load(fixtures / "attention" / vis / f"{entry['name']}.npz") as data:
                inputs = {k: data[k] for k in ("X", "W_k", "W_q", "W_v", "dLdXnew")}
            out.append({"vis": vis, "edge": entry.get("edge", ""), "dtype": entry["dtype"], "inputs": inputs})
    return out


def oracle(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Forward by the equations and backward by torch autograd, in float64."""
    X, W_k, W_q, W_v = (torch.from_numpy(inputs[k]).double().requires_grad_(True) for k in ("X", "W_k", "W_q", "W_v"))
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    for t in (Q, K, V):
        t.retain_grad()
    A_w = Q @ K.transpose(1, 2)
    T = X.shape[1]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    A_sig = torch.softmax((A_w / math.sqrt(W_k.shape[1])).masked_fill(~allowed, float("-inf")), dim=-1)
    X_new = A_sig @ V
    X_new.backward(torch.from_numpy(inputs["dLdXnew"]).double())
    values = {"Q": Q, "K": K, "V": V, "A_w": A_w, "A_sig": A_sig, "X_new": X_new, "dLdQ": Q.grad, "dLdK": K.grad,
              "dLdV": V.grad, "dLdWq": W_q.grad, "dLdWk": W_k.grad, "dLdWv": W_v.grad, "dLdX": X.grad}
    return {k: v.detach().numpy() for k, v in values.items()}


def judge(text: str, all_cases: list[dict], tolerance: dict) -> list[dict]:
    """Per case, quantity -> how it fails: '' (right), 'raise', 'nan', 'non-finite' (inf) or 'wrong'."""
    module = types.ModuleType("mutant")
    try:
        exec(compile(text, "<mutant>", "exec"), module.__dict__)  # the instructor's own mutants, not students'
        attention = module.Attention
    except Exception:  # noqa: BLE001
        return [{**c, "fails": dict.fromkeys(QUANTITIES, "raise")} for c in all_cases]
    return judge_class(attention, all_cases, tolerance)


def judge_class(attention, all_cases: list[dict], tolerance: dict) -> list[dict]:
    """`judge` of an Attention class run in this process, against the oracle with the rubric's `tolerance`: per case,
    `fails` (quantity -> '', 'raise', 'nan', 'non-finite' or 'wrong') and `slips` (what a wrong value is, see
    `_slip`). Backward is judged when forward stored what it reads, even if forward raised after that."""
    judged = []
    for case in all_cases:
        t = {k: torch.from_numpy(v) for k, v in case["inputs"].items()}
        got: dict = {}
        try:
            att = attention(t["W_k"], t["W_q"], t["W_v"])
        except Exception:  # noqa: BLE001
            judged.append({**case, "fails": dict.fromkeys(QUANTITIES, "raise")})
            continue
        try:
            got["X_new"] = att.forward(t["X"])
        except Exception:  # noqa: BLE001
            pass
        got.update({q: getattr(att, q, None) for q in ("Q", "K", "V", "A_w", "A_sig")})
        if all(isinstance(got[q], torch.Tensor) for q in ("Q", "K", "V", "A_sig")):  # what backward reads
            try:
                got["dLdX"] = att.backward(t["dLdXnew"])
            except Exception:  # noqa: BLE001
                pass
            got.update({q: getattr(att, q, None) for q in QUANTITIES if q.startswith("dLd") and q != "dLdX"})
        expected, tol = oracle(case["inputs"]), tolerance[case["dtype"]]
        fails = {q: _how(got.get(q), expected[q], t["X"].dtype, tol) for q in QUANTITIES}
        dk = case["inputs"]["W_k"].shape[1]
        judged.append({**case, "fails": fails,
                       "slips": {q: _slip(got[q], expected[q], dk) if fails[q] not in ("", "raise") else ""
                                 for q in QUANTITIES}})
    return judged


def _slip(value: torch.Tensor, e: np.ndarray, dk: int) -> str:
    """A wrong value as a transformation of the expected one: its finite entries the expected ones times a power of
    Dk ("Dk^-0.5"), or times another number (two entries at least); '' if neither."""
    g = value.detach().double().numpy()
    if g.shape != e.shape:
        return ""
    finite = np.isfinite(g) & (np.abs(e) > 1e-6 * max(1.0, np.abs(e).max()))
    if not finite.any():
        return ""
    ratio = g[finite] / e[finite]
    r = float(np.median(ratio))
    if not np.allclose(ratio, r, rtol=1e-3, atol=0) or abs(r - 1) < 1e-3:
        return ""
    return next((f"Dk^{p}" for p in (-1, -0.5, 0.5, 1) if abs(r - dk**p) <= 1e-3 * dk**p),
                f"{r:.4g}" if finite.sum() > 1 else "")


def _how(value, e: np.ndarray, dtype, tol: dict) -> str:
    if type(value) is not torch.Tensor:
        return "raise"
    if tuple(value.shape) != e.shape:
        return "wrong"
    g = value.detach().double().numpy()
    if np.isnan(g).any():
        return "nan"
    if not np.isfinite(g).all():
        return "non-finite"
    if value.dtype != dtype:
        return "wrong"
    ok = np.all(np.abs(g - e) <= tol["atol"] * max(1.0, np.abs(e).max()) + tol["rtol"] * np.abs(e))
    return "" if ok else "wrong"


def failing_lines(problem, judged: list[dict]) -> set[tuple[str, str]]:
    """The rubric file's rule: an ordinary line fails when an ordinary case of the set gets one of its quantities
    wrong. An edge line fails for a quantity wrong on one of its cases unless the same kind of failure, or the same
    slip (`slips`: the same transformation of the expected value), shows for it on an ordinary case of the same dtype
    (never a NaN on the stability line); and when all it has is such forgiven failures, for having no case on which
    over a quarter of its quantities were produced, one of them right."""
    taken = {g.edge for g in problem.groups if g.edge}
    failing = set()
    for g in problem.groups:
        for vis in g.visibilities:
            ordinary = [c for c in judged if c["vis"] == vis and c["edge"] not in taken]
            if not g.edge:
                if any(c["fails"][q] for c in ordinary for q in g.quantities):
                    failing.add((g.id, vis))
                continue
            mine = [c for c in judged if c["vis"] == vis and c["edge"] == g.edge]
            forgiven = False
            for c in mine:
                for q in (q for q in g.quantities if c["fails"][q]):
                    kind = c["fails"][q]
                    same = ("nan", "non-finite") if kind in ("nan", "non-finite") else (kind,)
                    slip = c.get("slips", {}).get(q, "")
                    if (kind == "nan" and g.stability) or not any(
                            o["dtype"] == c["dtype"] and (o["fails"][q] in same or o.get("slips", {}).get(q) == slip
                                                          != "") for o in ordinary):
                        failing.add((g.id, vis))
                    forgiven = True
            produced = [[q for q in g.quantities if c["fails"][q] != "raise"] for c in mine]
            if forgiven and not any(4 * len(p) > len(g.quantities) and any(not c["fails"][q] for q in p)
                                    for c, p in zip(mine, produced)):
                failing.add((g.id, vis))
    return failing


# --- grading and the report ---------------------------------------------------------------------------------

def grade(mutant: Mutant, fixtures: Path, timeout_s: float = 30.0) -> None:
    from autograder.batch.worker import grade_hidden
    from gradelib.runner import Limits

    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        sub = Path(tmp) / "handin"
        sub.mkdir()
        (sub / "attention.py").write_text(mutant.text)
        result = grade_hidden(sub, case_root=fixtures, visibilities=("public", "hidden"), only=["attention"],
                              limits=Limits(timeout_s=timeout_s, memory_mb=3072))
    mutant.score = result.score
    mutant.graded = {(t.line, t.visibility) for t in result.tests if not t.passed}
    mutant.first_line = next((t.line for t in result.tests if not t.passed), "")


def lost(problem, failing: set[tuple[str, str]]) -> float:
    return sum(problem.share(g, v) for g in problem.groups for v in g.visibilities if (g.id, v) in failing)


def verdict(problem, m: Mutant) -> str:
    """equivalent (right everywhere, full marks), false kill, killed (exactly the oracle's lines, or other
    lines: 'killed, other lines'), or survivor."""
    if not m.expected:
        return "equivalent" if not m.graded else "false kill"
    if not m.graded:
        return "survivor"
    return "killed" if m.graded == m.expected else "killed, other lines"


def first_expected(problem, expected: set[tuple[str, str]]) -> str:
    order = [(g.id, v) for g in problem.groups for v in g.visibilities]
    return next((line for line, v in order if (line, v) in expected), "")


def report(problem, graded: list[Mutant]) -> dict:
    counts: dict[str, int] = {}
    for m in graded:
        counts[verdict(problem, m)] = counts.get(verdict(problem, m), 0) + 1
    wrong = [m for m in graded if m.expected]
    return {
        "mutants": len(graded), **counts,
        "first_line_right": sum(m.first_line == first_expected(problem, m.expected) for m in wrong),
        "first_line_of": len(wrong),
        "points_lost_as_the_oracle_says": sum(abs(lost(problem, m.graded) - lost(problem, m.expected)) < 1e-9
                                              for m in graded),
    }


def sample(problem, found: list[Mutant], all_cases: list[dict], per_line: int) -> list[Mutant]:
    """`per_line` mutants for each rubric line the oracle fails them on (those failing the fewest other lines,
    so each line is tested by a slip of its own), and every equivalent one: a fixed set that covers every line,
    small enough for the test suite."""
    picked: list[Mutant] = []
    for m in found:
        m.expected = failing_lines(problem, judge(m.text, all_cases, problem.tolerance))
    for g in problem.groups:
        fails = [m for m in found if any(line == g.id for line, _ in m.expected) and m not in picked]
        picked += sorted(fails, key=lambda m: len(m.expected))[:per_line]
    return picked + [m for m in found if not m.expected]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--source", type=Path, default=REPO / "solutions" / "attention.py")
    ap.add_argument("--limit", type=int, default=0, help="grade only the first N mutants (0: all)")
    ap.add_argument("--names", nargs="*", default=None, help="grade only the mutants of these names")
    ap.add_argument("--pick", type=int, default=0, metavar="N",
                    help="judge every mutant and print a sample: N per rubric line, and every equivalent one")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "mutants.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    started, load = time.monotonic(), os.getloadavg()
    problem = rubric.load()["attention"]
    all_cases = cases(args.fixtures)
    found = mutants(args.source.read_text())
    if args.pick:
        print("\n".join(m.name for m in sample(problem, found, all_cases, args.pick)))
        return 0
    chosen = [m for m in found if args.names is None or m.name in args.names]
    chosen = chosen[: args.limit] if args.limit else chosen
    print(f"mutants: {len(found)} of {args.source.name}, grading {len(chosen)}", flush=True)
    for i, m in enumerate(chosen, 1):
        m.expected = failing_lines(problem, judge(m.text, all_cases, problem.tolerance))
        grade(m, args.fixtures)
        said = verdict(problem, m)
        print(f"[{i}/{len(chosen)}] {m.name}: {said}, {m.score:.2f} / {problem.points:.2f} "
              f"(oracle {problem.points - lost(problem, m.expected):.2f})", flush=True)
        if said in ("survivor", "false kill", "killed, other lines"):
            print("   " + m.diff.replace("\n", "\n   ").rstrip())
            print(f"   oracle fails {sorted(m.expected)}; grader fails {sorted(m.graded)}")
    summary = report(problem, chosen)
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m autograder.tools.mutants " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.write_text(json.dumps({"recorded": host_record(command.strip(), load), "found": {"attention": len(found)},
                                    "seconds": round(time.monotonic() - started), "summary": {"attention": summary},
                                    "mutants": [
        {"name": m.name, "verdict": verdict(problem, m), "score": m.score, "diff": m.diff,
         "expected": sorted(m.expected), "graded": sorted(m.graded)} for m in chosen]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
