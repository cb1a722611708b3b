"""Run the handin's trained model (model.pt + notebook 3's code) once per submission, in the sandbox: the public
set's logits in one forward pass (as notebook 3 computes its figure), generate() and predict() (the course grader's
Course.model_run answers the hidden rows)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from ..context import GradeContext
from ..handin_contract import GENERATION_STEPS, PREDICTION_STEPS, checkpoint_size_problem
from ..lm.vocab import VOCAB_SIZE
from ..safeio import notebook_budget, quote
from ..scoring import load_meta, read_array
from .handin_runs import NOTEBOOK_HARNESS, run_notebook
from .lm_common import fixture_array

CHECKPOINT = "model.pt"
NOTEBOOK = "03_language_model.ipynb"
HARNESS = (*NOTEBOOK_HARNESS, "model_child.py")
# The public prediction set: (name, prompts file, targets file) under <case_root>/lm/.
PUBLIC_SET = ("validation", "prediction.npz", "prediction.npz")
PROBE_ROWS, PROBE_LENGTH, PROBE_POSITION = 4, 48, 23
# Logits at or before the probe position may differ this much (relative to their scale) and count as unchanged.
CAUSAL_TOLERANCE = 1e-4
MODEL_TIME_FACTOR = 2.0
# predictions.npy and generated.npy are checked against the model's own predict() and generate() on their first
# rows: the checks decide no score (the model's own run does), and a forged array differs on every row.
PREDICT_CHECK_ROWS = 8
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
    hidden: bool = False  # the run had the hidden rows at hand: no figure it could choose is shown

    def said(self, text: str) -> str:
        """`text` (one of the run's texts) as a note or a public line may show it (the course's run names some)."""
        return text


def model_run(ctx: GradeContext, settings: dict) -> ModelRun:
    """The submission's ModelRun, made on first use by ctx.course (the kit's: public_run)."""
    key = ("lm_model", tuple(ctx.visibilities))
    if key not in ctx.cache:
        ctx.cache[key] = ctx.course.model_run(ctx, settings, public_run)
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
class Inputs:
    """What one model run is given: the handin's checkpoint, the prediction sets, generate()'s and predict()'s rows."""

    checkpoint: Path
    sets: dict[str, tuple[np.ndarray, np.ndarray]]  # set -> (prompts, targets of the graded steps)
    generation: np.ndarray
    prediction: np.ndarray


def model_inputs(ctx: GradeContext, chosen: tuple[str, str, str]) -> Inputs | str:
    """The run's inputs with the prediction set `chosen` (as PUBLIC_SET), or why there is no run."""
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
    unread = notebook_budget(notebook)
    if unread:
        return f"{NOTEBOOK} could not be read as a notebook ({unread})."
    lm, (name, prompts, targets) = ctx.case_root / "lm", chosen
    inp, out = fixture_array(lm / prompts, "inp"), fixture_array(lm / targets, "out")
    if inp is None or out is None:
        return f"the grader's fixtures lack {prompts} or {targets} under {lm}: the case files are incomplete."
    gen_inp = fixture_array(lm / "generation_test.npz", "inp")
    test_inp = fixture_array(lm / "prediction_test.npz", "inp")
    if gen_inp is None or test_inp is None:
        return (f"the grader's fixtures lack generation_test.npz or prediction_test.npz under {lm}: the case files are "
                "incomplete.")
    return Inputs(src, {name: (inp, out[:, :PREDICTION_STEPS])}, gen_inp[:GENERATE_CHECK_ROWS],
                  test_inp[:PREDICT_CHECK_ROWS])


def prepare(inputs: Inputs, scratch: Path) -> dict:
    """The run's inputs written in the scratch folder (each set's true characters with it); the task's entries."""
    folder = scratch / "inputs"
    shutil.copyfile(inputs.checkpoint, scratch / "submission" / CHECKPOINT)
    np.savez(folder / "probe.npz", **probe_inputs())
    np.savez(folder / "generation.npz", inp=inputs.generation)
    np.savez(folder / "prediction.npz", inp=inputs.prediction)
    for name, (inp, out) in inputs.sets.items():  # the true characters before each step, all at once
        np.savez(folder / f"{name}.npz", inp=inp, given=out[:, :-1])
    return {"checkpoint": f"submission/{CHECKPOINT}",
            "teacher_forcing": [{"name": n, "inputs": f"inputs/{n}.npz", "steps": PREDICTION_STEPS}
                                for n in inputs.sets],
            "generation_steps": GENERATION_STEPS, "prediction_steps": PREDICTION_STEPS}


