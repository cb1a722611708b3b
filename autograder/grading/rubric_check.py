"""The course grader's check of a rubric: every key of rubric.toml with its type, default and check.

The student kit reads the rubric it ships trusting it (gradelib/rubric.py); a rubric the course grades
with (its own, or another file with --rubric) passes here first. Every key this accepts is listed below
with a description and a default, and every value is checked (visibilities, shares, tolerances, points,
the lines and quantities each problem can grade, and each problem's own settings: SCHEMAS, below). A file
with an unknown key or a wrong value is refused at start-up with a message naming it, so a typo cannot
silently change a grade. The tables only the course reads are
here too: [late] (the gradebook's late policy) and [calibration] (what the language-model thresholds were
measured on).

A command reads its rubric once (read): one Rubric, handed to whatever needs it, its worker processes included.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from gradelib import rubric
from gradelib.problems import attention, lm_functions
from gradelib.problems.lm_common import FORMAT_LINE, QUALITY_LINES
from gradelib.problems.notebook_functions import SPECS, NotebookSpec
from gradelib.rubric import RUBRIC_PATH, Problem, RubricError, tomllib
from gradelib.rubric import _problem as kit_problem  # the kit's reading of one checked [problems.<id>] table
from gradelib.rubric_schema import VISIBILITIES

__all__ = ["RUBRIC_PATH", "LatePolicy", "Problem", "Rubric", "RubricError", "check", "load", "read", "rubric_of"]

# What students see of the hidden tests on Gradescope (each test's "visibility" in results.json).
HIDDEN_TESTS = {
    "after_published": "shown once the course publishes the grades",
    "after_due_date": "shown once the due date (the late due date, where late handins are allowed) has passed",
    "visible": "shown at once, like the public tests",
    "hidden": "never shown to students (the course staff see them)",
}
DTYPES = ("float16", "float32", "float64")
TOLERANCE_KEYS = ("rtol", "atol")


def positive(value: float) -> str | None:
    """A setting's check: None when `value` > 0, else the complaint."""
    return None if value > 0 else "must be > 0"


def fraction(value: float) -> str | None:
    """A setting's check: None when 0 < `value` < 1, else the complaint."""
    return None if 0 < value < 1 else "must be between 0 and 1 (exclusive)"


def below(low: str, high: str) -> Callable[[dict], str | None]:
    """A relation between two thresholds: full credit must be easier to reach than none."""
    return lambda s: None if s[low] < s[high] else f"'{low}' ({s[low]:g}) must be below '{high}' ({s[high]:g})"


@dataclass(frozen=True)
class Setting:
    """One key of a problem's `settings`: its type, default (None = required), meaning, and check."""

    type: type | tuple[type, ...]
    default: Any
    description: str
    check: Callable[[Any], str | None] = positive


@dataclass(frozen=True)
class ProblemSchema:
    """What a problem can grade: line_ids, of lines graded without quantities (e.g. "nll"); quantities, names a
    line may list; settings, the keys of its settings; relations, checks across settings, each returning a
    complaint or None; edge_lines, whether a line may be graded on its cases' edge tags."""

    settings: dict[str, Setting] = field(default_factory=dict)
    line_ids: frozenset[str] = frozenset()
    quantities: frozenset[str] = frozenset()
    relations: tuple[Callable[[dict], str | None], ...] = ()
    edge_lines: bool = False


# Settings of every notebook problem (rubric.toml [problems.<id>].settings).
NOTEBOOK_SETTINGS = {
    "cell_timeout_s": Setting((int, float), 10.0, "CPU seconds one notebook cell may use before the grader stops it "
                                                  "and moves on."),
    "call_timeout_s": Setting((int, float), 5.0, "CPU seconds one call of a graded function may use."),
}
# Settings of the problems whose function lines are graded from notebook 3. Notebook 3 imports torch and defines
# a model in its cells: slower than notebooks 1-2 on a busy grader.
FUNCTION_SETTINGS = {
    "cell_timeout_s": Setting((int, float), 30.0, "CPU seconds one cell of notebook 3 may use (training cells "
                              "never run)."),
    "call_timeout_s": Setting((int, float), 10.0, "CPU seconds one call of predict() or generate() may use."),
}
# A correct sampler stays below this total-variation distance with overwhelming probability at
# 8000 samples (typical 0.01): by the Bretagnolle-Huber-Carol inequality, P(TV >= eps) <=
# 2^k exp(-2 n eps^2), below 2e-9 for k = 28 tokens, n = 8000 and eps = 0.05.
SAMPLING_SETTINGS = {
    "sampling_max_tv": Setting((int, float), 0.05, "Largest total-variation distance between the frequencies "
                               "of generate()'s samples and softmax(logits / temperature).", fraction),
}


