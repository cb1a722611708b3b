"""Similarity between the submissions of a class: MOSS's winnowing, via copydetect.

    python -m autograder.batch.similarity SUBMISSION... --out DIR [--threshold 0.5] [--jobs N]

Each submission (a handin.tar or a folder, as for the batch grader) is opened
with gradelib.intake.open_handin into a temporary folder, which is removed at
once; attention.py and the code cells of the three notebooks are read from it.
Each file is fingerprinted once with copydetect.CodeFingerprint: tokenized by
pygments, names and strings reduced to one letter each (so renaming variables
changes nothing), hashed in k-grams and winnowed; every k-gram of the
handout's own code (handout/attention.py and the code cells of
handout/0*.ipynb) is given as boilerplate and never counts. Then every pair
is compared, file by file; a pair's score is the similarity of its most
similar file, in the direction that is higher (the share of one file's
fingerprinted code that is found in the other).

Writes into DIR: similarity.csv (one row per pair and file with matched code,
highest score first), similarity.html (self-contained: the pairs, flagged ones
first, and their matched lines side by side) and similarity.json (the run's
figures, the notes about submissions that could not be read, and the top pairs
that pairs_for_report() returns to the class report).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import io
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint
from copydetect.utils import get_copied_slices

from gradelib import intake
from gradelib.results import write_json_atomic, write_text_atomic

REPO = Path(__file__).resolve().parents[2]
HANDOUT = REPO / "handout"
PY_FILE = "attention.py"
NOTEBOOKS = ("01_mlm_and_next_token.ipynb", "02_attention_and_masks.ipynb", "03_language_model.ipynb")
FILES = (PY_FILE, *NOTEBOOKS)

# Lengths in characters of the *filtered* code, where every name is one letter
# and spaces are gone, so `self.Q = X @ self.W_q` is the 9 characters V.V=V@V.V.
# A match shorter than NOISE_T never counts (a couple of statements any two
# solutions share); one at least GUARANTEE_T long is always found.
NOISE_T = 25
GUARANTEE_T = 30
WINDOW = GUARANTEE_T - NOISE_T + 1
DEFAULT_THRESHOLD = 0.5
# similarity.csv lists the pair-files scoring at least LISTED_MIN, the best
# MAX_LISTED of them: where everyone solves the same small functions, almost
# every pair shares a little code, and working out the matched lines of
# 100,000 rows nobody reads would take longer than the comparison itself.
LISTED_MIN = 0.1
MAX_LISTED = 10_000
# Code beyond this many characters in one file is not compared (tokenizing
# it would take seconds); the note says so.
MAX_CODE_CHARS = 400_000
HTML_PAIRS = 500  # rows of the pairs table
HTML_DETAILS = 60  # pairs whose matched lines are shown
REPORT_PAIRS = 200  # pairs kept in similarity.json for the class report


class SimilarityError(ValueError):
    """Bad command-line input; the message says what is wrong."""


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


def notebook_source(raw: str, label: str, given: frozenset[str] = frozenset()) -> Source:
    """A notebook's code cells, in order, as one Python text; raise ValueError saying what is wrong.

    Cells identical to a cell of the handout (`given`) are left out: all their
    code is boilerplate anyway, and tokenizing is most of the time a run takes.
    """
    try:
        nb = json.loads(raw)
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
            notes.append(f"{name} is missing; it was not compared")
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
            intake.open_handin(Path(path), Path(tmp))
        except intake.HandinError as exc:
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


def fingerprint(text: str, label: str, boilerplate: np.ndarray, win_size: int = WINDOW) -> CodeFingerprint:
    return CodeFingerprint(label, NOISE_T, win_size, boilerplate=boilerplate, language="python", fp=io.StringIO(text))


def boilerplate_hashes(sources: list[Source]) -> np.ndarray:
    # Window 1 keeps every k-gram of the given code, as copydetect does for its boilerplate.
    hashes = [h for s in sources for h in fingerprint(s.text, "handout", np.array([]), win_size=1).hashes]
    return np.unique(np.array(hashes, dtype=np.int64))


class Prints:
    """A file's winnowed fingerprints, as flat arrays so a pair is compared without a Python loop per hash."""

    def __init__(self, fp: CodeFingerprint):
        self.fp = fp
        keys = list(fp.hash_idx)
        self.keys = np.sort(np.array(keys, dtype=np.int64))
        self.pos_hash = np.repeat(np.array(keys, dtype=np.int64), [len(fp.hash_idx[h]) for h in keys])
        self.pos = np.array([i for h in keys for i in fp.hash_idx[h]], dtype=np.int64)
        by_pos = np.argsort(self.pos, kind="stable")
        self.sorted_pos, self.sorted_hash = self.pos[by_pos], self.pos_hash[by_pos]

    def matched(self, other: Prints) -> np.ndarray:
        """Positions of this file's fingerprints that the other file has too."""
        if len(other.keys) == 0 or len(self.pos) == 0:
            return self.pos[:0]
        at = np.minimum(np.searchsorted(other.keys, self.pos_hash), len(other.keys) - 1)
        return self.pos[other.keys[at] == self.pos_hash]


