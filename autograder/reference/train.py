"""Train the reference language model and write its checkpoint and handin arrays (`make reference-model`).

    python -m autograder.reference.train [--lm-dir fixtures/lm] [--steps 3678] [--seed 0]
                                         [--config d_model=32,n_layers=1] [--init CKPT]

Trains autograder/reference/model.py's CausalLanguageModel on <lm-dir>/train.txt with
the settings notebook 3 uses, on 2 CPU threads, for a number of optimisation steps
(STEPS: what the default corpus needs, whatever the size of this one), and records the
two graded figures exactly as the course grader computes them for a handed-in model
at the end of an epoch once EVAL_EVERY steps have passed since the last record:

- prediction NLL: the teacher-forced mean NLL of the 20 true characters after each
  prompt of prediction.npz (validation), each predicted from the prompt and the true
  characters before it;
- generation perplexity: the oracle's perplexity of the greedy generation for
  generation_test.npz (30 characters per prompt);

with whether they earn full credit under the rubric's thresholds -- when those were set
for this corpus (rubric.toml's [calibration] corpus hash); otherwise it says so and
`make course` decides once it has set them. Training stops early when PATIENCE records in
a row do not improve the validation NLL by MIN_GAIN (`stalled`: a small corpus is learnt
as well as it will be long before STEPS), and keeps the weights of the record with the
lowest validation NLL. It then writes, into <lm-dir>:

    reference_model.pt          {"config": ModelConfig fields, "state_dict": float16 tensors}
    reference_predictions.npy   (128, 20, 30) float32: predict() on prediction_test.npz
    reference_generated.npy     (128, 30) int64: greedy generate() on generation_test.npz
    reference_generated.txt     the generations as text, one prompt per line
    reference_model.json        its inputs (corpus hash, config, steps, seed), parameters,
                                tokens/s, wall times, the figures per record, the steps
                                and epochs trained and the record whose weights it kept

The arrays are computed from the float16-rounded weights, so loading the
checkpoint reproduces them. Torch's CPU kernels are deterministic for a fixed
thread count; a different machine may still differ in the last bits.
--config and --steps shrink the run; --init starts from a checkpoint's weights (a warm start).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

# Waiting OpenMP threads sleep instead of spinning: on a busy machine a spinning thread
# burns the cycles its partner needs (measured: 5x the CPU time per batch at load 8).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

from autograder.grading import rubric_check as rubric
from gradelib.lm.vocab import decode

from ..oracle.metrics import generation_perplexity, prediction_nll
from ..oracle.oracles import load_model, load_oracle
from ..oracle.text import stream
from . import provenance
from .model import PAD, CausalLanguageModel, LMDataLoader, ModelConfig, generate, predict

REPO = Path(__file__).resolve().parents[2]
THREADS = 2

# The settings notebook 3 ships with (its CONFIG cell); keep the two in step.
CONFIG = ModelConfig(d_model=96, n_heads=4, n_layers=3, d_ff=384, dropout=0.05, emb_dropout=0.05)
# Optimisation steps: the default course's 6 epochs of 613 batches (full credit from step 3065).
# Steps, not epochs: an epoch of a small corpus is a few dozen steps, and epochs would make the
# reference's training depend on the corpus' size.
STEPS = 3678
EVAL_EVERY = 200  # steps between records of the graded figures at least (they end an epoch)
PATIENCE = 2  # records in a row without a better validation NLL that stop the training
# Nats/char a record must gain on the last that did, to count as better: at a slower pace the figure the
# thresholds come from moves by less than their rounding (0.05) in PATIENCE records. The default corpus'
# reference gains more at every record but the last (0.085, 0.031, 0.016, 0.004 nats).
MIN_GAIN = 0.02
BATCH_SIZE = 32
SEQ_LEN = 96
LR = 3e-3  # peak; linear warm-up over WARMUP steps, then cosine decay to 0
WARMUP = 100
WEIGHT_DECAY = 0.01
PREDICT_STEPS = 20
GENERATE_STEPS = 30


def lr_at(step: int, total: int) -> float:
    warmup = min(WARMUP, max(1, total // 10))  # a run cut to a few hundred steps still reaches the peak
    if step < warmup:
        return LR * (step + 1) / warmup
    return LR * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def load_arrays(lm_dir: Path) -> dict[str, np.ndarray]:
    out = {}
    with np.load(lm_dir / "prediction.npz") as f:
        out["val_inp"], out["val_out"] = f["inp"], f["out"]
    with np.load(lm_dir / "prediction_test.npz") as f:
        out["test_inp"] = f["inp"]
    with np.load(lm_dir / "generation_test.npz") as f:
        out["gen_inp"] = f["inp"]
    return out


@torch.no_grad()
def teacher_forced_logits(model, inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Logits (B, steps, 30) for each true character of `out`, given the prompt and the true characters
    before it: one causal forward pass over prompt + out[:, :-1] (what the grader reveals step by step)."""
    was_training = model.training
    model.eval()
    ids = torch.as_tensor(np.concatenate([inp, out[:, :-1]], axis=1), dtype=torch.long)
    logits = model(ids)[:, inp.shape[1] - 1 :].double().numpy()
    model.train(was_training)
    return logits


