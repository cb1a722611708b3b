"""Run the handin's trained model (model.pt + notebook 3's code) once per submission, in the sandbox.

The language-model quality lines grade the model itself, never an array the student wrote. The child
(child/model_child.py) answers a hidden set's rows one step at a time: the course grader (GradeContext.course)
reveals character t only once the logits of step t are written, so no look-ahead can see a target before the step
it grades. A public set's targets are in the handout: one forward pass, as notebook 3 computes its figure, which
the causality probe (logits at t must not change when later tokens change) says when not to trust. The run also
calls the notebook's generate() and predict(), to score generations and to compare with the handin's arrays.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from ..context import GradeContext
from ..handin_contract import GENERATION_STEPS, PREDICTION_STEPS, checkpoint_size_problem
from ..lm.vocab import VOCAB_SIZE
from ..safeio import clean_text, quote
from ..scoring import load_meta, read_array
from .handin_runs import NOTEBOOK_HARNESS, notebook_too_large, run_notebook
from .lm_common import fixture_array

CHECKPOINT = "model.pt"
NOTEBOOK = "03_language_model.ipynb"
HARNESS = (*NOTEBOOK_HARNESS, "model_child.py")
# The prediction set of a run, by the case set graded: (name, prompts file, targets file) under <case_root>/lm/.
# A public set's targets are in the handout, so the child gets them with the prompts and runs one forward pass; a
# hidden set's are revealed one step at a time. With the hidden rows at hand the validation rows add nothing graded.
SETS = {"public": ("validation", "prediction.npz", "prediction.npz"),
        "hidden": ("test", "prediction_test.npz", "hidden/prediction_test_out.npz")}
PROBE_ROWS, PROBE_LENGTH, PROBE_POSITION = 4, 48, 23
# Logits at or before the probe position may differ this much (relative to their scale) and count as unchanged.
CAUSAL_TOLERANCE = 1e-4
MODEL_TIME_FACTOR = 2.0
# predictions.npy is checked against the model's own predict() on its first rows: the check
# decides no score (the teacher-forced NLL does), and a forged array differs on every row.
PREDICT_CHECK_ROWS = 8
# Where no line scores generations (the local grader), generated.npy is checked the same way on
# the first rows only; the hidden perplexity line has the model generate for every prompt.
GENERATE_CHECK_ROWS = 8


@dataclass
class ModelRun:
    """What the handin's model did; every array was read back from the child as plain numbers."""

    problem: str = ""  # why nothing could be run ('' when the model ran)
    teacher_forced: dict[str, np.ndarray] = field(default_factory=dict)  # set -> (B, steps, V) logits
    targets: dict[str, np.ndarray] = field(default_factory=dict)  # set -> (B, steps) ids
    set_problems: dict[str, str] = field(default_factory=dict)  # set -> why its logits are missing
    causal_change: float | None = None  # largest change of logits at or before the probe position
    generated: np.ndarray | None = None
    predicted: np.ndarray | None = None
    call_problems: dict[str, str] = field(default_factory=dict)
    # What the child says each of its steps took (cells, load, probe, teacher_forcing_<set>, generate,
    # predict): for the benchmarks only, never for a grade, since the child could say anything.
    steps: dict[str, float] = field(default_factory=dict)
    # Whether the run had the hidden rows at hand, and which of the texts above are the child's own words.
    hidden: bool = False
    child_words: set[str] = field(default_factory=set)

    def said(self, text: str) -> str:
        """`text` (one of the run's texts) as the notes or a public line may show it: a child that had the hidden
        rows at hand could have written one into its own words, so those are named, not quoted."""
        if self.hidden and text in self.child_words:
            return ("the message your notebook's code gave is not shown here, since that run had the hidden rows at "
                    "hand; the local grader (python autograder.py) shows it")
        return text

    def quoted(self, text: object, limit: int) -> str:
        """The child's `text`, kept to one line and remembered as the child's words."""
        said = quote(text, limit)
        self.child_words.add(said)
        return said


def model_run(ctx: GradeContext, settings: dict) -> ModelRun:
    """The submission's ModelRun, made on first use."""
    key = ("lm_model", tuple(ctx.visibilities))
    if key not in ctx.cache:
        ctx.cache[key] = _run(ctx, settings)
    return ctx.cache[key]


def probe_inputs(seed: int = 785) -> dict[str, np.ndarray]:
    """Rows of random characters, and the same rows with every token after the probe position changed."""
    rng = np.random.default_rng(seed)
    x = rng.integers(2, VOCAB_SIZE, size=(PROBE_ROWS, PROBE_LENGTH))
    changed = x.copy()
    tail = changed[:, PROBE_POSITION + 1 :]
    shift = rng.integers(1, VOCAB_SIZE - 2, size=tail.shape)
    changed[:, PROBE_POSITION + 1 :] = 2 + (tail - 2 + shift) % (VOCAB_SIZE - 2)
    return {"x": x.astype(np.int64), "x_changed": changed.astype(np.int64)}