def compare(a: Prints, b: Prints) -> tuple[float, float, np.ndarray | None, np.ndarray | None]:
    """copydetect.compare_files(a.fp, b.fp) without its loop over shared hashes (tests check it agrees).

    Returns the two similarities and, when any code matched, the copied slices
    of each file in its filtered code (raw_slices() maps them to the raw text).
    """
    idx_a, idx_b = a.matched(b), b.matched(a)
    if len(idx_a) == 0:
        return 0.0, 0.0, None, None
    k = a.fp.k
    sa, sb = get_copied_slices(idx_a, k), get_copied_slices(idx_b, k)
    sim_a = float(np.sum(sa[1] - sa[0]) / a.fp.token_coverage) if len(a.fp.filtered_code) else 0.0
    sim_b = float(np.sum(sb[1] - sb[0]) / b.fp.token_coverage) if len(b.fp.filtered_code) else 0.0
    return sim_a, sim_b, sa, sb


def score_rows(column: list[Prints | None], rows: list[int]) -> np.ndarray:
    """S[r, b]: the share of file rows[r]'s fingerprinted code found in file b, for every b.

    The similarity compare_files() gives, for one file against the whole class
    at once: a pair's matched code is the union of the k-grams at the matched
    fingerprint positions (what get_copied_slices measures), so with the
    positions sorted, each matched one adds min(k, distance to the next matched
    one). Tests check it equals compare_files() pair by pair.
    """
    n = len(column)
    present = [f for f in range(n) if column[f] is not None]
    all_h = np.concatenate([column[f].keys for f in present] or [np.zeros(0, np.int64)])
    all_o = np.concatenate([np.full(len(column[f].keys), f) for f in present] or [np.zeros(0, np.int64)])
    order = np.argsort(all_h, kind="stable")
    table_h, table_o = all_h[order], all_o[order]
    big = np.iinfo(np.int64).max // 2
    out = np.zeros((len(rows), n))
    for r, a in enumerate(rows):
        pa = column[a]
        if pa is None or len(pa.sorted_pos) == 0 or not len(pa.fp.filtered_code):
            continue
        h, pos = pa.sorted_hash, pa.sorted_pos
        lo, hi = np.searchsorted(table_h, h, "left"), np.searchsorted(table_h, h, "right")
        count = hi - lo
        which = np.repeat(np.arange(len(h)), count)
        at = np.arange(count.sum()) + np.repeat(lo - (np.cumsum(count) - count), count)
        hit = np.zeros((len(h), n), dtype=bool)
        hit[which, table_o[at]] = True
        hit[:, a] = False
        at_pos = np.where(hit, pos[:, None], big)
        following = np.minimum.accumulate(at_pos[::-1], axis=0)[::-1]
        following = np.vstack([following[1:], np.full((1, n), big)])
        covered = np.where(hit, np.minimum(pa.fp.k, following - pos[:, None]), 0).sum(axis=0)
        out[r] = covered / pa.fp.token_coverage
    return out


def raw_slices(fp: CodeFingerprint, slices: np.ndarray) -> np.ndarray:
    """Slices of the filtered code moved onto the raw text, as compare_files does."""
    if len(fp.offsets) == 0:
        return slices
    off = fp.offsets
    return slices + off[:, 1][np.clip(np.searchsorted(off[:, 0], slices), 0, off.shape[0] - 1)]


def line_ranges(source: Source, slices: np.ndarray) -> list[tuple[int, int]]:
    """1-based inclusive line ranges covered by character slices, merged where they touch."""
    newlines = source.newlines
    ranges: list[tuple[int, int]] = []
    for start, end in sorted(zip(slices[0].tolist(), slices[1].tolist())):
        first = bisect.bisect_right(newlines, start) + 1
        last = bisect.bisect_right(newlines, max(start, end - 1)) + 1
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(last, ranges[-1][1]))
        else:
            ranges.append((first, last))
    return ranges


