"""Train the reference language model and write its checkpoint and handin arrays (`make reference-model`).

    python -m autograder.reference.train [--lm-dir fixtures/lm] [--epochs 6] [--seed 0]
                                         [--config d_model=32,n_layers=1] [--max-steps N]

Trains autograder/reference/model.py's CausalLanguageModel on <lm-dir>/train.txt with
the settings notebook 3 uses, on 2 CPU threads, and after every epoch records the two
graded figures exactly as the course grader computes them for a handed-in model:

- prediction NLL: the teacher-forced mean NLL of the 20 true characters after each
  prompt of prediction.npz (validation), each predicted from the prompt and the true
  characters before it;
- generation perplexity: the oracle's perplexity of the greedy generation for
  generation_test.npz (30 characters per prompt);

with whether they earn full credit under the rubric's thresholds -- when those were set
for this corpus (rubric.toml's [calibration] corpus hash); otherwise it says so and
`make course` decides once it has set them. It then writes, into <lm-dir>:

    reference_model.pt          {"config": ModelConfig fields, "state_dict": float16 tensors}
    reference_predictions.npy   (128, 20, 30) float32: predict() on prediction_test.npz
    reference_generated.npy     (128, 30) int64: greedy generate() on generation_test.npz
    reference_generated.txt     the generations as text, one prompt per line
    reference_model.json        its inputs (corpus hash, config, epochs, seed), parameters,
                                tokens/s, wall times and the figures per epoch

The arrays are computed from the float16-rounded weights, so loading the
checkpoint reproduces them. Torch's CPU kernels are deterministic for a fixed
thread count; a different machine may still differ in the last bits.
--config and --max-steps shrink the run; --init starts from a checkpoint's weights (a warm
start: the tests fine-tune the shipped reference for a few steps on another corpus).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path

# Waiting OpenMP threads sleep instead of spinning: on a busy machine a spinning thread
# burns the cycles its partner needs (measured: 5x the CPU time per batch at load 8).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

from gradelib import rubric
from gradelib.lm.metrics import generation_perplexity, prediction_nll
from gradelib.lm.vocab import decode, stream

from ..oracle.oracles import load_model, load_oracle
from . import provenance
from .model import PAD, CausalLanguageModel, LMDataLoader, ModelConfig, generate, predict

REPO = Path(__file__).resolve().parents[2]
THREADS = 2

# The settings notebook 3 ships with (its CONFIG cell); keep the two in step.
CONFIG = ModelConfig(d_model=96, n_heads=4, n_layers=3, d_ff=384, dropout=0.05, emb_dropout=0.05)
EPOCHS = 6
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


def training_inputs(lm_dir: Path, config: ModelConfig, epochs: int, seed: int, max_steps: int | None,
                    batch_size: int = BATCH_SIZE, seq_len: int = SEQ_LEN, init: Path | None = None) -> dict:
    """Everything the trained weights depend on: equal inputs, equal model (on the same machine)."""
    return {
        "init_sha256": hashlib.sha256(Path(init).read_bytes()).hexdigest() if init else None,
        "corpus_sha256": provenance.corpus_hash(lm_dir),
        "config": asdict(config),
        "epochs": epochs,
        "seed": seed,
        "max_steps": max_steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "lr": LR, "warmup": WARMUP, "weight_decay": WEIGHT_DECAY, "threads": THREADS,
    }


def thresholds_for(lm_dir: Path, rubric_path: Path | None = None) -> tuple[float, float] | None:
    """(full-credit prediction NLL, full-credit generation perplexity) when the rubric's were set on
    this corpus, else None: thresholds of another corpus say nothing about this one."""
    if provenance.threshold_hash(rubric_path) != provenance.corpus_hash(lm_dir):
        return None
    settings = rubric.load(rubric_path)
    return (float(settings["prediction"].settings["full_credit_nll"]),
            float(settings["generation"].settings["full_credit_perplexity"]))


def mark_full_credit(figures: dict, thresholds: tuple[float, float] | None) -> None:
    """Per epoch, whether both figures earn full credit; and the wall time of the first epoch that does."""
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
    if figures.get("wall_s_to_full_credit") is None:
        return f"full credit not reached in {len(figures['epochs'])} epochs"
    epoch = next(r["epoch"] for r in figures["epochs"] if r["passes_full_credit"])
    return f"full credit reached after {figures['wall_s_to_full_credit']:.0f} s (epoch {epoch})"


def initial_config(init: Path | None, config: ModelConfig) -> ModelConfig:
    """The config to train: a warm start's own (it must be), else `config`."""
    if init is None:
        return config
    return load_model(init).cfg