def logits_problem(logits: np.ndarray, shape: tuple[int, ...]) -> str:
    """Why an array the child wrote is not logits of `shape` ('' when it is)."""
    if logits.shape != shape or logits.dtype.kind != "f":
        return f"logits of shape {logits.shape} and dtype {logits.dtype}, expected {shape} floats"
    return ""


@dataclass
class _Inputs:
    """What one model run is given: the handin's checkpoint, the prediction set and the prompts."""

    checkpoint: Path
    hidden: bool  # the prediction set's targets are revealed step by step (else given with the prompts)
    sets: dict[str, tuple[np.ndarray, np.ndarray]]  # set -> (prompts, targets of the graded steps)
    generation: np.ndarray
    prediction: np.ndarray


def _inputs(ctx: GradeContext) -> _Inputs | str:
    """The run's inputs, or why there is no run to make."""
    src, notebook = ctx.submission / CHECKPOINT, ctx.submission / NOTEBOOK
    if not src.is_file():
        return (ctx.not_trained(CHECKPOINT) if not ctx.run_expected else
                f"{CHECKPOINT} is missing from the handin: the language-model lines grade the trained model "
                "itself; `make handin runid=<id> epoch=<n>` packs the checkpoint of the epoch you choose.")
    too_large = checkpoint_size_problem(src.stat().st_size)
    if too_large:  # the cap `make handin` enforces, with its words: a larger model is not run
        return f"{CHECKPOINT} {too_large}."
    if not notebook.is_file():
        return f"{NOTEBOOK} is missing from the handin: the grader rebuilds your model with its code."
    unread = notebook_too_large(notebook)
    if unread:
        return f"{NOTEBOOK} could not be read as a notebook ({unread})."
    lm, hidden, sets = ctx.case_root / "lm", "hidden" in ctx.visibilities, {}
    if ("hidden" if hidden else "public") in ctx.visibilities:
        name, prompts, targets = SETS["hidden" if hidden else "public"]
        inp, out = fixture_array(lm / prompts, "inp"), fixture_array(lm / targets, "out")
        if inp is None or out is None:
            return f"the grader's fixtures lack {prompts} or {targets} under {lm}: the case files are incomplete."
        sets[name] = (inp, out[:, :PREDICTION_STEPS])
    gen_inp = fixture_array(lm / "generation_test.npz", "inp")
    test_inp = fixture_array(lm / "prediction_test.npz", "inp")
    if gen_inp is None or test_inp is None:
        return (f"the grader's fixtures lack generation_test.npz or prediction_test.npz under {lm}: the case files are "
                "incomplete.")
    return _Inputs(src, hidden, sets, gen_inp, test_inp)


def _prepare(inputs: _Inputs, scratch: Path) -> dict:
    """The checkpoint, the probe, the prompts (and a public set's targets) in the scratch folder; the task entries."""
    folder, given = scratch / "inputs", not inputs.hidden
    shutil.copyfile(inputs.checkpoint, scratch / "submission" / CHECKPOINT)
    np.savez(folder / "probe.npz", **probe_inputs())
    np.savez(folder / "generation.npz", inp=inputs.generation[: None if inputs.hidden else GENERATE_CHECK_ROWS])
    np.savez(folder / "prediction.npz", inp=inputs.prediction[:PREDICT_CHECK_ROWS])
    for name, (inp, out) in inputs.sets.items():  # a public set's true characters before each step, all at once
        np.savez(folder / f"{name}.npz", inp=inp, **({"given": out[:, :-1]} if given else {}))
    return {"checkpoint": f"submission/{CHECKPOINT}",
            "teacher_forcing": [{"name": n, "inputs": f"inputs/{n}.npz", "steps": PREDICTION_STEPS, "given": given}
                                for n in inputs.sets],
            "generation_steps": GENERATION_STEPS, "prediction_steps": PREDICTION_STEPS}


def _reveal(ctx: GradeContext, inputs: _Inputs, scratch: Path):
    """Start revealing the hidden set's characters beside the child, each once the child has answered the step it
    grades (the course grader's ctx.course.reveal: the handout holds no hidden rows); returns the function that
    stops it and gives what the child answered (.answers, set -> logits per step; .problems, set -> why it stopped)."""
    if not (inputs.hidden and inputs.sets) or ctx.course is None:
        return lambda: None
    return ctx.course.reveal(scratch / "outputs", scratch / "inputs", {n: out for n, (_, out) in inputs.sets.items()})