# Set before the worker processes fork, so they share it without pickling.
_STATE: dict = {}


def _load_and_fingerprint(task: tuple[str, str]) -> tuple[Loaded, dict[str, CodeFingerprint]]:
    path, name = task
    loaded = load_submission(Path(path), name, _STATE["given"])
    prints = {}
    for kind, source in loaded.sources.items():
        try:
            prints[kind] = fingerprint(source.text, kind, _STATE["boilerplate"])
        except Exception as exc:  # a tokenizer failure on one file must not stop the class
            loaded.notes.append(f"{kind} could not be tokenized ({type(exc).__name__}); it was not compared")
    return loaded, prints


def _score_rows(task: tuple[str, list[int]]) -> tuple[str, list[int], np.ndarray]:
    kind, rows = task
    return kind, rows, score_rows(_STATE["prints"][kind], rows)


def _detail(task: tuple[int, int, str]) -> tuple:
    """One listed pair and file: its similarities and the line ranges of the matched code on each side."""
    i, j, kind = task
    a, b = _STATE["prints"][kind][i], _STATE["prints"][kind][j]
    sim_a, sim_b, sa, sb = compare(a, b)
    names, sources = _STATE["names"], _STATE["sources"]
    lines_a = line_ranges(sources[i][kind], raw_slices(a.fp, sa))
    lines_b = line_ranges(sources[j][kind], raw_slices(b.fp, sb))
    return names[i], names[j], kind, sim_a, sim_b, lines_a, lines_b


def _pool(jobs: int):
    # copydetect hashes k-grams with Python's hash(), which is salted per
    # interpreter: fingerprints are comparable only within one process and its
    # forks, so workers must be forked, never spawned.
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork").Pool(jobs)


@dataclass
class Run:
    names: list[str]
    notes: dict[str, list[str]]
    sources: dict[str, dict[str, Source]]
    rows: list[tuple]
    unlisted: int
    flagged: int
    pairs: int
    file_pairs: int
    threshold: float
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)