# The notebook problems whose case files tag edge cases (cases.json "edge"), each graded by the rubric line naming it.
EDGE_LINES = {"losses"}


def notebook_schema(pid: str, spec: NotebookSpec) -> ProblemSchema:
    """What problem `pid`, graded from notebook `spec`, may list in the rubric."""
    outputs = {q for c in spec.calls for q in c.outputs}
    return ProblemSchema(settings=NOTEBOOK_SETTINGS, quantities=frozenset(spec.quantities) | outputs,
                         edge_lines=pid in EDGE_LINES)


LM_QUANTITIES = frozenset(q for c in lm_functions.SPEC.calls for q in c.outputs)

# What each graded problem can grade, by rubric id: a rubric is checked against these.
SCHEMAS = {
    # Its case files tag edge cases (cases.json "edge"), each graded by the rubric line naming it.
    "attention": ProblemSchema(quantities=frozenset(attention.QUANTITIES), edge_lines=True),
    **{pid: notebook_schema(pid, spec) for pid, spec in SPECS.items()},
    "prediction": ProblemSchema(
        settings={
            "full_credit_nll": Setting((int, float), None, "Prediction NLL (nats/char) at or below which the nll "
                                       "line earns all its points."),
            "zero_credit_nll": Setting((int, float), None, "Prediction NLL at or above which the nll line earns "
                                       "nothing (linear in between)."),
            **FUNCTION_SETTINGS,
        },
        line_ids=frozenset({FORMAT_LINE, QUALITY_LINES["prediction"]}),
        quantities=LM_QUANTITIES,
        relations=(below("full_credit_nll", "zero_credit_nll"),),
    ),
    "generation": ProblemSchema(
        settings={
            "smoothing_eps": Setting((int, float), None, "Weight of the uniform distribution over the 28 characters "
                                     "mixed into the oracle (and its insertion-channel rate).", fraction),
            "full_credit_perplexity": Setting((int, float), None, "Perplexity at or below which the perplexity line "
                                              "earns all its points."),
            "zero_credit_perplexity": Setting((int, float), None, "Perplexity at or above which it earns nothing "
                                              "(linear in log in between)."),
            **FUNCTION_SETTINGS,
            **SAMPLING_SETTINGS,
        },
        line_ids=frozenset({FORMAT_LINE, QUALITY_LINES["generation"]}),
        quantities=LM_QUANTITIES,
        relations=(below("full_credit_perplexity", "zero_credit_perplexity"),),
    ),
}

# key -> (expected type, default, description). A default of None means required.
PROBLEM_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "title": (str, None, "Heading shown to students above the problem's tests."),
    "visibility_share": (
        dict,
        {"public": 0.5, "hidden": 0.5},
        "Fraction of each group's points earned on public and on hidden cases: one number in [0, 1] "
        "per visibility (public, hidden), summing to 1.",
    ),
    "tolerance": (
        dict,
        {},
        "Per-dtype (float16, float32, float64) {rtol, atol}, both >= 0, for value comparisons: "
        "|got - expected| <= atol * max(1, max|expected|) + rtol * |expected|.",
    ),
    "groups": (list, None, "The rubric lines; see GROUP_KEYS."),
    "settings": (dict, {}, "Problem-specific numbers (thresholds, time limits); their schema is in SCHEMAS."),
    "hidden_tests": (
        str,
        "after_published",
        "What students see of the problem's hidden tests on Gradescope: "
        + "; ".join(f"{k}: {v}" for k, v in HIDDEN_TESTS.items()) + ". The public tests are always visible.",
    ),
}

GROUP_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "id": (str, None, "Stable identifier of the rubric line, unique within the problem, used in reports."),
    "title": (str, None, "What the line checks, in words a student understands."),
    "points": ((int, float), None, "Points for the line (> 0), split between public and hidden cases."),
    "quantities": (
        list,
        [],
        "Names of the checked quantities (ones the problem computes); all must match on every case.",
    ),
    "backward": (bool, False, "Line is about gradients: lost when backward uses autograd."),
    "edge": (
        str,
        "",
        "An edge case the line is graded on alone (a name its cases carry in cases.json, e.g. large_scores; the "
        "fixture generator tags them and refuses a line without cases or a case without a line); every other line "
        "then skips those cases. A failure there is forgiven only "
        "when the same kind (raise, non-finite, finite but wrong) shows for that quantity on an ordinary case of "
        "the same dtype, never a NaN on a `stability` line, and only on a line one of whose cases produced "
        "over a quarter "
        "of its quantities, one right (gradelib/scoring.py). '' (the default): the ordinary cases.",
    ),
    "stability": (
        bool,
        False,
        "An edge line whose cases make exp() overflow: a NaN there is the line's own failure, never forgiven.",
    ),
    "visibilities": (
        list,
        list(VISIBILITIES),
        "Which case sets (public, hidden) the line is graded on; a line graded on one set earns its full points there.",
    ),
}

