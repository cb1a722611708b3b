"""What a results.json was graded with, whether it is stale, and merging a regrade of some problems into it.

Each results.json carries, in its top-level `extra_data` (which Gradescope keeps
and shows to nobody), a record of what graded it:

    "grader": {"format": 1, "notes": [submission-wide notes],
               "problems": {"<id>": {"rubric": {"sha256", "parts", "settings"},
                                     "fixtures": "<sha256 of the problem's MANIFEST.sha256 lines>",
                                     "notes": [...], "flags": [...], "seconds": s}}}

A problem is stale when its rubric (parsed: points, checks, tolerances, settings,
titles) or the fixtures it reads changed, or when the results.json has no
record (an older grader wrote it). A regrade of some problems replaces only
their tests and keeps every other problem's tests, notes and flags.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

from gradelib import rubric as rubric_mod
from gradelib.results import SubmissionResult, TestResult, wrap
from gradelib.safeio import SafeReadError, clean_text

from ..grading.course_result import NOT_GRADED, CourseResult, CourseTest, score_number
from ..isolation import safe_reading
from .atomic import write_json_atomic, write_text_atomic
from .records import MAX_RESULTS_BYTES

FORMAT = 1
MANIFEST = "MANIFEST.sha256"
OLDER_GRADER = "results from an older grader without rubric/fixture hashes"
# Fixture files each problem's grading reads, as prefixes of their paths under fixtures/. The model
# run serves prediction and generation together, so both depend on every prompt set it reads.
LM_RUN = ("lm_functions/", "lm/prediction.npz", "lm/prediction_test.npz", "lm/hidden/", "lm/generation_test.npz")
PROBLEM_FIXTURES: dict[str, tuple[str, ...]] = {
    "attention": ("attention/",),
    "losses": ("notebooks/",),
    "masks": ("notebooks/",),
    "prediction": LM_RUN,
    "generation": (*LM_RUN, "lm/oracle.json"),
}
VISIBILITY_TO_GRADESCOPE = {"public": "visible", "hidden": "after_published"}
FROM_GRADESCOPE = {v: k for k, v in VISIBILITY_TO_GRADESCOPE.items()}
GRADESCOPE_VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


def _sha(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def rubric_record(problem: rubric_mod.Problem) -> dict:
    """Hashes of a parsed rubric problem: whole, and by part, with its settings verbatim (to say what changed)."""
    d = dataclasses.asdict(problem)
    groups = d["groups"]
    parts = {
        "points": _sha([d["visibility_share"], [[g["id"], g["points"], list(g["visibilities"])] for g in groups]]),
        "checks": _sha([[g["id"], list(g["quantities"]), g["backward"]] for g in groups]),
        "tolerance": _sha(d["tolerance"]),
        "titles": _sha([d["title"], [g["title"] for g in groups]]),
    }
    settings = json.loads(json.dumps(d["settings"]))
    return {"sha256": _sha([parts, settings]), "parts": parts, "settings": settings}


def manifest_lines(case_root: Path) -> dict[str, str]:
    """path -> sha256 from case_root/MANIFEST.sha256; without a manifest, the files' own checksums."""
    try:
        text = safe_reading.read_text(case_root / MANIFEST, 4 * 1024 * 1024)
        out = {}
        for line in text.splitlines():
            digest, _, rel = line.partition("  ")
            if digest and rel:
                out[rel.strip()] = digest.strip()
        return out
    except SafeReadError:
        return {p.relative_to(case_root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(case_root.rglob("*")) if p.is_file()}


def fixture_hash(lines: dict[str, str], problem_id: str) -> str:
    prefixes = PROBLEM_FIXTURES.get(problem_id, ("",))
    mine = sorted(f"{h}  {rel}" for rel, h in lines.items() if rel.startswith(prefixes))
    return _sha(mine)


def current_records(problems: dict[str, rubric_mod.Problem], ids: list[str], case_root: Path) -> dict[str, dict]:
    """What grading `ids` now would record: {id: {"rubric": ..., "fixtures": ...}}."""
    lines = manifest_lines(case_root)
    return {pid: {"rubric": rubric_record(problems[pid]), "fixtures": fixture_hash(lines, pid)} for pid in ids}


def read_results(path: Path) -> dict | None:
    """A results.json as a dict, None when it is missing or not a Gradescope results object."""
    try:
        data = safe_reading.read_json(path, MAX_RESULTS_BYTES)
    except SafeReadError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("tests"), list) else None


