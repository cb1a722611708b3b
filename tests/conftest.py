"""pytest fixtures shared by the tests (plain helpers live in support.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import SOLUTIONS


@pytest.fixture
def reference_attention() -> str:
    return (SOLUTIONS / "attention.py").read_text()


@pytest.fixture
def copy_solution(tmp_path: Path):
    def _copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copyfile(SOLUTIONS / name, dest)
        return dest

    return _copy
