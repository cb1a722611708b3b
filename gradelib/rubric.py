"""The rubric: points, tests and thresholds per problem, read from rubric.toml.

The file is plain data. This module is its schema: every key it accepts is
listed below with a description and a default, and a file with an unknown or
mistyped key is refused with a message naming the key, so a typo cannot
silently change a grade.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUBRIC_PATH = Path(__file__).with_name("rubric.toml")

# key -> (expected type, default, description). A default of None means required.
PROBLEM_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "title": (str, None, "Heading shown to students above the problem's tests."),
    "visibility_share": (
        dict,
        {"public": 0.5, "hidden": 0.5},
        "Fraction of each group's points earned on public and on hidden cases; sums to 1.",
    ),
    "tolerance": (
        dict,
        {},
        "Per-dtype {rtol, atol} for value comparisons: "
        "|got - expected| <= atol * max(1, max|expected|) + rtol * |expected|.",
    ),
    "groups": (list, [], "The rubric lines; see GROUP_KEYS."),
    "settings": (dict, {}, "Problem-specific numbers (thresholds, sizes), described in the file."),
}

GROUP_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "id": (str, None, "Stable identifier of the rubric line, used in test names and reports."),
    "title": (str, None, "What the line checks, in words a student understands."),
    "points": ((int, float), None, "Points for the line, split between public and hidden cases."),
    "quantities": (list, [], "Names of the checked quantities; all must match on every case."),
    "backward": (bool, False, "Line is about gradients: lost when backward uses autograd."),
    "visibilities": (
        list,
        ["public", "hidden"],
        "Which case sets the line is graded on; a line graded on one set earns its full points there.",
    ),
}


class RubricError(ValueError):
    """The rubric file is malformed; the message names the key and what was expected."""


@dataclass(frozen=True)
class Group:
    id: str
    title: str
    points: float
    quantities: tuple[str, ...] = ()
    backward: bool = False
    visibilities: tuple[str, ...] = ("public", "hidden")


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    visibility_share: dict[str, float]
    tolerance: dict[str, dict[str, float]]
    groups: tuple[Group, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def points(self) -> float:
        return sum(g.points for g in self.groups)

    def share(self, group: Group, visibility: str) -> float:
        """Points of `group` earned on the `visibility` case set."""
        if len(group.visibilities) == 1:
            return group.points if visibility in group.visibilities else 0.0
        return group.points * self.visibility_share[visibility]


def _check_keys(where: str, table: dict, schema: dict) -> dict:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise RubricError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(schema)}")
    out = {}
    for key, (typ, default, _desc) in schema.items():
        if key not in table:
            if default is None:
                raise RubricError(f"{where}: missing required key '{key}' ({schema[key][2]})")
            out[key] = default
            continue
        value = table[key]
        wrong_bool = isinstance(value, bool) and typ is not bool
        if wrong_bool or not isinstance(value, typ):
            raise RubricError(
                f"{where}: key '{key}' must be {typ}, got {type(value).__name__} {value!r}"
            )
        out[key] = value
    return out


def load(path: Path | str = RUBRIC_PATH) -> dict[str, Problem]:
    """Read and validate the rubric; return problems by id, in file order."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path}: not valid TOML: {exc}") from None
    problems: dict[str, Problem] = {}
    for pid, table in data.get("problems", {}).items():
        where = f"{path.name} [problems.{pid}]"
        spec = _check_keys(where, table, PROBLEM_KEYS)
        groups = []
        for i, g in enumerate(spec["groups"]):
            gspec = _check_keys(f"{where} group {i + 1}", g, GROUP_KEYS)
            groups.append(
                Group(
                    id=gspec["id"],
                    title=gspec["title"],
                    points=float(gspec["points"]),
                    quantities=tuple(gspec["quantities"]),
                    backward=gspec["backward"],
                    visibilities=tuple(gspec["visibilities"]),
                )
            )
        share = spec["visibility_share"]
        if abs(sum(share.values()) - 1.0) > 1e-9:
            raise RubricError(f"{where}: visibility_share must sum to 1, got {share}")
        problems[pid] = Problem(
            id=pid,
            title=spec["title"],
            visibility_share=dict(share),
            tolerance=dict(spec["tolerance"]),
            groups=tuple(groups),
            settings=dict(spec["settings"]),
        )
    if not problems:
        raise RubricError(f"{path}: no [problems.<id>] tables")
    return problems
