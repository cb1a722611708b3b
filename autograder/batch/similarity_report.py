"""What a similarity run found (Run) and the files it writes: similarity.csv, similarity.html and similarity.json.

similarity.csv has one row per pair and file with matched code, highest score
first; similarity.html is self-contained: the pairs, flagged ones first, and
their matched lines side by side; similarity.json holds the run's figures,
the notes about submissions that could not be read, and the top pairs that
pairs_for_report() returns to the class report.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from .atomic import write_json_atomic, write_text_atomic
from .compared_code import Source
from .records import spreadsheet_cell

# similarity.csv lists the pair-files scoring at least LISTED_MIN, the best
# MAX_LISTED of them: where everyone solves the same small functions, almost
# every pair shares a little code, and working out the matched lines of
# 100,000 rows nobody reads would take longer than the comparison itself.
LISTED_MIN = 0.1
MAX_LISTED = 10_000
HTML_PAIRS = 500  # rows of the pairs table
HTML_DETAILS = 60  # pairs whose matched lines are shown
REPORT_PAIRS = 200  # pairs kept in similarity.json for the class report


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
    noise_t: int  # the winnowing's match lengths (winnowing.py), recorded in similarity.json
    guarantee_t: int
    phases: dict[str, float] = field(default_factory=dict)


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
            "submission_a": a,
            "submission_b": b,
            "file": kind,
            "score": round(score, 4),
            "score_a": round(sa, 4),
            "score_b": round(sb, 4),
            "flagged": score >= run.threshold,
            "lines_a": [list(r) for r in la],
            "lines_b": [list(r) for r in lb],
            "files": {kind: [round(sa, 4), round(sb, 4)]},
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
        writer.writerow([spreadsheet_cell(a), spreadsheet_cell(b), kind, f"{sa:.4f}", f"{sb:.4f}",
                         _ranges_text(sources[a][kind], la), _ranges_text(sources[b][kind], lb)])
    write_text_atomic(out / "similarity.csv", buf.getvalue())
    write_json_atomic(out / "similarity.json", {
        "threshold": run.threshold, "noise_t": run.noise_t, "guarantee_t": run.guarantee_t, "listed_min": LISTED_MIN,
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
        "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
        "tr.flag td{background:#fde2e2}"
        "h3.flag{color:#a40000}.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}"
        "pre{margin:0 0 0.5em;font-size:12px;white-space:pre-wrap;background:#f7f7f7;padding:4px}"
        ".where{font-size:12px;color:#555}"
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
