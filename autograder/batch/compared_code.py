"""The code a similarity run compares: attention.py and the notebooks' code cells, read from an opened handin.

Each submission (a handin.tar or a folder, as for the batch grader) is opened
with autograder.grading.uploads.open_handin into a temporary folder, which is removed at
once; attention.py and the code cells of the three notebooks are read from it.
A notebook's cells identical to one of the handout's are left out (all their
code is boilerplate); what cannot be read is noted, not compared.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..grading import uploads
from ..isolation.safe_reading import notebook_budget

REPO = Path(__file__).resolve().parents[2]
HANDOUT = REPO / "handout"
PY_FILE = "attention.py"
NOTEBOOKS = ("01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb", "03_language_model.ipynb")
FILES = (PY_FILE, *NOTEBOOKS)
# Code beyond this many characters in one file is not compared (tokenizing
# it would take seconds); the note says so.
MAX_CODE_CHARS = 400_000
NOT_COMPARED_MISSING = "is missing; it was not compared"  # the end of the note for a file the handin lacks


@dataclass
class Source:
    """One file's code as compared: attention.py, or a notebook's code cells joined in order."""

    text: str
    # For a notebook: (first line, last line) of each code cell's code in `text`, and the cell's
    # number counted from 1 at the top of the notebook, markdown cells included.
    cells: list[tuple[int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.newlines = [i for i, c in enumerate(self.text) if c == "\n"]

    def label(self, line: int) -> str:
        """How line `line` of `text` is shown: its number, or cell:line in a notebook."""
        if not self.cells:
            return str(line)
        for start, end, number in self.cells:
            if start <= line <= end:
                return f"{number}:{line - start + 1}"
        return ""

    def where(self, first: int, last: int) -> str:
        """Lines first..last of `text` (1-based), said in the file's own terms."""
        if not self.cells:
            return f"{first}-{last}" if last > first else f"{first}"
        parts = []
        for start, end, number in self.cells:
            a, b = max(first, start), min(last, end)
            if a <= b:
                a, b = a - start + 1, b - start + 1
                parts.append(f"cell {number}: {a}-{b}" if b > a else f"cell {number}: {a}")
        return "; ".join(parts)


@dataclass
class Loaded:
    name: str
    sources: dict[str, Source]
    notes: list[str]


def notebook_json(data: bytes | str) -> object:
    """A notebook's JSON, parsed within a fixed memory budget; ValueError says what is too large (or not JSON)."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    why = notebook_budget(raw)
    if why:
        raise ValueError(why)
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise ValueError(f"arrays or objects nested thousands deep: {exc}") from None


def notebook_source(raw: str, label: str, given: frozenset[str] = frozenset()) -> Source:
    """A notebook's code cells, in order, as one Python text; raise ValueError saying what is wrong.

    Cells identical to a cell of the handout (`given`) are left out: all their
    code is boilerplate anyway, and tokenizing is most of the time a run takes.
    """
    try:
        nb = notebook_json(raw)  # within a fixed memory budget, whatever the notebook holds
    except ValueError as exc:
        raise ValueError(f"{label} is not valid notebook JSON ({exc}); expected a .ipynb saved by Jupyter") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise ValueError(f"{label} has no list of cells; expected a .ipynb saved by Jupyter (nbformat 4)")
    lines: list[str] = []
    where: list[tuple[int, int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise ValueError(f"{label}: cell {number} has a source that is not text")
        if src.strip() in given:
            continue
        # The marker is a comment, which the tokenizer drops: it only shows where a cell starts.
        lines.append(f"# cell {number}")
        code = src.split("\n")
        where.append((len(lines) + 1, len(lines) + len(code), number))
        lines += code
        lines.append("")
    return Source("\n".join(lines), where)


def read_sources(folder: Path, given: frozenset[str] = frozenset()) -> tuple[dict[str, Source], list[str]]:
    """The compared files found in an opened handin, and a note for each one missing or unreadable."""
    sources: dict[str, Source] = {}
    notes: list[str] = []
    for name in FILES:
        path = folder / name
        if not path.is_file():
            notes.append(f"{name} {NOT_COMPARED_MISSING}")
            continue
        try:
            raw = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            notes.append(f"{name} is not UTF-8 text; it was not compared")
            continue
        try:
            source = notebook_source(raw, name, given) if name.endswith(".ipynb") else Source(raw)
        except ValueError as exc:
            notes.append(f"{exc}; it was not compared")
            continue
        if len(source.text) > MAX_CODE_CHARS:
            notes.append(f"{name} holds more than {MAX_CODE_CHARS:,} characters of code; it was not compared")
            continue
        sources[name] = source
    return sources, notes


def load_submission(path: Path, name: str, given: frozenset[str] = frozenset()) -> Loaded:
    """Open one handin into a temporary folder (gone on return) and read the files compared."""
    with tempfile.TemporaryDirectory(prefix="similarity-") as tmp:
        try:
            uploads.open_handin(Path(path), Path(tmp))
        except uploads.HandinError as exc:
            return Loaded(name, {}, [f"not compared: {exc}"])
        except OSError as exc:
            return Loaded(name, {}, [f"not compared: {path} could not be read ({exc.strerror or exc})"])
        sources, notes = read_sources(Path(tmp), given)
    return Loaded(name, sources, notes)


def given_cells(handout: Path = HANDOUT) -> frozenset[str]:
    """The handout notebooks' code cells, stripped."""
    cells = set()
    for nb in NOTEBOOKS:
        for cell in json.loads((handout / nb).read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                src = cell["source"]
                cells.add(("".join(src) if isinstance(src, list) else src).strip())
    return frozenset(cells)


def handout_sources(handout: Path = HANDOUT) -> list[Source]:
    """The code students are given: never counts as similar."""
    out = [Source((handout / PY_FILE).read_text(encoding="utf-8"))]
    out += [notebook_source((handout / nb).read_text(encoding="utf-8"), nb) for nb in NOTEBOOKS]
    return out
