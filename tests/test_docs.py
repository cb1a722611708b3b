"""The manual: README.md is a front page, docs/ builds into a site with no broken link or anchor, its pages speak in
short sentences and say what is (no history), and its figures page is made from the measurements' own data."""

from __future__ import annotations

import re
import subprocess
import sys

from support import REPO as ROOT

README = ROOT / "README.md"
HANDOUT_README = ROOT / "solutions" / "HANDOUT_README.md"

# Short sentences: at most 4% of a page set's sentences over LONG words, none over LONGEST.
LONG, LONGEST, LONG_SHARE = 40, 60, 0.04
# The docs say what is: the git log keeps what was.
HISTORY = re.compile(
    r"\b(the stop before|this stop|(earlier|third|faster|slower|previous),? (quiet |faster )?(host|run)"
    r"|before the split|no longer|used to|previously|formerly)\b",
    re.IGNORECASE,
)
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "etc.", "cf.")


def pages() -> list:
    return [README, HANDOUT_README, *sorted((ROOT / "docs").glob("*.md"))]


def paragraphs(text: str) -> list[str]:
    """A page's prose, a paragraph or list item each: code blocks (fenced, or indented after a blank line),
    tables, headings, images and HTML comments left out."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out: list[str] = []
    para: list[str] = []
    fence = code = False
    blank = True
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
        elif not fence and not stripped:
            blank = True
        elif not fence and not (code and line.startswith("    ")):
            code = line.startswith("    ") and blank and not re.match(r"\s*([-*]|\d+\.)\s", line)
            blank = False
            item = re.match(r"([-*]|\d+\.)\s+", stripped)
            if code or item or stripped.startswith(("|", "#", "![")):
                out.append(" ".join(para))
                para = []
            if not code and not stripped.startswith(("|", "#", "![")):
                para.append(stripped[item.end():] if item else stripped)
            continue
        if not fence or stripped.startswith("```"):
            out.append(" ".join(para))
            para = []
    out.append(" ".join(para))
    return [p for p in out if p]


def sentences(text: str) -> list[str]:
    """The prose's sentences: a paragraph split after . ! or ? (or one closing a parenthesis) before a capital, a
    backtick, a quote or a parenthesis (not after e.g., i.e. or vs.)."""
    found = []
    for para in paragraphs(text):
        para = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", para)  # a link's words, not its address
        pieces = re.split(r"(?:(?<=[.!?])|(?<=[.!?]\)))\s+(?=[A-Z`\"'(*_])", para)
        for piece in pieces:
            if found and found[-1][1] is para and found[-1][0].lower().endswith(ABBREVIATIONS):
                found[-1] = (found[-1][0] + " " + piece, para)
            else:
                found.append((piece, para))
    return [s for s, _ in found]


def words(sentence: str) -> int:
    return sum(1 for w in sentence.split() if re.search(r"\w", w))


def measure(paths) -> dict:
    """Per page: sentences, those over LONG words, the longest; history phrases found."""
    out = {}
    for path in paths:
        text = path.read_text()
        counts = [words(s) for s in sentences(text)]
        history = [m.group(0) for m in HISTORY.finditer(text)]  # code blocks' comments too
        out[path.name] = {"sentences": len(counts), "long": sum(n > LONG for n in counts),
                          "longest": max(counts, default=0), "history": history}
    return out


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
    # The grading page's table of lines is read from the rubric (autograder/tools/docs_rubric.py), not written by hand.
    from gradelib import rubric

    grading = (tmp_path / "site" / "grading" / "index.html").read_text()
    problems = rubric.load()
    assert "<!-- rubric lines -->" not in grading
    assert all(f"<code>{g.id}</code>" in grading for p in problems.values() for g in p.groups)
    assert f"<strong>{sum(p.points for p in problems.values()):g}</strong>" in grading
    # Every measured figure comes from the data its measurement wrote (autograder/tools/docs_figures.py), and the
    # pictures are drawn from it into the site.
    import json

    from autograder.tools import docs_figures

    figures = (tmp_path / "site" / "figures" / "index.html").read_text()
    assert "<!-- figures:" not in figures
    pictures = [("students", "img/student_run.png"), ("class", "img/class_report.png")]
    for name, command in (("bench", "make bench"), ("suite", "make test"), ("mutants", "make mutants")):
        if not (ROOT / "docs" / "data" / f"{name}.json").is_file():
            assert f"Not measured yet: <code>{command}</code> writes <code>docs/data/{name}.json</code>" in figures
            continue
        data = json.loads((ROOT / "docs" / "data" / f"{name}.json").read_text())
        for record in [data["recorded"]] if "recorded" in data else [r["recorded"] for r in data["runs"]]:
            assert docs_figures.recorded(record).split(" on ")[0] in figures, name
        if name == "bench":
            pictures.append(("figures", "img/bench_ratios.png"))
            for row in data["grading"]:
                assert f"<td>{row['template_s']:.2f} s</td>" in figures, row
                assert f"<td>{row['ratio_otter']:.2f}</td>" in figures, row
        if name == "suite":
            assert f"ran {sum(data['tests'].values())} tests" in figures
        if name == "mutants":
            assert all(f"<code>{pid}</code>" in figures.split('id="the-graders-power')[1] for pid in data["problems"])
            for c in data.get("checks", {}).values():
                assert f"<td>{c['own_check_first']} of {c['own_check_of']}</td>" in figures, c
    for page, picture in pictures:
        assert f'src="../{picture}"' in (tmp_path / "site" / page / "index.html").read_text(), (page, picture)
        assert (tmp_path / "site" / picture).read_bytes().startswith(b"\x89PNG"), picture
    lm = (tmp_path / "site" / "language-model" / "index.html").read_text()
    calibration = json.loads((ROOT / "fixtures" / "lm" / "calibration.json").read_text())
    assert all(f"<td>{m['model']}</td>" in lm for m in calibration["models"])


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


def test_the_measure_reads_sentences_as_a_reader_does():
    text = (
        "# A heading. Not a sentence\n\nOne sentence here. Another, e.g. this one (with a `code`). `make x` starts a"
        " third.\n\n    an indented block. Left out.\n\n```\nfenced. Left out.\n```\n\n| a table. | Left out. |\n\n"
        "- an item. Its second sentence\n  goes on here.\n1. A numbered item!\n\n![a picture](img/x.png)\n"
        "<!-- a comment. Left out. -->\n"
    )
    assert sentences(text) == [
        "One sentence here.", "Another, e.g. this one (with a `code`).", "`make x` starts a third.", "an item.",
        "Its second sentence goes on here.", "A numbered item!",
    ]
    assert words("a `code` word, and [a link](x.md) - 42.") == 7
    assert HISTORY.search("as the stop before measured") and HISTORY.search("On an earlier host it was")
    assert not HISTORY.search("before the run ends, the host says")


def test_sentences_are_short():
    """At most 4% of the sentences over 40 words and none over 60, on every page."""
    measured = measure(pages())
    assert set(measured) >= {"README.md", "HANDOUT_README.md", "index.md", "figures.md"}
    too_long = {
        name: [s for s in sentences(path.read_text()) if words(s) > LONGEST]
        for name, path in ((p.name, p) for p in pages()) if name in measured and measured[name]["longest"] > LONGEST
    }
    assert not too_long, f"sentences over {LONGEST} words: {too_long}"
    total, long = sum(m["sentences"] for m in measured.values()), sum(m["long"] for m in measured.values())
    assert long <= LONG_SHARE * total, f"{long} of {total} sentences over {LONG} words: {measured}"


def test_the_pages_say_what_is_not_what_was():
    found = {name: m["history"] for name, m in measure(pages()).items()
             if m["history"]}
    assert not found, f"history in the docs (the git log keeps it): {found}"


# A measured figure is stated once, on the figures page, from its data: the front page and the contributors' page
# link there instead of restating a time.
DURATION = re.compile(r"\b\d[\d.,]*\s?(?:s|ms|min|minutes|seconds|CPU-seconds)\b")


def test_the_front_pages_state_no_measured_time():
    for path in (README, ROOT / "docs" / "contributing.md", ROOT / "docs" / "index.md", ROOT / "docs" / "figures.md"):
        text = re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.S)
        assert not DURATION.findall(text), (path.name, DURATION.findall(text))
    assert "figures.md" in README.read_text() and "figures.md" in (ROOT / "docs" / "contributing.md").read_text()


def test_the_suites_summary_sums_its_timing_lines():
    from autograder.tools.measured import mutants_summary, suite_summary

    lines = [
        {"session": "start", "time": 100.0, "load": [1.5, 1.0, 0.5]},
        {"file": "test_a.py", "start": 105.0, "end": 115.0, "cpu_s": 5.0, "worker": "gw0", "outcomes": {"passed": 3}},
        {"file": "test_b.py", "start": 106.0, "end": 134.0, "cpu_s": 20.0, "worker": "gw1",
         "outcomes": {"passed": 1, "skipped": 2}, "load": [9.25, 4.0, 2.0]},
        {"file": "test_a.py", "start": 135.0, "end": 139.0, "cpu_s": 1.5, "worker": "gw1", "outcomes": {"failed": 1}},
        {"session": "end", "time": 140.0, "load": [2.0, 1.0, 0.5], "exitstatus": 1},
    ]
    s = suite_summary(lines)
    assert (s["wall_s"], s["cpu_s"], s["workers"], s["files"]) == (40.0, 26.5, 2, 2)
    assert s["tests"] == {"passed": 4, "skipped": 2, "failed": 1} and s["load_start"] == [1.5, 1.0, 0.5]
    assert s["load_peak"] == 9.25  # the highest 1-minute load any line read, the session's own included
    assert [(f["file"], f["wall_s"], f["cpu_s"]) for f in s["longest"]] == [("test_b.py", 28.0, 20.0),
                                                                             ("test_a.py", 14.0, 6.5)]
    # Without the session's lines (an older timing file), the span of its test files.
    assert suite_summary(lines[1:-1])["wall_s"] == 34.0
    report = {"recorded": {"date": "x"}, "seconds": 60, "found": {"losses": 10, "masks": 12},
              "summary": {"losses": {"mutants": 5, "killed": 4, "equivalent": 1}, "masks": {"mutants": 12}}}
    m = mutants_summary([report])
    assert m["runs"] == [{"recorded": {"date": "x"}, "seconds": 60}]
    assert m["problems"]["losses"] == {"found": 10, "mutants": 5, "killed": 4, "equivalent": 1, "run": 0}
    # mutants_checks' report: per problem, how many mutants fail their own question's check first.
    checks = {"recorded": {"date": "y"}, "seconds": 9, "checks": {"masks": {"own_check_first": 3, "own_check_of": 4,
                                                                             "no_check_fails": 0, "every": 2}}}
    m = mutants_summary([report, checks])
    assert m["checks"] == {"masks": {"own_check_first": 3, "own_check_of": 4, "no_check_fails": 0, "every": 2,
                                     "run": 1}} and m["problems"]["masks"]["run"] == 0
