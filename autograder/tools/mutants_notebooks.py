"""`make mutants`, the notebooks: single-point mutants of the graded functions of notebooks 1, 2 and 3.

The mutants are autograder/tools/mutants.py's (mutmut's operators and the tensor ones), made in the
solution notebook's cell that defines each graded function; the rest of the notebook is the solution
(its otter test cells left out, as a student's notebook has none). The oracle runs the mutated
notebook's cells here and calls each function on every case's inputs, as the grader's calls do, and
compares with references written for it alone in float64 torch (torch.nn.functional's cross_entropy
with ignore_index and scaled_dot_product_attention with masks, torch.nn.utils.rnn.pad_sequence): never
the solution or the case files' expected values. The rubric file's rule turns what it finds into the
lines a mutant must lose; the course grader grades the mutated notebook; the report is mutants.py's.

Notebook 3's lines graded here are collate_and_loss, causal_attention, model_building, predict_function,
generate_greedy and generate_sampling (the model's, predict's and generate's references: mutants_lm.py);
format / nll / perplexity need a trained run (the grader gives them their points or not whatever these
functions do, so they are left out of both sides of the comparison).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np
import torch
import torch.nn.functional as F

from autograder.tools import mutants as mm
from autograder.tools import mutants_lm as lm
from autograder.tools.measured import host_record
from gradelib import rubric
from gradelib.problems import lm_functions
from gradelib.problems.notebook_functions import LOSSES, MASKS, SPECS

REPO = mm.REPO
TEST_CELL = '""" # BEGIN TEST CONFIG'
PROMPT = re.compile(r'\n[ \t]*""" # BEGIN PROMPT.*?""" # END PROMPT[^\n]*', re.S)
SKIP_TAG = "skip-grading"
PAD = 1  # notebook 3's <pad> id
CALL_S = 10.0  # seconds one call may take here before the oracle calls it a failure (a mutant's endless loop)


@dataclass(frozen=True)
class Target:
    problem: str
    notebook: str
    functions: tuple[str, ...]  # names or Class.method, mutated where the notebook defines them
    folder: str  # the case folder under fixtures/
    lines: tuple[str, ...] = ()  # the rubric lines judged (all the problem's lines when empty)


TARGETS = (
    *(Target(pid, spec.notebook, tuple(sorted({c.function for c in spec.calls})), "notebooks")
      for pid, spec in (("losses", LOSSES), ("masks", MASKS))),
    Target("prediction", lm_functions.NOTEBOOK, ("collate", "lm_loss", "CausalSelfAttention.forward",
                                                 "CausalSelfAttention.__init__", "embedding_dropout",
                                                 "CausalLanguageModel.__init__", "CausalLanguageModel.forward",
                                                 "predict"), "lm_functions",
           ("collate_and_loss", "causal_attention", "model_building", "predict_function")),
    Target("generation", lm_functions.NOTEBOOK, ("filter_logits", "generate"), "lm_functions",
           ("generate_greedy", "generate_sampling")),
)


# --- the notebook and its mutants ----------------------------------------------------------------------------

def cells(notebook: Path) -> list[tuple[int, str, bool]]:
    """(index, source without its prompt strings, graded) of every code cell but otter's test cells; graded is False
    for the cells tagged skip-grading, which the grader does not run."""
    nb = nbformat.read(notebook, as_version=4)
    return [(i, PROMPT.sub("", c.source), SKIP_TAG not in c.metadata.get("tags", []))
            for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.source.startswith(TEST_CELL)]


def mutants(target: Target, notebook: Path) -> list[mm.Mutant]:
    """Every single-point mutant of the target's functions; a mutant's text is its whole cell, `name` says which."""
    found = []
    for index, source, graded in cells(notebook):
        if not graded:
            continue
        for m in mm.mutants(source, target.functions):
            m.name = f"{target.problem}:cell{index}:{m.name}"
            found.append(m)
    return found


def cell_of(m: mm.Mutant) -> int:
    return int(m.name.split(":")[1].removeprefix("cell"))


def write_notebook(notebook: Path, out: Path, m: mm.Mutant | None) -> None:
    """The solution notebook without its test cells and prompt strings, the mutant's cell replaced."""
    nb = nbformat.read(notebook, as_version=4)
    kept = {i: text for i, text, _ in cells(notebook)}
    for i, cell in enumerate(nb.cells):
        if i in kept:
            cell.source = m.text if m is not None and i == cell_of(m) else kept[i]
    nb.cells = [c for i, c in enumerate(nb.cells) if c.cell_type != "code" or i in kept]
    nbformat.write(nb, out)


