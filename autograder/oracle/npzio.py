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


def case_folders(out: Path, kind: str):
    """(visibility, out/<kind>/<visibility>) for the public and hidden case sets, each folder made if missing."""
    for vis in ("public", "hidden"):
        folder = Path(out) / kind / vis
        folder.mkdir(parents=True, exist_ok=True)
        yield vis, folder
