"""The rubric's types: a problem, its lines (groups), its settings, and what each problem can grade (the course
grader checks a rubric against the problems' schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

VISIBILITIES = ("public", "hidden")


class RubricError(ValueError):
    """The rubric file is malformed; the message names the key and what was expected."""


def positive(value: float) -> str | None:
    """A setting's check: None when `value` > 0, else the complaint."""
    return None if value > 0 else "must be > 0"


def fraction(value: float) -> str | None:
    """A setting's check: None when 0 < `value` < 1, else the complaint."""
    return None if 0 < value < 1 else "must be between 0 and 1 (exclusive)"


@dataclass(frozen=True)
class Setting:
    """One key of a problem's `settings`: its type, default (None = required), meaning, and check."""

    type: type | tuple[type, ...]
    default: Any
    description: str
    check: Callable[[Any], str | None] = positive


@dataclass(frozen=True)
class ProblemSchema:
    """What a problem can grade, declared beside its code: line_ids, of lines graded without quantities (e.g.
    "nll"); quantities, names a line may list; settings, the keys of its settings; relations, checks across
    settings, each returning a complaint or None; edge_lines, whether a line may be graded on its cases' edge tags."""

    settings: dict[str, Setting] = field(default_factory=dict)
    line_ids: frozenset[str] = frozenset()
    quantities: frozenset[str] = frozenset()
    relations: tuple[Callable[[dict], str | None], ...] = ()
    edge_lines: bool = False


@dataclass(frozen=True)
class Group:
    id: str
    title: str
    points: float
    quantities: tuple[str, ...] = ()
    backward: bool = False
    visibilities: tuple[str, ...] = VISIBILITIES
    edge: str = ""  # graded on the cases of this edge alone ('' = the ordinary cases)
    stability: bool = False  # a NaN on its edge's cases is never forgiven


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    visibility_share: dict[str, float]
    tolerance: dict[str, dict[str, float]]
    groups: tuple[Group, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    hidden_tests: str = "after_published"  # Gradescope's visibility of the hidden tests

    @property
    def points(self) -> float:
        """The problem's points: the sum of its lines'."""
        return sum(g.points for g in self.groups)

    def share(self, group: Group, visibility: str) -> float:
        """Points of `group` earned on the `visibility` case set."""
        if len(group.visibilities) == 1:
            return group.points if visibility in group.visibilities else 0.0
        return group.points * self.visibility_share[visibility]

    def max_points(self, visibilities: tuple[str, ...]) -> float:
        """Points available on these case sets."""
        return sum(self.share(g, v) for g in self.groups for v in visibilities if v in g.visibilities)
