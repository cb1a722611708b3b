"""The static half of attention's autograd check: which lines of attention.py reach for automatic differentiation,
read from the source (nothing of it runs here); the run-time half is the child's tripwires (attention_child.py)."""

from __future__ import annotations

import ast

# Names whose use means gradients came from automatic differentiation.
AUTOGRAD_NAMES = {"autograd", "requires_grad", "requires_grad_", "enable_grad", "grad_fn", "vjp", "jvp", "jacrev",
                  "jacfwd", "hessian", "vmap", "linearize", "functorch", "_functorch", "forward_ad", "dual_level",
                  "make_dual", "unpack_dual", "_make_dual", "_unpack_dual", "scaled_dot_product_attention"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# The tests of `if __name__ == "__main__":` (either order), as ast.dump writes them.
MAIN_GUARDS = {ast.dump(ast.parse(test, mode="eval").body) for main in ("'__main__'", "u'__main__'")
               for test in (f"__name__ == {main}", f"{main} == __name__")}


def _own_backward_classes(tree: ast.Module) -> set[str]:
    """Classes of the file with a `backward` of their own (defined in the class or in a base of the file's that
    has one): calling it runs the file's code, not autograd."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    own = {name for name, node in classes.items() if any(isinstance(f, FUNCTIONS) and f.name == "backward"
                                                         for f in node.body)}
    while grew := {name for name, node in classes.items()
                   if name not in own and any(isinstance(b, ast.Name) and b.id in own for b in node.bases)}:
        own |= grew
    return own


def _bindings(tree: ast.Module) -> dict[tuple[str, str], list]:
    """("name" or "attr", name) -> the value of each binding of it: an expression, or None where it may be anything
    (an import, a parameter, a def, an except clause, a loop, one element of a tuple target...)."""
    bound: dict[tuple[str, str], list] = {}
    for node in ast.walk(tree):
        # `from torch import Tensor as sm` makes sm.backward autograd's, whatever else sm is.
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            others = [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.arg):
            others = [node.arg]
        else:
            named = isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.ExceptHandler))
            others = [node.name] if named and node.name else []
        for name in others:
            bound.setdefault(("name", name), []).append(None)
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            pairs = [(node.target, node.value if not isinstance(node, ast.AugAssign) else None)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr)):
            pairs = [(node.target, None)]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            pairs = [(i.optional_vars, None) for i in node.items if i.optional_vars is not None]
        else:
            continue
        for target, value in [(t, v) for target, value in pairs for t, v in _element_pairs(target, value)]:
            for t in ast.walk(target):
                if isinstance(t, (ast.Name, ast.Attribute)):  # an element of a tuple target gets one part of the value
                    key = ("name", t.id) if isinstance(t, ast.Name) else ("attr", t.attr)
                    bound.setdefault(key, []).append(value if t is target else None)
    return bound


def _holders_of_own_instances(tree: ast.Module, own: set[str]) -> set[tuple[str, str]]:
    """The ("name" or "attr", name) the file only ever binds to an instance of one of the `own` classes (or None),
    directly or through another such holder: `self.softmax = Softmax(dim=-1)`, `sm = self.softmax`."""
    bound, held = _bindings(tree), set()
    # A holder may be bound from another holder: grow the set until it stops changing.
    while (found := {key for key, values in bound.items() if all(
            _is_own(v, own, held) or (isinstance(v, ast.Constant) and v.value is None) for v in values)}) != held:
        held = found
    return held


def _element_pairs(target, value) -> list[tuple]:
    """`a, b = A(), B()` binds a to A() and b to B(): a tuple target and a tuple value of its length pair up."""
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in target.elts):
        return [p for t, v in zip(target.elts, value.elts) for p in _element_pairs(t, v)]
    return [(target, value)]


def _is_own(value, own: set[str], held: set[tuple[str, str]]) -> bool:
    """Whether `value` is an instance of one of the `own` classes: made right there, or read from a `held` holder."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id in own
    return (isinstance(value, ast.Name) and ("name", value.id) in held) or (isinstance(value, ast.Attribute)
                                                                            and ("attr", value.attr) in held)


def autograd_uses(source: str, main_blocks: bool = False) -> list[str]:
    """Lines of `source` that reach for automatic differentiation, as 'line N: code'. A `.backward` call is
    autograd's unless it is the file's own method (on self, on one of its classes or on an instance of one).
    A self-test under `if __name__ == "__main__":` never runs when the grader imports the file (its `else` branch
    does): it counts only with `main_blocks` (the course's grader says when a file could run it)."""
    tree = ast.parse(source)
    if not main_blocks:
        tree.body = [n for node in tree.body for n in (node.orelse if isinstance(node, ast.If)
                                                       and ast.dump(node.test) in MAIN_GUARDS else [node])]
    lines = source.splitlines()
    own = _own_backward_classes(tree)
    held = _holders_of_own_instances(tree, own)
    hits = []
    for node in ast.walk(tree):
        bad = False
        if isinstance(node, ast.Attribute):
            name = node.value.id if isinstance(node.value, ast.Name) else None
            mine = name in {"self", *own} or _is_own(node.value, own, held)
            bad = node.attr in AUTOGRAD_NAMES or (node.attr == "func" and name == "torch") or (
                node.attr == "backward" and not mine)
        elif isinstance(node, ast.keyword):
            bad = node.arg in AUTOGRAD_NAMES
        elif isinstance(node, ast.Name):
            bad = node.id in AUTOGRAD_NAMES
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""  # `from torch import func` imports torch.func
            imported = [module, *(n for a in node.names for n in (a.name, f"{module}.{a.name}"))]
            bad = any(part in AUTOGRAD_NAMES or part == "torch.func" for n in imported for part in (n, *n.split(".")))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            bad = node.value in AUTOGRAD_NAMES
        if bad and hasattr(node, "lineno"):
            hits.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(set(hits), key=lambda h: int(h.split(":")[0].split()[1]))
