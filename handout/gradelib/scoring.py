"""Turn per-case checks into rubric lines, and read what a child process left. A rubric line (group) on a case set
is one test: it earns its points when every case of that set (line_cases) passes every quantity of the line."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import safeio
from .compare import FLOAT32_CAUSE, Check, Observed
from .results import TestResult, gist
from .rubric_schema import Group, Problem
from .safeio import SafeReadError, quote

MAX_CASE_NAMES_SHOWN = 6


@dataclass(frozen=True)
class Case:
    """One case file, <case_root>/<folder>/<visibility>/<name>.npz, listed in that folder's cases.json."""

    name: str
    visibility: str
    description: str
    path: Path
    dtype: str = ""  # attention cases say which dtype their expected values are in
    edge: str = ""  # the edge case it is ('' for an ordinary case), graded by the line with that `edge`


def load_cases(case_root: Path, folder: str, visibilities: tuple[str, ...], problem_id: str | None = None
               ) -> list[Case]:
    """The cases of `folder` on these case sets (only `problem_id`'s when the index tags cases by problem)."""
    indexes = [case_root / folder / vis / "cases.json" for vis in visibilities]
    return [Case(e["name"], index.parent.name, e["description"], index.parent / f"{e['name']}.npz",
                 e.get("dtype", ""), e.get("edge", ""))
            for index in indexes if index.exists() for e in json.loads(index.read_text())
            if problem_id is None or e.get("problem") == problem_id]


@dataclass(frozen=True)
class Line:
    """One test to fill in: a rubric line (group) of a problem on one case set."""

    problem: Problem
    group: Group
    visibility: str

    @property
    def points(self) -> float:
        """The points this line earns on its visibility's cases."""
        return self.problem.share(self.group, self.visibility)

    def result(self, fraction: float, output: str) -> TestResult:
        """The test with `fraction` of the line's points and the message a student reads."""
        name = f"{self.problem.id}: {self.group.title} [{self.visibility}]"
        return TestResult(self.problem.id, name, fraction * self.points, self.points, self.visibility, output,
                          line=self.group.id)


def lines(problem: Problem, visibilities: tuple[str, ...]) -> list[Line]:
    """Every test of `problem` on these case sets, in rubric order."""
    return [Line(problem, g, v) for g in problem.groups for v in visibilities if v in g.visibilities]


@dataclass
class CaseOutcome:
    """All checks of one case."""

    name: str
    visibility: str
    description: str
    checks: dict[str, Check] = field(default_factory=dict)
    edge: str = ""
    dtype: str = ""

    @classmethod
    def of(cls, case: Case) -> CaseOutcome:
        """An outcome for `case` with no checks yet."""
        return cls(case.name, case.visibility, case.description, edge=case.edge, dtype=case.dtype)


def line_cases(problem: Problem, group: Group, outcomes: list, vis: str, ordinary: bool = False) -> list:
    """The outcomes (or Cases) of set `vis` a line is graded on: its edge's, or the ordinary ones (an edge no line of
    the problem takes is graded as ordinary); with `ordinary`, an edge line's ordinary ones too (it forgives theirs)."""
    taken = {g.edge for g in problem.groups if g.edge}
    return [o for o in outcomes if o.visibility == vis
            and (o.edge == group.edge or ((ordinary or not group.edge) and o.edge not in taken))]


def group_results(problem: Problem, outcomes: list[CaseOutcome], visibilities: tuple[str, ...],
                  withheld: dict[str, str] | None = None) -> list[TestResult]:
    """One TestResult per (group, visibility); `withheld` maps group id -> reason it scores 0."""
    return [line.result(*_verdict(problem, line, outcomes, withheld or {})) for line in lines(problem, visibilities)]


def _verdict(problem: Problem, line: Line, outcomes: list[CaseOutcome], withheld: dict[str, str]) -> tuple[float, str]:
    """The fraction of its points `line` earns on `outcomes`, and what it says. On an edge line, what fails the same
    way as on an ordinary case is forgiven (_first_failure) where the edge was verified (_ran_through)."""
    group, vis = line.group, line.visibility
    cases = line_cases(problem, group, outcomes, vis)
    if group.id in withheld:
        return 0.0, withheld[group.id]
    if not cases:
        return 0.0, f"no {vis} cases were found for this line"
    ordinary = line_cases(problem, replace(group, edge=""), outcomes, vis) if group.edge else []
    left: set[str] = set()
    failed = [(o, c) for o in cases if (c := _first_failure(o, group, ordinary, left)) is not None]
    if not failed and left and not any(_ran_through(o, group) for o in cases):
        return 0.0, _not_verified(cases, group, vis)
    if failed:
        return 0.0, _failure_text(failed, len(cases), vis)
    if left:
        return 1.0, (f"passed on all {len(cases)} {vis} cases: what fails there fails the same way on ordinary cases "
                     f"of the same dtype ({', '.join(map(repr, sorted(left)))}: graded by their own lines, not again "
                     "here)")
    return 1.0, f"passed on all {len(cases)} {vis} cases"


