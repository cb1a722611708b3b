"""Helpers for code that runs inside the submission's process.

This file is copied into the scratch folder beside a problem's harness. It
knows the inputs and the submission, never an expected value. What it writes
is read back by the grader as data it does not trust: plain .npy arrays
(loaded without pickle) and a small JSON file of type names and messages.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np

SCRATCH = Path.cwd()
SUBMISSION = SCRATCH / "submission"
OUTPUTS = SCRATCH / "outputs"
MAX_MESSAGE = 2000


def load_task() -> dict:
    with open(SCRATCH / "task.json") as fh:
        return json.load(fh)


def short_exception(exc: BaseException) -> str:
    """The exception and the deepest frame in the submission's own files."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if str(SUBMISSION) in (f.filename or "") or f.filename.startswith("<")]
    where = ""
    if mine:
        f = mine[-1]
        code = (f.line or "").strip()
        shown = "" if code.startswith("raise ") else f": {code}"
        where = f" (in {Path(f.filename).name}, line {f.lineno}{shown})"
    text = f"{type(exc).__name__}: {exc}{where}"
    return text[:MAX_MESSAGE]


def type_name(obj) -> str:
    cls = type(obj)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


class Recorder:
    """Collects one case's observed quantities and writes them to outputs/<case>/."""

    def __init__(self, case: str):
        self.dir = OUTPUTS / case
        self.dir.mkdir(parents=True, exist_ok=True)
        self.meta: dict = {"quantities": {}, "errors": {}, "flags": {}}

    def record(self, name: str, obj, *, convert) -> None:
        """Store `obj` under `name`; `convert` turns an allowed type into an ndarray or returns None."""
        entry = {"present": obj is not None, "type": type_name(obj) if obj is not None else None}
        if obj is not None:
            try:
                arr = convert(obj)
            except BaseException as exc:  # a hostile object may raise anything
                arr = None
                entry["note"] = f"could not be read back: {short_exception(exc)}"
            if arr is not None:
                # np.ascontiguousarray would turn a 0-d array (a scalar loss) into shape (1,).
                arr = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
                if arr.dtype.kind in "biuf":
                    np.save(self.dir / f"{name}.npy", arr, allow_pickle=False)
                else:
                    entry["note"] = f"has non-numeric dtype {arr.dtype}"
        self.meta["quantities"][name] = entry

    def error(self, stage: str, exc: BaseException) -> None:
        self.meta["errors"][stage] = short_exception(exc)

    def flag(self, name: str, value) -> None:
        self.meta["flags"][name] = value

    def write(self) -> None:
        tmp = self.dir / "meta.json.tmp"
        with open(tmp, "w") as fh:
            json.dump(self.meta, fh)
        os.replace(tmp, self.dir / "meta.json")


def add_submission_to_path() -> None:
    sys.path.insert(0, str(SUBMISSION))