def find_similar(paths: list[Path], names: list[str], *, jobs: int = 1, threshold: float = DEFAULT_THRESHOLD,
                 listed_min: float = LISTED_MIN, handout: Path = HANDOUT) -> Run:
    """Compare every pair of submissions; rows (a, b, file, score_a, score_b, lines_a, lines_b) best first."""
    started = time.perf_counter()
    unlisted = flagged = 0
    _STATE.clear()
    _STATE["boilerplate"] = boilerplate_hashes(handout_sources(handout))
    _STATE["listed_min"] = listed_min
    _STATE["given"] = given_cells(handout)
    tasks = [(str(p), n) for p, n in zip(paths, names, strict=True)]
    pool = _pool(jobs)
    try:
        loaded = pool.map(_load_and_fingerprint, tasks, chunksize=4) if pool else list(map(_load_and_fingerprint, tasks))
    finally:
        if pool:
            pool.close()
            pool.join()
    phases = {"open and fingerprint": time.perf_counter() - started}
    prints = {kind: [Prints(fps[kind]) if kind in fps else None for _, fps in loaded] for kind in FILES}
    _STATE.update(prints=prints, names=names, sources=[sub.sources for sub, _ in loaded])
    n = len(names)
    # Every file against the whole class (a few rows per task), then the pairs worth listing in detail.
    tasks = [(kind, list(range(start, min(n, start + 8)))) for kind in FILES for start in range(0, n, 8)]
    scores = {kind: np.zeros((n, n)) for kind in FILES}
    pool = _pool(jobs)
    try:
        for kind, rows_done, block in (pool.imap_unordered(_score_rows, tasks) if pool else map(_score_rows, tasks)):
            scores[kind][rows_done] = block
        phases["score every pair"] = time.perf_counter() - started - sum(phases.values())
        candidates = []
        best = np.zeros((n, n))
        for kind in FILES:
            both = np.maximum(scores[kind], scores[kind].T)
            best = np.maximum(best, both)
            i, j = np.nonzero(np.triu((both >= listed_min) & (both > 0), k=1))
            candidates += [(-both[a, b], int(a), int(b), kind) for a, b in zip(i, j)]
        candidates.sort()
        details = [(a, b, kind) for _, a, b, kind in candidates[:MAX_LISTED]]
        unlisted = len(candidates) - len(details)
        flagged = int(np.count_nonzero(np.triu((best >= threshold) & (best > 0), k=1)))
        chunk = max(1, len(details) // (8 * max(1, jobs)))
        rows = list(pool.imap_unordered(_detail, details, chunksize=chunk) if pool else map(_detail, details))
        phases["matched lines of listed pairs"] = time.perf_counter() - started - sum(phases.values())
    finally:
        if pool:
            pool.close()
            pool.join()
    _STATE.clear()
    rows.sort(key=lambda r: (-max(r[3], r[4]), r[0], r[1], r[2]))
    file_pairs = sum(
        1 for kind in FILES for i in range(n) for j in range(i + 1, n)
        if prints[kind][i] is not None and prints[kind][j] is not None
    )
    return Run(
        names=names, notes={sub.name: sub.notes for sub, _ in loaded if sub.notes},
        sources={sub.name: sub.sources for sub, _ in loaded}, rows=rows, unlisted=unlisted, flagged=flagged,
        pairs=n * (n - 1) // 2, file_pairs=file_pairs, threshold=threshold, seconds=time.perf_counter() - started,
        phases=phases,
    )


def top_pairs(run: Run, limit: int) -> list[dict]:
    """One entry per pair, scored by its most similar file, best first."""
    seen: dict[tuple[str, str], dict] = {}
    for a, b, kind, sa, sb, la, lb in run.rows:
        if (a, b) in seen:
            seen[(a, b)]["files"][kind] = [round(sa, 4), round(sb, 4)]
            continue
        if len(seen) >= limit:
            continue
        score = max(sa, sb)
        seen[(a, b)] = {
            "submission_a": a, "submission_b": b, "file": kind, "score": round(score, 4),
            "score_a": round(sa, 4), "score_b": round(sb, 4), "flagged": score >= run.threshold,
            "lines_a": [list(r) for r in la], "lines_b": [list(r) for r in lb], "files": {kind: [round(sa, 4), round(sb, 4)]},
        }
    return list(seen.values())


def _ranges_text(source: Source, ranges: list[tuple[int, int]]) -> str:
    return "; ".join(source.where(a, b) for a, b in ranges)


def write_outputs(run: Run, out: Path) -> None:
    sources = run.sources
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["submission_a", "submission_b", "file", "score_a", "score_b", "lines_a", "lines_b"])
    for a, b, kind, sa, sb, la, lb in run.rows:
        writer.writerow([a, b, kind, f"{sa:.4f}", f"{sb:.4f}",
                         _ranges_text(sources[a][kind], la), _ranges_text(sources[b][kind], lb)])
    write_text_atomic(out / "similarity.csv", buf.getvalue())
    write_json_atomic(out / "similarity.json", {
        "threshold": run.threshold, "noise_t": NOISE_T, "guarantee_t": GUARANTEE_T, "listed_min": LISTED_MIN,
        "submissions": len(run.names), "pairs": run.pairs, "file_pairs": run.file_pairs,
        "flagged": run.flagged, "unlisted": run.unlisted, "seconds": round(run.seconds, 2), "notes": run.notes,
        "top_pairs": top_pairs(run, REPORT_PAIRS),
    })
    write_text_atomic(out / "similarity.html", render_html(run))


def pairs_for_report(out_dir: Path, limit: int = 20) -> list[dict]:
    """The top pairs of the similarity run written in out_dir, best first; [] if there was none.

    Each: submission_a, submission_b, file (the most similar), score (the higher
    of score_a and score_b), score_a, score_b, flagged, lines_a and lines_b
    ([first, last] line ranges in that file's compared text), files (every file
    with matched code -> [score_a, score_b]).
    """
    path = Path(out_dir) / "similarity.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    pairs = data.get("top_pairs") if isinstance(data, dict) else None
    return pairs[:limit] if isinstance(pairs, list) else []


def _code_block(source: Source, ranges: list[tuple[int, int]]) -> str:
    lines = source.text.split("\n")
    parts = []
    for first, last in ranges:
        body = "\n".join(f"{source.label(n):>6}  {lines[n - 1]}" for n in range(first, min(last, len(lines)) + 1))
        parts.append(f"<div class=where>{escape(source.where(first, last))}</div><pre>{escape(body)}</pre>")
    return "".join(parts)


