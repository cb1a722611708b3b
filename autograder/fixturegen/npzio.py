"""Byte-for-byte reproducible .npz files.

numpy.savez stamps each member with the current time, so saving the same
arrays twice gives different bytes. Fixtures are committed and checked for
drift, so they are written here with a fixed timestamp and sorted keys.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from autograder.grading import rubric_check as rubric

FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def save(path: Path | str, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` as an uncompressed .npz whose bytes depend only on the data."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            # np.ascontiguousarray would turn a 0-d array into shape (1,); copy only when needed.
            arr = np.asarray(arrays[key])
            arr = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def write_index(folder: Path, index: list[dict]) -> Path:
    """A case folder's cases.json (one entry per case, in order); returns its path."""
    path = Path(folder) / "cases.json"
    path.write_text(json.dumps(index, indent=2) + "\n")
    return path


def check_edges(problem_id: str, cases: list[tuple[str, str, str]], rubric_path: Path | None = None) -> None:
    """Refuse (ValueError) what would grade an edge case wrong: the rubric line naming an edge is its one
    declaration, so a case (name, visibility, edge) tagged with an edge no line of `problem_id` is graded on at
    its visibility, and an edge line without a case at one of its visibilities, are errors."""
    problem = rubric.load(rubric_path)[problem_id]
    lines = {g.edge: g for g in problem.groups if g.edge}
    for name, vis, edge in cases:
        if edge and (edge not in lines or vis not in lines[edge].visibilities):
            raise ValueError(f"{problem_id} case '{name}' ({vis}) is tagged edge '{edge}', but no {vis} rubric line of "
                             f"{problem_id} is graded on it; expected a line with edge = \"{edge}\" in the rubric, or "
                             f"one of the edges it names: {sorted(lines)}")
    for edge, g in lines.items():
        for vis in g.visibilities:
            if not any(e == edge and v == vis for _, v, e in cases):
                raise ValueError(f"rubric line {problem_id}.{g.id} is graded on edge '{edge}' ({vis}), but no {vis} "
                                 f"case carries it; expected a case of the generator tagged edge '{edge}'")


def case_folders(out: Path, kind: str):
    """(visibility, out/<kind>/<visibility>) for the public and hidden case sets, each folder made if missing."""
    for vis in ("public", "hidden"):
        folder = Path(out) / kind / vis
        folder.mkdir(parents=True, exist_ok=True)
        yield vis, folder
