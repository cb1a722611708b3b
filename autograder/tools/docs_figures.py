"""MkDocs hook: the manual's figures and pictures, made from the data the measurements wrote.

A page states no measured figure by hand. `<!-- figures: NAME -->` in a page becomes NAME's table or line:
bench-* from docs/data/bench.json (`make bench`), suite from docs/data/suite.json (`make test`), mutants from
docs/data/mutants.json (`make mutants`), lm-* from fixtures/lm/ (`make course`, `make reference-model`). The
pictures are drawn at build time into the site: img/bench_ratios.png (the ratios to `otter run`) and
img/student_run.png (docs/data/student_run.txt, a real `python autograder.py` run that `make pictures` records).
"""

from __future__ import annotations

import datetime
import io
import json
import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
LM = REPO / "fixtures" / "lm"
MARKER = re.compile(r"<!-- figures: ([a-z-]+) -->")
FIRST = ("bench-recorded", "suite", "mutants")  # the first marker of each measurement's section
PICTURES = {"img/bench_ratios.png": "bench.json", "img/student_run.png": "student_run.txt"}


def _data(name: str):
    path = DATA / name
    if not path.is_file():
        return None
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def _s(x: float) -> str:
    return f"{x:.2f} s"


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def recorded(r: dict) -> str:
    """The host and the moment a measurement recorded, in one line."""
    date = datetime.datetime.fromisoformat(r["date"]).strftime("%Y-%m-%d %H:%M UTC")
    peak = f", up to {r['load_peak']:g} in between" if r.get("load_peak") else ""
    load = f"load average {r['load_start'][0]:g} at the start{peak}, {r['load_end'][0]:g} at the end"
    load += f", run at niceness {r['nice']}" if r.get("nice") else ""
    return (f"Measured {date} on `{r['host']}` ({r['cpus']} CPUs, {r['cpu']}; {r['system']}; Python {r['python']}), "
            f"{load}, commit `{r['commit'] or 'unknown'}`: `{r['command']}`.")


def bench_table(b: dict) -> str:
    rows = ["| what | template process | fresh interpreter per run | target | ratio to `otter run` |",
            "|---|---|---|---|---|"]
    for g in b["grading"]:
        target = g["target"].removeprefix("target ")
        rows.append(f"| {g['what']} | {_s(g['template_s'])} | {_s(g['fresh_s'])} | {target} | {g['ratio_otter']:.2f} |")
    rows.append(f"| `otter run`, a one-question notebook | {_s(b['otter_s'])} | | | 1 |")
    return "\n".join(rows)


def bench_more(b: dict) -> str:
    """The class, the box, the model run, similarity and the language-model figures of the same run."""
    rows = ["| what | figure |", "|---|---|"]
    c = b.get("class")
    if c:
        rows += [
            f"| a class of {c['handins']} handins (correct, buggy, attacks, broken archives), `--jobs {c['jobs']}` | "
            f"{c['wall_s']:.1f} s, {c['per_minute']:.1f} handins a minute; median {_s(c['per_submission_median_s'])} "
            "a handin |",
            f"| one complete handin, hidden and public cases, one core | {_s(c['one_core_complete_s'])} "
            "(target < 60 s) |",
            f"| notebook 1 alone, hidden grading, next to `otter run` on it | {_s(c['notebook_1_s'])} and "
            f"{_s(c['notebook_1_otter_s'])}: {c['notebook_1_ratio_otter']:.2f} x |",
        ]
    m = b.get("model_run")
    if m and "grader_s" in m:
        rows.append(f"| complete handin, one core: the grader's own time, less the handed-in model's forward passes "
                    f"({_s(m['model_s'])}) | {_s(m['grader_s'])} of {_s(m['complete_s'])} (target <= 5 s) |")
    box = b.get("box")
    if box:
        rows.append(f"| the complete handin in a box of {box['cpu']:g} CPU and {box['memory_mb']} MB (Gradescope's "
                    f"default) | {min(box['times_s']):.1f} to {max(box['times_s']):.1f} s, peak {box['peak_mb']} MB, "
                    f"scores {', '.join(f'{x:g}' for x in box['scores'])} |")
    sim = b.get("similarity")
    if sim:
        rows.append(f"| similarity: {sim['submissions']} generated handins, {sim['pairs']:,} pairs x {sim['files']} "
                    f"files, `--jobs {sim['jobs']}` | {sim['wall_s']:.1f} s ({sim['cpu_s']:.1f} CPU-seconds), "
                    f"{sim['flagged']:,} pairs flagged |")
    ref = (b.get("lm") or {}).get("reference")
    if ref:
        rows.append(f"| the reference model's training, as `make reference-model` recorded it | "
                    f"{ref['parameters']:,} parameters, {ref['train_tokens_per_s']:,.0f} tokens/s on 2 threads, "
                    f"{_duration(ref['train_s'])} |")
    for what, seconds in ((b.get("lm") or {}).get("scoring_s") or {}).items():
        rows.append(f"| the oracle scoring 128 generations of 30 characters ({what}) | {seconds * 1000:.0f} ms |")
    return "\n".join(rows)


