"""The class report, report.html, rendered from the rows of every results.json (records.py).

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
import math
import statistics
from html import escape
from pathlib import Path

from gradelib.safeio import clean_text

from .atomic import write_text_atomic
from .records import Row, finite, is_finite
from .triage import needs_look

SLOWEST_SHOWN = 10
HISTOGRAM_BINS = 10
SCORE_BINS = 50  # the total's histogram: bins of a round width, at most this many (2.5 points of 120)
CHAR_PX = 6.5  # about the width of a character at font-size 11, for placing labels


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def histogram_svg(values: list[float], lo: float, hi: float, svg_id: str, title: str, xlabel: str,
                  marks: list[tuple[float, str]] = (), log: bool = False, width: int = 640, height: int = 260,
                  bins: int = HISTOGRAM_BINS) -> str:
    """Bar chart of `values` in `bins` equal bins over [lo, hi] (log-spaced with `log`); values
    outside go to the end bins. `marks` are vertical lines (e.g. thresholds) drawn at their x with a label."""
    if log:
        values = [math.log10(max(v, 1e-12)) for v in values]
        marks = [(math.log10(max(x, 1e-12)), text) for x, text in marks]
        lo, hi = math.log10(max(lo, 1e-12)), math.log10(max(hi, 1e-12))
    hi = hi if hi > lo else lo + 1.0
    step = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(max(int((v - lo) / step), 0), bins - 1)] += 1
    box = _Box(width, height, lo, hi, log)
    peak = max(counts) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>',
        f'<line x1="{box.left}" y1="{box.bottom}" x2="{width - box.right}" y2="{box.bottom}" stroke="#333"/>',
        f'<line x1="{box.left}" y1="{box.top}" x2="{box.left}" y2="{box.bottom}" stroke="#333"/>',
        f'<text x="{box.left - 6}" y="{box.top + 4}" text-anchor="end" font-size="11">{peak}</text>',
        f'<text x="{box.left - 6}" y="{box.bottom}" text-anchor="end" font-size="11">0</text>',
        *_bars(box, counts, peak),
        *(_mark(box, mx, text) for mx, text in marks if lo <= mx <= hi),
        f'<text x="{box.left + box.plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" '
        f'font-size="12">{escape(xlabel)}</text>',
        "</svg>",
    ]
    return "".join(parts)


class _Box:
    """Where a histogram's plot sits in its picture, and how a value reads and is placed on its x axis."""

    left, bottom_pad, top, right = 40, 40, 16, 24

    def __init__(self, width: int, height: int, lo: float, hi: float, log: bool):
        self.width, self.lo, self.hi, self.log = width, lo, hi, log
        self.plot_w, self.plot_h = width - self.left - self.right, height - self.bottom_pad - self.top
        self.bottom = self.top + self.plot_h

    def x_of(self, v: float) -> float:
        return self.left + self.plot_w * (v - self.lo) / (self.hi - self.lo)

    def shown(self, v: float) -> str:
        return f"{10 ** v:.3g}" if self.log else f"{v:.3g}"


def _bars(box: _Box, counts: list[int], peak: int) -> list[str]:
    """A histogram's bars, their counts, and its bin edges labelled every `every` bins so that no two labels
    overlap, the last edge always."""
    bins = len(counts)
    step, bar_w = (box.hi - box.lo) / bins, box.plot_w / bins
    edges = [box.shown(box.lo + i * step) for i in range(bins)] + [box.shown(box.hi)]
    every = max(1, math.ceil((max(map(len, edges)) * CHAR_PX + 6) / bar_w))
    parts = []
    for i, c in enumerate(counts):
        a, b = box.lo + i * step, box.lo + (i + 1) * step
        bh = box.plot_h * c / peak
        x = box.left + i * bar_w
        parts.append(
            f'<rect class="bar" data-count="{c}" x="{x + 2:.1f}" y="{box.bottom - bh:.1f}" width="{bar_w - 4:.1f}" '
            f'height="{bh:.1f}" fill="#4472c4"><title>{box.shown(a)} to {box.shown(b)}: '
            f'{plural(c, "submission")}</title></rect>'
        )
        if c:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{box.bottom - bh - 3:.1f}" '
                         f'text-anchor="middle" font-size="11">{c}</text>')
        if i % every == 0 and (bins - i) >= every:
            parts.append(f'<text class="tick" x="{x:.1f}" y="{box.bottom + 14}" '
                         f'text-anchor="middle" font-size="11">{edges[i]}</text>')
    parts.append(f'<text class="tick" x="{box.left + box.plot_w:.1f}" y="{box.bottom + 14}" '
                 f'text-anchor="middle" font-size="11">{edges[-1]}</text>')
    return parts


