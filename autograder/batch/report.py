"""Class outputs of a batch run: grades.csv and report.html, built from the results.json files.

results.json (Gradescope's format) is the one record of a graded submission;
everything here is derived from those files, so the gradebook and the report
of a resumed run are the same as those of an uninterrupted one.

report.html is a single self-contained file: inline CSS and an inline SVG
chart, no script, and a Content-Security-Policy that forbids loading or
running anything. Every string that can come from a submission (names,
messages that quote a student's exception) is HTML-escaped.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from gradelib import safeio
from gradelib.results import write_text_atomic
from gradelib.safeio import SafeReadError, clean_text

SLOWEST_SHOWN = 10
MAX_RESULTS_BYTES = 64 * 1024 * 1024
HISTOGRAM_BINS = 10


@dataclass
class TestRow:
    name: str
    problem: str
    score: float
    max_score: float
    passed: bool


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

    def autolab_line(self, problem_ids: list[str]) -> str:
        """Autolab's autoresult: the last stdout line, one score per problem id."""
        return json.dumps({"scores": {p: self.scores.get(p, 0.0) for p in problem_ids}}, separators=(",", ":"), allow_nan=False)


def _number(value) -> float:
    """A finite float from results.json, else ValueError (NaN, inf, text, a list...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


def read_row(path: Path, name: str) -> Row:
    """The row of one submission; a missing, corrupt or malformed results.json becomes a 0 row that says so."""
    try:
        data = safeio.read_json(path, MAX_RESULTS_BYTES)
        if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
            raise ValueError("not a Gradescope results object with a list of tests")
        tests = []
        for t in data["tests"]:
            tags = t.get("tags") or [""]
            tests.append(TestRow(clean_text(t["name"]), clean_text(tags[0] if isinstance(tags, list) else ""),
                                 _number(t["score"]), _number(t["max_score"]), t.get("status") == "passed"))
        total = round(_number(data.get("score", 0.0)), 4)
        wall = _number(data.get("execution_time", 0.0))
        notes = clean_text(data.get("output", ""))
    except (SafeReadError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        return Row(name, notes=f"results.json could not be read ({clean_text(exc)[:300]}); this submission is listed with 0 points")
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
        flags=_flags(data.get("extra_data")),
    )


def _flags(extra) -> dict[str, str]:
    flags = extra.get("flags") if isinstance(extra, dict) else None
    if not isinstance(flags, dict):
        return {}
    return {clean_text(k)[:80]: clean_text(v)[:500] for k, v in list(flags.items())[:20]}


def write_gradebook(path: Path, rows: list[Row], problem_ids: list[str]) -> None:
    """grades.csv without a roster or late policy: one row per submission (gradebook.py has the full version)."""
    from .gradebook import build, write_grades

    write_grades(path, build(rows, problem_ids), problem_ids, roster=False)


def _histogram_svg(totals: list[float], max_score: float) -> str:
    """Bar chart of the totals in HISTOGRAM_BINS equal bins from 0 to max_score (the last bin is closed)."""
    top = max_score or max(totals, default=1.0) or 1.0
    width = top / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for t in totals:
        counts[min(int(t / width), HISTOGRAM_BINS - 1) if width else 0] += 1
    w, h, pad_l, pad_b, pad_t = 640, 260, 40, 40, 16
    plot_w, plot_h = w - pad_l - 10, h - pad_b - pad_t
    bar_w = plot_w / HISTOGRAM_BINS
    peak = max(counts) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="score-histogram" role="img" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}"><title>Distribution of total scores</title>',
        f'<line x1="{pad_l}" y1="{pad_t + plot_h}" x2="{w - 10}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<text x="{pad_l - 6}" y="{pad_t + 4}" text-anchor="end" font-size="11">{peak}</text>',
        f'<text x="{pad_l - 6}" y="{pad_t + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    for i, c in enumerate(counts):
        lo, hi = i * width, (i + 1) * width
        bh = plot_h * c / peak
        x = pad_l + i * bar_w
        parts.append(
            f'<rect class="bar" data-count="{c}" x="{x + 2:.1f}" y="{pad_t + plot_h - bh:.1f}" width="{bar_w - 4:.1f}" '
            f'height="{bh:.1f}" fill="#4472c4"><title>{lo:g}-{hi:g} points: {c} submissions</title></rect>'
        )
        if c:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{pad_t + plot_h - bh - 3:.1f}" text-anchor="middle" font-size="11">{c}</text>')
        parts.append(f'<text x="{x:.1f}" y="{pad_t + plot_h + 14}" text-anchor="middle" font-size="11">{lo:g}</text>')
    parts.append(f'<text x="{pad_l + plot_w:.1f}" y="{pad_t + plot_h + 14}" text-anchor="middle" font-size="11">{top:g}</text>')
    parts.append(f'<text x="{pad_l + plot_w / 2:.1f}" y="{h - 6}" text-anchor="middle" font-size="12">total score</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in r) + "</tr>" for r in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _head(text: str, lines: int = 6, width: int = 200) -> str:
    """The first lines of a message, each cut to `width` characters."""
    kept = [ln if len(ln) <= width else ln[: width - 3] + "..." for ln in text.strip().splitlines()[:lines]]
    return "\n".join(kept)


def render_report(rows: list[Row], problem_ids: list[str], title: str, similar: list[dict] | None = None) -> str:
    """The class report; `similar` holds the top pairs of a similarity run (similarity.py), if any."""
    rows = sorted(rows, key=lambda r: r.submission)
    totals = [r.total for r in rows]
    max_score = max((r.max for r in rows), default=0.0)
    n = len(rows)
    summary = (
        f"{n} submissions; total out of {max_score:g}: mean {statistics.fmean(totals):.2f}, "
        f"median {statistics.median(totals):g}, full marks {sum(t >= max_score - 1e-9 for t in totals)}, "
        f"zero {sum(t <= 1e-9 for t in totals)}"
        if n else "no submissions"
    )

    levels: dict[str, int] = {}
    for r in rows:
        levels[r.isolation or "unknown"] = levels.get(r.isolation or "unknown", 0) + 1
    sandbox_line = "sandbox: " + ", ".join(f"{level} ({k} submissions)" for level, k in sorted(levels.items()))
    if n and set(levels) != {"namespaces"}:
        sandbox_line += " (only namespaces stop every attack the test suite tries; see the README's isolation section)"

    problem_rows = []
    for p in problem_ids:
        got = [r.scores.get(p, 0.0) for r in rows]
        pmax = max((sum(t.max_score for t in r.tests if t.problem == p) for r in rows), default=0.0)
        problem_rows.append([escape(p), f"{statistics.fmean(got) if got else 0:.2f}", f"{pmax:g}"])

    # Pass rate per test, tests in the order the grader reports them.
    order: dict[str, tuple[int, int]] = {}
    for r in rows:
        for t in r.tests:
            passed, seen = order.get(t.name, (0, 0))
            order[t.name] = (passed + t.passed, seen + 1)
    test_rows = []
    for name, (passed, seen) in order.items():
        rate = passed / seen if seen else 0.0
        bar = f'<span class="rate"><span style="width:{100 * rate:.0f}%"></span></span>'
        test_rows.append([escape(name), f"{passed} / {seen}", f"{100 * rate:.0f}% {bar}"])

    slowest = sorted(rows, key=lambda r: (-r.wall_s, r.submission))[:SLOWEST_SHOWN]
    slow_rows = [[escape(r.submission), f"{r.wall_s:.1f}", f"{r.total:g}"] for r in slowest]

    flagged = [r for r in rows if r.notes.strip() or r.total <= 1e-9]
    failed_rows = [
        [f'<a href="{escape(r.submission)}/feedback.txt">{escape(r.submission)}</a>', f"{r.total:g}",
         f"<pre>{escape(_head(r.notes) or 'scored 0 on every test')}</pre>"]
        for r in flagged
    ]

    flag_rows = [
        [f'<a href="{escape(r.submission)}/feedback.txt">{escape(r.submission)}</a>', escape(key), f"<pre>{escape(text)}</pre>"]
        for r in rows for key, text in sorted(r.flags.items())
    ]
    pair_rows = [
        [escape(str(p.get("submission_a", ""))), escape(str(p.get("submission_b", ""))), escape(str(p.get("file", ""))),
         f"{_number(p.get('score', 0.0)):.2f}", "yes" if p.get("flagged") else ""]
        for p in (similar or []) if isinstance(p, dict) and _is_number(p.get("score"))
    ]

    all_rows = [
        [f'<a href="{escape(r.submission)}/feedback.txt">{escape(r.submission)}</a>',
         *[f"{r.scores.get(p, 0.0):g}" for p in problem_ids], f"{r.total:g}", f"{r.wall_s:.1f}",
         escape(r.isolation or "unknown")]
        for r in rows
    ]

    css = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
        "vertical-align:top}th{background:#f0f0f0}.rate{display:inline-block;width:120px;height:10px;background:#eee;"
        "margin-left:6px}.rate span{display:block;height:10px;background:#5a9e4b}pre{margin:0;white-space:pre-wrap;font-size:12px}"
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        f"<title>{escape(title)}</title><style>{css}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p id="summary">{escape(summary)}</p>',
        f'<p id="sandbox">{escape(sandbox_line)}</p>',
        "<h2>Score distribution</h2>",
        _histogram_svg(totals, max_score),
        "<h2>Problems</h2>",
        _table(["problem", "mean score", "max"], problem_rows, "problems"),
        "<h2>Pass rate per test</h2>",
        _table(["test", "passed", "rate"], test_rows, "pass-rates"),
        f"<h2>Slowest {len(slow_rows)} submissions</h2>",
        _table(["submission", "grading time (s)", "total"], slow_rows, "slowest"),
        f"<h2>Submissions that failed or need a look ({len(failed_rows)})</h2>",
        _table(["submission", "total", "why"], failed_rows, "failed"),
        f"<h2>Integrity flags ({len(flag_rows)})</h2>",
        _table(["submission", "flag", "what the grader found"], flag_rows, "flags"),
        *([f"<h2>Most similar pairs ({len(pair_rows)}; details in similarity.html)</h2>",
           _table(["submission", "submission", "file", "similarity", "flagged"], pair_rows, "similar")] if similar is not None else []),
        "<h2>All submissions</h2>",
        _table(["submission", *problem_ids, "total", "time (s)", "sandbox"], all_rows, "all"),
        "</body></html>",
        "",
    ])


def _is_number(value) -> bool:
    try:
        _number(value)
    except ValueError:
        return False
    return True


def write_report(path: Path, rows: list[Row], problem_ids: list[str], title: str) -> None:
    """report.html; the similarity pairs are shown when a similarity run wrote its results beside it."""
    from .similarity import pairs_for_report

    has_run = (path.parent / "similarity.json").is_file()
    similar = pairs_for_report(path.parent) if has_run else None
    write_text_atomic(path, clean_text(render_report(rows, problem_ids, title, similar)))
