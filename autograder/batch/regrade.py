"""What a results.json was graded with, whether it is stale, and merging a regrade of some problems into it.

A problem is stale when its rubric (parsed: points, checks, tolerances, settings,
titles) or the fixtures it reads changed, or when the results.json has no
record (an older grader wrote it; results_json.py describes the record). A regrade
of some problems replaces only their tests and keeps every other problem's tests,
notes and flags.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from gradelib import rubric as rubric_mod
from gradelib.safeio import SafeReadError

from ..grading.course_result import NOT_GRADED, CourseResult
from ..isolation import safe_reading
from . import feedback, results_json
from .results_json import general_notes, grader_record

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


def write_merged(
    new: CourseResult, folder: Path, records: dict[str, dict], problem_order: list[str], merge_old: bool
) -> None:
    """Record `new` in `folder` (feedback.txt, then results.json, each by its one writer); with merge_old, merged
    into the results already there. Every path of the batch records a submission here: graded, or not graded
    because the grader failed (pool.py)."""
    result, all_records = new, dict(records)
    if merge_old:
        old_data = results_json.read(folder / "results.json")
        if old_data is not None:
            old = results_json.from_json(old_data, new.submission, problem_order)
            result = merge(old, new, problem_order)
            kept = results_json.records_of(old_data).items()
            all_records = {p: r for p, r in kept if p not in new.problems} | records
    feedback.write(folder, result)
    results_json.write(folder / "results.json", results_json.to_json(result, all_records))
