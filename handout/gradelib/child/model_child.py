"""Rebuilds the handin's trained model from notebook 3's own code and model.pt, and runs it (inside the child).

task.json names the notebook and the checkpoint; the child

1. runs the notebook's code cells with notebook_child.py's machinery (cells tagged
   skip-grading, i.e. training, never run), so the student's own ModelConfig,
   CausalLanguageModel and generate() are defined;
2. builds CausalLanguageModel(ModelConfig(**config)) with the config stored in the
   checkpoint ({"config": ..., "state_dict": ...}), or the notebook's CONFIG for a
   bare state dict, and loads the weights strictly; outputs/model.json says how;
3. causality probe: logits of inputs/probe.npz's `x` and `x_changed` (the same rows
   with the tokens after `position` replaced), for the grader to compare;
4. teacher forcing for each prediction set the task names. A hidden set, one step at
   a time: writes outputs/<set>/step_<t>.npy, the logits of the next character given
   the prompt and the true characters before t, and only then waits for the grader to
   reveal character t as inputs/<set>_reveal_<t>.npy, so the child never holds a
   target before it has answered the step the target grades. A public set (its
   targets are in the handout): the true characters come with the prompts, and one
   forward pass writes outputs/<set>/logits.npy, every step at once;
5. greedy generation with the notebook's generate(model, inp, steps) on
   inputs/generation.npz, and predict(model, inp, steps) on inputs/prediction.npz,
   written as outputs/generated.npy and outputs/predicted.npy (compared with the
   handin's arrays).

It knows no target it has not earned and no expected value.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import notebook_child  # noqa: E402
import numpy as np  # noqa: E402
from child_common import OUTPUTS, SCRATCH, load_task, short_exception  # noqa: E402

POLL_S = 0.002
# A grader that has not revealed a character this long after the step was answered is gone.
REVEAL_WAIT_S = 60.0


def save(path, array: np.ndarray) -> None:
    """Write atomically: the grader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)
    os.replace(tmp, path)


def write_report(report: dict) -> None:
    tmp = OUTPUTS / "model.json.tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh)
    os.replace(tmp, OUTPUTS / "model.json")


def build_model(namespace: dict, checkpoint: str):
    """(model, None) or (None, why it could not be built), with the notebook's own classes."""
    import torch

    for name in ("ModelConfig", "CausalLanguageModel"):
        if not callable(namespace.get(name)):
            return None, f"`{name}` is not defined after running notebook 3"
    try:
        ckpt = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file
        return None, f"model.pt could not be read by torch.load(weights_only=True): {short_exception(exc)}"
    if isinstance(ckpt, dict) and "state_dict" in ckpt:
        config, state = ckpt.get("config") or {}, ckpt["state_dict"]
        if not isinstance(config, dict):
            return None, "model.pt's 'config' is not a dict of ModelConfig arguments"
        try:
            cfg = namespace["ModelConfig"](**config)
        except Exception as exc:
            return None, f"ModelConfig(**config) failed for the config stored in model.pt: {short_exception(exc)}"
    else:
        state = ckpt
        cfg = namespace.get("CONFIG")
        if cfg is None:
            return None, "model.pt is a bare state dict and notebook 3 defines no CONFIG to build the model with"
    if not isinstance(state, dict):
        return None, f"model.pt holds a {type(state).__name__}, not a state dict"
    try:
        model = namespace["CausalLanguageModel"](cfg)
    except Exception as exc:
        return None, f"CausalLanguageModel(config) raised {short_exception(exc)}"
    try:
        result = model.load_state_dict(state, strict=False)
    except Exception as exc:  # shape mismatches raise even when strict=False
        return None, f"model.pt does not fit the notebook's model: {short_exception(exc)[:900]}"
    if result.missing_keys or result.unexpected_keys:
        parts = []
        if result.missing_keys:
            parts.append(f"missing keys {list(result.missing_keys)[:8]}")
        if result.unexpected_keys:
            parts.append(f"unexpected keys {list(result.unexpected_keys)[:8]}")
        return None, "model.pt does not fit the notebook's model: " + "; ".join(parts)
    model.eval()
    return model, None


