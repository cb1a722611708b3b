"""What the child harnesses share, copied beside them: the task and inputs in, outputs out (.npy arrays without pickle
and small JSON files, which the grader reads as untrusted data), exceptions described. No expected value is here."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

import numpy as np

SCRATCH = Path.cwd()
SUBMISSION = SCRATCH / "submission"
OUTPUTS = SCRATCH / "outputs"


def clock(pid: int | str = "self") -> float:
    """The wall clock less the time `pid` waited for a CPU (Linux's /proc/<pid>/schedstat; else the wall clock)."""
    try:
        return time.monotonic() - int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return time.monotonic()


def load_task() -> dict:
    """task.json, as the grader wrote it."""
    with open(SCRATCH / "task.json") as fh:
        return json.load(fh)


def load_arrays(path) -> dict[str, np.ndarray]:
    """The arrays of the .npz file `path` (relative to the scratch folder), read without pickle."""
    with np.load(SCRATCH / path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def save(path: Path, obj) -> None:
    """Write `obj` atomically (never read half written): an ndarray as .npy without pickle, anything else as JSON."""
    tmp = str(path.with_name(path.name + ".tmp"))  # a plain path: the course refuses to open any other kind
    if isinstance(obj, np.ndarray):
        with open(tmp, "wb") as fh:
            np.save(fh, obj, allow_pickle=False)
    else:
        with open(tmp, "w") as fh:
            json.dump(obj, fh)
    os.replace(tmp, path)


def short_exception(exc: BaseException) -> str:
    """The exception and the deepest frame in the submission's own files."""
    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if str(SUBMISSION) in (f.filename or "") or f.filename.startswith("<")]
    where = ""
    if mine:
        code = (mine[-1].line or "").strip()
        shown = "" if code.startswith("raise ") else f": {code}"
        where = f" (in {Path(mine[-1].filename).name}, line {mine[-1].lineno}{shown})"
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


class Recorder:
    """Collects one case's observed quantities and writes them to outputs/<case>/."""

    def __init__(self, case: str):
        self.dir = OUTPUTS / case
        self.dir.mkdir(parents=True, exist_ok=True)
        self.meta: dict = {"quantities": {}, "errors": {}, "flags": {}}

    def record(self, name: str, obj, *, convert) -> None:
        """Store `obj` under `name`; `convert` turns an allowed type into an ndarray or returns None."""
        entry = {"present": obj is not None, "type": None}
        if obj is not None:
            cls = type(obj)
            entry["type"] = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
            try:
                arr = convert(obj)
            except BaseException as exc:  # a hostile object may raise anything
                arr = None
                entry["note"] = f"could not be read back: {short_exception(exc)}"
            if arr is not None and arr.dtype.kind in "biuf":
                save(self.dir / f"{name}.npy", arr)
            elif arr is not None:
                entry["note"] = f"has non-numeric dtype {arr.dtype}"
        self.meta["quantities"][name] = entry

    def write(self) -> None:
        """Write meta.json (atomically)."""
        save(self.dir / "meta.json", self.meta)