def evaluate(model, arrays: dict, oracle, eps: float) -> dict:
    """The two graded figures for the current weights, as the grader computes them."""
    t0 = time.perf_counter()
    nll = prediction_nll(teacher_forced_logits(model, arrays["val_inp"], arrays["val_out"]), arrays["val_out"])
    generated = generate(model, arrays["gen_inp"], GENERATE_STEPS).numpy()
    ppl = generation_perplexity(oracle, arrays["gen_inp"], generated, eps)
    return {"val_prediction_nll": nll, "generation_perplexity": ppl, "eval_s": time.perf_counter() - t0}


def round_to_half(model: CausalLanguageModel) -> dict[str, torch.Tensor]:
    """The float16 state dict, and the model's own weights set to its rounded values."""
    half = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    model.load_state_dict(half)
    return half


def parse_config(text: str | None) -> ModelConfig:
    """CONFIG with `key=value,key=value` overrides (ints and floats), e.g. "d_model=32,n_layers=1"."""
    fields = asdict(CONFIG)
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in fields or not value:
            raise SystemExit(f"--config: expected key=value with a key of {sorted(fields)}, got {item!r}")
        fields[key] = type(fields[key])(value)
    return ModelConfig(**fields)


def training_inputs(lm_dir: Path, config: ModelConfig, steps: int, seed: int,
                    batch_size: int = BATCH_SIZE, seq_len: int = SEQ_LEN, init: Path | None = None) -> dict:
    """Everything the trained weights depend on: equal inputs, equal model (on the same machine)."""
    return {
        "init_sha256": hashlib.sha256(Path(init).read_bytes()).hexdigest() if init else None,
        "corpus_sha256": provenance.corpus_hash(lm_dir),
        "config": asdict(config),
        "steps": steps,
        "seed": seed,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "lr": LR, "warmup": WARMUP, "weight_decay": WEIGHT_DECAY, "threads": THREADS,
        "eval_every": EVAL_EVERY, "patience": PATIENCE, "min_gain": MIN_GAIN,
    }


def stalled(nll: list[float]) -> bool:
    """Whether the last PATIENCE of these validation NLLs (one per record) each failed to gain MIN_GAIN on the
    last record that did: the rule that stops the training."""
    bar, misses = math.inf, 0
    for value in nll:
        if value < bar - MIN_GAIN:
            bar, misses = value, 0
        else:
            misses += 1
    return misses >= PATIENCE


