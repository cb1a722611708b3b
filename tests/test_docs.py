"""The manual: README.md is a front page, docs/ builds into a site with no broken link or anchor."""

from __future__ import annotations

import re
import subprocess
import sys

from support import REPO as ROOT

README = ROOT / "README.md"


def test_readme_is_a_front_page_of_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the manual belongs in docs/"


def test_every_docs_link_of_the_readme_names_a_page_that_exists():
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links, "the README links to no page of docs/"
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, f"README.md links to pages that do not exist: {missing}"


def test_the_site_builds_strictly(tmp_path):
    # --strict turns every warning (an unknown page, a missing anchor, a page left out of nav) into a failure.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    built = {
        p.parent.name if p.parent != tmp_path / "site" else "index" for p in (tmp_path / "site").rglob("index.html")
    }
    assert {p.removesuffix(".md") for p in pages} <= built
    # The grading page's table of lines is read from the rubric (autograder/build/docs_rubric.py), not written by hand.
    from gradelib import rubric

    grading = (tmp_path / "site" / "grading" / "index.html").read_text()
    problems = rubric.load()
    assert "<!-- rubric lines -->" not in grading
    assert all(f"<code>{g.id}</code>" in grading for p in problems.values() for g in p.groups)
    assert f"<strong>{sum(p.points for p in problems.values()):g}</strong>" in grading


def test_every_total_the_documents_state_is_the_rubrics():
    """Scores and totals written in the README, the manual and the handout's README (sample reports, the points
    table, `Total N.`) are the rubric's: a rubric change that leaves one stale fails here."""
    from gradelib import rubric

    problems = rubric.load()
    points = {pid: p.points for pid, p in problems.items()}
    public = {pid: p.max_points(("public",)) for pid, p in problems.items()}
    lines = {pid: (sum("public" in g.visibilities for g in p.groups), sum(len(g.visibilities) for g in p.groups))
             for pid, p in problems.items()}
    totals = {sum(points.values()), sum(public.values())}
    pages = [README, ROOT / "solutions" / "HANDOUT_README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = {}
    for page in pages:
        text = page.read_text()
        checked[page.name] = 0
        for pid, got, top, said, count in re.findall(
                r"^\s*([a-z_]+) ([\d.]+) / ([\d.]+): (all|\d+ of) (\d+) lines pass", text, re.MULTILINE):
            assert pid in problems and float(top) in (points[pid], public[pid]), (page.name, pid, top)
            assert int(count) == lines[pid][float(top) == points[pid]], (page.name, pid, count)
            checked[page.name] += 1
        for top in re.findall(r"TOTAL\s+[\d.]+ /\s+([\d.]+)", text):
            assert float(top) in totals, (page.name, top)
            checked[page.name] += 1
        for scores in re.findall(r'\{"scores":(\{[^}]*\})', text):
            found = {k: float(v) for k, v in re.findall(r'"(\w+)":([\d.]+)', scores)}
            assert set(found) == set(points) and all(v in (0.0, points[k]) for k, v in found.items()), (
                page.name,
                found,
            )
            checked[page.name] += 1
        for pid, top in re.findall(r"^\| `([a-z_]+)` \|.*\| ([\d.]+) \|$", text, re.MULTILINE):
            if pid in problems:
                assert float(top) == points[pid], (page.name, pid, top)
                checked[page.name] += 1
        for top in re.findall(r"^Total ([\d.]+)\.", text, re.MULTILINE):
            assert float(top) == sum(points.values()), (page.name, top)
            checked[page.name] += 1
    # The README's sample report (its problems' lines and its TOTAL) at least; grading.md's points table is
    # made from the rubric when the site is built (test_the_site_builds_strictly checks it there).
    assert checked["README.md"] >= 3, checked
