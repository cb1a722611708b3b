"""The rubric's types: a problem, its lines (groups) and its settings (the course grader checks them too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VISIBILITIES = ("public", "hidden")


class RubricError(ValueError):
    """The rubric file is malformed; the message names the key and what was expected."""


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
