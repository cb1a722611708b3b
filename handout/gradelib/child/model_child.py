"""Rebuilds the handin's trained model from notebook 3's own code and model.pt, and runs it (inside the child).

After notebook_child.py's run of the cells: the causality probe's logits, each prediction set's teacher-forced
logits, generate() and predict() (see lm_model.py); model.json says how it went. A hidden set is answered one step at
a time, each true character revealed only after the step it grades (inputs/<set>_reveal_<t>.npy).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import notebook_child  # noqa: E402
import numpy as np  # noqa: E402
from child_common import OUTPUTS, SCRATCH, load_arrays, load_task, save, short_exception  # noqa: E402

POLL_S = 0.002
REVEAL_WAIT_S = 60.0  # a grader that has not revealed a character this long after the step was answered is gone


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
        state, cfg = ckpt, namespace.get("CONFIG")
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
    parts = [f"{what} keys {list(keys)[:8]}" for what, keys in (("missing", result.missing_keys),
                                                                ("unexpected", result.unexpected_keys)) if keys]
    if parts:
        return None, "model.pt does not fit the notebook's model: " + "; ".join(parts)
    return model.eval(), None


def logits(model, seq: np.ndarray) -> np.ndarray:
    """The model's logits of the token ids `seq`, as float32 (B, T, V)."""
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(seq, dtype=torch.long)).detach().float().cpu().numpy()


def teacher_forced(model, name: str, prompts: np.ndarray, given: np.ndarray | None, steps: int) -> str:
    """Write the set's teacher-forced logits; '' when all steps were answered, else why not. With the true characters
    `given` (a public set), every step at once from one forward pass; else each step, then wait for its character."""
    folder = OUTPUTS / name
    folder.mkdir(exist_ok=True)
    if given is not None:
        first = prompts.shape[1] - 1
        seq = np.concatenate([prompts, given[:, : steps - 1]], axis=1).astype(np.int64)
        save(folder / "logits.npy", logits(model, seq)[:, first : first + steps, :])  # (B, steps, V)
        return ""
    seq = prompts.astype(np.int64)
    for t in range(steps):
        save(folder / f"step_{t}.npy", logits(model, seq)[:, -1, :])  # (B, V)
        reveal = SCRATCH / "inputs" / f"{name}_reveal_{t}.npy"
        deadline = time.monotonic() + REVEAL_WAIT_S
        while not reveal.exists():
            if time.monotonic() > deadline:
                return f"no character revealed for step {t} in time"
            time.sleep(POLL_S)
        seq = np.concatenate([seq, np.load(reveal, allow_pickle=False).astype(np.int64).reshape(-1, 1)], axis=1)
    return ""


def call(namespace: dict, name: str, report: dict, timeout_s: float, wall_s: float, *args):
    """The notebook's `name`(*args) under a time limit, as an ndarray; None (saying why in `report`) if none."""
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
    namespace, cells = notebook_child.run_cells(task, budget * 0.5)
    import torch

    seconds: dict[str, float] = {}  # how long each step took, for the benchmarks
    report: dict = {"cells": cells.get("cells", []), "read_error": cells.get("read_error"), "load_error": None,
                    "calls": {}, "seconds": seconds}

    def lap(step: str) -> None:
        seconds[step] = round(time.monotonic() - started - sum(seconds.values()), 4)

    lap("cells")
    model = None
    if not report["read_error"]:
        model, report["load_error"] = build_model(namespace, str(SCRATCH / task["checkpoint"]))
    if model is None:
        save(OUTPUTS / "model.json", report)
        return
    lap("load")
    save(OUTPUTS / "model.json", report)
    try:
        probe = load_arrays("inputs/probe.npz")
        for key, saved in (("x", "probe_x"), ("x_changed", "probe_changed")):
            save(OUTPUTS / f"{saved}.npy", logits(model, probe[key]))
    except BaseException as exc:
        report["probe"] = f"the model raised {short_exception(exc)}"
    lap("probe")
    for entry in task["teacher_forcing"]:
        try:
            data = load_arrays(entry["inputs"])
            given = data["given"] if entry.get("given") else None
            report[entry["name"]] = teacher_forced(model, entry["name"], data["inp"], given, int(entry["steps"]))
        except BaseException as exc:
            report[entry["name"]] = f"the model raised {short_exception(exc)}"
        lap(f"teacher_forcing_{entry['name']}")
    for name, steps, saved in (("generate", "generation", "generated"), ("predict", "prediction", "predicted")):
        prompts = torch.from_numpy(load_arrays(f"inputs/{steps}.npz")["inp"])
        # The wall-clock cap of a call is half the time left: generate and predict both get their turn.
        wall_s = max((budget - (time.monotonic() - started)) / 2, 0.5)
        value = call(namespace, name, report["calls"], float(task.get("call_timeout_s", 30.0)), wall_s, model,
                     prompts, int(task[f"{steps}_steps"]))
        if value is not None:
            save(OUTPUTS / f"{saved}.npy", np.asarray(value))
        lap(name)
    save(OUTPUTS / "model.json", report)


if __name__ == "__main__":
    main()
