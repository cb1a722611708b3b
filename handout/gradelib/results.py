"""Test results (a rubric line on one case set each) and the score table a student reads."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from .handin_contract import RUN_FILES
from .safeio import clean_text


@dataclass
class TestResult:
    problem: str
    name: str
    score: float
    max_score: float
    visibility: str  # "public" or "hidden"
    output: str = ""
    line: str = ""  # the rubric line's id (rubric.toml), stable whatever its title says

    def __post_init__(self) -> None:
        self.name, self.output = clean_text(self.name), clean_text(self.output)  # safe to show, whatever it quotes

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score - 1e-9

    @property
    def grades_run(self) -> bool:
        """Whether the line grades a training run's files (predictions.npy's format): shown after the code lines."""
        return self.name.removeprefix(f"{self.problem}: ").startswith(tuple(f"{name}:" for name in RUN_FILES))


@dataclass
class SubmissionResult:
    submission: str
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # submission-wide messages
    problems: tuple[str, ...] = ()  # ids graded, in rubric order
    max_points: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    flags: dict[str, str] = field(default_factory=dict)  # integrity findings for the course staff

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tests), 4)

    @property
    def max_score(self) -> float:
        return round(sum(self.max_points.values()), 4)

    def table(self) -> str:
        """The report a student reads, rows of at most WIDTH columns: per problem its score, each failed line with
        its first failing case and cause (failures), its passing lines folded into one."""
        lines = [f"Submission: {self.submission}", *(ln for n in self.notes for ln in wrap(f"  note: {n}"))]
        for pid in self.problems:
            mine = [t for t in self.tests if t.problem == pid]
            got = sum(t.score for t in mine)
            passing = [t for t in mine if t.passed]
            said = ("all" if len(passing) == len(mine) and mine else f"{len(passing)} of") + f" {len(mine)} lines pass"
            said = {"all 1 lines pass": "its one line passes"}.get(said, said)
            lines.append(f"{pid} {got:.2f} / {self.max_points.get(pid, 0):.2f}: {said}")
            lines += self.failures(pid, [t for t in mine if not t.passed])
            if passing and len(passing) < len(mine):
                other = "line passes" if len(passing) == 1 else f"{len(passing)} lines pass"
                lines.append(f"  the other {other} ({sum(t.score for t in passing):.2f} points)")
        lines.append(f"TOTAL {self.score:.2f} / {self.max_score:.2f}")
        return clean_text("\n".join(lines))

    def failures(self, pid: str, failed: list[TestResult]) -> list[str]:
        """The table's lines on problem `pid`'s `failed` tests (why_lost), root causes first."""
        failed = sorted(failed, key=lambda t: (knock_on(t.output), t.grades_run))
        items = [(f"FAIL {t.score:.2f} / {t.max_score:.2f} {t.name.removeprefix(f'{pid}: ')}", t.output, t.max_score)
                 for t in failed]
        return [ln for line in why_lost(items) for ln in wrap(f"  {line.removeprefix('- ')}")]


WIDTH = 100  # columns of the score table: a terminal, an e-mail, a phone turned sideways


def wrapped(text: str) -> str:
    """`text` with each of its lines wrapped at WIDTH (wrap)."""
    return "\n".join(ln for line in text.splitlines() for ln in wrap(line))


def wrap(line: str, width: int = WIDTH) -> list[str]:
    """`line` cut at spaces into lines of at most `width` columns, the continuations indented 4 more."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False)


# How a failure text says it follows from another quantity's failure.
_KNOCK_ON = ("which probably follows from", "(see the forward lines)", "stopped before storing it", "(see that line)")


def knock_on(output: str) -> bool:
    """Whether a failed line's first case fails because of another line's failure (it is shown after the root)."""
    first = next((ln for ln in output.splitlines() if ln.startswith(("case ", "not checked"))), output)
    return any(k in first for k in _KNOCK_ON)


# How a line's failure text says the code it grades is still the handout's TODO (the children's words).
_TODO_SAID = (re.compile(r"not attempted: `(?P<what>[^`]+)` raises NotImplementedError"),
              re.compile(r"(?P<what>import|init|forward|backward) raised NotImplementedError\b:? ?(?P<todo>TODO[^(]*?)?"
                         r" ?\(in (?P<file>[^,()]+), line (?P<line>\d+)\)"))