def collect(inputs: Inputs, result: ModelRun, scratch: Path, run, report) -> dict:
    """Read what the child wrote into `result` (.problem set when the model was not run); returns the child's
    model.json ({} if none)."""
    out = scratch / "outputs"
    meta = load_meta(out / "model.json", root=scratch)[0] or {}
    if report is not None and report.get("read_error") or meta.get("read_error"):
        result.problem = f"{NOTEBOOK} could not be read as a notebook; submit the .ipynb file saved by Jupyter."
    elif meta.get("load_error"):
        result.problem = quote(meta["load_error"], 1500)
    elif not meta:
        result.problem = f"the process that runs your model {run.describe()} before it loaded model.pt"
    if result.problem:
        return meta
    for name, (_inp, out_ids) in inputs.sets.items():
        logits = read_array(out / name / "logits.npy", scratch)[0]
        why = logits_problem(logits, (*out_ids.shape, VOCAB_SIZE)) if logits is not None else ""
        if logits is not None and not why:
            result.teacher_forced[name], result.targets[name] = logits.astype(np.float32), out_ids
        else:
            why = quote(meta.get(name) or "", 700) or why or f"the process {run.describe()}"
            result.set_problems[name] = quote(f"your model's teacher-forced logits are missing: {why}", 800)
    a, b = read_array(out / "probe_x.npy", scratch)[0], read_array(out / "probe_changed.npy", scratch)[0]
    if a is not None and b is not None and a.shape == b.shape and a.ndim == 3 and a.shape[1] == PROBE_LENGTH:
        head_a, head_b = (x[:, : PROBE_POSITION + 1].astype(np.float64) for x in (a, b))
        scale = max(1.0, float(np.nanmax(np.abs(head_a))) if np.isfinite(head_a).any() else 1.0)
        result.causal_change = float(np.nan_to_num(np.abs(head_a - head_b), nan=np.inf).max()) / scale
    result.generated = read_array(out / "generated.npy", scratch)[0]
    result.predicted = read_array(out / "predicted.npy", scratch)[0]
    calls = meta.get("calls") if isinstance(meta.get("calls"), dict) else {}
    result.call_problems = {quote(k, 40): quote(v, 500) for k, v in list(calls.items())[:16]}
    return meta


def public_run(ctx: GradeContext, settings: dict) -> ModelRun:
    """The kit's ModelRun: the public set's logits in one forward pass, the probe, generate(), predict()."""
    inputs = model_inputs(ctx, PUBLIC_SET)
    if isinstance(inputs, str):
        return ModelRun(inputs)
    result = ModelRun()
    run_model(ctx, settings, partial(prepare, inputs), partial(collect, inputs, result))
    return result


def run_model(ctx: GradeContext, settings: dict, prepare: Callable[[Path], dict], collect: Callable,
              child: str = "model_child.py") -> None:
    """Run notebook 3's cells, then model_child.py (through `child`) on the handin's model.pt: prepare(scratch)
    writes the inputs and returns the task's entries, collect(scratch, run, report) reads what the child wrote."""
    # Notebook 3's cells, loading the model, 20 steps and 30 generated characters: a handin's heaviest run.
    limits = replace(ctx.limits, timeout_s=ctx.limits.timeout_s * MODEL_TIME_FACTOR)
    run_notebook(ctx, "model", ctx.submission / NOTEBOOK, NOTEBOOK, [], (), settings, collect, limits, child=child,
                 harness=HARNESS, prepare=prepare)


def causal_note(run: ModelRun) -> str:
    """A sentence for the student when the model's logits see the future, else ''."""
    if run.causal_change is None or run.causal_change <= CAUSAL_TOLERANCE:
        return ""
    by = "" if run.hidden else f" (by {run.causal_change:.3g} relative to their scale)"
    return (f"Your model is not causal: changing the tokens after position {PROBE_POSITION} changed its logits at or "
            f"before that position{by}. Trained with teacher forcing, such a model learns to read the next character "
            "instead of predicting it; apply the causal mask in every attention layer.")


def handin_head(run: ModelRun, arr: np.ndarray, own: np.ndarray | None, call: str) -> tuple[np.ndarray | None, str]:
    """(the first rows of the handin's `arr`, as many as the model's own `own` array from `call`, '') when the two
    can be compared, else (None, why not)."""
    if run.problem:
        return None, f"there is no model to check it against: {run.said(run.problem)}"
    if own is None or own.ndim != arr.ndim or own.shape[1:] != arr.shape[1:] or len(own) > len(arr):
        why = run.call_problems.get(call, f"{call}() returned nothing the grader could compare")
        return None, f"your model's {call}() could not be compared with it: {run.said(why)}"
    return arr[: len(own)], ""