def train(lm_dir: Path, epochs: int, seed: int, config: ModelConfig = CONFIG, max_steps: int | None = None,
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
    total = epochs * len(loader) if max_steps is None else min(max_steps, epochs * len(loader))
    say(
        f"reference model: {model.num_parameters():,} parameters, {len(train_stream):,} training tokens, "
        f"{len(loader)} batches of {batch_size} x {seq_len} per epoch, {THREADS} threads"
        + (f", cut to {total} steps" if max_steps is not None else ""),
        flush=True,
    )
    figures: dict = {
        "inputs": training_inputs(lm_dir, config, epochs, seed, max_steps, batch_size, seq_len, init),
        "parameters": model.num_parameters(), "config": asdict(config), "epochs": [], "seed": seed,
        "corpus": provenance.corpus_label(lm_dir),
    }
    thresholds = thresholds_for(lm_dir, rubric_path)
    if thresholds is None:
        say("  (the rubric's thresholds were set for another corpus: full credit is decided once `make course` sets them)")
    step, tokens, train_s, cpu_s, start = 0, 0, 0.0, 0.0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        t0, c0 = time.perf_counter(), time.process_time()
        for inputs, targets in loader:
            if step >= total:
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total)
            loss = F.cross_entropy(model(inputs).reshape(-1, config.vocab_size), targets.reshape(-1), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tokens += int((targets != PAD).sum())
            if step % 500 == 0:
                say(f"  step {step}/{total}: loss {loss.item():.3f}, {time.perf_counter() - start:.0f} s", flush=True)
        train_s += time.perf_counter() - t0
        cpu_s += time.process_time() - c0
        row = {"epoch": epoch, "steps": step, "train_loss": loss.item(), **evaluate(model, arrays, oracle, eps)}
        row["wall_s"] = time.perf_counter() - start
        figures["epochs"].append(row)
        credit = "" if thresholds is None else f" (full credit <= {thresholds[0]:g})"
        credit_g = "" if thresholds is None else f" (full credit <= {thresholds[1]:g})"
        say(
            f"epoch {epoch}: train loss {row['train_loss']:.3f}  validation prediction NLL {row['val_prediction_nll']:.3f}"
            f"{credit}  generation perplexity {row['generation_perplexity']:.2f}{credit_g}  {row['wall_s']:.0f} s",
            flush=True,
        )
        if step >= total:
            break
    figures["train_tokens_per_s"] = tokens / max(train_s, 1e-9)
    figures["train_s"] = train_s
    # Process CPU seconds of the training steps: on a shared machine the wall time above
    # includes waiting for cores; cpu_s / THREADS bounds what 2 free cores would need.
    figures["train_cpu_s"] = cpu_s
    figures["wall_s"] = time.perf_counter() - start
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
        "val_prediction_nll": prediction_nll(teacher_forced_logits(model, arrays["val_inp"], arrays["val_out"]), arrays["val_out"]),
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
        f"trained in {figures['train_s']:.0f} s ({figures['wall_s']:.0f} s with evaluation); {full_credit_text(figures)}"
    )
    say(
        f"float16 checkpoint: validation prediction NLL {nll:.4f} nats/char (perplexity {math.exp(nll):.3f}), "
        f"generation perplexity {final['generation_perplexity']:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the reference language model on <lm-dir>/train.txt.")
    ap.add_argument("--lm-dir", type=Path, default=REPO / "fixtures" / "lm")
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default=None, help="ModelConfig overrides, key=value,... (default: notebook 3's CONFIG)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps (for tests)")
    ap.add_argument("--init", type=Path, default=None, help="start from this checkpoint's weights and config (a warm start)")
    args = ap.parse_args(argv)
    try:
        model, figures = train(args.lm_dir, args.epochs, args.seed, parse_config(args.config), args.max_steps, init=args.init)
    except provenance.StaleCalibration as exc:
        raise SystemExit(f"reference model: {exc}") from None
    write_outputs(model, figures, args.lm_dir)


if __name__ == "__main__":
    main()