HINT = " Hint: "  # how compare.check ends a message with its hint


def _names(outcomes: list[CaseOutcome]) -> str:
    shown = ", ".join(repr(o.name) for o in outcomes[:MAX_CASE_NAMES_SHOWN])
    return shown + (f" and {len(outcomes) - MAX_CASE_NAMES_SHOWN} more" if len(outcomes) > MAX_CASE_NAMES_SHOWN else "")


def _failure_text(failed: list[tuple[CaseOutcome, Check]], n_cases: int, vis: str) -> str:
    """The first failing case in full; the cases that failed the same way counted, up to two other failures in a
    line each, any more counted. A line none of whose cases could be checked, for one reason, says so in one
    sentence."""
    first, check = failed[0]
    groups: dict[str, list[tuple[CaseOutcome, Check]]] = {}
    for o, c in failed:
        groups.setdefault(gist(c.message), []).append((o, c))
    same = [o for o, _ in groups.pop(gist(check.message))[1:]]
    if check.stage == "unchecked" and not groups:
        return f"not checked on {len(failed)} of {n_cases} {vis} cases: {check.message.removeprefix('not checked: ')}"
    lines = [f"failed on {len(failed)} of {n_cases} {vis} cases:",
             f"case '{first.name}' ({first.description}): {check.message}"]
    if same:
        lines.append(f"the same failure on {_names(same)}")
    others = list(groups.values())
    for found in others[:2]:  # a different failure: its first case, in one line of at most 300 characters
        message = found[0][1].message.partition(HINT)[0]
        message = message if len(message) <= 300 else message[:299] + "…"
        lines.append(f"another failure on {_names([o for o, _ in found])}: {message}")
    rest = [o for found in others[2:] for o, _ in found]
    if rest:
        lines.append(f"and other failures on {_names(rest)}")
    return "\n".join(lines)


# A stability line's cases make exp() overflow: a NaN there is its own failure, whatever the ordinary cases show;
# an inf they show too (A_w stored with the mask's -inf) is forgiven like any other shared failure.
_NAN_SAID = re.compile(r"\b\d+ NaN (and \d+ inf )?entries")  # how compare says a quantity has NaN entries


def failure_kind(check: Check) -> str:
    """How a quantity failed: 'raise' (not produced, or not checkable after an earlier raise), 'non-finite'
    (NaN or inf values), or 'wrong' (finite but wrong: values, shape, dtype or type)."""
    if check.stage in ("present", "unchecked"):
        return "raise"
    if check.max_abs_error is not None and math.isinf(check.max_abs_error):
        return "non-finite"
    return "wrong"


def _first_failure(outcome: CaseOutcome, group: Group, ordinary: list[CaseOutcome], left: set[str]) -> Check | None:
    """The first quantity of the line that fails on this case. On an edge line, one failing the same way (failure_kind)
    or by the same slip (A_w scaled: finite at T = 1, inf where masked) on an `ordinary` case of its dtype is left to
    their lines (in `left`); a stability NaN is not."""
    for q in group.quantities:
        check = outcome.checks.get(q)
        if check is None:
            return Check(q, False, "present", f"'{q}' was not checked.")
        if check.passed:
            continue
        kind = failure_kind(check)
        if group.edge and not (group.stability and _NAN_SAID.search(check.message)) and any(
                o.dtype == outcome.dtype and q in o.checks and not o.checks[q].passed
                and (failure_kind(o.checks[q]) == kind or o.checks[q].slip == check.slip != "") for o in ordinary):
            left.add(q)
            continue
        return check
    return None


def _ran_through(outcome: CaseOutcome, group: Group) -> bool:
    """Whether over a quarter of the line's quantities were produced on this case, one of them right and not all
    zeros: else (a blank handout, T = 1's zero score gradients) forgiving the rest would pay for code not checked."""
    produced = [q for q in group.quantities if q in outcome.checks and failure_kind(outcome.checks[q]) != "raise"]
    return 4 * len(produced) > len(group.quantities) and any(
        outcome.checks[q].passed and not outcome.checks[q].trivial for q in produced)


