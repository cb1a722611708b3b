"""Rebuilds the handin's model from notebook 3's code and model.pt and runs it after notebook_child.py's cells: the
causality probe, generate(), predict(), each prediction set's teacher-forced logits (lm_model.py); see model.json."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import notebook_child  # noqa: E402
import numpy as np  # noqa: E402
from child_common import OUTPUTS, SCRATCH, load_arrays, load_task, save, short_exception  # noqa: E402


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


def teacher_forced(model, name: str, data: dict, steps: int) -> str:
    """Write the set's teacher-forced logits, every step at once from one forward pass over the prompts `data["inp"]`
    and the true characters `data["given"]`; '' when all steps were answered."""
    first = data["inp"].shape[1] - 1
    seq = np.concatenate([data["inp"], data["given"][:, : steps - 1]], axis=1).astype(np.int64)
    (OUTPUTS / name).mkdir(exist_ok=True)
    save(OUTPUTS / name / "logits.npy", logits(model, seq)[:, first : first + steps, :])  # (B, steps, V)
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


def main(answer=teacher_forced) -> None:
    """Answer task.json: answer(model, set, its arrays, steps) answers each prediction set (the course's: its own)."""
    task = load_task()
    started = notebook_child.clock()
    budget = float(task.get("budget_s", 120.0))
    namespace, cells = notebook_child.run_cells(task, budget * 0.5)
    import torch

    report: dict = {"cells": cells.get("cells", []), "read_error": cells.get("read_error"), "load_error": None,
                    "calls": {}}
    model = None
    if not report["read_error"]:
        model, report["load_error"] = build_model(namespace, str(SCRATCH / task["checkpoint"]))
    save(OUTPUTS / "model.json", report)
    if model is None:
        return
    try:
        probe = load_arrays("inputs/probe.npz")
        for key, saved in (("x", "probe_x"), ("x_changed", "probe_changed")):
            save(OUTPUTS / f"{saved}.npy", logits(model, probe[key]))
    except BaseException as exc:
        report["probe"] = f"the model raised {short_exception(exc)}"
    for name, steps, saved in (("generate", "generation", "generated"), ("predict", "prediction", "predicted")):
        prompts = torch.from_numpy(load_arrays(f"inputs/{steps}.npz")["inp"])
        wall_s = max((budget - (notebook_child.clock() - started)) / 2, 0.5)  # half what is left: predict gets a turn
        value = call(namespace, name, report["calls"], float(task.get("call_timeout_s", 30.0)), wall_s, model,
                     prompts, int(task[f"{steps}_steps"]))
        if value is not None:
            save(OUTPUTS / f"{saved}.npy", np.asarray(value))
    save(OUTPUTS / "model.json", report)
    for entry in task["teacher_forcing"]:
        try:
            report[entry["name"]] = answer(model, entry["name"], load_arrays(entry["inputs"]), int(entry["steps"]))
        except BaseException as exc:
            report[entry["name"]] = f"the model raised {short_exception(exc)}"
    save(OUTPUTS / "model.json", report)


if __name__ == "__main__":
    main()
