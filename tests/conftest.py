"""pytest fixtures shared by the tests (plain helpers live in support.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autograder.build import notebooks

from support import SOLUTIONS


@pytest.fixture(scope="session")
def otter_build(tmp_path_factory) -> tuple[dict[str, bytes], Path]:
    """One run of otter assign per test session: (student files by handout path, staff output folder)."""
    staff = tmp_path_factory.mktemp("staff")
    return notebooks.build(staff_out=staff), staff


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