def _not_verified(cases: list[CaseOutcome], group: Group, vis: str) -> str:
    """Each case's first failure, then why failures the ordinary cases share still cost this line."""
    failed = [(o, next(c for q in group.quantities if (c := o.checks.get(q)) is not None and not c.passed))
              for o in cases]
    return (_failure_text(failed, len(cases), vis) + "\nnot verified: on no case were over a quarter of the line's "
            "quantities produced with one of them right, so nothing of this edge was checked (the same failure on "
            "the ordinary cases is charged there too)")


def follow_upstream(outcome: CaseOutcome, upstream: dict[str, tuple[str, ...]], via: dict | None = None) -> None:
    """A wrong value that follows from an earlier wrong quantity it is computed from (`upstream`: quantity ->
    its sources) says so, first, instead of its own formula hint (`via`: source -> (how it is reached, what to fix),
    where that is another function)."""
    for q, sources in upstream.items():
        c = outcome.checks.get(q)
        if c is None or c.passed or c.stage != "values" or c.float32_level:
            continue
        first = next((s for s in sources if s in outcome.checks and not outcome.checks[s].passed), None)
        if first:
            how, fix = (via or {}).get(first, (f"it is computed from '{first}'", f"'{first}'"))
            outcome.checks[q] = replace(c, message=f"'{q}' is wrong, which probably follows from the '{first}' failure "
                                                   f"({how}). {c.message.partition(HINT)[0]}{HINT}fix {fix} first.")


def name_float32(outcomes: list[CaseOutcome]) -> None:
    """Where a float64 quantity is wrong at float32 precision only (compare.FLOAT32_LEVEL) and none of its ordinary
    float32 cases fails, say first that a float32 value entered the float64 computation, the numbers after. An
    edge case failing as well (a float32 NaN on large scores) is a second mistake: it does not hide this one."""
    checks: dict[str, list[tuple[CaseOutcome, Check]]] = {}
    for o in outcomes:
        for q, c in o.checks.items():
            checks.setdefault(q, []).append((o, c))
    for q, found in checks.items():
        float32 = [c for o, c in found if c.dtype == "float32" and not o.edge]
        if any(not c.passed for c in float32):  # then something else is wrong: float32_level says nothing
            for o, c in found:
                o.checks[q] = replace(c, float32_level=False)
            continue
        passing = " (its ordinary float32 cases pass)" if float32 else ""
        for o, c in found:
            if c.float32_level:
                detail = c.message.partition(HINT)[0].removeprefix(f"'{q}' has wrong values: ")
                o.checks[q] = replace(c, message=f"'{q}' is right to float32 precision only on this float64 case"
                                                 f"{passing}: {detail}{HINT}{FLOAT32_CAUSE}.")


def all_zero(problem: Problem, visibilities: tuple[str, ...], message: str) -> list[TestResult]:
    """Every line of the problem scores 0 with the same explanation (e.g. a missing file)."""
    return [line.result(0.0, message) for line in lines(problem, visibilities)]


def read_array(path: Path, root: Path | None = None, max_elements: int | None = None) -> tuple[np.ndarray | None, str]:
    """A .npy the child wrote, as (array, "") or (None, why it was refused)."""
    try:  # 64 MB: one quantity on one small case (the largest expected holds 18 kB)
        return safeio.read_npy(path, max_bytes=64 << 20, kinds="biuf", root=root, single_link=True,
                               max_elements=max_elements), ""
    except SafeReadError as exc:
        return None, str(exc)


def load_meta(path: Path, root: Path | None = None) -> tuple[dict | None, str]:
    """The child's JSON notes for a case, or (None, why not): "" when the child never wrote them. `root`: the
    scratch folder the child owned (no folder between it and the file may be a link)."""
    try:
        data = safeio.read_json(path, 1_000_000, root=root, single_link=True)
    except SafeReadError as exc:
        return None, "" if exc.reason == "missing" else str(exc)
    if not isinstance(data, dict):
        return None, f"{path.name} holds {type(data).__name__}, not the object the grader's harness writes"
    return data, ""


def observed_from_child(case_dir: Path, meta: dict, name: str, missing_note: str, root: Path | None = None,
                        max_elements: int | None = None) -> Observed:
    """What the child recorded for quantity `name`, as an Observed; every string in it made safe to show
    (`max_elements`: a larger array is refused from its header, unread)."""
    entries = meta.get("quantities")
    entry = entries.get(name) if isinstance(entries, dict) else None
    if not isinstance(entry, dict) or not entry.get("present"):
        return Observed(False, note=quote(missing_note, 1000))
    type_name = None if entry.get("type") is None else quote(entry["type"], 200)
    note = quote(entry.get("note", ""), 500)
    array, refused = read_array(case_dir / f"{name}.npy", root, max_elements)
    if array is None and "note" not in entry:
        note = f"its array could not be read back: {refused}"[:500]
    return Observed(True, type_name, array, note)