def recorded_inputs(lm_dir: Path, figures: dict) -> dict | None:
    """reference_model.json's inputs in today's form. A record of the epoch-counted training (epochs and a
    step cap, before steps) becomes its number of steps; it trained every step of them and kept the last
    weights, which today's rule also does when its records came as today's would, the rule would not have
    stopped before the last and the last had the lowest NLL -- else it stays unequal."""
    inputs = figures.get("inputs")
    if not isinstance(inputs, dict) or "epochs" not in inputs:
        return inputs
    inputs = {"init_sha256": None, **inputs}
    epochs, cap = inputs.pop("epochs"), inputs.pop("max_steps", None)
    loader = LMDataLoader(stream((lm_dir / "train.txt").read_text().splitlines()), inputs["batch_size"],
                          inputs["seq_len"], seed=inputs["seed"])
    steps = epochs * len(loader) if cap is None else min(cap, epochs * len(loader))
    nll = [row["val_prediction_nll"] for row in figures.get("epochs", [])]
    steps_at = [row["steps"] for row in figures.get("epochs", [])]
    kept = (bool(nll) and nll[-1] == min(nll) and not any(stalled(nll[:i]) for i in range(1, len(nll)))
            and all(b - a >= EVAL_EVERY for a, b in zip([0, *steps_at], steps_at[:-1])))
    return {**inputs, "steps": steps, **({"eval_every": EVAL_EVERY, "patience": PATIENCE, "min_gain": MIN_GAIN}
                                         if kept else {"eval_every": None})}


def thresholds_for(lm_dir: Path, rubric_path: Path | None = None) -> tuple[float, float] | None:
    """(full-credit prediction NLL, full-credit generation perplexity) when the rubric's were set on
    this corpus, else None: thresholds of another corpus say nothing about this one."""
    if provenance.threshold_hash(rubric_path) != provenance.corpus_hash(lm_dir):
        return None
    settings = rubric.load(rubric_path)
    return (float(settings["prediction"].settings["full_credit_nll"]),
            float(settings["generation"].settings["full_credit_perplexity"]))


def mark_full_credit(figures: dict, thresholds: tuple[float, float] | None) -> None:
    """Per record, whether both figures earn full credit; and the wall time of the first record that does."""
    figures["full_credit"] = None if thresholds is None else {
        "val_prediction_nll": thresholds[0], "generation_perplexity": thresholds[1]}
    for row in figures["epochs"]:
        row["passes_full_credit"] = None if thresholds is None else (
            row["val_prediction_nll"] <= thresholds[0] and row["generation_perplexity"] <= thresholds[1])
    passing = [r["wall_s"] for r in figures["epochs"] if r["passes_full_credit"]]
    figures["wall_s_to_full_credit"] = passing[0] if passing else None


def full_credit_text(figures: dict) -> str:
    """"full credit reached after N s", or why there is no such time (never a NaN)."""
    if figures.get("full_credit") is None:
        return "full credit: no thresholds set for this corpus yet (make course sets them)"
    last = figures["epochs"][-1]
    if figures.get("wall_s_to_full_credit") is None:
        return f"full credit not reached in {last['steps']} steps ({last['epoch']} epochs)"
    row = next(r for r in figures["epochs"] if r["passes_full_credit"])
    return (
        f"full credit reached after {figures['wall_s_to_full_credit']:.0f} s "
        f"(step {row['steps']}, epoch {row['epoch']})"
    )


def initial_config(init: Path | None, config: ModelConfig) -> ModelConfig:
    """The config to train: a warm start's own (it must be), else `config`."""
    if init is None:
        return config
    return load_model(init).cfg