def model_steps(b: dict) -> str:
    steps = (b.get("model_run") or {}).get("steps_s") or {}
    rows = ["| step of the model run (hidden grading, one core) | seconds |", "|---|---|"]
    return "\n".join(rows + [f"| {name} | {seconds:.2f} |" for name, seconds in steps.items()])


def suite(s: dict) -> str:
    tests = ", ".join(f"{n} {outcome}" for outcome, n in sorted(s["tests"].items(), key=lambda kv: -kv[1]))
    head = (f"{recorded(s['recorded'])}\n\n`make test` ran {sum(s['tests'].values())} tests ({tests}) in "
            f"{s['files']} files on {s['workers']} workers: **{_duration(s['wall_s'])}** of wall clock, "
            f"{s['cpu_s']:,.0f} CPU-seconds in the test processes (the sandboxed runs they start are not counted). "
            "The longest files:\n\n")
    rows = ["| file | wall clock | CPU-seconds of its test process |", "|---|---|---|"]
    rows += [f"| `{f['file']}` | {_duration(f['wall_s'])} | {f['cpu_s']:.0f} |" for f in s["longest"]]
    return head + "\n".join(rows)


def mutants(m: dict) -> str:
    rows = ["| problem | mutants graded | killed: exactly the oracle's lines | first failed line is the oracle's "
            "| equivalent: full marks | survivors | false kills |", "|---|---|---|---|---|---|---|"]
    for pid, p in m["problems"].items():
        rows.append(f"| `{pid}` | {p['mutants']} of {p['found']} | {p.get('killed', 0)} of {p['first_line_of']} | "
                    f"{p['first_line_right']} of {p['first_line_of']} | {p.get('equivalent', 0)} | "
                    f"{p.get('survivor', 0)} | {p.get('false kill', 0)} |")
    if m.get("checks"):
        rows += ["", "| notebook problem | mutants the oracle finds wrong, run through the check cells "
                 "| first failing check is the mutated function's own question | no check fails |", "|---|---|---|---|"]
        for pid, c in m["checks"].items():
            sample = f" (every {c['every']}th)" if c.get("every", 1) > 1 else ""
            rows.append(f"| `{pid}` | {c['own_check_of']}{sample} | {c['own_check_first']} of {c['own_check_of']} | "
                        f"{c['no_check_fails']} |")
    runs = "\n".join(f"- {recorded(r['recorded'])} It took {_duration(r['seconds'])}." for r in m["runs"])
    return "\n".join(rows) + "\n\n" + runs


def lm_thresholds(c: dict) -> str:
    t = c["thresholds"]
    rows = ["| model | prediction NLL (validation / hidden test): credit | generation perplexity: credit |",
            "|---|---|---|"]
    for r in c["models"]:
        nll = (f"{r['val_nll']:.3f} / {r['test_nll']:.3f}: {r['prediction_credit']:.0%}" if "val_nll" in r
               else "(no model)")
        rows.append(f"| {r['model']} | {nll} | {r['generation_perplexity']:,.2f}: {r['generation_credit']:.0%} |")
    p, g = t["prediction"], t["generation"]
    rows.append(f"| full credit at / none at | <= {p['full_credit_nll']:g} / >= {p['zero_credit_nll']:g} (linear) | "
                f"<= {g['full_credit_perplexity']:g} / >= {g['zero_credit_perplexity']:g} (linear in log) |")
    return "\n".join(rows)


def lm_epochs(ref: dict) -> str:
    rows = ["| epoch | training loss | validation prediction NLL | generation perplexity | full credit on both "
            "| wall clock |", "|---|---|---|---|---|---|"]
    for e in ref["epochs"]:
        rows.append(f"| {e['epoch']} | {e['train_loss']:.3f} | {e['val_prediction_nll']:.3f} | "
                    f"{e['generation_perplexity']:.2f} | {'yes' if e['passes_full_credit'] else 'no'} | "
                    f"{_duration(e['wall_s'])} |")
    return "\n".join(rows)


