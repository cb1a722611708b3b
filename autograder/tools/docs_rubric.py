"""MkDocs hook: the rubric's lines, read from gradelib/rubric.toml, in place of `<!-- rubric lines -->` in a page.

A page states no point by hand: a new line, or new points, show on the next `make docs`.
"""

from __future__ import annotations

from gradelib import rubric

MARKER = "<!-- rubric lines -->"


def _points(x: float) -> str:
    return f"{x:g}"


def lines_table(problems: dict[str, rubric.Problem]) -> str:
    """A Markdown table: per problem its title and points, then one row per line (its id, title, points, the case
    sets it is graded on, its edge), and the total."""
    rows = ["| problem | line | what it checks | points | graded on |", "|---|---|---|---|---|"]
    for p in problems.values():
        rows.append(f"| **`{p.id}`** | | **{p.title}** | **{_points(p.points)}** | |")
        for g in p.groups:
            where = ", ".join(g.visibilities) + (f"; edge `{g.edge}`" if g.edge else "")
            where += "; a NaN is never forgiven" if g.stability else ""
            rows.append(f"| | `{g.id}` | {g.title.replace('|', '/')} | {_points(g.points)} | {where} |")
    rows.append(f"| **total** | | | **{_points(sum(p.points for p in problems.values()))}** | |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_kwargs) -> str:
    """MkDocs' hook: the page's Markdown with the marker replaced by the rubric's lines."""
    return markdown.replace(MARKER, lines_table(rubric.load())) if MARKER in markdown else markdown
