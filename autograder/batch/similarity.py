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
# Rows below this score are counted but not written: in a class where everyone
# solves the same small functions, almost every pair shares a little code.
LISTED_MIN = 0.1
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


def notebook_source(raw: str, label: str) -> Source:
    """A notebook's code cells, in order, as one Python text; raise ValueError saying what is wrong."""
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
        # The marker is a comment, which the tokenizer drops: it only shows where a cell starts.
        lines.append(f"# cell {number}")
        code = src.split("\n")
        where.append((len(lines) + 1, len(lines) + len(code), number))
        lines += code
        lines.append("")
    return Source("\n".join(lines), where)


def read_sources(folder: Path) -> tuple[dict[str, Source], list[str]]:
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
            source = notebook_source(raw, name) if name.endswith(".ipynb") else Source(raw)
        except ValueError as exc:
            notes.append(f"{exc}; it was not compared")
            continue
        if len(source.text) > MAX_CODE_CHARS:
            notes.append(f"{name} holds more than {MAX_CODE_CHARS:,} characters of code; it was not compared")
            continue
        sources[name] = source
    return sources, notes


def load_submission(path: Path, name: str) -> Loaded:
    """Open one handin into a temporary folder (gone on return) and read the files compared."""
    with tempfile.TemporaryDirectory(prefix="similarity-") as tmp:
        try:
            intake.open_handin(Path(path), Path(tmp))
        except intake.HandinError as exc:
            return Loaded(name, {}, [f"not compared: {exc}"])
        except OSError as exc:
            return Loaded(name, {}, [f"not compared: {path} could not be read ({exc.strerror or exc})"])
        sources, notes = read_sources(Path(tmp))
    return Loaded(name, sources, notes)


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
    loaded = load_submission(Path(path), name)
    prints = {}
    for kind, source in loaded.sources.items():
        try:
            prints[kind] = fingerprint(source.text, kind, _STATE["boilerplate"])
        except Exception as exc:  # a tokenizer failure on one file must not stop the class
            loaded.notes.append(f"{kind} could not be tokenized ({type(exc).__name__}); it was not compared")
    return loaded, prints


def _compare_row(i: int) -> tuple[int, list]:
    """Submission i against every later one, each file kind: rows with any matched code."""
    prints, names, sources = _STATE["prints"], _STATE["names"], _STATE["sources"]
    out = []
    for kind in FILES:
        column = prints[kind]
        a = column[i]
        if a is None:
            continue
        for j in range(i + 1, len(column)):
            b = column[j]
            if b is None:
                continue
            sim_a, sim_b, sa, sb = compare(a, b)
            if max(sim_a, sim_b) < _STATE["listed_min"] or sa is None:
                continue
            src_a, src_b = sources[i][kind], sources[j][kind]
            lines_a = line_ranges(src_a, raw_slices(a.fp, sa))
            lines_b = line_ranges(src_b, raw_slices(b.fp, sb))
            out.append((names[i], names[j], kind, sim_a, sim_b, lines_a, lines_b))
    return i, out


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
    pairs: int
    file_pairs: int
    threshold: float
    seconds: float


def find_similar(paths: list[Path], names: list[str], *, jobs: int = 1, threshold: float = DEFAULT_THRESHOLD,
                 listed_min: float = LISTED_MIN, handout: Path = HANDOUT) -> Run:
    """Compare every pair of submissions; rows (a, b, file, score_a, score_b, lines_a, lines_b) best first."""
    started = time.perf_counter()
    _STATE.clear()
    _STATE["boilerplate"] = boilerplate_hashes(handout_sources(handout))
    _STATE["listed_min"] = listed_min
    tasks = [(str(p), n) for p, n in zip(paths, names, strict=True)]
    pool = _pool(jobs)
    try:
        loaded = pool.map(_load_and_fingerprint, tasks, chunksize=4) if pool else list(map(_load_and_fingerprint, tasks))
    finally:
        if pool:
            pool.close()
            pool.join()
    prints = {kind: [Prints(fps[kind]) if kind in fps else None for _, fps in loaded] for kind in FILES}
    _STATE.update(prints=prints, names=names, sources=[sub.sources for sub, _ in loaded])
    n = len(names)
    rows: list[tuple] = []
    pool = _pool(jobs)
    try:
        # Row i holds n - i - 1 pairs: interleave long and short rows so the workers finish together.
        order = [i for pair in zip(range(n), reversed(range(n))) for i in pair][:n]
        results = pool.imap_unordered(_compare_row, order, chunksize=2) if pool else map(_compare_row, order)
        for _, out in results:
            rows += out
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
        sources={sub.name: sub.sources for sub, _ in loaded}, rows=rows,
        pairs=n * (n - 1) // 2, file_pairs=file_pairs, threshold=threshold, seconds=time.perf_counter() - started,
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


def flagged_pairs(run: Run) -> int:
    return len({(r[0], r[1]) for r in run.rows if max(r[3], r[4]) >= run.threshold})


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
        "flagged": flagged_pairs(run), "seconds": round(run.seconds, 2), "notes": run.notes,
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
        body = "\n".join(f"{n:5d}  {lines[n - 1]}" for n in range(first, min(last, len(lines)) + 1))
        parts.append(f"<div class=where>{escape(source.where(first, last))}</div><pre>{escape(body)}</pre>")
    return "".join(parts)


def render_html(run: Run) -> str:
    sources = run.sources
    pairs = top_pairs(run, HTML_PAIRS)
    flagged = flagged_pairs(run)
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
        table.append(f"<p>Only the top {len(pairs)} pairs are shown; similarity.csv lists them all.</p>")
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
        f"{flagged_pairs(run)} flagged at {run.threshold:g}, {unread} with notes, {run.seconds:.1f} s -> "
        f"{out / 'similarity.html'}"
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
        for note in notes:
            print(f"  {name}: {note}", file=sys.stderr)
    print(summary_line(run, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