def next_logits(model, seq: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(torch.as_tensor(seq, dtype=torch.long))
    return out[:, -1, :].detach().float().cpu().numpy()  # (B, V)


def teacher_forced(model, name: str, prompts: np.ndarray, steps: int) -> str:
    """Answer each step, then wait for its character; '' when all steps were answered."""
    folder = OUTPUTS / name
    folder.mkdir(exist_ok=True)
    seq = prompts.astype(np.int64)
    for t in range(steps):
        save(folder / f"step_{t}.npy", next_logits(model, seq))
        reveal = SCRATCH / "inputs" / f"{name}_reveal_{t}.npy"
        deadline = time.monotonic() + REVEAL_WAIT_S
        while not reveal.exists():
            if time.monotonic() > deadline:
                return f"no character revealed for step {t} in time"
            time.sleep(POLL_S)
        chars = np.load(reveal, allow_pickle=False).astype(np.int64).reshape(-1, 1)
        seq = np.concatenate([seq, chars], axis=1)
    return ""


def teacher_forced_given(model, name: str, prompts: np.ndarray, given: np.ndarray, steps: int) -> str:
    """Every step's logits from one forward pass over the prompt and the true characters."""
    import torch

    folder = OUTPUTS / name
    folder.mkdir(exist_ok=True)
    seq = np.concatenate([prompts, given[:, : steps - 1]], axis=1).astype(np.int64)
    with torch.no_grad():
        out = model(torch.as_tensor(seq, dtype=torch.long))
    first = prompts.shape[1] - 1
    save(folder / "logits.npy", out[:, first : first + steps, :].detach().float().cpu().numpy())  # (B, steps, V)
    return ""


def call(namespace: dict, name: str, report: dict, timeout_s: float, wall_s: float, *args):
    fn = namespace.get(name)
    if not callable(fn):
        report[name] = f"`{name}` is not defined after running notebook 3"
        return None
    limit = notebook_child.time_limit(timeout_s, wall_s)
    try:
        with limit:
            value = fn(*args)
        return notebook_child.convert(value)
    except notebook_child.GradingTimeout as exc:
        report[name] = f"`{name}` did not return within {exc.describe(limit)}"
    except BaseException as exc:
        report[name] = f"`{name}` raised {short_exception(exc)}"
    return None


def main() -> None:
    task = load_task()
    started = time.monotonic()
    budget = float(task.get("budget_s", 120.0))
    OUTPUTS.mkdir(exist_ok=True)
    sys.stdout = sys.stderr = notebook_child.BoundedSink(notebook_child.MAX_CAPTURED_OUTPUT)
    import torch

    torch.set_num_threads(1)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__, "grader": notebook_child.OfflineGrader()}
    seconds: dict[str, float] = {}  # how long each step took, for the benchmarks
    mark = time.monotonic()

    def lap(step: str) -> None:
        nonlocal mark
        now = time.monotonic()
        seconds[step] = round(now - mark, 4)
        mark = now

    cells = notebook_child.run_notebook(task, namespace, budget * 0.5)
    lap("cells")
    torch.set_num_threads(1)  # the notebook may have asked for more
    report: dict = {
        "cells": cells.get("cells", []),
        "read_error": cells.get("read_error"),
        "load_error": None,
        "calls": {},
        "seconds": seconds,
    }
    if cells.get("read_error"):
        write_report(report)
        return
    model, why = build_model(namespace, str(SCRATCH / task["checkpoint"]))
    if model is None:
        report["load_error"] = why
        write_report(report)
        return
    report["parameters"] = int(sum(p.numel() for p in model.parameters()))
    lap("load")
    write_report(report)
    try:
        with np.load(SCRATCH / "inputs" / "probe.npz", allow_pickle=False) as probe:
            save(OUTPUTS / "probe_x.npy", model(torch.as_tensor(probe["x"], dtype=torch.long)).detach().float().numpy())
            save(OUTPUTS / "probe_changed.npy",
                 model(torch.as_tensor(probe["x_changed"], dtype=torch.long)).detach().float().numpy())
    except BaseException as exc:
        report["probe"] = f"the model raised {short_exception(exc)}"
    lap("probe")
    for entry in task["teacher_forcing"]:
        try:
            with np.load(SCRATCH / entry["inputs"], allow_pickle=False) as data:
                prompts = data["inp"]
                given = data["given"] if entry.get("given") else None
            if given is not None:
                report[entry["name"]] = teacher_forced_given(model, entry["name"], prompts, given, int(entry["steps"]))
            else:
                report[entry["name"]] = teacher_forced(model, entry["name"], prompts, int(entry["steps"]))
        except BaseException as exc:
            report[entry["name"]] = f"the model raised {short_exception(exc)}"
        lap(f"teacher_forcing_{entry['name']}")
    call_s = float(task.get("call_timeout_s", 30.0))

    def half_left() -> float:  # the wall-clock cap of a call: generate and predict both get their turn
        return max((budget - (time.monotonic() - started)) / 2, 0.5)

    with np.load(SCRATCH / "inputs" / "generation.npz", allow_pickle=False) as data:
        prompts = torch.from_numpy(data["inp"].copy())
    ids = call(
        namespace, "generate", report["calls"], call_s, half_left(), model, prompts, int(task["generation_steps"])
    )
    if ids is not None:
        save(OUTPUTS / "generated.npy", np.asarray(ids))
    lap("generate")
    with np.load(SCRATCH / "inputs" / "prediction.npz", allow_pickle=False) as data:
        prompts = torch.from_numpy(data["inp"].copy())
    logits = call(
        namespace, "predict", report["calls"], call_s, half_left(), model, prompts, int(task["prediction_steps"])
    )
    if logits is not None:
        save(OUTPUTS / "predicted.npy", np.asarray(logits))
    lap("predict")
    write_report(report)


if __name__ == "__main__":
    main()