def render_html(run: Run) -> str:
    sources = run.sources
    pairs = top_pairs(run, HTML_PAIRS)
    flagged = run.flagged
    summary = (
        f"{len(run.names)} submissions, {run.pairs:,} pairs ({run.file_pairs:,} file pairs) compared in "
        f"{run.seconds:.1f} s; {flagged} pair(s) at or above the flag line {run.threshold:g}. A pair's score is the "
        f"share of one file's own code (handout code excluded) found in the other, for its most similar file."
    )
    table = ["<table><tr><th>#</th><th>submission a</th><th>submission b</th><th>file</th><th>score</th>"
             "<th>a in b</th><th>b in a</th><th>other files</th></tr>"]
    for k, p in enumerate(pairs, start=1):
        others = ", ".join(f"{f} {max(s):.2f}" for f, s in p["files"].items() if f != p["file"])
        link = f'<a href="#pair-{k}">{k}</a>' if k <= HTML_DETAILS else str(k)
        table.append(
            f'<tr class="{"flag" if p["flagged"] else ""}"><td>{link}</td><td>{escape(p["submission_a"])}</td>'
            f'<td>{escape(p["submission_b"])}</td><td>{escape(p["file"])}</td><td>{p["score"]:.2f}</td>'
            f'<td>{p["score_a"]:.2f}</td><td>{p["score_b"]:.2f}</td><td>{escape(others)}</td></tr>'
        )
    table.append("</table>")
    if len({(r[0], r[1]) for r in run.rows}) > len(pairs):
        table.append(f"<p>Only the top {len(pairs)} pairs are shown; similarity.csv lists more.</p>")
    if run.unlisted:
        table.append(f"<p>{run.unlisted:,} more pair-files scoring at least {LISTED_MIN:g} are not listed anywhere: "
                     f"similarity.csv holds the best {MAX_LISTED:,}.</p>")
    details = []
    for k, p in enumerate(pairs[:HTML_DETAILS], start=1):
        a, b, kind = p["submission_a"], p["submission_b"], p["file"]
        la = [tuple(r) for r in p["lines_a"]]
        lb = [tuple(r) for r in p["lines_b"]]
        details.append(
            f'<h3 id="pair-{k}" class="{"flag" if p["flagged"] else ""}">#{k} {escape(a)} / {escape(b)}: '
            f'{escape(kind)} ({p["score_a"]:.2f} / {p["score_b"]:.2f})</h3>'
            f"<div class=side><div>{_code_block(sources[a][kind], la)}</div>"
            f"<div>{_code_block(sources[b][kind], lb)}</div></div>"
        )
    notes = [f"<li><b>{escape(name)}</b>: {escape(note)}</li>" for name, ns in sorted(run.notes.items()) for note in ns]
    css = (
        "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:0.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}tr.flag td{background:#fde2e2}"
        "h3.flag{color:#a40000}.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}"
        "pre{margin:0 0 0.5em;font-size:12px;white-space:pre-wrap;background:#f7f7f7;padding:4px}.where{font-size:12px;color:#555}"
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        f"<title>Similarity</title><style>{css}</style></head><body>",
        "<h1>Similarity between submissions</h1>",
        f'<p id="summary">{escape(summary)}</p>',
        "<h2>Not compared</h2><ul>" + "".join(notes) + "</ul>" if notes else "",
        "<h2>Pairs</h2>", *table,
        "<h2>Matched lines</h2>", *details,
        "</body></html>",
    ])


def run_class(paths: list[Path], out: Path, *, threshold: float = DEFAULT_THRESHOLD, jobs: int = 1,
              handout: Path = HANDOUT) -> Run:
    """Compare the submissions and write similarity.csv, .html and .json into `out`."""
    from .cli import submission_names

    run = find_similar(paths, submission_names(paths), jobs=jobs, threshold=threshold, handout=handout)
    write_outputs(run, out)
    return run


def summary_line(run: Run, out: Path) -> str:
    unread = len(run.notes)
    return (
        f"similarity: {len(run.names)} submissions, {run.pairs:,} pairs ({run.file_pairs:,} file pairs) compared, "
        f"{run.flagged} flagged at {run.threshold:g}, {unread} with notes, {run.seconds:.1f} s"
        + (f", {run.unlisted:,} pair-files beyond the {MAX_LISTED:,} listed" if run.unlisted else "")
        + " -> "
        f"{out / 'similarity.html'}"
    )