def figure(name: str) -> str:
    """The Markdown a marker stands for; a sentence saying which command makes it when its data is missing."""
    source = {"bench": ("bench.json", "make bench"), "suite": ("suite.json", "make test"),
              "mutants": ("mutants.json", "make mutants")}
    if name.startswith("lm-"):
        path = LM / ("calibration.json" if name == "lm-thresholds" else "reference_model.json")
        if not path.is_file():
            return f"*No figures yet: `make course` writes `fixtures/lm/{path.name}`.*"
        return {"lm-thresholds": lm_thresholds, "lm-epochs": lm_epochs}[name](json.loads(path.read_text()))
    file, command = source[name.split("-")[0]]
    data = _data(file)
    if data is None:  # said once, by the section's first marker
        return f"*Not measured yet: `{command}` writes `docs/data/{file}`; commit it.*" if name in FIRST else ""
    makers = {"bench-chart": lambda _: "![Each grading figure as a ratio to otter run](img/bench_ratios.png)",
              "bench-recorded": lambda b: recorded(b["recorded"]) + f" Each figure is the median of {b['runs']} runs.",
              "bench-table": bench_table, "bench-more": bench_more, "bench-steps": model_steps, "suite": suite,
              "mutants": mutants}
    return makers[name](data)


# --- pictures -------------------------------------------------------------------------------------------------

def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=fig.dpi)
    return out.getvalue()


def ratio_chart(b: dict) -> bytes:
    """Each grading figure's time as a ratio to `otter run`, with the template process and with a fresh
    interpreter per run, bars side by side; `otter run` is the line at 1."""
    from matplotlib.figure import Figure

    rows = b["grading"][::-1]
    labels = ["\n".join(textwrap.wrap(g["what"], 44)) for g in rows]
    fig = Figure(figsize=(9, 0.62 * len(rows) + 1.1), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ys = range(len(rows))
    template = [g["ratio_otter"] for g in rows]
    fresh = [g["fresh_s"] / b["otter_s"] for g in rows]
    ax.barh([y + 0.2 for y in ys], template, 0.38, color="#2b6cb0", label="template process (the default)")
    ax.barh([y - 0.2 for y in ys], fresh, 0.38, color="#a0aec0", label="fresh interpreter per run")
    for y, value, other in zip(ys, template, fresh):
        ax.text(value + 0.02, y + 0.2, f"{value:.2f}", va="center", fontsize=8, color="#1a365d")
        ax.text(other + 0.02, y - 0.2, f"{other:.2f}", va="center", fontsize=7, color="#4a5568")
    ax.axvline(1, color="#c53030", linewidth=1.2)
    ax.text(1.03, len(rows) - 0.5, f"otter run = 1\n({b['otter_s']:.1f} s)", color="#c53030", fontsize=8, va="top")
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.set_xlabel("time as a ratio to otter run on a one-question notebook (lower is faster)", fontsize=9)
    ax.set_xlim(0, max(1.3, max(fresh) * 1.12))
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    return _png(fig)


def terminal(text: str) -> bytes:
    """A terminal's window showing `text`: light characters on a dark background, a monospace font; the command in
    blue, each problem's score line in bold, each failed line in red."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle, Rectangle

    lines = text.rstrip("\n").splitlines()
    width = max(len(line) for line in lines)
    char_w, line_h, pad, bar = 0.0725, 0.175, 0.25, 0.3  # inches at font size 9
    w, h = width * char_w + 2 * pad, len(lines) * line_h + 2 * pad + bar
    fig = Figure(figsize=(w, h), dpi=110)
    fig.patch.set_facecolor("#1e1e1e")
    fig.add_artist(Rectangle((0, 1 - bar / h), 1, bar / h, transform=fig.transFigure, color="#3c3c3c"))
    for i, color in enumerate(("#ff5f56", "#ffbd2e", "#27c93f")):
        fig.add_artist(Circle(((0.22 + 0.2 * i) / w, 1 - bar / 2 / h), 0.055 / w, transform=fig.transFigure,
                              color=color))
    for i, line in enumerate(lines):
        score = re.match(r"(\w+|TOTAL) [\d.]+ / [\d.]+", line)
        color = "#9cdcfe" if line.startswith("$") else "#f48771" if line.lstrip().startswith("FAIL") else (
            "#ffffff" if score else "#cccccc")
        fig.text(pad / w, 1 - (bar + pad + (i + 0.8) * line_h) / h, line, family="DejaVu Sans Mono", fontsize=9,
                 color=color, weight="bold" if score else "normal")
    return _png(fig)


# --- the hook ----------------------------------------------------------------------------------------------------

def on_files(files, config):
    """The pictures drawn from the data, added to the site (nothing binary in docs/ for them)."""
    from mkdocs.structure.files import File

    draw = {"bench.json": lambda d: ratio_chart(d), "student_run.txt": terminal}
    for path, name in PICTURES.items():
        data = _data(name)
        if data is not None:
            files.append(File.generated(config, path, content=draw[name](data)))
    return files


def on_page_markdown(markdown: str, **_kwargs) -> str:
    return MARKER.sub(lambda m: figure(m.group(1)), markdown)
