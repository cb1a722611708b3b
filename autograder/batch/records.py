"""The batch's records: a submission's folder name, which path it was graded from, and its row read back from
results.json.

results.json (Gradescope's format) is the one record of a graded submission;
every class file (grades.csv, report.html, the exports) is derived from the
rows read here, so those of a resumed run are the same as those of an
uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gradelib.safeio import SafeReadError, clean_text

from ..grading.course_result import NOT_GRADED
from ..isolation import safe_reading
from .atomic import write_text_atomic

MAX_RESULTS_BYTES = 64 * 1024 * 1024
# The class outputs beside the per-submission folders.
RESERVED = {"grades.csv", "report.html", "regrades.csv", "canvas.csv", "scores.csv"}
SOURCE_FILE = ".source"  # in each submission's folder: the path it was graded from
ARCHIVE_EXTENSIONS = (".tar.gz", ".tgz", ".tar", ".zip")  # dropped from a submission's name, whatever its type
HANDIN_ARCHIVES = tuple(f"handin{ext}" for ext in ARCHIVE_EXTENSIONS)
# Gradescope's upload folder (/autograder/submission/, its submission_metadata.json beside it): a class
# exported in that layout (<student>/submission/) is named by the student's folder.
UPLOAD_FOLDER = "submission"
FORMULA_STARTS = ("=", "+", "-", "@")  # a spreadsheet runs a cell starting so as a formula
# A graded test's message that tells of a run ended from outside its limits (results of a grader that scored such
# a run): a fault may have touched its score, so the report lists it.
FAULT_WORDS = ("from outside its limits", "none of the grader's limits sent")


# ---------------------------------------------------------------- submission names


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _base_name(p: Path) -> str:
    base = p.name
    if base == UPLOAD_FOLDER and p.parent.name:
        return p.parent.name
    for ext in ARCHIVE_EXTENSIONS:
        if base.endswith(ext):
            base = base[: -len(ext)]
            break
    if base == "handin" and p.parent.name:
        base = p.parent.name
    return base


def source_key(p: Path) -> str:
    """What identifies a submission across runs: its resolved path, a handin archive by its folder
    (so `student/` and `student/handin.tar` are the same submission, as their name says)."""
    path = p.resolve()
    key = str(path.parent if path.name in HANDIN_ARCHIVES else path)
    return key.encode("utf-8", "surrogateescape").decode(
        "utf-8", "backslashreplace"
    )  # a name not in UTF-8 still has one


def submission_names(paths: list[Path]) -> list[str]:
    """A distinct, filesystem-safe folder name per submission (handin.tar and submission/ -> their folder's name).

    A plain name is kept as it is. A name that had to change gets a short hash of the
    original ("a b" -> "a_b-<hash>"), so it cannot take the folder of a student really
    named "a_b"; names that still coincide (the same name in two folders, or names equal
    but for case, which a case-insensitive disk would merge) each get a hash of their path.
    The result depends on each path, not on the order or the company it comes in, so a
    resumed run finds every submission in the folder it had before.
    """
    names = []
    for p in paths:
        base = _base_name(p)
        clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in base).strip(".") or "submission"
        if clean != base or clean.lower() in RESERVED:
            clean = f"{clean}-{_digest(base)}"
        names.append(clean)
    folded = Counter(n.casefold() for n in names)
    names = [f"{n}-{_digest(source_key(p))}" if folded[n.casefold()] > 1 else n for n, p in zip(names, paths)]
    seen: set[str] = set()
    for i, n in enumerate(names):  # left: the very same path listed twice
        name, k = n, 2
        while name.casefold() in seen:
            name, k = f"{n}-{k}", k + 1
        seen.add(name.casefold())
        names[i] = name
    return names


def spreadsheet_cell(value: str) -> str:
    """Text for a CSV cell that a spreadsheet shows as text, never runs as a formula (a leading ' where needed)."""
    value = clean_text(value)
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def source_of(folder: Path) -> str | None:
    """The path a submission folder's results were graded from (None when it does not say)."""
    try:
        return safe_reading.read_text(folder / SOURCE_FILE, 64 * 1024)
    except SafeReadError:
        return None


def already_graded(path: Path, folder: Path) -> bool:
    """Whether `folder` holds results of this very submission (not of another that once had its name)."""
    return (folder / "results.json").is_file() and source_of(folder) == source_key(path)


def claim(path: Path, folder: Path) -> None:
    """Mark `folder` as the one of `path`; results there of any other submission are removed first."""
    source = source_key(path)
    if source_of(folder) != source:
        for stale in ("results.json", "feedback.txt", "submission_metadata.json"):
            (folder / stale).unlink(missing_ok=True)
        write_text_atomic(folder / SOURCE_FILE, source)


def adopt_zip_folders(out: Path, paths: list[Path], names: list[str]) -> None:
    """Move the results of a .zip graded under its file name (`alice.zip`, as an older grader named it) to its
    name now (`alice`), where that folder is free: one name per submission, and no row twice."""
    for path, name in zip(paths, names):
        old = out / path.name
        if path.name.endswith(".zip") and old.name != name and not (out / name).exists() and old.is_dir() and \
                not old.is_symlink() and source_of(old) == source_key(path):
            old.rename(out / name)


def class_folders(out: Path) -> list[Path]:
    """The submission folders under `out` that hold a results.json, whichever run graded them."""
    return sorted(
        p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "results.json").is_file()
    )


# ---------------------------------------------------------------- rows


@dataclass
class TestRow:
    name: str
    problem: str
    score: float
    max_score: float
    passed: bool
    figures: dict[str, float] = field(default_factory=dict)  # e.g. prediction_nll, generation_perplexity


@dataclass
class Row:
    """One graded submission, as read back from its results.json."""

    submission: str
    scores: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    max: float = 0.0
    wall_s: float = 0.0
    notes: str = ""
    tests: list[TestRow] = field(default_factory=list)
    isolation: str = ""  # sandbox level its code ran under; "" when results.json does not say
    flags: dict[str, str] = field(default_factory=dict)  # integrity findings (e.g. arrays that are not the model's)
    faults: list[str] = field(default_factory=list)  # graded tests whose message tells of a fault (FAULT_WORDS)

    @property
    def not_graded(self) -> list[str]:
        """The problems the grader failed on (course_result.NOT_GRADED flags): no grade, marked for regrading."""
        return [k[len(NOT_GRADED):] for k in self.flags if k.startswith(NOT_GRADED)]


def finite(value) -> float:
    """A finite float from results.json, else ValueError (NaN, inf, text, a list...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


def is_finite(value) -> bool:
    try:
        finite(value)
    except ValueError:
        return False
    return True


def read_row(path: Path, name: str) -> Row:
    """The row of one submission; a missing, corrupt or malformed results.json becomes a 0 row that says so."""
    try:
        return row_of(safe_reading.read_json(path, MAX_RESULTS_BYTES), name)
    except Exception as exc:  # whatever the file holds, the class's other rows are read
        return Row(
            name,
            notes=f"results.json could not be read ({clean_text(exc)[:300]}); this submission is listed with 0 points",
        )


def row_of(data, name: str) -> Row:
    """The row of the results.json content `data`; ValueError (or another error) when it is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        raise ValueError("not a Gradescope results object with a list of tests")
    flags = _flags(data.get("extra_data"))
    ungraded = {k[len(NOT_GRADED):] for k in flags if k.startswith(NOT_GRADED)}
    tests, faults = [], []
    for t in data["tests"]:
        tags = t.get("tags") or [""]
        problem = clean_text(tags[0] if isinstance(tags, list) else "")
        extra = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
        figures = extra.get("figures") if isinstance(extra.get("figures"), dict) else {}
        score = 0.0 if t["score"] is None and problem in ungraded else finite(t["score"])  # no grade: no score
        tests.append(TestRow(clean_text(t["name"]), problem, score, finite(t["max_score"]),
                             t.get("status") == "passed",
                             {clean_text(k): float(v) for k, v in figures.items() if is_finite(v)}))
        if problem not in ungraded and any(w in str(t.get("output", "")) for w in FAULT_WORDS):
            faults.append(tests[-1].name)
    total = round(sum(t.score for t in tests) if ungraded else finite(data.get("score", 0.0)), 4)
    wall = finite(data.get("execution_time", 0.0))
    notes = clean_text(data.get("output", ""))
    scores: dict[str, float] = {}
    for t in tests:
        scores[t.problem] = round(scores.get(t.problem, 0.0) + t.score, 4)
    return Row(
        submission=name,
        scores=scores,
        total=total,
        max=round(sum(t.max_score for t in tests), 4),
        wall_s=wall,
        notes=notes,
        tests=tests,
        isolation=str(extra.get("isolation", "")) if isinstance(extra := data.get("extra_data"), dict) else "",
        flags=flags,
        faults=faults,
    )


def _flags(extra) -> dict[str, str]:
    flags = extra.get("flags") if isinstance(extra, dict) else None
    if not isinstance(flags, dict):
        return {}
    return {clean_text(k)[:80]: clean_text(v)[:500] for k, v in list(flags.items())[:20]}


def class_rows(out: Path) -> list[Row]:
    """A row per submission folder under `out` that holds a results.json."""
    return [read_row(p / "results.json", p.name) for p in class_folders(out)]