def _mark(box: _Box, mx: float, text: str) -> str:
    """A vertical line at `mx` with its label: right of the line, or left of it where it would leave the chart."""
    x = box.x_of(mx)
    left = x + 3 + len(text) * CHAR_PX > box.width
    anchor = ' text-anchor="end"' if left else ""
    return (f'<line class="mark" x1="{x:.1f}" y1="{box.top}" x2="{x:.1f}" y2="{box.bottom}" stroke="#c00" '
            f'stroke-dasharray="4 3"/><text x="{x - 3 if left else x + 3:.1f}" y="{box.top + 10}" font-size="11" '
            f'fill="#c00"{anchor}>{escape(text)}</text>')


def score_bins(top: float) -> int:
    """How many bins of a round width (1, 2, 2.5 or 5 times a power of ten) split [0, top] into SCORE_BINS at
    most: a class bunched near full marks spreads over several bars."""
    if top <= 0:
        return HISTOGRAM_BINS
    scale = 10 ** math.floor(math.log10(top / SCORE_BINS))
    width = next(k * scale for k in (1, 2, 2.5, 5, 10) if top / (k * scale) <= SCORE_BINS + 1e-9)
    return max(1, math.ceil(top / width - 1e-9))


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


# Figures a line records (CourseTest.figures) ->
# (rubric problem, full-credit setting, zero-credit setting, label, log axis).
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
        out.append(
            f"<h3>{escape(label)}: {plural(len(values), 'submission')}, median {statistics.median(values):.3g}</h3>"
        )
        out.append(histogram_svg(values, lo, hi, f"figure-{key}", label, label, marks, log=log and lo > 0))
    return out


def _summary(rows: list[Row]) -> str:
    graded = [r for r in rows if not r.not_graded]
    totals = [r.total for r in graded]
    max_score = max((r.max for r in rows), default=0.0)
    if not rows:
        return "no submissions"
    missing = len(rows) - len(graded)
    head = f"{len(rows)} submissions" + (f" ({missing} not graded: no score yet, listed below)" if missing else "")
    if not totals:
        return head
    return (f"{head}; total out of {max_score:g}: mean {statistics.fmean(totals):.2f}, "
            f"median {statistics.median(totals):g}, full marks {sum(t >= max_score - 1e-9 for t in totals)}, "
            f"zero {sum(t <= 1e-9 for t in totals)}")


def _sandbox_line(rows: list[Row]) -> str:
    levels: dict[str, int] = {}
    for r in rows:
        levels[r.isolation or "unknown"] = levels.get(r.isolation or "unknown", 0) + 1
    line = "sandbox: " + ", ".join(f"{level} ({k} submissions)" for level, k in sorted(levels.items()))
    if rows and set(levels) != {"namespaces"}:
        line += " (only namespaces stop every attack the test suite tries; see the README's isolation section)"
    return line


def _problem_rows(rows: list[Row], problem_ids: list[str]) -> list[list[str]]:
    out = []
    for p in problem_ids:
        got = [r.scores.get(p, 0.0) for r in rows if p not in r.not_graded]
        pmax = max((sum(t.max_score for t in r.tests if t.problem == p) for r in rows), default=0.0)
        chart = histogram_svg(got, 0.0, pmax or 1.0, f"problem-{p}", f"{p}: distribution of scores", "points",
                              width=320, height=120)
        out.append([escape(p), f"{statistics.fmean(got) if got else 0:.2f}", f"{pmax:g}", chart])
    return out