def _collect(inputs: _Inputs, result: ModelRun, scratch: Path, run, report, revealer) -> None:
    """Read what the child wrote into `result`."""
    out = scratch / "outputs"
    meta = load_meta(out / "model.json", root=scratch)[0] or {}
    if report is not None and report.get("read_error") or meta.get("read_error"):
        result.problem = f"{NOTEBOOK} could not be read as a notebook; submit the .ipynb file saved by Jupyter."
        return
    result.hidden = inputs.hidden
    if meta.get("load_error"):
        result.problem = result.quoted(meta["load_error"], 1500)
        return
    if not meta:
        result.problem = f"the process that runs your model {run.describe()} before it loaded model.pt"
        return
    _collect_teacher_forced(inputs, result, scratch, run, meta, revealer)
    a, b = read_array(out / "probe_x.npy", scratch)[0], read_array(out / "probe_changed.npy", scratch)[0]
    if a is not None and b is not None and a.shape == b.shape and a.ndim == 3 and a.shape[1] == PROBE_LENGTH:
        head_a = a[:, : PROBE_POSITION + 1].astype(np.float64)
        head_b = b[:, : PROBE_POSITION + 1].astype(np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(head_a))) if np.isfinite(head_a).any() else 1.0)
        result.causal_change = float(np.nan_to_num(np.abs(head_a - head_b), nan=np.inf).max()) / scale
    result.generated = read_array(out / "generated.npy", scratch)[0]
    result.predicted = read_array(out / "predicted.npy", scratch)[0]
    said = meta.get("seconds") if isinstance(meta.get("seconds"), dict) else {}
    result.steps = {clean_text(k)[:40]: float(v) for k, v in list(said.items())[:16]
                    if type(v) in (int, float) and 0 <= v < 1e9}  # a bounded number, never a huge int
    calls = meta.get("calls") if isinstance(meta.get("calls"), dict) else {}
    result.call_problems = {quote(k, 40): result.quoted(v, 500) for k, v in list(calls.items())[:16]}


def _collect_teacher_forced(inputs: _Inputs, result: ModelRun, scratch: Path, run, meta: dict, revealer) -> None:
    """The prediction set's logits: written at once (a public set) or answered step by step (a hidden one)."""
    for name, (_inp, out_ids) in inputs.sets.items():
        first = shape_why = ""
        if inputs.hidden:
            answers = revealer.answers[name] if revealer is not None else []
            logits = np.stack(answers, axis=1) if len(answers) == out_ids.shape[1] else None
            first = (revealer.problems.get(name) if revealer is not None else
                     "this grader reveals no hidden rows (the course grader does)")
            missing = f"your model answered {len(answers)} of {out_ids.shape[1]} steps"
        else:
            logits = read_array(scratch / "outputs" / name / "logits.npy", scratch)[0]
            shape_why = logits_problem(logits, (*out_ids.shape, VOCAB_SIZE)) if logits is not None else ""
            logits, missing = None if shape_why else logits, "your model's teacher-forced logits are missing"
        if logits is not None:
            result.teacher_forced[name], result.targets[name] = logits.astype(np.float32), out_ids
        else:
            why = first or quote(meta.get(name) or "", 700) or shape_why or f"the process {run.describe()}"
            result.set_problems[name] = result.quoted(f"{missing}: {why}", 800)


def _run(ctx: GradeContext, settings: dict) -> ModelRun:
    inputs = _inputs(ctx)
    if isinstance(inputs, str):
        return ModelRun(inputs)
    result = ModelRun()
    timeouts = {"cell_timeout_s": settings["cell_timeout_s"], "call_timeout_s": settings["call_timeout_s"]}
    # Notebook 3's cells, loading the model, 20 revealed steps and 30 generated characters: the
    # heaviest run of a handin, so it gets twice the time of the others.
    limits = replace(ctx.limits, timeout_s=ctx.limits.timeout_s * MODEL_TIME_FACTOR)
    run_notebook(ctx, "model", ctx.submission / NOTEBOOK, NOTEBOOK, [], (), timeouts, partial(_collect, inputs, result),
                 child="model_child.py", harness=HARNESS, prepare=partial(_prepare, inputs),
                 companion=partial(_reveal, ctx, inputs), limits=limits)
    return result


def causal_note(run: ModelRun) -> str:
    """A sentence for the student when the model's logits see the future, else ''."""
    if run.causal_change is None or run.causal_change <= CAUSAL_TOLERANCE:
        return ""
    # No figure from a run that had the hidden rows at hand: it could choose it.
    by = "" if run.hidden else f" (by {run.causal_change:.3g} relative to their scale)"
    return (f"Your model is not causal: changing the tokens after position {PROBE_POSITION} changed its logits at or "
            f"before that position{by}. Trained with teacher forcing, "
            "such a model learns to read the next character instead of predicting it; apply the causal mask in "
            "every attention layer.")


def handin_head(run: ModelRun, arr: np.ndarray, own: np.ndarray | None, call: str) -> tuple[np.ndarray | None, str]:
    """(the first rows of the handin's `arr`, as many as the model's own `own` array from `call`, '') when the two
    can be compared, else (None, why not)."""
    if run.problem:
        return None, f"there is no model to check it against: {run.said(run.problem)}"
    if own is None or own.ndim != arr.ndim or own.shape[1:] != arr.shape[1:] or len(own) > len(arr):
        why = run.call_problems.get(call, f"{call}() returned nothing the grader could compare")
        return None, f"your model's {call}() could not be compared with it: {run.said(why)}"
    return arr[: len(own)], ""
