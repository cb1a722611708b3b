"""Byte-for-byte reproducible .npz files.

numpy.savez stamps each member with the current time, so saving the same
arrays twice gives different bytes. Fixtures are committed and checked for
drift, so they are written here with a fixed timestamp and sorted keys.
"""

from __future__ import annotations

import io
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
