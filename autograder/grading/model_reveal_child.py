"""The course grader's model harness (runs in the child, beside the kit's model_child.py): a hidden set is answered one
step at a time, each true character revealed only after the step it grades (inputs/<set>_reveal_<t>.npy, written by
model_quality.py's Revealer), so no look-ahead can see a target before the step it grades. It also times each step
of model_child.py's run (outputs/seconds.json), for the benchmarks only.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_child  # noqa: E402
import notebook_child  # noqa: E402
import numpy as np  # noqa: E402
from child_common import OUTPUTS, SCRATCH, save  # noqa: E402

POLL_S = 0.002
REVEAL_WAIT_S = 60.0  # a grader that has not revealed a character this long after the step was answered is gone
STARTED = time.monotonic()
SECONDS: dict[str, float] = {}  # step -> how long it took: cells, load, probe, teacher_forcing_<set>, generate, predict


def lap(step: str) -> None:
    """Record that `step` ended now (it began when the step before it ended)."""
    SECONDS[step] = round(time.monotonic() - STARTED - sum(SECONDS.values()), 4)


def timed(function, step):
    """`function`, which records a lap named step(*its arguments) when it returns (and the probe's, which ran just
    before the first generate(), when it begins)."""

    def run(*args):
        if "probe" not in SECONDS and "load" in SECONDS:
            lap("probe")
        value = function(*args)
        lap(step(*args))
        return value

    return run


def step_by_step(model, name: str, data: dict, steps: int) -> str:
    """Write the hidden set's logits a step at a time (outputs/<set>/step_<t>.npy, (B, V)), each true character read
    once revealed; '' when all steps were answered, else why not."""
    folder = OUTPUTS / name
    folder.mkdir(exist_ok=True)
    seq = data["inp"].astype(np.int64)
    for t in range(steps):
        save(folder / f"step_{t}.npy", model_child.logits(model, seq)[:, -1, :])
        reveal = SCRATCH / "inputs" / f"{name}_reveal_{t}.npy"
        deadline = time.monotonic() + REVEAL_WAIT_S
        while not reveal.exists():
            if time.monotonic() > deadline:
                return f"no character revealed for step {t} in time"
            time.sleep(POLL_S)
        seq = np.concatenate([seq, np.load(reveal, allow_pickle=False).astype(np.int64).reshape(-1, 1)], axis=1)
    return ""


if __name__ == "__main__":
    notebook_child.run_cells = timed(notebook_child.run_cells, lambda *_: "cells")
    model_child.build_model = timed(model_child.build_model, lambda *_: "load")
    model_child.call = timed(model_child.call, lambda namespace, name, *_: name)
    model_child.main(timed(step_by_step, lambda model, name, *_: f"teacher_forcing_{name}"))
    save(OUTPUTS / "seconds.json", SECONDS)