def grader_record(data: dict | None) -> dict | None:
    extra = data.get("extra_data") if isinstance(data, dict) else None
    record = extra.get("grader") if isinstance(extra, dict) else None
    if isinstance(record, dict) and record.get("format") == FORMAT and isinstance(record.get("problems"), dict):
        return record
    return None


def _rubric_change(problem_id: str, old: dict, new: dict) -> str:
    """'prediction: full_credit_nll 0.85 -> 0.8' -- what changed in a problem's rubric, in words."""
    what = []
    old_settings, new_settings = old.get("settings"), new.get("settings") or {}
    if isinstance(old_settings, dict):
        for key in sorted(set(old_settings) | set(new_settings)):
            a, b = old_settings.get(key), new_settings.get(key)
            if a != b:
                what.append(f"{key} {a if a is not None else '(none)'} -> {b if b is not None else '(none)'}")
    old_parts = old.get("parts") if isinstance(old.get("parts"), dict) else {}
    what += [part for part, h in (new.get("parts") or {}).items() if old_parts and old_parts.get(part) != h]
    return f"{problem_id}: {', '.join(what)}" if what else problem_id


def stale_problems(data: dict | None, current: dict[str, dict]) -> dict[str, str]:
    """Problem id -> why it must be (re)graded, for each of `current`'s problems whose results are not up to date."""
    record = grader_record(data)
    if record is None:
        return dict.fromkeys(current, OLDER_GRADER)
    graded = record["problems"]
    why = {}
    for pid, now in current.items():
        was = graded.get(pid)
        if not isinstance(was, dict):
            why[pid] = f"not graded yet ({pid})"
            continue
        old_rubric = was.get("rubric") if isinstance(was.get("rubric"), dict) else {}
        reasons = []
        if old_rubric.get("sha256") != now["rubric"]["sha256"]:
            reasons.append(f"rubric changed ({_rubric_change(pid, old_rubric, now['rubric'])})")
        if was.get("fixtures") != now["fixtures"]:
            reasons.append(f"fixtures changed ({pid})")
        if reasons:
            why[pid] = "; ".join(reasons)
    return why