# --- the oracle ----------------------------------------------------------------------------------------------

def cases(target: Target, fixtures: Path) -> list[dict]:
    out = []
    for vis in ("public", "hidden"):
        folder = fixtures / target.folder / vis
        for entry in json.loads((folder / "cases.json").read_text()):
            if entry.get("problem", target.problem) != target.problem:
                continue
            with np.load(folder / f"{entry['name']}.npz") as data:
                inputs = {k: data[k] for k in data.files if not k.startswith("expected_")}
            out.append({"vis": vis, "edge": entry.get("edge", ""), "dtype": "float64", "inputs": inputs})
    return out


def _t(x: dict, k: str) -> torch.Tensor:
    return torch.from_numpy(np.array(x[k]))


def reference_losses(x: dict) -> dict:
    Q, K, V, M, z, logits = (_t(x, k).double() for k in ("Q", "K", "V", "mask", "z", "logits"))
    scores = Q @ K.T / math.sqrt(K.shape[-1])
    T = int(x["T"])
    return {
        "softmax": torch.softmax(z, dim=-1),
        "attn_weights": torch.softmax(scores, dim=-1),
        "attn_output": F.scaled_dot_product_attention(Q[None], K[None], V[None])[0],
        "masked_weights": torch.softmax(scores + M, dim=-1),
        "masked_output": F.scaled_dot_product_attention(Q[None], K[None], V[None], attn_mask=M)[0],
        "predicted_ids": logits.argmax(dim=-1),
        "token_nll": F.cross_entropy(logits, _t(x, "nll_targets"), reduction="none"),
        "cross_entropy_loss": F.cross_entropy(logits, _t(x, "targets"), ignore_index=int(x["ignore_index"])),
        "causal_mask": torch.zeros(T, T, dtype=torch.float64).masked_fill(
            torch.arange(T)[None, :] > torch.arange(T)[:, None], float("-inf")),
    }


def reference_masks(x: dict) -> dict:
    Q, K, V, X, logits = (_t(x, k).double() for k in ("Q", "K", "V", "X", "logits"))
    mask, tokens, targets, pad = _t(x, "mask"), _t(x, "tokens"), _t(x, "targets"), int(x["pad_id"])
    scores = Q @ K.transpose(1, 2) / math.sqrt(K.shape[-1])
    blocked = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    rows = mask.any(dim=-1, keepdim=True)  # a query with no allowed key: zeros
    T, Tx = int(x["T"]), X.shape[1]
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    Tt = tokens.shape[1]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad)
    return {
        "uniform": torch.stack([X[:, : t + 1].mean(dim=1) for t in range(Tx)], dim=1),
        "A": torch.softmax(scores, dim=-1),
        "C": F.scaled_dot_product_attention(Q, K, V),
        "A_masked": torch.where(rows, blocked, 0.0),
        "C_masked": torch.where(rows, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask), 0.0),
        "causal_mask": causal,
        "padding_mask": tokens != pad,
        "combined_mask": (torch.arange(Tt)[None, :] <= torch.arange(Tt)[:, None])[None] & (tokens != pad)[:, None, :],
        "masked_mean_loss": nll,
        "perplexity": torch.exp(nll),
    }


