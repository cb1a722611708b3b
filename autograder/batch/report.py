"""Class outputs of a batch run: grades.csv and report.html, built from the results.json files.

results.json (Gradescope's format) is the one record of a graded submission;
everything here is derived from those files, so the gradebook and the report
of a resumed run are the same as those of an uninterrupted one.

report.html is a single self-contained file: inline CSS, inline SVG charts
(the one place the class report draws: `histogram_svg`) and one inline
script that sorts and filters its tables. Its Content-Security-Policy
allows that script by hash and nothing else: no other script, no loading.
Every string that can come from a submission (names, messages that quote a
student's exception) is HTML-escaped.
"""

from __future__ import annotations

import base64
import hashlib
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
CHAR_PX = 6.5  # about the width of a character at font-size 11, for placing labels


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


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
            extra = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
            figures = extra.get("figures") if isinstance(extra.get("figures"), dict) else {}
            tests.append(TestRow(clean_text(t["name"]), clean_text(tags[0] if isinstance(tags, list) else ""),
                                 _number(t["score"]), _number(t["max_score"]), t.get("status") == "passed",
                                 {clean_text(k): float(v) for k, v in figures.items() if _is_number(v)}))
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


def histogram_svg(values: list[float], lo: float, hi: float, svg_id: str, title: str, xlabel: str,
                  marks: list[tuple[float, str]] = (), log: bool = False, width: int = 640, height: int = 260) -> str:
    """Bar chart of `values` in HISTOGRAM_BINS equal bins over [lo, hi] (log-spaced with `log`); values
    outside go to the end bins. `marks` are vertical lines (e.g. thresholds) drawn at their x with a label."""
    if log:
        values = [math.log10(max(v, 1e-12)) for v in values]
        marks = [(math.log10(max(x, 1e-12)), text) for x, text in marks]
        lo, hi = math.log10(max(lo, 1e-12)), math.log10(max(hi, 1e-12))
    hi = hi if hi > lo else lo + 1.0
    step = (hi - lo) / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for v in values:
        counts[min(max(int((v - lo) / step), 0), HISTOGRAM_BINS - 1)] += 1
    w, h, pad_l, pad_b, pad_t, pad_r = width, height, 40, 40, 16, 24
    plot_w, plot_h = w - pad_l - pad_r, h - pad_b - pad_t
    bar_w = plot_w / HISTOGRAM_BINS
    peak = max(counts) or 1

    def x_of(v: float) -> float:
        return pad_l + plot_w * (v - lo) / (hi - lo)

    def shown(v: float) -> str:
        return f"{10 ** v:.3g}" if log else f"{v:.3g}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}" role="img" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}"><title>{escape(title)}</title>',
        f'<line x1="{pad_l}" y1="{pad_t + plot_h}" x2="{w - pad_r}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + plot_h}" stroke="#333"/>',
        f'<text x="{pad_l - 6}" y="{pad_t + 4}" text-anchor="end" font-size="11">{peak}</text>',
        f'<text x="{pad_l - 6}" y="{pad_t + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    # Bin edges labelled every `every` bins, so that no two labels overlap, the last edge always.
    edges = [shown(lo + i * step) for i in range(HISTOGRAM_BINS)] + [shown(hi)]
    every = max(1, math.ceil((max(map(len, edges)) * CHAR_PX + 6) / bar_w))
    for i, c in enumerate(counts):
        a, b = lo + i * step, lo + (i + 1) * step
        bh = plot_h * c / peak
        x = pad_l + i * bar_w
        parts.append(
            f'<rect class="bar" data-count="{c}" x="{x + 2:.1f}" y="{pad_t + plot_h - bh:.1f}" width="{bar_w - 4:.1f}" '
            f'height="{bh:.1f}" fill="#4472c4"><title>{shown(a)} to {shown(b)}: {plural(c, "submission")}</title></rect>'
        )
        if c:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{pad_t + plot_h - bh - 3:.1f}" text-anchor="middle" font-size="11">{c}</text>')
        if i % every == 0 and (HISTOGRAM_BINS - i) >= every:
            parts.append(f'<text class="tick" x="{x:.1f}" y="{pad_t + plot_h + 14}" text-anchor="middle" font-size="11">{edges[i]}</text>')
    parts.append(f'<text class="tick" x="{pad_l + plot_w:.1f}" y="{pad_t + plot_h + 14}" text-anchor="middle" font-size="11">{edges[-1]}</text>')
    for mx, text in marks:
        if lo <= mx <= hi:
            x = x_of(mx)
            # The label goes right of its line, or left of it where it would leave the chart.
            left = x + 3 + len(text) * CHAR_PX > w
            anchor = ' text-anchor="end"' if left else ""
            parts.append(f'<line class="mark" x1="{x:.1f}" y1="{pad_t}" x2="{x:.1f}" y2="{pad_t + plot_h}" stroke="#c00" '
                         f'stroke-dasharray="4 3"/><text x="{x - 3 if left else x + 3:.1f}" y="{pad_t + 10}" font-size="11" '
                         f'fill="#c00"{anchor}>{escape(text)}</text>')
    parts.append(f'<text x="{pad_l + plot_w / 2:.1f}" y="{h - 6}" text-anchor="middle" font-size="12">{escape(xlabel)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[str]], table_id: str, sortable: bool = False) -> str:
    """A table; `sortable` ones get a filter box and sort on a click on a header (the report's script)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in r) + "</tr>" for r in rows)
    cls = ' class="sortable"' if sortable else ""
    table = f'<table id="{table_id}"{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if not sortable:
        return table
    return (f'<p class="filter"><input type="search" data-table="{table_id}" placeholder="filter rows (any text)" '
            f'aria-label="filter {table_id}"> <span class="shown" data-table="{table_id}"></span></p>{table}')


# Sorts a sortable table on a click on its header (numbers as numbers, again: descending) and keeps the rows
# that contain the filter box's text. Allowed by its hash in the report's Content-Security-Policy.
SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var body = table.tBodies[0];
  var shown = document.querySelector('span.shown[data-table="' + table.id + '"]');
  function count() { var n = 0; for (var r of body.rows) { if (r.style.display !== 'none') n++; }
    if (shown) shown.textContent = n + ' of ' + body.rows.length + ' rows'; }
  table.tHead.querySelectorAll('th').forEach(function (th, col) {
    th.style.cursor = 'pointer'; th.title = 'sort';
    th.addEventListener('click', function () {
      var down = th.dataset.order !== 'asc'; th.dataset.order = down ? 'asc' : 'desc';
      var rows = Array.from(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].textContent.trim(), y = b.cells[col].textContent.trim();
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return down ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var box = document.querySelector('input[data-table="' + table.id + '"]');
  if (box) box.addEventListener('input', function () {
    var q = box.value.toLowerCase();
    for (var r of body.rows) r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
    count();
  });
  count();
});
"""


def _script_hash() -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()


def _head(text: str, lines: int = 6, width: int = 200) -> str:
    """The first lines of a message, each cut to `width` characters."""
    kept = [ln if len(ln) <= width else ln[: width - 3] + "..." for ln in text.strip().splitlines()[:lines]]
    return "\n".join(kept)


# Figures a line records (TestResult.figures) -> (rubric problem, full-credit setting, zero-credit setting, label, log axis).
FIGURES = {
    "prediction_nll": ("prediction", "full_credit_nll", "zero_credit_nll", "prediction NLL (nats/char)", False),
    "generation_perplexity": ("generation", "full_credit_perplexity", "zero_credit_perplexity",
                              "generation perplexity", True),
}


def _link(name: str) -> str:
    return f'<a href="{escape(name)}/feedback.txt">{escape(name)}</a>'


def _hidden_figures(row: Row, key: str) -> list[float]:
    """The values of figure `key` that the row's hidden-test lines recorded."""
    return [t.figures[key] for t in row.tests if t.name.endswith("[hidden]") and key in t.figures]


def _figure_charts(rows: list[Row], thresholds: dict[str, tuple[float, float]]) -> list[str]:
    """One histogram per recorded figure (hidden-test lines), with the rubric's thresholds drawn."""
    out = []
    for key, (_problem, _full, _zero, label, log) in FIGURES.items():
        values = [v for r in rows for v in _hidden_figures(r, key)]
        if not values:
            continue
        full, zero = thresholds.get(key, (min(values), max(values)))
        lo, hi = min(min(values), full, zero), max(max(values), full, zero)
        pad = (hi / lo) ** 0.05 if log and lo > 0 else 0.05 * (hi - lo)
        lo, hi = (lo / pad, hi * pad) if log and lo > 0 else (lo - pad, hi + pad)
        marks = [(full, f"full credit {full:g}"), (zero, f"no credit {zero:g}")] if key in thresholds else []
        out.append(f"<h3>{escape(label)}: {plural(len(values), 'submission')}, median {statistics.median(values):.3g}</h3>")
        out.append(histogram_svg(values, lo, hi, f"figure-{key}", label, label, marks, log=log and lo > 0))
    return out


def render_report(rows: list[Row], problem_ids: list[str], title: str, similar: list[dict] | None = None,
                  thresholds: dict[str, tuple[float, float]] | None = None) -> str:
    """The class report; `similar` holds the top pairs of a similarity run (similarity.py), if any;
    `thresholds` maps a figure (FIGURES) to the rubric's (full credit, no credit) values."""
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
        chart = histogram_svg(got, 0.0, pmax or 1.0, f"problem-{p}", f"{p}: distribution of scores", "points",
                              width=320, height=120)
        problem_rows.append([escape(p), f"{statistics.fmean(got) if got else 0:.2f}", f"{pmax:g}", chart])

    # Pass rate per test, tests in the order the grader reports them, with who failed each.
    order: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for r in rows:
        for t in r.tests:
            seen[t.name] = seen.get(t.name, 0) + 1
            order.setdefault(t.name, [])
            if not t.passed:
                order[t.name].append(r.submission)
    test_rows = []
    for name, failing in order.items():
        passed = seen[name] - len(failing)
        rate = passed / seen[name] if seen[name] else 0.0
        bar = f'<span class="rate"><span style="width:{100 * rate:.0f}%"></span></span>'
        who = (f"<details><summary>{len(failing)}</summary>{', '.join(_link(n) for n in failing)}</details>"
               if failing else "0")
        test_rows.append([escape(name), f"{passed} / {seen[name]}", f"{100 * rate:.0f}% {bar}", who])

    slowest = sorted(rows, key=lambda r: (-r.wall_s, r.submission))[:SLOWEST_SHOWN]
    slow_rows = [[escape(r.submission), f"{r.wall_s:.1f}", f"{r.total:g}"] for r in slowest]

    flagged = [r for r in rows if r.notes.strip() or r.total <= 1e-9]
    failed_rows = [[_link(r.submission), f"{r.total:g}", f"<pre>{escape(_head(r.notes) or 'scored 0 on every test')}</pre>"]
                   for r in flagged]

    flag_rows = [[_link(r.submission), escape(key), f"<pre>{escape(text)}</pre>"]
                 for r in rows for key, text in sorted(r.flags.items())]
    pair_rows = [
        [escape(str(p.get("submission_a", ""))), escape(str(p.get("submission_b", ""))), escape(str(p.get("file", ""))),
         f"{_number(p.get('score', 0.0)):.2f}", "yes" if p.get("flagged") else ""]
        for p in (similar or []) if isinstance(p, dict) and _is_number(p.get("score"))
    ]

    def figure(r: Row, key: str) -> str:
        got = _hidden_figures(r, key)
        return f"{got[0]:.4g}" if got else ""

    shown_figures = [k for k in FIGURES if any(figure(r, k) for r in rows)]
    all_rows = [
        [_link(r.submission), *[f"{r.scores.get(p, 0.0):g}" for p in problem_ids], f"{r.total:g}",
         *[figure(r, k) for k in shown_figures], f"{r.wall_s:.1f}", escape(r.isolation or "unknown"),
         escape(", ".join(sorted(r.flags)))]
        for r in rows
    ]

    css = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
        "vertical-align:top}th{background:#f0f0f0}.rate{display:inline-block;width:120px;height:10px;background:#eee;"
        "margin-left:6px}.rate span{display:block;height:10px;background:#5a9e4b}pre{margin:0;white-space:pre-wrap;font-size:12px}"
        "details summary{cursor:pointer}input[type=search]{width:24em;padding:3px}"
    )
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{_script_hash()}'"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        f"<title>{escape(title)}</title><style>{css}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p id="summary">{escape(summary)}</p>',
        f'<p id="sandbox">{escape(sandbox_line)}</p>',
        "<h2>Score distribution</h2>",
        histogram_svg(totals, 0.0, max_score or max(totals, default=1.0) or 1.0, "score-histogram",
                      "Distribution of total scores", "total score"),
        "<h2>Problems</h2>",
        _table(["problem", "mean score", "max", "distribution"], problem_rows, "problems"),
        *(["<h2>Language-model figures (hidden test lines)</h2>", *_figure_charts(rows, thresholds or {})]
          if any(t.figures for r in rows for t in r.tests) else []),
        "<h2>Pass rate per test</h2>",
        _table(["test", "passed", "rate", "failed by"], test_rows, "pass-rates", sortable=True),
        f"<h2>Slowest {len(slow_rows)} submissions</h2>",
        _table(["submission", "grading time (s)", "total"], slow_rows, "slowest"),
        f"<h2>Submissions that failed or need a look ({len(failed_rows)})</h2>",
        _table(["submission", "total", "why"], failed_rows, "failed", sortable=True),
        f"<h2>Integrity flags ({len(flag_rows)})</h2>",
        _table(["submission", "flag", "what the grader found"], flag_rows, "flags", sortable=True),
        *([f"<h2>Most similar pairs ({len(pair_rows)}; details in similarity.html)</h2>",
           _table(["submission", "submission", "file", "similarity", "flagged"], pair_rows, "similar")] if similar is not None else []),
        "<h2>All submissions</h2>",
        _table(["submission", *problem_ids, "total", *[FIGURES[k][3] for k in shown_figures], "time (s)", "sandbox",
                "flags"], all_rows, "all", sortable=True),
        f"<script>{SCRIPT}</script>",
        "</body></html>",
        "",
    ])


def _is_number(value) -> bool:
    try:
        _number(value)
    except ValueError:
        return False
    return True


def thresholds_of(problems: dict) -> dict[str, tuple[float, float]]:
    """FIGURES -> (full credit, no credit) from a loaded rubric's settings."""
    out = {}
    for key, (problem, full, zero, _label, _log) in FIGURES.items():
        settings = problems[problem].settings if problem in problems else {}
        if full in settings and zero in settings:
            out[key] = (float(settings[full]), float(settings[zero]))
    return out


def write_report(path: Path, rows: list[Row], problem_ids: list[str], title: str,
                 thresholds: dict[str, tuple[float, float]] | None = None) -> None:
    """report.html; the similarity pairs are shown when a similarity run wrote its results beside it."""
    from .similarity import pairs_for_report

    has_run = (path.parent / "similarity.json").is_file()
    similar = pairs_for_report(path.parent) if has_run else None
    write_text_atomic(path, clean_text(render_report(rows, problem_ids, title, similar, thresholds)))