# The optional [late] table: the late policy the course staff's gradebook applies to the final scores.
LATE_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "penalty_per_day": (
        (int, float), None,
        "Fraction of the total (in [0, 1]) taken off per day late; a started day counts as a whole day.",
    ),
    "max_days": (
        (int, float), None,
        "Days late (>= 0) after which the score is 0: a handin more than max_days late scores 0.",
    ),
}


# The optional top-level [calibration] table: which corpus the language-model thresholds were measured on.
CALIBRATION_KEYS: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "corpus": (str, "", "The corpus the thresholds were measured on, in words."),
    "corpus_sha256": (str, "", "sha256 of the language-model data the thresholds were measured on; the course grader "
                      "refuses to grade when it differs from its own data's."),
    "oracle": (str, "", "The oracle that scored the generations the thresholds were measured with."),
}


@dataclass(frozen=True)
class LatePolicy:
    """[late]: penalty_per_day (fraction of the total per started day late), max_days (more than that: 0)."""

    penalty_per_day: float
    max_days: float

    def penalty(self, days_late: int) -> float:
        """Fraction of the total taken off for `days_late` whole days (0 on time, 1 past max_days)."""
        if days_late <= 0:
            return 0.0
        if days_late > self.max_days:
            return 1.0
        return min(1.0, days_late * self.penalty_per_day)


def _is(value: Any, typ: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return typ is bool or (isinstance(typ, tuple) and bool in typ)
    return isinstance(value, typ)


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = [t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,))]
    return " or ".join("number" if n in ("int", "float") else n for n in dict.fromkeys(names))


def _check_keys(where: str, table: dict, schema: dict) -> dict:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise RubricError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(schema)}")
    out = {}
    for key, (typ, default, desc) in schema.items():
        if key not in table:
            if default is None:
                raise RubricError(f"{where}: missing required key '{key}' ({desc})")
            out[key] = default
            continue
        value = table[key]
        if not _is(value, typ):
            raise RubricError(f"{where}: key '{key}' must be {_type_name(typ)}, got {type(value).__name__} {value!r}")
        out[key] = value
    return out


def _number(where: str, value: Any) -> float:
    if not _is(value, (int, float)) or not math.isfinite(value):
        raise RubricError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _visibility_share(where: str, share: dict) -> None:
    if set(share) != set(VISIBILITIES):
        raise RubricError(
            f"{where}: visibility_share must have exactly the keys {list(VISIBILITIES)}, got {sorted(share)}"
        )
    out = {v: _number(f"{where}: visibility_share.{v}", share[v]) for v in VISIBILITIES}
    if any(not 0 <= x <= 1 for x in out.values()):
        raise RubricError(f"{where}: visibility_share values must be between 0 and 1, got {share}")
    if abs(sum(out.values()) - 1.0) > 1e-9:
        raise RubricError(f"{where}: visibility_share must sum to 1, got {share}")


def _tolerance(where: str, tolerance: dict) -> None:
    for dtype, tol in tolerance.items():
        if dtype not in DTYPES:
            raise RubricError(f"{where}: tolerance for unknown dtype '{dtype}'; known: {list(DTYPES)}")
        if not isinstance(tol, dict) or set(tol) != set(TOLERANCE_KEYS):
            got = sorted(tol) if isinstance(tol, dict) else tol
            raise RubricError(
                f"{where}: tolerance.{dtype} must have exactly the keys {list(TOLERANCE_KEYS)}, got {got}"
            )
        values = [_number(f"{where}: tolerance.{dtype}.{k}", tol[k]) for k in TOLERANCE_KEYS]
        if any(x < 0 for x in values):
            raise RubricError(f"{where}: tolerance.{dtype} values must be >= 0, got {tol}")