def from_gradescope(data: dict, name: str, problem_order: list[str]) -> CourseResult:
    """A CourseResult back from a results.json, with its per-problem notes and flags when recorded."""
    record = grader_record(data) or {}
    graded = record.get("problems", {}) if record else {}
    result = CourseResult(submission=name)
    for t in data.get("tests", []):
        if not isinstance(t, dict):
            continue
        tags = t.get("tags") if isinstance(t.get("tags"), list) else [""]
        extra = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
        figures = extra.get("figures") if isinstance(extra.get("figures"), dict) else {}
        shown = t.get("visibility") if t.get("visibility") in GRADESCOPE_VISIBILITIES else ""
        result.tests.append(CourseTest(
            problem=str(tags[0] if tags else ""), name=str(t.get("name", "")), score=t.get("score") or 0.0,
            max_score=t.get("max_score", 0.0), visibility=FROM_GRADESCOPE.get(t.get("visibility"), "hidden"),
            output=str(t.get("output", "")), line=str(extra.get("line", "")),
            figures={k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            shown=shown,  # a hidden test's rubric visibility (hidden_tests) is kept when its problem is not regraded
        ))
    present = {t.problem for t in result.tests} | set(graded)
    result.problems = tuple([p for p in problem_order if p in present] + sorted(present - set(problem_order)))
    for t in result.tests:
        result.max_points[t.problem] = round(result.max_points.get(t.problem, 0.0) + t.max_score, 4)
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    flags = extra.get("flags") if isinstance(extra.get("flags"), dict) else {}
    result.flags = {str(k): str(v) for k, v in flags.items()}
    result.isolation = str(extra.get("isolation", ""))
    for pid, rec in graded.items():
        if isinstance(rec, dict):
            result.problem_notes[pid] = [str(n) for n in rec.get("notes", []) if isinstance(n, str)]
            result.problem_flags[pid] = [str(f) for f in rec.get("flags", []) if isinstance(f, str)]
            if isinstance(rec.get("seconds"), (int, float)):
                result.problem_seconds[pid] = float(rec["seconds"])
    general = record.get("notes") if record else None
    if isinstance(general, list):
        result.notes = [str(n) for n in general] + [
            n for pid in result.problems for n in result.problem_notes.get(pid, [])
        ]
    else:
        output = str(data.get("output", "") or "")
        result.notes = [output] if output else []
    wall = data.get("execution_time", 0.0)
    result.wall_s = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else 0.0
    return result


def general_notes(result: CourseResult) -> list[str]:
    """The notes of the whole submission (intake, missing files): those no problem added."""
    mine = sum(len(result.problem_notes.get(p, [])) for p in result.problems)
    return list(result.notes[: len(result.notes) - mine]) if mine else list(result.notes)


def merge(old: CourseResult, new: CourseResult, problem_order: list[str]) -> CourseResult:
    """`old` with the problems graded in `new` replaced by `new`'s: tests, notes, flags; the score is the new sum."""
    regraded = set(new.problems)
    kept = [p for p in old.problems if p not in regraded]
    problems = [p for p in problem_order if p in regraded or p in kept]
    problems += [p for p in [*old.problems, *new.problems] if p not in problems]
    whole = not kept  # the regrade covers every problem the old results had
    notes_general = general_notes(new) if whole or not old.notes else general_notes(old)
    merged = CourseResult(
        submission=new.submission or old.submission,
        problems=tuple(problems),
        isolation=new.isolation or old.isolation,
    )
    for pid in problems:
        src = new if pid in regraded else old
        merged.tests += [t for t in src.tests if t.problem == pid]
        merged.max_points[pid] = src.max_points.get(pid, 0.0)
        if pid in src.problem_notes:
            merged.problem_notes[pid] = list(src.problem_notes[pid])
        if pid in src.problem_flags:
            merged.problem_flags[pid] = list(src.problem_flags[pid])
        if pid in src.problem_seconds:
            merged.problem_seconds[pid] = src.problem_seconds[pid]
    merged.notes = notes_general + [n for pid in problems for n in merged.problem_notes.get(pid, [])]
    old_flag_owner = {f: pid for pid, fs in old.problem_flags.items() for f in fs}
    old_flag_owner.update({NOT_GRADED + pid: pid for pid in old.problems})  # (a problem not graded has no record)
    merged.flags = {k: v for k, v in old.flags.items()
                    if (old_flag_owner.get(k) in kept) or (k not in old_flag_owner and not whole)}
    merged.flags.update(new.flags)
    merged.wall_s = new.wall_s + sum(old.problem_seconds.get(p, 0.0) for p in kept)
    return merged


LACKS = re.compile(r"The handin lacks ([^;]+);")
MISSING = re.compile(r"(\S+) is missing from the handin")


def not_graded_normally(result: SubmissionResult) -> list[str]:
    """A line for each problem that could not be graded normally -- every one of its lines scored 0 with one and
    the same message (a file that does not parse or load, an internal error) -- that the notes do not say already.
    Only a message a public line shows already: the top-level output is visible before hidden tests are."""
    said = "\n".join(result.notes)
    lacking = LACKS.search(said)
    lacking = set(lacking.group(1).split(", ")) if lacking else set()
    out = []
    for pid in result.problems:
        tests = [t for t in result.tests if t.problem == pid]
        messages = {t.output.strip() for t in tests}
        if (
            not tests
            or any(t.score > 0 for t in tests)
            or len(messages) != 1
            or all(t.visibility != "public" for t in tests)
        ):
            continue
        message = messages.pop()
        missing = MISSING.search(message)
        if not message or message.removeprefix("not graded: ") in said or (missing and missing.group(1) in lacking):
            continue
        out.append(f"{pid}: not graded normally: {message}")
    return out


def gradescope_test(t: CourseTest, number: str) -> dict:
    """Test `t` as one entry of results.json's tests, numbered `number` (e.g. "1.2"); a hidden test's visibility is
    the rubric's hidden_tests (t.shown)."""
    return {
        "name": t.name,
        "number": number,
        "score": round(score_number(t.score), 4),
        "max_score": round(score_number(t.max_score), 4),
        "status": "passed" if t.passed else "failed",
        "output": clean_text(t.output),
        "visibility": t.shown or VISIBILITY_TO_GRADESCOPE[t.visibility],
        "tags": [t.problem],
        **({"extra_data": {"line": t.line, **({"figures": t.figures} if t.figures else {})}} if t.line else {}),
    }


WITHHELD = "its message names hidden cases: not shown here"


def shown_at_once(t: TestResult) -> bool:
    """Whether a student sees test `t`'s message with its score: a public test's, or a hidden one's where the rubric
    shows hidden tests at once (hidden_tests = "visible"; t.shown)."""
    return t.visibility != "hidden" or getattr(t, "shown", "") == "visible"


def _withheld(pid: str, shown: list[TestResult], hidden: list[TestResult]) -> list[str]:
    """What feedback says of problem `pid`'s failed `hidden` tests, whose messages name hidden cases: one failing with
    its public twin, among the `shown` failures, is counted (its public message said why); one whose public twin
    passed is named, a slip only the hidden cases show."""
    public_failed = {t.name.rsplit(" [", 1)[0] for t in shown if t.visibility == "public"}
    twins = [t for t in hidden if t.name.rsplit(" [", 1)[0] in public_failed]
    lines = []
    for t in (t for t in hidden if t not in twins):
        lines += wrap(f"  FAIL {t.score:.2f} / {t.max_score:.2f} {t.name.removeprefix(f'{pid}: ')} ({WITHHELD})")
    if twins:
        said = f"same {len(twins)} lines fail" if len(twins) > 1 else "same line fails"
        lines += wrap(f"  the {said} on the hidden cases too "
                      f"({sum(t.score for t in twins):.2f} / {sum(t.max_score for t in twins):.2f})")
    return lines


class _Feedback(CourseResult):
    """The kit's table with the messages of hidden tests withheld (_withheld) unless the rubric shows them at once."""

    def failures(self, pid: str, failed: list[TestResult]) -> list[str]:
        if NOT_GRADED + pid in self.flags:  # one line: what the grader failed at, never a FAIL per line
            return wrap(f"  {self.flags[NOT_GRADED + pid]}")
        shown = [t for t in failed if shown_at_once(t)]
        return super().failures(pid, shown) + _withheld(pid, shown, [t for t in failed if t not in shown])

    def table(self) -> str:
        """The kit's table; a problem not graded, and then the total, read `not graded` instead of a score."""
        ungraded = {k[len(NOT_GRADED):] for k in self.flags if k.startswith(NOT_GRADED)}
        lines = super().table().splitlines()
        for i, line in enumerate(lines):
            pid, _, rest = line.partition(" ")
            if pid in ungraded and rest.endswith(" lines pass") and " / " in rest:
                lines[i] = f"{pid} not graded (of {self.max_points.get(pid, 0):.2f}): the grader failed, not the " \
                           "submission; the next run grades it"
            elif ungraded and line.startswith("TOTAL "):
                lines[i] = f"TOTAL not graded yet ({', '.join(sorted(ungraded))} not graded)"
        return "\n".join(lines)


def feedback(result: CourseResult) -> str:
    """feedback.txt, the report a student reads on Gradescope: the kit's table, a hidden test's message shown only
    where the rubric shows hidden tests at once (hidden_tests = "visible"); the staff's report.html lists every
    line."""
    unshown = sum(not t.passed and t.visibility == "hidden" and t.shown != "visible"
                  for pid in result.problems if NOT_GRADED + pid not in result.flags
                  for t in result.tests if t.problem == pid)
    said = wrap(f"The messages of the {unshown} failed hidden tests are not shown here (they name hidden "
                "cases); the course staff publish them with the grades.") if unshown else []
    shown = _Feedback(**vars(result))
    if result.isolation:  # under the submission's name: students see what ran their code, and how confined
        shown.submission += f"\nSandbox: {result.isolation}"
    return "\n".join([shown.table(), *said])


def to_results_json(result: CourseResult, records: dict[str, dict]) -> dict:
    """Gradescope's results.json of `result`, with the grader record of each of its problems
    (records: id -> rubric/fixtures). A problem the grader failed on (a NOT_GRADED flag) has no score: its tests'
    `score` is null, and so is the top-level `score` (the platforms' writers, runtime.py, give no grade for it).

    Its top-level `output` is the notes, then what happened to each problem that could not be graded normally,
    then the sandbox level that graded it (students see it: what ran their code, and how confined). The one
    writer of results.json is write_merged."""
    per_problem: dict[str, int] = {}
    tests = []
    not_graded = {k[len(NOT_GRADED):] for k in result.flags if k.startswith(NOT_GRADED)}  # mark_not_graded's
    for t in result.tests:
        per_problem[t.problem] = per_problem.get(t.problem, 0) + 1
        number = (
            f"{result.problems.index(t.problem) + 1}.{per_problem[t.problem]}" if t.problem in result.problems else ""
        )
        tests.append(gradescope_test(t, number))
        if t.problem in not_graded:  # no grade, so no score (null) and no status: never a 0 anyone records
            del tests[-1]["status"]
            tests[-1]["score"] = None
    level = [f"Sandbox: {result.isolation}"] if result.isolation else []
    wall = result.wall_s if isinstance(result.wall_s, (int, float)) and math.isfinite(result.wall_s) else 0.0
    data = {
        "score": None if not_graded else result.score,
        "execution_time": round(float(wall), 2),
        "output": clean_text("\n".join([*result.notes, *not_graded_normally(result), *level])),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    extra: dict = {}  # Gradescope keeps extra_data and shows it to nobody
    if result.flags:
        extra["flags"] = dict(result.flags)
    if result.isolation:
        extra["isolation"] = result.isolation
    problems = {}
    for pid in result.problems:
        rec = records.get(pid)
        if rec is None or pid in not_graded:
            continue  # graded by an older grader, or not graded (the grader failed): stays stale, so regraded
        problems[pid] = {
            **rec,
            "notes": [clean_text(n) for n in result.problem_notes.get(pid, [])],
            "flags": [clean_text(f) for f in result.problem_flags.get(pid, [])],
            "seconds": round(float(result.problem_seconds.get(pid, 0.0)), 3),
        }
    general = [clean_text(n) for n in general_notes(result)]
    extra["grader"] = {"format": FORMAT, "notes": general, "problems": problems}
    data["extra_data"] = extra
    return data


def records_of(data: dict | None) -> dict[str, dict]:
    """The rubric/fixture record of each problem of a results.json ({} for an older grader's)."""
    record = grader_record(data)
    if record is None:
        return {}
    return {pid: {"rubric": rec.get("rubric"), "fixtures": rec.get("fixtures")}
            for pid, rec in record["problems"].items() if isinstance(rec, dict)}


def write_merged(
    new: CourseResult, folder: Path, records: dict[str, dict], problem_order: list[str], merge_old: bool
) -> None:
    """Write `new` to folder/results.json and feedback.txt; with merge_old, into the results already there."""
    result, all_records = new, dict(records)
    if merge_old:
        old_data = read_results(folder / "results.json")
        if old_data is not None:
            old = from_gradescope(old_data, new.submission, problem_order)
            result = merge(old, new, problem_order)
            all_records = {p: r for p, r in records_of(old_data).items() if p not in new.problems} | records
    write_text_atomic(folder / "feedback.txt", feedback(result) + "\n")
    write_json_atomic(folder / "results.json", to_results_json(result, all_records))