def _student_cells(master: dict) -> list[str]:
    """The code cells of a master notebook as a student holds them: no tests, no prompts, no markers."""
    cells, in_tests = [], False
    for cell in master["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "raw":
            in_tests = text.startswith("# BEGIN TESTS") or (in_tests and not text.startswith("# END TESTS"))
        elif cell["cell_type"] == "code" and not in_tests:
            text = re.sub(r'\n\s*""" # BEGIN PROMPT.*?""" # END PROMPT', "", text, flags=re.S)
            cells.append(text)
    return cells


def _vary(text: str, rng: np.random.Generator) -> str:
    """One student's version: each solution block kept (minus some lines, plus some of their own) or rewritten."""
    out, block, keep = [], False, True
    for line in text.split("\n"):
        if "# BEGIN SOLUTION" in line:
            block, keep = True, rng.random() < 0.5
            continue
        if "# END SOLUTION" in line:
            block = False
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if block and (not keep or rng.random() < 0.25):
            line = ""
        if block and (not keep or rng.random() < 0.25):
            a, b, c = rng.integers(0, 1000, 3)
            op = "+-*/"[int(rng.integers(4))]
            line += f"\n{indent}tmp{a} = x{b}.reshape({a}, -1)[:{c}] {op} y{c}.sum({b % 3})"
        out.append(line)
    return "\n".join(out)


def make_bench_class(dest: Path, n: int, seed: int = 0) -> list[Path]:
    """n handin folders derived from the solutions, each with its own changes: a class where most pairs share code."""
    rng = np.random.default_rng(seed)
    reference = (REPO / "solutions" / PY_FILE).read_text(encoding="utf-8")
    masters = {nb: _student_cells(json.loads((REPO / "solutions" / nb).read_text(encoding="utf-8"))) for nb in NOTEBOOKS}
    paths = []
    for k in range(n):
        folder = dest / f"student{k:03d}"
        folder.mkdir(parents=True)
        (folder / PY_FILE).write_text(_vary(reference, rng), encoding="utf-8")
        for nb, cells in masters.items():
            doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                   "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                              "source": _vary(c, rng)} for c in cells]}
            (folder / nb).write_text(json.dumps(doc), encoding="utf-8")
        paths.append(folder)
    return paths


def _cpu_seconds() -> float:
    """User + system time of this process and its reaped children (the worker pools)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def print_similarity_figures(n: int = 300, jobs: int = 2) -> None:
    """`make bench`: the whole run (open, fingerprint, compare, write) on n generated submissions."""
    with tempfile.TemporaryDirectory(prefix="similarity-bench-") as tmp:
        paths = make_bench_class(Path(tmp) / "class", n)
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        run = run_class(paths, Path(tmp) / "out", jobs=jobs)
        run_class_s = time.perf_counter() - started
        run.phases["write csv, html, json"] = run_class_s - run.seconds
        wall = run_class_s
        cpu = _cpu_seconds() - cpu_before
    print(
        f"similarity: {n} generated submissions, {run.pairs:,} pairs x {len(FILES)} files, --jobs {jobs}: "
        f"{wall:.1f} s wall (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores), {cpu:.1f} CPU-s "
        f"(~{cpu / jobs:.0f} s on {jobs} idle cores), "
        f"{len(run.rows):,} rows listed, {run.flagged:,} pairs flagged; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in run.phases.items())
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m autograder.batch.similarity",
                                 description="Similarity between submissions (winnowing, as MOSS), handout code excluded.")
    ap.add_argument("submissions", nargs="+", type=Path, help="handin.tar files or folders of handin files")
    ap.add_argument("--out", type=Path, required=True, help="folder for similarity.csv, .html and .json")
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                    help=f"flag pairs whose score is at least this (0..1, default {DEFAULT_THRESHOLD})")
    ap.add_argument("--jobs", type=int, default=1, help="processes used (default 1)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 0.0 <= args.threshold <= 1.0:
        print(f"--threshold must be between 0 and 1 (got {args.threshold:g})", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"--jobs must be at least 1 (got {args.jobs})", file=sys.stderr)
        return 2
    if len(args.submissions) < 2:
        print("give at least two submissions to compare", file=sys.stderr)
        return 2
    run = run_class(args.submissions, args.out, threshold=args.threshold, jobs=args.jobs)
    for name, notes in sorted(run.notes.items()):
        print(f"  {name}: {'; '.join(notes)}", file=sys.stderr)
    print(summary_line(run, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