def not_attempted(output: str) -> str:
    """What is still a TODO (e.g. "`softmax`", "forward (attention.py, line 65)") when every failed case of a line
    failed only on the handout's NotImplementedError; '' otherwise, or when some failures are not shown."""
    if output.startswith("not checked on "):
        cases = [output.splitlines()[0]]
    elif output.startswith("failed on ") and not any(f"\n{w}" in output for w in OTHER_FAILURES):
        cases = [ln for ln in output.splitlines() if ln.startswith("case ")]
    else:
        return ""
    found = set()
    for ln in cases:
        match = next((m for m in (p.search(ln) for p in _TODO_SAID) if m), None)
        if match is None:
            return ""
        where = match.groupdict()
        if where.get("file"):
            todo = f": {where['todo'].strip()}" if where.get("todo") else ""
            found.add(f"{where['what']} ({where['file']}, line {where['line']}{todo})")
        else:
            found.add(where["what"])
    return " and ".join(sorted(found))


def why_lost(failed: list[tuple[str, str, float]]) -> list[str]:
    """The lines of 'Why points were lost' for (test name, its output, its points) of one problem: one block per
    test, except that tests lost only to code not written yet are named in one short list at the end."""
    lines: list[str] = []
    todo: dict[str, list[float]] = {}
    previous = None
    hints: set[str] = set()
    for name, output, points in failed:
        what = not_attempted(output)
        if what:  # a function's name, or a stage with its file and line
            todo.setdefault(what if "(" in what else f"`{what}`", []).append(points)
            continue
        if output == previous:  # e.g. the backward points withheld, said on each backward line
            lines.append(f"- {name}: the same as the line above.")
            continue
        same = previous is not None and output.startswith("failed on ")
        same = same and failure_gist(output) == failure_gist(previous)
        previous = output
        if same:  # the same failure on the other case set (other cases, other figures): said once
            lines.append(f"- {name}: the same failure as the line above ({output.splitlines()[0].rstrip(':')}).")
        else:
            lines += [f"- {name}:", *(f"    {line}" for line in _hints_once(output, hints).splitlines())]
    if todo:
        lines.append("- not attempted yet (the handout's TODO still raises NotImplementedError), so every case failed:")
        for what, points in todo.items():
            lines.append(f"    {what}: {len(points)} line{'s' if len(points) > 1 else ''}, {sum(points):.2f} points")
    return lines


# How a line's failure text (scoring._failure_text) starts the lines about cases that failed another way.
OTHER_FAILURES = ("another failure on ", "and other failures on ")


def gist(message: str) -> str:
    """A message without its figures and indices: two failures with the same gist are the same mistake."""
    return re.sub(r"-?\d[\d.e+-]*", "#", message)


def failure_gist(output: str) -> str:
    """What a line's failure text says about its first failing case, without which case and its figures."""
    shown = [ln.split("): ", 1)[1] if ln.startswith("case '") and "): " in ln else ln
             for ln in output.splitlines()[1:] if not ln.startswith(("the same failure on ", *OTHER_FAILURES))]
    return gist("\n".join(shown))


_RAISED = re.compile(r"raised (?P<type>[A-Za-z_][\w.]*): ")


def _errors_once(line: str, said: set[str]) -> str:
    """`line` with each exception already quoted above (the same type at the same line of the same file, kept in
    `said`) replaced by a pointer to it: a dtype clash raised on every float64 case is quoted once."""
    out, at = [], 0
    for m in _RAISED.finditer(line):
        where = line.find("(in ", m.end())
        if where < 0 or m.start() < at:
            continue
        depth, end = 0, where
        for end in range(where, len(line)):  # the closing parenthesis of "(in file, line N: code)"
            depth += {"(": 1, ")": -1}.get(line[end], 0)
            if depth == 0:
                break
        place = line[where:end + 1]
        key = f"{m['type']} {place.split(':', 1)[0]}"
        if key in said:
            out.append(line[at:m.start()] + f"raised the {m['type']} quoted above {place.split(':', 1)[0]})")
            at = end + 1
        else:
            said.add(key)
    return "".join(out) + line[at:]


def _hints_once(output: str, said: set[str]) -> str:
    """`output` with each hint and each exception already said above (in `said`) replaced by a pointer to it."""
    out = []
    for line in output.splitlines():
        line = _errors_once(line, said)
        head, mark, hint = line.partition("Hint: ")
        if mark and hint in said:
            line = f"{head}Hint: as above."
        elif mark:
            said.add(hint)
        out.append(line)
    return "\n".join(out)
