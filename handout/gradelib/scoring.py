"""Turn per-case checks into rubric lines, and read what a child process left.

A rubric line (group) on a visibility is one test: it earns its points when
every case of that visibility passes every quantity of the line, and its
message lists the cases that did not, each with the first failed check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import safeio
from .compare import Check, Observed
from .results import TestResult
from .rubric_schema import Group, Problem
from .safeio import SafeReadError, clean_text

# A child's array is the value of one quantity on one small case (the largest expected
# one holds 18 kB); a larger one is refused rather than loaded into the grader.
MAX_ARRAY_BYTES = 64 * 1024 * 1024
MAX_META_BYTES = 1_000_000
MAX_FAILED_CASES_SHOWN = 3


@dataclass(frozen=True)
class Case:
    """One case file, <case_root>/<folder>/<visibility>/<name>.npz, listed in that folder's cases.json."""

    name: str
    visibility: str
    description: str
    path: Path
    dtype: str = ""  # attention cases say which dtype their expected values are in


def load_cases(case_root: Path, folder: str, visibilities: tuple[str, ...], problem_id: str | None = None) -> list[Case]:
    """The cases of `folder` on these case sets (only `problem_id`'s when the index tags cases by problem)."""
    cases = []
    for vis in visibilities:
        index = case_root / folder / vis / "cases.json"
        if not index.exists():
            continue
        for entry in json.loads(index.read_text()):
            if problem_id is None or entry.get("problem") == problem_id:
                cases.append(Case(entry["name"], vis, entry["description"], index.parent / f"{entry['name']}.npz",
                                  entry.get("dtype", "")))
    return cases


@dataclass(frozen=True)
class Line:
    """One test to fill in: a rubric line (group) of a problem on one case set."""

    problem: Problem
    group: Group
    visibility: str

    @property
    def points(self) -> float:
        return self.problem.share(self.group, self.visibility)

    def result(self, fraction: float, output: str, figures: dict[str, float] | None = None) -> TestResult:
        """The test with `fraction` of the line's points, the message a student reads and the figures it scored."""
        name = f"{self.problem.id}: {self.group.title} [{self.visibility}]"
        return TestResult(self.problem.id, name, fraction * self.points, self.points, self.visibility, output,
                          line=self.group.id, figures=dict(figures or {}))


def lines(problem: Problem, visibilities: tuple[str, ...]) -> list[Line]:
    """Every test of `problem` on these case sets, in rubric order."""
    return [Line(problem, g, v) for g in problem.groups for v in visibilities if v in g.visibilities]


@dataclass
class CaseOutcome:
    """All checks of one case, plus messages that apply to the whole case."""

    name: str
    visibility: str
    description: str
    checks: dict[str, Check] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def group_results(
    problem: Problem,
    outcomes: list[CaseOutcome],
    visibilities: tuple[str, ...],
    withheld: dict[str, str] | None = None,
) -> list[TestResult]:
    """One TestResult per (group, visibility); `withheld` maps group id -> reason it scores 0."""
    withheld = withheld or {}
    tests = []
    for line in lines(problem, visibilities):
        group, vis = line.group, line.visibility
        cases = [o for o in outcomes if o.visibility == vis]
        if group.id in withheld:
            tests.append(line.result(0.0, withheld[group.id]))
            continue
        failed = [(o, _first_failure(o, group)) for o in cases]
        failed = [(o, c) for o, c in failed if c is not None]
        if not cases:
            tests.append(line.result(0.0, f"no {vis} cases were found for this line"))
        elif not failed:
            tests.append(line.result(1.0, f"passed on all {len(cases)} {vis} cases"))
        else:
            tests.append(line.result(0.0, _failure_text(failed, len(cases), vis)))
    return tests


HINT = " Hint: "  # how compare.check ends a message with its hint


