"""The model-quality lines only the course grader scores: what the handout does not hold decides them.

prediction's "nll" line: the handed-in model's teacher-forced NLL on the hidden continuations of
prediction_test.npz, each character revealed to the model's run (`model_run`, through the kit's
gradelib/problems/lm_model.py) only once it has answered the step it grades (`reveal`), so no
look-ahead can see a target before the step it grades; generation's "perplexity" line: what the
model generates for every prompt, scored under the secret oracle (autograder/oracle/). The kit grades
every other line and leaves these to this module: CourseSide's score_line and model_run (course_side.py), the
hooks of gradelib.context.Course whose kit defaults score nothing here.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from gradelib.context import GradeContext
from gradelib.handin_contract import PREDICTION_STEPS
from gradelib.lm.nll import prediction_nll
from gradelib.lm.vocab import VOCAB_SIZE, decode
from gradelib.problems import generation, lm_common, lm_model
from gradelib.problems.generation import FILENAME, STEPS, check_ids
from gradelib.problems.lm_common import QUALITY_LINES, credit
from gradelib.problems.lm_model import logits_problem
from gradelib.results import TestResult
from gradelib.rubric_schema import Problem
from gradelib.safeio import clean_text, quote
from gradelib.scoring import Line, load_meta, read_array

from ..isolation.interpreter import Limits
from ..isolation.safe_reading import DIR_FLAGS
from ..oracle.metrics import generation_token_nll
from ..oracle.oracles import load_oracle
from .course_result import CourseTest
from .run_order import hidden_run, public_run


def score_line(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """The TestResult of a line the kit leaves to the course grader (lm_common.grade_array)."""
    if line.group.id == QUALITY_LINES.get(problem.id):
        return (_score_nll if problem.id == "prediction" else _perplexity)(ctx, problem, line)
    return line.result(0.0, f"{problem.id}: unknown rubric line '{line.group.id}'")


def _perplexity(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """The perplexity under the oracle of what the handed-in model generates for generation_test.npz."""
    prompts = lm_common.fixture_array(ctx.case_root / generation.INPUTS, "inp")
    if prompts is None:
        return line.result(0.0, lm_common.missing("generation", ctx, generation.INPUTS))
    own, why = model_generation(ctx, problem, (prompts.shape[0], STEPS))
    scored = None
    if own is not None:
        scored, why = _score(ctx.case_root / "lm", problem.settings, prompts, own)
    if scored is None:
        return line.result(0.0, f"generation: {why}")
    full, zero = float(problem.settings["full_credit_perplexity"]), float(problem.settings["zero_credit_perplexity"])
    return _perplexity_result(line, prompts, own, scored, full, zero)


def model_generation(ctx: GradeContext, problem: Problem, shape: tuple[int, int]) -> tuple[np.ndarray | None, str]:
    """(the ids the handed-in model generates greedily with the notebook's generate(), '') or (None, why not)."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        return None, run.problem
    if run.generated is None:
        why = run.call_problems.get("generate", "generate() returned nothing the grader could read")
        return None, f"running your generate(model, inp, {STEPS}) on generation_test.npz: {why}"
    own = run.generated
    if own.shape != shape or own.dtype.kind not in "iu":
        return None, (f"your generate(model, inp, {STEPS}) returned shape {own.shape} and dtype {own.dtype}; "
                      f"expected {shape} integer ids")
    bad = check_ids(own)
    if bad:
        return None, "what your model generates: " + bad.replace(f"generation: {FILENAME} holds", "it holds")
    return own.astype(np.int64), ""


def _score(lm_dir: Path, settings: dict, prompts: np.ndarray, ids: np.ndarray):
    """((perplexity, per-token NLL, seconds), '') or (None, why the oracle could not score)."""
    eps = float(settings["smoothing_eps"])
    try:
        oracle = load_oracle(lm_dir, eps)
    except (ImportError, OSError, ValueError, KeyError) as exc:
        return None, f"the oracle could not be loaded ({exc}); perplexity not computed."
    start = time.monotonic()
    tok = generation_token_nll(oracle, prompts, ids, eps)  # (B, STEPS)
    ppl = float(np.exp(tok.mean()))
    if not math.isfinite(ppl):
        return None, "the perplexity of your model's generations is not a finite number."
    return (ppl, tok, time.monotonic() - start), ""


def _perplexity_result(line: Line, prompts, ids, scored, full, zero) -> TestResult:
    ppl, tok, seconds = scored
    if not math.isfinite(ppl):
        return line.result(
            0.0,
            (
                f"generation: the perplexity of your model's generations is not a finite number ({ppl}), "
                "so this line scores 0; "
                "please tell the course staff, since smoothed scores should always be finite."
            ),
        )
    frac = credit(math.log(ppl), math.log(full), math.log(zero))
    worst = np.argsort(-tok.mean(axis=1), kind="stable")[:2]
    said = [
        f"generation perplexity {ppl:.3f} under the oracle ({tok.size} ids, scored in {seconds:.2f} s); "
        f"full credit at <= {full:g}, none at >= {zero:g} (linear in log perplexity): "
        f"{frac * line.points:.2f} of {line.points:g} points."
    ]
    if frac < 1.0:
        said.append("Least likely generations (prompt -> generation, mean NLL):")
        for r in worst.tolist():
            said.append(f"  row {r}: {decode(prompts[r])[-30:]!r} -> {decode(ids[r])!r}, {tok[r].mean():.2f} nats/char")
        said.append(
            "Hint: greedy decoding from a well-trained model should continue the prompt's sentence grammatically; "
            "check that generate feeds each picked id back as input for the next step."
        )
    return CourseTest(**vars(line.result(frac, "\n".join(said))), figures={"generation_perplexity": ppl})


def _score_nll(ctx: GradeContext, problem: Problem, line: Line) -> TestResult:
    """Teacher-forced NLL of the handed-in model on the hidden continuations of prediction_test.npz."""
    run = lm_model.model_run(ctx, problem.settings)
    if run.problem:
        return line.result(0.0, f"prediction: {run.problem}")
    if "test" not in run.teacher_forced:
        why = run.set_problems.get("test", "the model was not run on the test rows")
        return line.result(0.0, f"prediction: {why}")
    logits, targets = run.teacher_forced["test"], run.targets["test"]
    if not np.isfinite(logits).all():
        return line.result(0.0,
                          "prediction: your model's logits hold NaN or infinite values; they must be finite.")
    nll = prediction_nll(logits, targets)
    if not math.isfinite(nll):
        return line.result(0.0, (
            f"prediction: your model's NLL is {nll}, not a finite number, so this line scores 0: its logits are "
            "finite but so far apart that their softmax gives a true character probability 0 in float64."))
    full, zero = float(problem.settings["full_credit_nll"]), float(problem.settings["zero_credit_nll"])
    frac = credit(nll, full, zero)
    text = (
        f"prediction NLL {nll:.4f} nats/char: your model.pt, rebuilt with your notebook's code, predicted each of the "
        f"{targets.size} hidden characters from the prompt and the true characters before it (teacher forcing); "
        f"full credit at <= {full:g}, none at >= {zero:g}: {frac * line.points:.2f} of {line.points:g} points."
    )
    note = lm_model.causal_note(run)
    if frac < 1.0:
        text += "\n" + (note or "Hint: the notebook prints the same figure on prediction.npz for each epoch; hand in "
                         "the checkpoint of the epoch with the lowest validation NLL.")
    return CourseTest(**vars(line.result(frac, text)), figures={"prediction_nll": nll})


# The hidden prediction set, as the kit's lm_model.PUBLIC_SET: its targets are revealed one step at a time. With the
# hidden rows at hand the validation rows add nothing graded, so they are not run.
HIDDEN_SET = ("test", "prediction_test.npz", "hidden/prediction_test_out.npz")
REVEAL_CHILD = Path(__file__).with_name("model_reveal_child.py")  # model_child.py's run, a hidden set step by step


@dataclass
class HiddenRun(lm_model.ModelRun):
    """A run that had the hidden rows at hand: its child could have written one into its own words, so those are
    named, not quoted, and no figure it could choose is shown."""

    hidden: bool = True
    child_words: set[str] = field(default_factory=set)
    # What the child says each of its steps took (cells, load, probe, teacher_forcing_<set>, generate,
    # predict): for the benchmarks only, never for a grade, since the child could say anything.
    steps: dict[str, float] = field(default_factory=dict)

    def said(self, text: str) -> str:
        """`text` (one of the run's texts) as the notes or a public line may show it: the child's own words are
        named, not quoted."""
        if text in self.child_words:
            return ("the message your notebook's code gave is not shown here, since that run had the hidden rows at "
                    "hand; the local grader (python autograder.py) shows it")
        return text

    def quoted(self, text: object, limit: int) -> str:
        """The child's `text`, kept to one line and remembered as the child's words."""
        said = quote(text, limit)
        self.child_words.add(said)
        return said


def model_run(ctx: GradeContext, settings: dict) -> lm_model.ModelRun:
    """The run of the handed-in model (lm_model.model_run's, made here): the kit's public run, or with the hidden
    rows graded, each of their characters revealed once the model has answered the step before, and every prompt
    of generation_test.npz generated from (the perplexity line scores them all)."""
    if "hidden" not in ctx.visibilities:
        public_run("the model on the public rows")
        return lm_model.public_run(ctx, settings)
    inputs = lm_model.model_inputs(ctx, HIDDEN_SET)
    if isinstance(inputs, str):
        return lm_model.ModelRun(inputs)
    hidden_run()  # after every public run of the submission (run_order.py)
    inputs = replace(inputs, generation=lm_common.fixture_array(ctx.case_root / generation.INPUTS, "inp"))
    result, finishing = HiddenRun(), []

    def prepare(scratch: Path) -> dict:
        task = lm_model.prepare(replace(inputs, sets={}), scratch)
        shutil.copyfile(REVEAL_CHILD, scratch / REVEAL_CHILD.name)
        for name, (inp, _out) in inputs.sets.items():  # the prompts only: the characters come one by one
            np.savez(scratch / "inputs" / f"{name}.npz", inp=inp)
        task["teacher_forcing"] = [{"name": n, "inputs": f"inputs/{n}.npz", "steps": PREDICTION_STEPS}
                                   for n in inputs.sets]
        finishing.append(reveal(scratch / "outputs", scratch / "inputs",
                                {n: out for n, (_, out) in inputs.sets.items()}, keep_in=ctx.scratch_root))
        return task

    def collect(scratch: Path, run, report) -> None:
        revealer = finishing.pop()()
        try:
            # What the notes and the public lines read (the notebook's and the model's reports, the probe,
            # generate() and predict()): as the run had written it before its first hidden character.
            seen = revealer.seen or scratch
            if revealer.seen is not None:
                report = load_meta(seen / "outputs" / "notebook.json", root=seen)[0]
            meta = lm_model.collect(replace(inputs, sets={}), result, seen, run, report)
            result.child_words.update(result.call_problems.values())  # what the kit's collect quoted of the child
            if meta.get("load_error"):
                result.child_words.add(quote(meta["load_error"], 1500))
            if not result.problem:  # the model loaded
                final = load_meta(scratch / "outputs" / "model.json", root=scratch)[0] or {}
                seconds = load_meta(scratch / "outputs" / "seconds.json", root=scratch)[0] or {}
                _collect_hidden(inputs, result, final, run, revealer, seconds)
        finally:
            revealer.forget()

    try:
        # Hidden, so its end is said by kind alone (Limits.hidden): an exit code could carry a hidden character.
        hidden = replace(ctx, limits=replace(Limits.of(ctx.limits), hidden=True))
        lm_model.run_model(hidden, settings, prepare, collect, child=REVEAL_CHILD.name)
    finally:
        for finish in finishing:  # the run failed before its collect: stop revealing
            finish().forget()
    return result


def _collect_hidden(inputs: lm_model.Inputs, result: HiddenRun, meta: dict, run, revealer, said: dict) -> None:
    """The hidden sets' logits, as the child answered them step by step (its model.json: `meta`), and the child's
    timings (`said`: its seconds.json)."""
    for name, (_inp, out_ids) in inputs.sets.items():
        answers = revealer.answers[name]
        if len(answers) == out_ids.shape[1]:
            result.teacher_forced[name], result.targets[name] = np.stack(answers, axis=1).astype(np.float32), out_ids
        else:
            why = revealer.problems.get(name) or quote(meta.get(name) or "", 700) or f"the process {run.describe()}"
            result.set_problems[name] = result.quoted(
                f"your model answered {len(answers)} of {out_ids.shape[1]} steps: {why}", 800)
    said = said if isinstance(said, dict) else {}
    result.steps = {clean_text(k)[:40]: float(v) for k, v in list(said.items())[:16]
                    if type(v) in (int, float) and 0 <= v < 1e9}  # a bounded number, never a huge int


def reveal(outputs: Path, inputs: Path, sets: dict[str, np.ndarray], keep_in: Path | None = None):
    """Start revealing each hidden set's true characters (set -> targets (B, steps)) into the folder `inputs`
    beside the model's run, each once the run has answered the step it grades in `outputs`; returns the
    function that stops it (once the child is gone) and gives the Revealer (.answers, .problems). `keep_in`: where
    the Revealer keeps what the run wrote first (the submission's scratch folder, which a killed batch's successor
    sweeps; the system's temp folder if None)."""
    fd = os.open(inputs, DIR_FLAGS)  # a descriptor of the folder itself (never a link's), before the child starts
    revealer = Revealer(outputs, fd, sets, keep_in)
    revealer.start()

    def finish() -> Revealer:
        revealer.stop.set()
        revealer.join()
        os.close(fd)
        return revealer

    return finish


# What the run writes before its first hidden character and a visible note or a public line reads (the notebook's
# report, the model's, the causality probe, generate() and predict()): kept as it was then, out of the run's reach.
SEEN_BEFORE_REVEAL = ("notebook.json", "model.json", "probe_x.npy", "probe_changed.npy", "generated.npy",
                      "predicted.npy")


class Revealer(threading.Thread):
    """Reveals each true character once the child has answered the step it grades; before the first, keeps what
    the child had written (SEEN_BEFORE_REVEAL) in `seen`, a folder of the grader's."""

    def __init__(self, outputs: Path, inputs_fd: int, sets: dict[str, np.ndarray], keep_in: Path | None = None):
        super().__init__(daemon=True)
        self.keep_in = keep_in
        self.outputs, self.inputs_fd, self.sets = outputs, inputs_fd, sets
        self.answers: dict[str, list[np.ndarray]] = {name: [] for name in sets}
        self.problems: dict[str, str] = {}
        self.stop = threading.Event()
        self.seen: Path | None = None

    def keep_what_was_written(self) -> None:
        """Copy SEEN_BEFORE_REVEAL as the child wrote it (each read as the grader reads it) into `seen`."""
        self.seen = Path(tempfile.mkdtemp(prefix="gradelib-seen-", dir=self.keep_in))
        kept, scratch = self.seen / "outputs", self.outputs.parent
        kept.mkdir()
        for name in SEEN_BEFORE_REVEAL:
            if name.endswith(".npy"):
                arr = read_array(self.outputs / name, scratch)[0]
                if arr is not None:
                    np.save(kept / name, arr, allow_pickle=False)
            else:
                data = load_meta(self.outputs / name, root=scratch)[0]
                if data is not None:
                    (kept / name).write_text(json.dumps(data))

    def forget(self) -> None:
        if self.seen is not None:
            shutil.rmtree(self.seen, ignore_errors=True)

    def run(self) -> None:
        for name, targets in self.sets.items():
            rows, steps = targets.shape
            for t in range(steps):
                logits = self._wait_for(self.outputs / name / f"step_{t}.npy")
                if logits is None:
                    return
                why = logits_problem(logits, (rows, VOCAB_SIZE))
                if why:
                    self.problems[name] = f"step {t}: {why}"
                    break
                self.answers[name].append(logits.astype(np.float32))
                if self.seen is None:
                    self.keep_what_was_written()
                final = f"{name}_reveal_{t}.npy"
                try:
                    if _exists(final, self.inputs_fd):
                        raise FileExistsError(17, "the name is taken")
                    # Written under a temporary name, then renamed: the child never reads half a file.
                    fd = os.open(f".{final}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o644, dir_fd=self.inputs_fd)
                    with os.fdopen(fd, "wb") as fh:
                        np.save(fh, targets[:, t].astype(np.int64), allow_pickle=False)
                    os.rename(f".{final}.tmp", final, src_dir_fd=self.inputs_fd, dst_dir_fd=self.inputs_fd)
                except OSError as exc:  # the child planted something under one of the names
                    self.problems[name] = f"step {t}: the grader could not reveal the next character ({exc.strerror})"
                    break

    def _wait_for(self, path: Path) -> np.ndarray | None:
        # The sandbox's time limit bounds the wait: `stop` is set once the child is gone. A step comes within a few
        # ms of the reveal before it; the first, after the cells, generate() and predict(), takes seconds.
        pause = 0.002
        while not self.stop.is_set():
            arr = read_array(path, self.outputs.parent)[0] if path.is_file() else None
            if arr is not None:
                return arr
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return None


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