def _group(where: str, table: Any, schema: ProblemSchema) -> str:
    """Check one rubric line; its id."""
    if not isinstance(table, dict):
        raise RubricError(f"{where}: must be a table ([[problems.<id>.groups]]), got {table!r}")
    spec = _check_keys(where, table, GROUP_KEYS)
    if _number(f"{where}: points", spec["points"]) <= 0:
        raise RubricError(f"{where}: points must be > 0, got {spec['points']!r}")
    vis = spec["visibilities"]
    if not vis or any(v not in VISIBILITIES for v in vis) or len(set(vis)) != len(vis):
        raise RubricError(
            f"{where}: visibilities must be a non-empty list of distinct values from {list(VISIBILITIES)}, got {vis!r}"
        )
    quantities = spec["quantities"]
    if any(not isinstance(q, str) for q in quantities):
        raise RubricError(f"{where}: quantities must be strings, got {quantities!r}")
    unknown = [q for q in quantities if q not in schema.quantities]
    if unknown:
        raise RubricError(
            f"{where}: quantities {unknown} are not computed by this problem; known: {sorted(schema.quantities)}"
        )
    if not quantities and spec["id"] not in schema.line_ids:
        known = sorted(schema.line_ids) or "none: every line of this problem lists quantities"
        raise RubricError(
            f"{where}: line id '{spec['id']}' lists no quantities and is not a line this problem grades ({known})"
        )
    if spec["edge"] and not schema.edge_lines:
        raise RubricError(f"{where}: edge '{spec['edge']}': this problem's cases carry no edge tags")
    if spec["edge"] and not re.fullmatch(r"[a-z][a-z0-9_]*", spec["edge"]):
        raise RubricError(f"{where}: edge must be a lower-case name (letters, digits, _), got {spec['edge']!r}")
    if spec["edge"] and not quantities:
        raise RubricError(
            f"{where}: a line graded on an edge case ('{spec['edge']}') must list the quantities it checks"
        )
    if spec["stability"] and not spec["edge"]:
        raise RubricError(f"{where}: stability = true is for a line graded on an edge case (set its `edge`)")
    return spec["id"]


def _settings(where: str, table: dict, schema: ProblemSchema) -> None:
    unknown = sorted(set(table) - set(schema.settings))
    if unknown:
        raise RubricError(f"{where}: unknown setting(s) {unknown}; known settings: {sorted(schema.settings)}")
    out = {}
    for key, setting in schema.settings.items():
        if key not in table:
            if setting.default is None:
                raise RubricError(f"{where}: missing required setting '{key}' ({setting.description})")
            out[key] = setting.default
            continue
        value = table[key]
        if not _is(value, setting.type) or (_is(value, (int, float)) and not math.isfinite(value)):
            raise RubricError(f"{where}: setting '{key}' must be {_type_name(setting.type)}, got {value!r}")
        complaint = setting.check(value)
        if complaint:
            raise RubricError(f"{where}: setting '{key}' {complaint}, got {value!r} ({setting.description})")
        out[key] = value
    for relation in schema.relations:
        complaint = relation(out)
        if complaint:
            raise RubricError(f"{where}: settings {complaint}")


def _late(where: str, table: Any) -> LatePolicy:
    if not isinstance(table, dict):
        raise RubricError(f"{where}: must be a table ([late]) with keys {sorted(LATE_KEYS)}, got {table!r}")
    spec = _check_keys(where, table, LATE_KEYS)
    per_day = _number(f"{where}: penalty_per_day", spec["penalty_per_day"])
    if not 0 <= per_day <= 1:
        raise RubricError(
            f"{where}: penalty_per_day must be a fraction between 0 and 1 (0.1 = 10% per day), got {per_day!r}"
        )
    max_days = _number(f"{where}: max_days", spec["max_days"])
    if max_days < 0:
        raise RubricError(f"{where}: max_days must be >= 0 (days late after which the score is 0), got {max_days!r}")
    return LatePolicy(per_day, max_days)


def _calibration(path: Path, data: dict) -> dict[str, str]:
    table = data.get("calibration", {})
    if not isinstance(table, dict):
        raise RubricError(f"{path.name} [calibration]: must be a table")
    return _check_keys(f"{path.name} [calibration]", table, CALIBRATION_KEYS)


def _read(path: Path) -> dict:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(
            f"{path}: cannot be read ({exc.strerror if isinstance(exc, OSError) else exc}); expected a rubric TOML file"
        ) from None
    unknown_top = sorted(set(data) - {"problems", "late", "calibration"})
    if unknown_top:
        raise RubricError(
            f"{path.name}: unknown top-level key(s) {unknown_top}; the file holds [problems.<id>] tables, "
            "an optional [late] table and a [calibration] table"
        )
    return data