def _train_epoch(model: CausalLanguageModel, loader: LMDataLoader, opt: torch.optim.Optimizer, step: int, steps: int,
                 say: Callable, start: float) -> tuple[int, int, torch.Tensor | None]:
    """One pass over the training batches, or to step `steps`: (the step reached, the tokens it trained on, the
    last batch's loss)."""
    model.train()
    tokens, loss = 0, None
    for inputs, targets in loader:
        if step >= steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        loss = F.cross_entropy(model(inputs).reshape(-1, model.cfg.vocab_size), targets.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += int((targets != PAD).sum())
        if step % 500 == 0:
            say(f"  step {step}/{steps}: loss {loss.item():.3f}, {time.perf_counter() - start:.0f} s", flush=True)
    return step, tokens, loss


def _say_record(say: Callable, row: dict, thresholds: tuple[float, float] | None) -> None:
    credit = "" if thresholds is None else f" (full credit <= {thresholds[0]:g})"
    credit_g = "" if thresholds is None else f" (full credit <= {thresholds[1]:g})"
    say(
        f"epoch {row['epoch']}, step {row['steps']}: train loss {row['train_loss']:.3f}  validation prediction NLL "
        f"{row['val_prediction_nll']:.3f}{credit}  "
        f"generation perplexity {row['generation_perplexity']:.2f}{credit_g}  "
        f"{row['wall_s']:.0f} s",
        flush=True,
    )


def _finish(figures: dict, step: int, steps: int, spent: dict, start: float, say: Callable) -> None:
    """The training's own figures: where it stopped and why, its speed and its time."""
    stopped = stalled([r["val_prediction_nll"] for r in figures["epochs"]]) and step < steps
    if stopped:
        say(f"  stopped at step {step}: the validation NLL has not gained {MIN_GAIN} nats/char for {PATIENCE} records; "
            f"keeping the weights of step {figures['kept']['steps']} (epoch {figures['kept']['epoch']})", flush=True)
    figures["steps"], figures["stopped_early"] = step, stopped
    figures["train_tokens_per_s"] = spent["tokens"] / max(spent["train_s"], 1e-9)
    figures["train_s"] = spent["train_s"]
    # Process CPU seconds of the training steps: on a shared machine the wall time above
    # includes waiting for cores; cpu_s / THREADS is the least that 2 free cores would need.
    figures["train_cpu_s"] = spent["cpu_s"]
    figures["wall_s"] = time.perf_counter() - start


def train(lm_dir: Path, steps: int, seed: int, config: ModelConfig = CONFIG,
          batch_size: int = BATCH_SIZE, seq_len: int = SEQ_LEN, rubric_path: Path | None = None,
          quiet: bool = False, init: Path | None = None) -> tuple[CausalLanguageModel, dict]:
    """Train from scratch, or from the weights of checkpoint `init` (a warm start: its config wins)."""
    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    say = (lambda *a, **k: None) if quiet else print
    eps = float(rubric.load(rubric_path)["generation"].settings["smoothing_eps"])
    oracle = load_oracle(lm_dir, eps)
    arrays = load_arrays(lm_dir)
    train_stream = stream((lm_dir / "train.txt").read_text().splitlines())

    config = initial_config(init, config)
    model = CausalLanguageModel(config)
    if init is not None:
        model.load_state_dict({k: v.float() for k, v in load_model(init).state_dict().items()})
    loader = LMDataLoader(train_stream, batch_size, seq_len, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.98))
    say(
        f"reference model: {model.num_parameters():,} parameters, {len(train_stream):,} training tokens, "
        f"{len(loader)} batches of {batch_size} x {seq_len} per epoch, {THREADS} threads; {steps:,} steps "
        f"(about {steps / len(loader):.1f} epochs) unless the validation NLL stops improving",
        flush=True,
    )
    figures: dict = {
        "inputs": training_inputs(lm_dir, config, steps, seed, batch_size, seq_len, init),
        "parameters": model.num_parameters(), "config": asdict(config), "epochs": [], "seed": seed,
        "corpus": provenance.corpus_label(lm_dir),
    }
    thresholds = thresholds_for(lm_dir, rubric_path)
    if thresholds is None:
        say("  (the rubric's thresholds were set for another corpus: "
            "full credit is decided once `make course` sets them)")
    spent, start = {"tokens": 0, "train_s": 0.0, "cpu_s": 0.0}, time.perf_counter()
    step, best, best_state, epoch, recorded_at = 0, math.inf, None, 0, 0
    while step < steps and not stalled([r["val_prediction_nll"] for r in figures["epochs"]]):
        epoch += 1
        t0, c0 = time.perf_counter(), time.process_time()
        step, tokens, loss = _train_epoch(model, loader, opt, step, steps, say, start)
        spent["tokens"] += tokens
        spent["train_s"] += time.perf_counter() - t0
        spent["cpu_s"] += time.process_time() - c0
        if step - recorded_at < EVAL_EVERY and step < steps:
            continue
        recorded_at = step
        row = {"epoch": epoch, "steps": step, "train_loss": loss.item(), **evaluate(model, arrays, oracle, eps)}
        row["wall_s"] = time.perf_counter() - start
        figures["epochs"].append(row)
        if row["val_prediction_nll"] < best:
            best, best_state = row["val_prediction_nll"], {k: v.detach().clone() for k, v in model.state_dict().items()}
            figures["kept"] = {"epoch": epoch, "steps": step}
        _say_record(say, row, thresholds)
    model.load_state_dict(best_state)
    _finish(figures, step, steps, spent, start, say)
    mark_full_credit(figures, thresholds)
    return model, figures


