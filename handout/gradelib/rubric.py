"""The course's rubric: gradelib/rubric.toml read and checked against the graded problems' own schemas.

The schema of every key and the reader are in gradelib/rubric_schema.py; what each
problem can grade (its SCHEMA) is declared beside its code and collected in
gradelib/problems/ (SCHEMAS). This module puts the two together for every caller
that reads the course's rubric (another file with --rubric), and names the
rubric's types for them.
"""

from __future__ import annotations

from pathlib import Path

from . import rubric_schema
from .problems import SCHEMAS
from .rubric_schema import Group, LatePolicy, Problem, ProblemSchema, RubricError, Setting

__all__ = ["RUBRIC_PATH", "Group", "LatePolicy", "Problem", "ProblemSchema", "RubricError", "Setting", "calibration",
           "late_policy", "load"]

RUBRIC_PATH = Path(__file__).with_name("rubric.toml")


def load(path: Path | str | None = None, schemas: dict[str, ProblemSchema] | None = None) -> dict[str, Problem]:
    """Read and validate the rubric (default RUBRIC_PATH); return problems by id, in file order.

    `schemas` (problem id -> ProblemSchema) defaults to the graded problems' own (problems.SCHEMAS).
    """
    return rubric_schema.read(path or RUBRIC_PATH, SCHEMAS if schemas is None else schemas)


def late_policy(path: Path | str | None = None) -> LatePolicy | None:
    """The rubric's [late] table, validated; None when the rubric has none."""
    return rubric_schema.late_policy(path or RUBRIC_PATH)


def calibration(path: Path | str | None = None) -> dict[str, str]:
    """The rubric's [calibration] table (corpus, corpus_sha256, oracle), each key "" when absent."""
    return rubric_schema.calibration(path or RUBRIC_PATH)