@dataclass(frozen=True)
class Rubric:
    """One rubric file, read and checked once: its problems by id in file order (as the kit reads them, each setting
    the file leaves out at its default), its late policy ([late]; None without one) and its [calibration] table
    (corpus, corpus_sha256, oracle; each "" when absent)."""

    path: Path
    problems: dict[str, Problem]
    late: LatePolicy | None
    calibration: dict[str, str]


def read(path: Path | str | None = None, schemas: dict[str, ProblemSchema] | None = None) -> Rubric:
    """The rubric at `path` (default the kit's, gradelib/rubric.toml), read once and checked: every key and value
    against `schemas` (problem id -> ProblemSchema, default the graded problems' own); RubricError naming the first
    that is wrong. A problem id without a schema is refused."""
    path = Path(path or rubric.RUBRIC_PATH)
    schemas = SCHEMAS if schemas is None else schemas
    data = _read(path)
    late = _late(f"{path.name} [late]", data["late"]) if "late" in data else None
    calibration = _calibration(path, data)
    problems = data.get("problems", {})
    for pid, table in problems.items():
        where = f"{path.name} [problems.{pid}]"
        if pid not in schemas:
            raise RubricError(f"{where}: unknown problem id '{pid}'; known: {sorted(schemas)}")
        if not isinstance(table, dict):
            raise RubricError(f"{where}: must be a table")
        spec = _check_keys(where, table, PROBLEM_KEYS)
        if spec["hidden_tests"] not in HIDDEN_TESTS:
            raise RubricError(
                f"{where}: hidden_tests must be one of {list(HIDDEN_TESTS)}, got {spec['hidden_tests']!r} "
                f"({PROBLEM_KEYS['hidden_tests'][2]})"
            )
        ids = [_group(f"{where} group {i + 1}", g, schemas[pid]) for i, g in enumerate(spec["groups"])]
        if not ids:
            raise RubricError(f"{where}: no groups (rubric lines)")
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise RubricError(f"{where}: line ids must be unique, repeated: {duplicates}")
        _visibility_share(where, spec["visibility_share"])
        _tolerance(where, spec["tolerance"])
        _settings(f"{where} settings", spec["settings"], schemas[pid])
    if not problems:
        raise RubricError(f"{path}: no [problems.<id>] tables")
    read_problems = {pid: kit_problem(pid, table) for pid, table in problems.items()}
    return Rubric(
        path=path,
        problems={pid: replace(p, settings={key: p.settings.get(key, s.default)
                                            for key, s in schemas[pid].settings.items()})
                  for pid, p in read_problems.items()},
        late=late,
        calibration=calibration,
    )


def rubric_of(source: Rubric | Path | str | None) -> Rubric:
    """`source` itself when it is a Rubric already read, else the rubric at that path (None: the kit's), read."""
    return source if isinstance(source, Rubric) else read(source)


def check(path: Path | str | None = None, schemas: dict[str, ProblemSchema] | None = None) -> None:
    """Check the rubric at `path` (read); RubricError naming the first key or value that is wrong."""
    read(path, schemas)


def load(path: Path | str | None = None, schemas: dict[str, ProblemSchema] | None = None) -> dict[str, Problem]:
    """The problems of the rubric at `path` (default gradelib/rubric.toml), checked (read), as the kit reads them:
    by id, in file order, each setting the file leaves out at its default (`schemas`, default the problems' own)."""
    return read(path, schemas).problems


def check_edges(problem_id: str, cases: list[tuple[str, str, str]], rubric_path: Path | None = None) -> None:
    """Refuse (ValueError) what would grade an edge case wrong: the rubric line naming an edge is its one
    declaration, so a case (name, visibility, edge) tagged with an edge no line of `problem_id` is graded on at
    its visibility, and an edge line without a case at one of its visibilities, are errors."""
    problem = load(rubric_path)[problem_id]
    lines = {g.edge: g for g in problem.groups if g.edge}
    for name, vis, edge in cases:
        if edge and (edge not in lines or vis not in lines[edge].visibilities):
            raise ValueError(f"{problem_id} case '{name}' ({vis}) is tagged edge '{edge}', but no {vis} rubric line of "
                             f"{problem_id} is graded on it; expected a line with edge = \"{edge}\" in the rubric, or "
                             f"one of the edges it names: {sorted(lines)}")
    for edge, g in lines.items():
        for vis in g.visibilities:
            if not any(e == edge and v == vis for _, v, e in cases):
                raise ValueError(f"rubric line {problem_id}.{g.id} is graded on edge '{edge}' ({vis}), but no {vis} "
                                 f"case carries it; expected a case of the generator tagged edge '{edge}'")
