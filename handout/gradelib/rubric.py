"""The course's rubric: gradelib/rubric.toml read into rubric_schema.py's types. The kit trusts the rubric it ships
(it states every setting); the course grader checks a rubric before it grades with one."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as the tomli package
    import tomli as tomllib

from .rubric_schema import VISIBILITIES, Group, Problem, RubricError

__all__ = ["RUBRIC_PATH", "Problem", "RubricError", "load"]

RUBRIC_PATH = Path(__file__).with_name("rubric.toml")


def load(path: Path | str | None = None) -> dict[str, Problem]:
    """The rubric at `path` (default RUBRIC_PATH) as problems by id, in file order; RubricError when the file
    cannot be read as a rubric."""
    path = Path(path or RUBRIC_PATH)
    try:
        return {pid: _problem(pid, table) for pid, table in tomllib.loads(path.read_text())["problems"].items()}
    except (OSError, LookupError, TypeError, ValueError, AttributeError) as exc:  # TOML and decoding errors: ValueError
        raise RubricError(f"{path}: cannot be read as a rubric ({type(exc).__name__}: {exc})") from None


def _problem(pid: str, table: dict) -> Problem:
    """Problem `pid` from its [problems.<pid>] table, every number a float, defaults where a key is left out."""
    groups = tuple(Group(**{**g, "points": float(g["points"]), "quantities": tuple(g.get("quantities", ())),
                            "visibilities": tuple(g.get("visibilities", VISIBILITIES))}) for g in table["groups"])
    share = table.get("visibility_share", {"public": 0.5, "hidden": 0.5})
    tolerance = {dtype: {"rtol": float(tol["rtol"]), "atol": float(tol["atol"])}
                 for dtype, tol in table.get("tolerance", {}).items()}
    return Problem(pid, table["title"], {v: float(share[v]) for v in VISIBILITIES}, tolerance, groups,
                   dict(table.get("settings", {})), table.get("hidden_tests", "after_published"))