def _failure_text(failed: list[tuple[CaseOutcome, Check]], n_cases: int, vis: str) -> str:
    """Failed cases grouped by identical message, so one mistake reads once; a hint that every message
    shown shares is said once, after them."""
    by_message: dict[str, list[CaseOutcome]] = {}
    for outcome, chk in failed:
        by_message.setdefault(chk.message, []).append(outcome)
    shown = list(by_message)[:MAX_FAILED_CASES_SHOWN]
    hints = {m.partition(HINT)[2] for m in shown}
    common = hints.pop() if len(shown) > 1 and len(hints) == 1 and "" not in hints else ""
    if common:
        by_message = {(m.partition(HINT)[0] if m in shown else m): o for m, o in by_message.items()}
    lines = [f"failed on {len(failed)} of {n_cases} {vis} cases:"]
    for message, outcomes in list(by_message.items())[:MAX_FAILED_CASES_SHOWN]:
        if len(outcomes) == 1:
            o = outcomes[0]
            lines.append(f"case '{o.name}' ({o.description}): {message}")
        else:
            lines.append(f"cases {', '.join(repr(o.name) for o in outcomes)}: {message}")
        for o in outcomes:
            lines += [f"  {n}" for n in o.notes]
    if len(by_message) > MAX_FAILED_CASES_SHOWN:
        more = len(by_message) - MAX_FAILED_CASES_SHOWN
        lines.append(f"... and {more} more distinct failure{'s' if more > 1 else ''}")
    if common:
        lines.append(f"Hint: {common}")
    return "\n".join(lines)


def _first_failure(outcome: CaseOutcome, group: Group) -> Check | None:
    for q in group.quantities:
        check = outcome.checks.get(q)
        if check is None:
            return Check(q, False, "present", f"'{q}' was not checked.")
        if not check.passed:
            return check
    return None


def all_zero(problem: Problem, visibilities: tuple[str, ...], message: str) -> list[TestResult]:
    """Every line of the problem scores 0 with the same explanation (e.g. a missing file)."""
    return [line.result(0.0, message) for line in lines(problem, visibilities)]


def read_array(path: Path, root: Path | None = None, max_elements: int | None = None) -> tuple[np.ndarray | None, str]:
    """A .npy the child wrote, as (array, "") or (None, why it was refused)."""
    try:
        return safeio.read_npy(path, max_bytes=MAX_ARRAY_BYTES, kinds="biuf", root=root, single_link=True,
                               max_elements=max_elements), ""
    except SafeReadError as exc:
        return None, str(exc)


def load_meta(path: Path, root: Path | None = None) -> tuple[dict | None, str]:
    """The child's JSON notes for a case, or (None, why not): "" when the child never wrote them.

    `root` is the scratch folder the child owned: no folder between it and the file may be a link.
    """
    try:
        data = safeio.read_json(path, MAX_META_BYTES, root=root, single_link=True)
    except SafeReadError as exc:
        return None, "" if exc.reason == "missing" else str(exc)
    if not isinstance(data, dict):
        return None, f"{path.name} holds {type(data).__name__}, not the object the grader's harness writes"
    return data, ""


def read_meta(path: Path, root: Path | None = None) -> dict | None:
    """load_meta without the reason."""
    return load_meta(path, root)[0]


def observed_from_child(case_dir: Path, meta: dict, name: str, missing_note: str, root: Path | None = None,
                        max_elements: int | None = None) -> Observed:
    """What the child recorded for quantity `name`, as an Observed; every string in it made safe to show
    (`max_elements`: a larger array is refused from its header, unread)."""
    entries = meta.get("quantities")
    entry = entries.get(name) if isinstance(entries, dict) else None
    if not isinstance(entry, dict) or not entry.get("present"):
        return Observed(False, note=clean_text(missing_note))
    type_name = entry.get("type")
    type_name = clean_text(type_name)[:200] if type_name is not None else None
    note = clean_text(entry.get("note", ""))[:500]
    array, refused = read_array(case_dir / f"{name}.npy", root, max_elements)
    if array is None and "note" not in entry:
        note = f"its array could not be read back: {refused}"[:500]
    return Observed(True, type_name, array, note)