def _pass_rate_rows(rows: list[Row]) -> list[list[str]]:
    """Pass rate per graded test, the most failed first (then in the order the grader reports them), with who
    failed each; a test of a problem not graded counts neither way."""
    order: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for r in rows:
        for t in r.tests:
            if t.problem in r.not_graded:
                continue
            seen[t.name] = seen.get(t.name, 0) + 1
            order.setdefault(t.name, [])
            if not t.passed:
                order[t.name].append(r.submission)
    out = []
    for name, failing in sorted(order.items(), key=lambda item: -len(item[1]) / seen[item[0]]):
        passed = seen[name] - len(failing)
        rate = passed / seen[name] if seen[name] else 0.0
        bar = f'<span class="rate"><span style="width:{100 * rate:.0f}%"></span></span>'
        who = (f"<details><summary>{len(failing)}</summary>{', '.join(_link(n) for n in failing)}</details>"
               if failing else "0")
        out.append([escape(name), f"{passed} / {seen[name]}", f"{100 * (1 - rate):.0f}%",
                    f"{100 * rate:.0f}% {bar}", who])
    return out


def _attention_rows(rows: list[Row], needs: dict[str, list[str]]) -> list[list[str]]:
    """A row per submission to open: its total and each reason it is listed (triage.py)."""
    totals = {r.submission: "not graded" if r.not_graded else f"{r.total:g}" for r in rows}
    out = []
    for name, why in needs.items():
        text = "\n".join(_head(reason, 4) for reason in why)
        out.append([_link(name), totals.get(name, "0"), f"<pre>{escape(text)}</pre>"])
    return out


def _pair_rows(similar: list[dict]) -> list[list[str]]:
    return [
        [escape(str(p.get("submission_a", ""))), escape(str(p.get("submission_b", ""))), escape(str(p.get("file", ""))),
         f"{finite(p.get('score', 0.0)):.2f}", "yes" if p.get("flagged") else ""]
        for p in similar if isinstance(p, dict) and is_finite(p.get("score"))
    ]


def _figure_cell(r: Row, key: str) -> str:
    got = _hidden_figures(r, key)
    return f"{got[0]:.4g}" if got else ""


def _all_rows(rows: list[Row], problem_ids: list[str], shown_figures: list[str]) -> list[list[str]]:
    return [
        [_link(r.submission),
         *["not graded" if p in r.not_graded else f"{r.scores.get(p, 0.0):g}" for p in problem_ids],
         "not graded" if r.not_graded else f"{r.total:g}",
         *[_figure_cell(r, k) for k in shown_figures], f"{r.wall_s:.1f}", escape(r.isolation or "unknown"),
         escape(", ".join(sorted(r.flags)))]
        for r in rows
    ]


CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
    "vertical-align:top}th{background:#f0f0f0}.rate{display:inline-block;width:120px;height:10px;background:#eee;"
    "margin-left:6px}.rate span{display:block;height:10px;background:#5a9e4b}"
    "pre{margin:0;white-space:pre-wrap;font-size:12px}"
    "details summary{cursor:pointer}input[type=search]{width:24em;padding:3px}"
)


def _page(title: str, body: list[str]) -> str:
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{_script_hash()}'"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        *body,
        f"<script>{SCRIPT}</script>",
        "</body></html>",
        "",
    ])


def render_report(
    rows: list[Row],
    problem_ids: list[str],
    title: str,
    similar: list[dict] | None = None,
    thresholds: dict[str, tuple[float, float]] | None = None,
    needs: dict[str, list[str]] | None = None,
) -> str:
    """The class report; `similar` holds the top pairs of a similarity run (similarity.py), if any;
    `thresholds` maps a figure (FIGURES) to the rubric's (full credit, no credit) values; `needs`: the
    submissions to open and why (triage.needs_look; from the rows alone when not given)."""
    rows = sorted(rows, key=lambda r: r.submission)
    attention = _attention_rows(rows, needs if needs is not None else needs_look(rows, problem_ids))
    return _page(title, [
        f'<p id="summary">{escape(_summary(rows))}</p>',
        f'<p id="sandbox">{escape(_sandbox_line(rows))}</p>',
        # First what needs a TA: the submissions to open, each with why.
        f"<h2>Submissions that failed or need a look ({len(attention)})</h2>",
        _table(["submission", "total", "why it is listed"], attention, "failed", sortable=True),
        *_score_sections(rows, problem_ids, thresholds or {}),
        *_list_sections(rows, problem_ids, similar),
    ])