def reference_lm(x: dict) -> dict:
    flat, lengths = x["pieces_flat"], x["pieces_lengths"]
    ends = np.cumsum(lengths)
    pieces = [torch.from_numpy(flat[e - n: e].copy()) for n, e in zip(lengths.tolist(), ends.tolist())]
    logits, targets = _t(x, "loss_logits").double(), _t(x, "loss_targets")
    d_model, n_heads, _ = (int(v) for v in x["att_cfg"])
    w = {k.removeprefix("attw."): _t(x, k).double() for k in x if k.startswith("attw.")}

    def block(inp: torch.Tensor) -> torch.Tensor:
        B, T, C = inp.shape
        q, k, v = (F.linear(inp.double(), w["qkv.weight"], w["qkv.bias"]).split(C, dim=-1))
        q, k, v = (t.reshape(B, T, n_heads, C // n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        return F.linear(y, w["proj.weight"], w["proj.bias"])

    return {
        "collate_inputs": torch.nn.utils.rnn.pad_sequence(
            [p[:-1] for p in pieces], batch_first=True, padding_value=PAD
        ),
        "collate_targets": torch.nn.utils.rnn.pad_sequence(
            [p[1:] for p in pieces], batch_first=True, padding_value=PAD
        ),
        "lm_loss": F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=PAD),
        "attention_out": block(_t(x, "att_x")),
        "attention_causal": block(_t(x, "att_x_changed")),
    }


REFERENCES = {"losses": reference_losses, "masks": reference_masks,
              "prediction": lambda x: {**reference_lm(x), **lm.reference_prediction(x)},
              "generation": lm.reference_generation}
# What a right value is: its container (a scalar may be a plain float) and its dtype kind (f: the float64 inputs'
# dtype for notebooks 1 and 2, float32 for notebook 3's float32 model; b: bool; i: any integer).
CONTAINER = {"losses": np.ndarray, "masks": torch.Tensor, "prediction": torch.Tensor, "generation": torch.Tensor}
TOLERANCE = {"float64": {"rtol": 1e-7, "atol": 1e-9}, "float32": {"rtol": 1e-4, "atol": 1e-5}}


class _TooLong(Exception):
    pass


def _alarm(_signum, _frame):
    raise _TooLong()


def run_cells(texts: list[str]) -> dict:
    """The notebook's graded cells, run in one namespace as the grader runs them (a cell that raises is passed)."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for text in texts:
            try:
                with _time_limit():
                    exec(compile(text, "<cell>", "exec"), namespace)  # the instructor's own mutants, not students'
            except BaseException:  # noqa: BLE001
                pass
    return namespace


class _time_limit:  # noqa: N801 (a context manager)
    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, CALL_S)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)
        return False


def _argument(spec: str, x: dict, problem: str):
    kind, key = spec.split(":", 1)
    if kind == "int":
        return int(x[key])
    if kind in ("model", "float", "bool"):
        return lm.argument(kind, key, x)
    if kind == "pieces":
        ends = np.cumsum(x[f"{key}_lengths"])
        return [torch.from_numpy(x[f"{key}_flat"][e - n: e].copy()) for n, e in zip(x[f"{key}_lengths"].tolist(), ends)]
    return np.array(x[key]) if kind == "array" else torch.from_numpy(np.array(x[key]))


def observe(problem: str, namespace: dict, x: dict) -> dict:
    """quantity -> what the notebook's function returned for it on the case `x` (None: raised or absent)."""
    got: dict = {}
    calls = SPECS.get(problem, lm_functions.SPEC).calls
    wanted = {q for g in problem_of(next(t for t in TARGETS if t.problem == problem)).groups for q in g.quantities}
    for call in calls:
        if problem in ("prediction", "generation") and not set(call.outputs) & wanted:
            continue
        try:
            with _time_limit():
                torch.manual_seed(int(x.get("seed", 0)))  # as the grader's child: each call from the case's seed
                if call.function == "CausalSelfAttention":
                    values = _attention(namespace, x)
                elif call.function == "CausalLanguageModel":
                    values = lm.language_model(namespace, x)
                else:
                    args = [_argument(a, x, problem) for a in call.args]
                    kwargs = {k: _argument(a, x, problem) for k, a in call.kwargs.items()}
                    function = namespace[call.function]
                    values = (lm.mode_after(function) if any(q.endswith("_mode") for q in call.outputs)
                              else function)(*args, **kwargs)
        except BaseException:  # noqa: BLE001
            continue
        for q, index in call.outputs.items():
            try:
                got[q] = values if index is None else values[index]
            except Exception:  # noqa: BLE001
                pass
    return got


def _attention(namespace: dict, x: dict):
    """The module built on the case's sizes, loaded with its weights, in eval mode, on the case's two inputs."""
    d_model, n_heads, max_len = (int(v) for v in x["att_cfg"])
    cfg = namespace["ModelConfig"](d_model=d_model, n_heads=n_heads, max_len=max_len, dropout=0.1, emb_dropout=0.1)
    module = namespace["CausalSelfAttention"](cfg)
    state = {k.removeprefix("attw."): _t(x, k) for k in x if k.startswith("attw.")}
    module.load_state_dict(state, strict=False)
    module.eval()
    with torch.no_grad():
        return module(_t(x, "att_x")), module(_t(x, "att_x_changed"))


def how(problem: str, value, expected: torch.Tensor) -> str:
    """'' (right), 'raise' (absent or not a value), 'nan', 'non-finite' or 'wrong'."""
    e = expected.detach()
    scalar = e.dim() == 0
    if isinstance(value, torch.Tensor) and problem == "losses":
        return "wrong"  # notebook 1 works in numpy
    if scalar and isinstance(value, (float, np.floating)):
        value = np.asarray(value)
    if not isinstance(value, (np.ndarray, torch.Tensor)):
        return "raise"
    if not scalar and not isinstance(value, CONTAINER[problem]):
        return "wrong"
    g = np.asarray(value.detach().numpy() if isinstance(value, torch.Tensor) else value)
    if g.shape != tuple(e.shape):
        return "wrong"
    if e.dtype == torch.bool:
        return "" if g.dtype == np.bool_ and np.array_equal(g, e.numpy()) else "wrong"
    if not e.is_floating_point():
        return "" if g.dtype.kind in "iu" and np.array_equal(g, e.numpy()) else "wrong"
    if g.dtype.kind != "f":
        return "wrong"
    want = np.float32 if problem == "prediction" else np.float64
    if g.dtype != want and not (scalar and isinstance(value, np.ndarray) and g.dtype == np.float64):
        return "wrong"
    g, e64 = g.astype(np.float64), e.double().numpy()
    infinite = np.isinf(e64)
    if np.isnan(g).any():
        return "nan"
    if not np.array_equal(np.isinf(g), infinite) or not np.array_equal(g[infinite], e64[infinite]):
        return "non-finite" if not np.isfinite(g).all() else "wrong"
    tol = TOLERANCE[str(g.dtype) if problem != "prediction" else "float32"]
    g, e64 = g[~infinite], e64[~infinite]
    ok = np.all(np.abs(g - e64) <= tol["atol"] * max(1.0, np.abs(e64).max(initial=0.0)) + tol["rtol"] * np.abs(e64))
    return "" if ok else "wrong"


def judge(target: Target, notebook: Path, m: mm.Mutant | None, all_cases: list[dict]) -> list[dict]:
    """Per case, quantity -> how it fails (mutants.judge's form, for mutants.failing_lines)."""
    texts = [m.text if m is not None and i == cell_of(m) else text for i, text, graded in cells(notebook) if graded]
    namespace = run_cells(texts)
    judged = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observed = [observe(target.problem, namespace, case["inputs"]) for case in all_cases]
    for case, got in zip(all_cases, observed):
        expected = REFERENCES[target.problem](case["inputs"])
        judged.append({**case, "fails": {q: e(got.get(q)) if callable(e) else how(target.problem, got.get(q), e)
                                         for q, e in expected.items()}})
    return judged


def problem_of(target: Target):
    """The rubric's problem, with only the lines judged here."""
    from dataclasses import replace

    problem = rubric.load()[target.problem]
    if not target.lines:
        return problem
    return replace(problem, groups=tuple(g for g in problem.groups if g.id in target.lines))


# --- grading ------------------------------------------------------------------------------------------------------

def grade(batch: list[tuple[Target, object, mm.Mutant]], solutions: Path, fixtures: Path,
          timeout_s: float = 60.0) -> None:
    """Grade mutants of different notebooks in one handin (one grading for up to three mutants): each mutant's
    notebook is the solution with its cell replaced; only their problems are graded."""
    from autograder.batch.worker import grade_hidden
    from gradelib.runner import Limits

    assert len({t.notebook for t, _, _ in batch}) == len(batch), "one mutant per notebook in a handin"
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        sub = Path(tmp) / "handin"
        sub.mkdir()
        for target, _, m in batch:
            write_notebook(solutions / target.notebook, sub / target.notebook, m)
        result = grade_hidden(sub, case_root=fixtures, visibilities=("public", "hidden"),
                              only=[t.problem for t, _, _ in batch], limits=Limits(timeout_s=timeout_s, memory_mb=3072))
    for target, problem, m in batch:
        judged = {g.id for g in problem.groups}
        tests = [t for t in result.tests if t.problem == target.problem and t.line in judged]
        m.graded = {(t.line, t.visibility) for t in tests if not t.passed}
        m.score = problem.points - mm.lost(problem, m.graded)
        m.first_line = next((t.line for t in tests if not t.passed), "")


def cover(problem, found: list[mm.Mutant]) -> list[mm.Mutant]:
    """The test suite's sample: for each rubric line in turn that no mutant picked so far fails, the mutant failing
    it with the fewest other lines (a slip of its own; a wrong value before a crash: a deleted statement or a None,
    which mostly make the function raise or return None), then the first equivalent mutant."""
    picked: list[mm.Mutant] = []
    for g in problem.groups:
        if any(line == g.id for m in picked for line, _ in m.expected):
            continue
        fails = [m for m in found if any(line == g.id for line, _ in m.expected)]
        picked += sorted(fails, key=lambda m: (_crashes(m), len(m.expected)))[:1]
    return picked + [m for m in found if not m.expected][:1]


def _crashes(m: mm.Mutant) -> bool:
    added = [line[1:] for line in m.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return any(line.strip().startswith("pass") or "None" in line for line in added)


def handins(chosen: list[tuple]) -> list[list[tuple]]:
    """(target, problem, mutants) lists -> handins of one mutant per notebook: one grading for up to three mutants
    (the targets of one notebook, prediction and generation, take turns)."""
    per: dict[str, list] = {}
    for t, p, ms in chosen:
        per.setdefault(t.notebook, []).extend((t, p, m) for m in ms)
    return [[q[i] for q in per.values() if i < len(q)] for i in range(max(map(len, per.values()), default=0))]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--solutions", type=Path, default=REPO / "solutions")
    ap.add_argument("--only", nargs="*", default=None, help="problem ids (losses, masks, prediction, generation)")
    ap.add_argument("--limit", type=int, default=0, help="grade only the first N mutants of each notebook (0: all)")
    ap.add_argument("--names", nargs="*", default=None, help="grade only the mutants of these names")
    ap.add_argument("--every", type=int, default=1, metavar="N", help="grade every N-th mutant of each notebook")
    ap.add_argument(
        "--pick",
        action="store_true",
        help="judge every mutant and print a small sample that fails every rubric line, and an equivalent one",
    )
    ap.add_argument("--out", type=Path, default=REPO / "build" / "mutants_notebooks.json")
    return ap.parse_args(argv)


def write_figures(out: Path, command: list[str], load, found_of: dict, seconds: float, graded: dict) -> dict:
    """Write the figures of the mutants graded so far to `out`; their summary per problem."""
    summaries = {k: mm.report(p, ms) for k, (p, ms) in graded.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "recorded": host_record(" ".join(["python -m autograder.tools.mutants_notebooks", *command]), load),
                "found": found_of, "seconds": round(seconds), "summary": summaries,
                "mutants": [
                    {
                        "name": m.name,
                        "verdict": mm.verdict(p, m),
                        "score": m.score,
                        "diff": m.diff,
                        "expected": sorted(m.expected),
                        "graded": sorted(m.graded),
                    }
                    for p, ms in graded.values()
                    for m in ms
                ],
            },
            indent=1,
        )
    )
    return summaries


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    torch.set_num_threads(1)
    started, load, found_of = time.monotonic(), os.getloadavg(), {}
    chosen: dict[str, tuple[Target, object, list[mm.Mutant]]] = {}
    for target in TARGETS:
        if args.only and target.problem not in args.only:
            continue
        notebook, problem = args.solutions / target.notebook, problem_of(target)
        all_cases = cases(target, args.fixtures)
        found = mutants(target, notebook)
        mine = [m for m in found if args.names is None or m.name in args.names][:: args.every]
        mine = found if args.pick else mine[: args.limit] if args.limit else mine
        for m in mine:  # judged only when graded (about 2 s a mutant of notebook 3)
            m.expected = mm.failing_lines(problem, judge(target, notebook, m, all_cases))
        if args.pick:
            print("\n".join(m.name for m in cover(problem, found)), flush=True)
            continue
        chosen[target.problem], found_of[target.problem] = (target, problem, mine), len(found)
        print(f"{target.problem}: {len(found)} mutants of {target.notebook}, grading {len(mine)}", flush=True)
    batches = handins(list(chosen.values()))
    for i, batch in enumerate(batches, 1):
        grade(batch, args.solutions, args.fixtures)
        for target, problem, m in batch:
            said = mm.verdict(problem, m)
            print(f"[{i}/{len(batches)}] {m.name}: {said}, {m.score:.2f} / {problem.points:.2f} "
                  f"(oracle {problem.points - mm.lost(problem, m.expected):.2f})", flush=True)
            if said in ("survivor", "false kill", "killed, other lines"):
                print("   " + m.diff.replace("\n", "\n   ").rstrip())
                print(f"   oracle fails {sorted(m.expected)}; grader fails {sorted(m.graded)}")
        # Written after every batch: a run stopped early keeps its figures.
        graded = {k: (p, ms[:i]) for k, (_, p, ms) in chosen.items()}
        summaries = write_figures(args.out, sys.argv[1:] if argv is None else argv, load, found_of,
                                  time.monotonic() - started, graded)
    if batches:
        print(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