def write_outputs(model: CausalLanguageModel, figures: dict, lm_dir: Path, rubric_path: Path | None = None,
                  quiet: bool = False) -> None:
    say = (lambda *a, **k: None) if quiet else print
    arrays = load_arrays(lm_dir)
    half = round_to_half(model)
    torch.save({"config": asdict(model.cfg), "state_dict": half}, lm_dir / "reference_model.pt")
    logits = predict(model, arrays["test_inp"], PREDICT_STEPS).numpy().astype(np.float32)
    generated = generate(model, arrays["gen_inp"], GENERATE_STEPS).numpy().astype(np.int64)
    np.save(lm_dir / "reference_predictions.npy", logits)
    np.save(lm_dir / "reference_generated.npy", generated)
    lines = [f"{decode(p)} -> {decode(g)}" for p, g in zip(arrays["gen_inp"], generated)]
    (lm_dir / "reference_generated.txt").write_text("\n".join(lines) + "\n")
    eps = float(rubric.load(rubric_path)["generation"].settings["smoothing_eps"])
    # The graded figures of the float16 weights, from the generations just written (evaluate() would regenerate them).
    final = {
        "val_prediction_nll": prediction_nll(
            teacher_forced_logits(model, arrays["val_inp"], arrays["val_out"]), arrays["val_out"]
        ),
        "generation_perplexity": generation_perplexity(load_oracle(lm_dir, eps), arrays["gen_inp"], generated, eps),
    }
    figures["float16_checkpoint"] = final
    figures["checkpoint_bytes"] = (lm_dir / "reference_model.pt").stat().st_size
    (lm_dir / "reference_model.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    nll = final["val_prediction_nll"]
    say(f"wrote {lm_dir}/reference_model.pt ({figures['checkpoint_bytes'] / 1e6:.2f} MB, float16)")
    say(f"wrote {lm_dir}/reference_predictions.npy {logits.shape} {logits.dtype}")
    say(f"wrote {lm_dir}/reference_generated.npy {generated.shape} {generated.dtype} and reference_generated.txt")
    say(f"wrote {lm_dir}/reference_model.json")
    say(
        f"reference: {figures['parameters']:,} parameters, {figures['train_tokens_per_s']:,.0f} training tokens/s, "
        f"trained in {figures['train_s']:.0f} s ({figures['wall_s']:.0f} s with evaluation); "
        f"{full_credit_text(figures)}"
    )
    say(
        f"float16 checkpoint: validation prediction NLL {nll:.4f} nats/char (perplexity {math.exp(nll):.3f}), "
        f"generation perplexity {final['generation_perplexity']:.3f}"
    )


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the reference language model on <lm-dir>/train.txt.")
    ap.add_argument("--lm-dir", type=Path, default=REPO / "fixtures" / "lm")
    ap.add_argument("--steps", type=positive, default=STEPS, help=f"optimisation steps (default {STEPS})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--config", default=None, help="ModelConfig overrides, key=value,... (default: notebook 3's CONFIG)"
    )
    ap.add_argument(
        "--init", type=Path, default=None, help="start from this checkpoint's weights and config (a warm start)"
    )
    args = ap.parse_args(argv)
    try:
        model, figures = train(args.lm_dir, args.steps, args.seed, parse_config(args.config), init=args.init)
    except provenance.StaleCalibration as exc:
        raise SystemExit(f"reference model: {exc}") from None
    write_outputs(model, figures, args.lm_dir)


if __name__ == "__main__":
    main()