def _score_sections(rows: list[Row], problem_ids: list[str], thresholds: dict[str, tuple[float, float]]) -> list[str]:
    """The report's distributions: total scores, problems, pass rates per test, the language-model figures."""
    totals = [r.total for r in rows if not r.not_graded]
    max_score = max((r.max for r in rows), default=0.0)
    top = max_score or max(totals, default=1.0) or 1.0
    return [
        "<h2>Score distribution</h2>",
        histogram_svg(totals, 0.0, top, "score-histogram", "Distribution of total scores", "total score",
                      bins=score_bins(top)),
        "<h2>Problems</h2>",
        _table(["problem", "mean score", "max", "distribution"], _problem_rows(rows, problem_ids), "problems"),
        "<h2>Pass rate per test (the most failed first; click a header to sort)</h2>",
        _table(["test", "passed", "failure rate", "pass rate", "failed by"], _pass_rate_rows(rows), "pass-rates",
               sortable=True),
        *(["<h2>Language-model figures (hidden test lines)</h2>", *_figure_charts(rows, thresholds)]
          if any(t.figures for r in rows for t in r.tests) else []),
    ]


def _list_sections(rows: list[Row], problem_ids: list[str], similar: list[dict] | None) -> list[str]:
    """The report's lists: the slowest submissions, the integrity flags, the most similar pairs, every submission."""
    slow_rows = [[escape(r.submission), f"{r.wall_s:.1f}", "not graded" if r.not_graded else f"{r.total:g}"]
                 for r in sorted(rows, key=lambda r: (-r.wall_s, r.submission))[:SLOWEST_SHOWN]]
    flag_rows = [[_link(r.submission), escape(key), f"<pre>{escape(text)}</pre>"]
                 for r in rows for key, text in sorted(r.flags.items())]
    pair_rows = _pair_rows(similar or [])
    shown_figures = [k for k in FIGURES if any(_figure_cell(r, k) for r in rows)]
    return [
        f"<h2>Slowest {len(slow_rows)} submissions</h2>",
        _table(["submission", "grading time (s)", "total"], slow_rows, "slowest"),
        f"<h2>Integrity flags ({len(flag_rows)})</h2>",
        _table(["submission", "flag", "what the grader found"], flag_rows, "flags", sortable=True),
        *([f"<h2>Most similar pairs ({len(pair_rows)}; details in similarity.html)</h2>",
           _table(["submission", "submission", "file", "similarity", "flagged"], pair_rows, "similar")]
          if similar is not None else []),
        "<h2>All submissions</h2>",
        _table(["submission", *problem_ids, "total", *[FIGURES[k][3] for k in shown_figures], "time (s)",
                "sandbox", "flags"], _all_rows(rows, problem_ids, shown_figures), "all", sortable=True),
    ]


def thresholds_of(problems: dict) -> dict[str, tuple[float, float]]:
    """FIGURES -> (full credit, no credit) from a loaded rubric's settings."""
    out = {}
    for key, (problem, full, zero, _label, _log) in FIGURES.items():
        settings = problems[problem].settings if problem in problems else {}
        if full in settings and zero in settings:
            out[key] = (float(settings[full]), float(settings[zero]))
    return out


def write_report(path: Path, rows: list[Row], problem_ids: list[str], title: str,
                 thresholds: dict[str, tuple[float, float]] | None = None, similar: list[dict] | None = None,
                 needs: dict[str, list[str]] | None = None) -> None:
    """report.html; `similar`: the top pairs of a similarity run, when there was one; `needs`: as render_report's."""
    write_text_atomic(path, clean_text(render_report(rows, problem_ids, title, similar, thresholds, needs)))
