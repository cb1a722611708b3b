"""The rubric file is validated by the course grader (autograder/grading/rubric_check.py): typos are refused by
name, points add up; the kit reads the shipped file as the check passed it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import tomllib

from autograder.grading import rubric_check
from gradelib import rubric
from gradelib.problems import GRADERS

GOOD = """
[problems.demo]
title = "demo"
visibility_share = { public = 0.25, hidden = 0.75 }

[[problems.demo.groups]]
id = "a"
title = "line a"
points = 4
quantities = ["Q"]

[[problems.demo.groups]]
id = "b"
title = "line b, public only"
points = 2
visibilities = ["public"]
"""


# A toy problem's schema, so the generic checks are shown apart from the real problems.
DEMO = {"demo": rubric_check.ProblemSchema(line_ids=frozenset({"b"}), quantities=frozenset({"Q"}))}


def load_text(tmp_path, text: str, schemas=DEMO):
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return rubric_check.load(path, schemas)


def test_valid_rubric_loads_with_defaults(tmp_path):
    demo = load_text(tmp_path, GOOD)["demo"]
    assert [g.id for g in demo.groups] == ["a", "b"]
    assert demo.groups[0].visibilities == ("public", "hidden") and demo.groups[0].backward is False
    assert demo.points == 6


def test_the_shipped_rubric_passes_the_course_check_which_the_kit_trusts(tmp_path):
    """The kit reads gradelib/rubric.toml without checking it: the course's check passes it here. A file the kit
    cannot read at all is a RubricError (the local grader says so in a line), not a traceback."""
    rubric_check.check()
    assert rubric_check.load() == rubric.load()
    path = tmp_path / "rubric.toml"
    for broken in ("[problems.attention", "[problems.attention]\ntitle = 1\n", "x = 1\n"):
        path.write_text(broken)
        with pytest.raises(rubric.RubricError, match="cannot be read as a rubric"):
            rubric.load(path)


def test_unknown_problem_key_is_refused_by_name(tmp_path):
    with pytest.raises(rubric.RubricError, match=r"\[problems.demo\]: unknown key\(s\) \['visiblity_share'\]"):
        load_text(tmp_path, GOOD.replace("visibility_share", "visiblity_share"))


def test_unknown_group_key_is_refused_by_name(tmp_path):
    with pytest.raises(rubric.RubricError, match=r"group 2: unknown key\(s\) \['point'\]"):
        load_text(tmp_path, GOOD.replace("points = 2", "point = 2"))


def test_missing_required_key_is_named(tmp_path):
    with pytest.raises(rubric.RubricError, match="missing required key 'title'"):
        load_text(tmp_path, GOOD.replace('title = "line a"\n', ""))


def test_mistyped_value_is_refused(tmp_path):
    with pytest.raises(rubric.RubricError, match="key 'points' must be"):
        load_text(tmp_path, GOOD.replace("points = 4", "points = true"))


def test_visibility_shares_must_sum_to_one(tmp_path):
    with pytest.raises(rubric.RubricError, match="must sum to 1"):
        load_text(tmp_path, GOOD.replace("hidden = 0.75", "hidden = 0.5"))


def test_shares_split_points_and_single_visibility_lines_earn_them_all(tmp_path):
    demo = load_text(tmp_path, GOOD)["demo"]
    a, b = demo.groups
    assert (demo.share(a, "public"), demo.share(a, "hidden")) == (1.0, 3.0)
    assert (demo.share(b, "public"), demo.share(b, "hidden")) == (2.0, 0.0)


@pytest.mark.parametrize("pid", sorted(rubric.load()))
def test_shares_of_every_problem_sum_to_its_points(pid):
    problem = rubric.load()[pid]
    total = sum(problem.share(g, v) for g in problem.groups for v in g.visibilities)
    assert total == pytest.approx(problem.points)
    assert problem.points > 0


def test_attention_gives_its_edge_cases_lines_of_their_own_on_both_case_sets():
    """Ordinary lines half public, half hidden; each edge line on both sets, so a slip only an edge shows
    (sqrt(Dv) for sqrt(Dk), a T = 1 shape slip) loses a public line too. Totals are the rubric's own sums."""
    att = rubric.load()["attention"]
    edges = {g.id: (g.edge, g.visibilities) for g in att.groups if g.edge}
    assert edges == {"numerical_stability": ("large_scores", ("public", "hidden")),
                     "single_position": ("single_position", ("public", "hidden")),
                     "key_value_widths": ("key_value_widths", ("public", "hidden"))}
    assert att.max_points(("public",)) == pytest.approx(att.max_points(("hidden",))) == pytest.approx(att.points / 2)
    assert {g.id for g in att.groups if g.backward} == {"backward_values", "backward_queries_keys",
                                                         "backward_weights", "backward_input"}


def test_every_graded_problem_is_in_the_rubric():
    assert set(GRADERS) <= set(rubric.load())


def test_rubric_and_grader_use_exactly_the_five_contract_problem_ids():
    """The README's problem ids, in order: outside checks (Autolab scores, gradebooks) rely on them."""
    contract = ["attention", "losses", "masks", "prediction", "generation"]
    assert list(rubric.load()) == contract
    assert list(GRADERS) == contract


def test_lm_problems_grade_both_the_arrays_and_notebook_3s_functions():
    problems = rubric.load()
    lines = {
        pid: {g.id: (g.points, g.visibilities) for g in problems[pid].groups} for pid in ("prediction", "generation")
    }
    assert lines["prediction"] == {
        "format": (2, ("public",)), "nll": (12, ("hidden",)), "predict_function": (4, ("public", "hidden")),
        "collate_and_loss": (2, ("public", "hidden")), "causal_attention": (2, ("public", "hidden")),
        "model_building": (2, ("public", "hidden")),
    }
    assert lines["generation"] == {
        "format": (2, ("public",)), "perplexity": (18, ("hidden",)),
        "generate_greedy": (3, ("public", "hidden")), "generate_sampling": (3, ("public", "hidden")),
    }


# --- values are checked too: each typo below would change grades if it were read ----------

REAL = rubric.RUBRIC_PATH.read_text()

TYPOS = [
    # (what is changed in the real rubric, from, to, what the refusal names)
    (
        "a misspelt visibility drops a line's hidden points",
        'id = "nll"\ntitle = "prediction NLL on the hidden targets"\npoints = 12\nvisibilities = ["hidden"]',
        'id = "nll"\ntitle = "prediction NLL on the hidden targets"\npoints = 12\nvisibilities = ["hiden"]',
        "visibilities must be",
    ),
    ("a duplicated visibility", 'visibilities = ["public"]', 'visibilities = ["public", "public"]', "distinct values"),
    ("an empty visibility list", 'visibilities = ["public"]', "visibilities = []", "non-empty"),
    ("a misspelt setting", "full_credit_nll = 0.85", "full_credit_nl = 0.85", "unknown setting(s) ['full_credit_nl']"),
    (
        "a setting given as text",
        "zero_credit_nll = 1.25",
        'zero_credit_nll = "1.25"',
        "setting 'zero_credit_nll' must be number",
    ),
    (
        "thresholds the wrong way round",
        "full_credit_nll = 0.85",
        "full_credit_nll = 2.5",
        "'full_credit_nll' (2.5) must be below 'zero_credit_nll' (1.25)",
    ),
    (
        "a negative time limit",
        "settings = { cell_timeout_s = 10, call_timeout_s = 5 }",
        "settings = { cell_timeout_s = -10, call_timeout_s = 5 }",
        "setting 'cell_timeout_s' must be > 0",
    ),
    (
        "smoothing outside (0, 1)",
        "smoothing_eps = 1e-3",
        "smoothing_eps = 1.5",
        "setting 'smoothing_eps' must be between 0 and 1",
    ),
    (
        "a misspelt share key",
        "visibility_share = { public = 0.5, hidden = 0.5 }\n# Relative",
        "visibility_share = { public = 0.5, hiden = 0.5 }\n# Relative",
        "visibility_share must have exactly the keys",
    ),
    (
        "a share above 1",
        "visibility_share = { public = 0.5, hidden = 0.5 }\n# Relative",
        "visibility_share = { public = 1.5, hidden = -0.5 }\n# Relative",
        "between 0 and 1",
    ),
    (
        "a tolerance for an unknown dtype",
        "float32 = { rtol = 1e-4, atol = 1e-5 }",
        "float23 = { rtol = 1e-4, atol = 1e-5 }",
        "tolerance for unknown dtype 'float23'",
    ),
    (
        "a misspelt tolerance key",
        "float32 = { rtol = 1e-4, atol = 1e-5 }",
        "float32 = { rtoll = 1e-4, atol = 1e-5 }",
        "tolerance.float32 must have exactly the keys ['rtol', 'atol']",
    ),
    (
        "a negative tolerance",
        "float32 = { rtol = 1e-4, atol = 1e-5 }",
        "float32 = { rtol = -1e-4, atol = 1e-5 }",
        "must be >= 0",
    ),
    ("zero points", 'quantities = ["A_sig"]\npoints = 4', 'quantities = ["A_sig"]\npoints = 0', "points must be > 0"),
    (
        "a quantity the problem never computes",
        'quantities = ["A_sig"]',
        'quantities = ["A_sigma"]',
        "quantities ['A_sigma'] are not computed",
    ),
    (
        "a line without quantities the problem does not know",
        'id = "nll"',
        'id = "nl"',
        "line id 'nl' lists no quantities",
    ),
    (
        "two lines with one id",
        'id = "forward_scores"',
        'id = "forward_projections"',
        "line ids must be unique, repeated: ['forward_projections']",
    ),
    ("a misspelt problem id", "[problems.masks]", "[problems.mask]", "unknown problem id 'mask'"),
    ("a misspelt top-level table", "[problems.attention]", "[problem.attention]", "unknown top-level key"),
    (
        "a visibility Gradescope does not know",
        'hidden_tests = "after_published"',
        'hidden_tests = "after_publish"',
        "hidden_tests must be one of ['after_published', 'after_due_date', 'visible', 'hidden'], got 'after_publish'",
    ),
    (
        "stability on a line without an edge",
        'edge = "large_scores"\nstability = true',
        "stability = true",
        "stability = true is for a line graded on an edge case",
    ),
    (
        "an edge that is not a name",
        'edge = "single_position"',
        'edge = "single position"',
        "edge must be a lower-case name",
    ),
    (
        "an edge on a problem whose cases carry none",
        'points = 18\nvisibilities = ["hidden"]',
        'points = 18\nvisibilities = ["hidden"]\nedge = "x"',
        "this problem's cases carry no edge tags",
    ),
]


@pytest.mark.parametrize("what, old, new, named", TYPOS, ids=[t[0] for t in TYPOS])
def test_a_typo_in_a_value_is_refused_at_start_up_by_name(tmp_path, what, old, new, named):
    assert REAL.count(old) >= 1, f"the rubric no longer holds {old!r}: update this test"
    path = tmp_path / "rubric.toml"
    path.write_text(REAL.replace(old, new, 1))
    with pytest.raises(rubric.RubricError) as refused:
        rubric_check.load(path)
    assert named in str(refused.value)


def test_every_threshold_the_problems_use_is_written_in_the_rubric():
    """Defaults exist for old rubrics, but the shipped file states every setting it is graded by."""
    written = tomllib.loads(REAL)["problems"]
    for pid, schema in rubric_check.SCHEMAS.items():
        assert set(written[pid].get("settings", {})) == set(schema.settings), pid


def test_the_batch_grader_refuses_a_broken_rubric_without_a_traceback(tmp_path, monkeypatch, capsys):
    from autograder.batch import cli

    path = tmp_path / "rubric.toml"
    path.write_text(REAL.replace("full_credit_nll = 0.85", "full_credit_nl = 0.85"))
    monkeypatch.setattr(rubric, "RUBRIC_PATH", path)
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "grades")]) == 2
    err = capsys.readouterr().err
    assert "unknown setting(s) ['full_credit_nl']" in err and "Traceback" not in err
    assert not (tmp_path / "grades").exists()


def test_the_batch_grader_refuses_an_edge_line_no_case_carries(tmp_path, monkeypatch, capsys):
    """A misspelt edge would score 0 for everyone: nothing is graded, and the line and its edge are named."""
    from autograder.batch import cli

    path = tmp_path / "rubric.toml"
    path.write_text(REAL.replace('edge = "single_position"', 'edge = "single_positon"'))
    monkeypatch.setattr(rubric, "RUBRIC_PATH", path)
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "grades")]) == 2
    err = capsys.readouterr().err
    assert re.search(
        r"attention.single_position is graded on edge 'single_positon', but no (public|hidden) case", err
    ), err
    assert "Traceback" not in err and not (tmp_path / "grades").exists()


AUDIT_OPENS = """import json, os, sys
def _hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if os.path.basename(path) == "rubric.toml":
            with open(os.environ["RUBRIC_OPENS"], "a") as log:
                log.write(json.dumps([os.getpid(), sys.argv[0], path]) + "\\n")
sys.addaudithook(_hook)
"""


def test_one_grading_command_reads_its_rubric_once_and_its_workers_never(tmp_path):
    """The command reads the rubric once (every table: problems, [late], [calibration]) and hands it to its workers,
    which read no rubric file: every process gets an audit hook on open (sitecustomize.py) that logs each rubric.toml
    it opens."""
    from support import REPO, SOLUTIONS

    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(AUDIT_OPENS)
    copy = tmp_path / "course" / "rubric.toml"
    copy.parent.mkdir()
    shutil.copyfile(rubric.RUBRIC_PATH, copy)
    subs = []
    for name in ("alice", "bob"):  # two submissions: two workers; the language-model problems score 0 (no files)
        (tmp_path / name).mkdir()
        shutil.copyfile(SOLUTIONS / "attention.py", tmp_path / name / "attention.py")
        subs.append(str(tmp_path / name))
    log = tmp_path / "opens.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hook"), "RUBRIC_OPENS": str(log)}
    proc = subprocess.run([sys.executable, "-m", "autograder", *subs, "--out", str(tmp_path / "grades"),
                           "--rubric", str(copy), "--timeout", "120"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("alice", "bob"):  # each was graded, by a worker, with the rubric it was given
        data = json.loads((tmp_path / "grades" / name / "results.json").read_text())
        attention = [t for t in data["tests"] if t["tags"] == ["attention"]]
        assert attention and all(t["score"] == t["max_score"] for t in attention), attention
    opens = [json.loads(line) for line in log.read_text().splitlines()]
    assert [path for _, _, path in opens] == [str(copy)], opens  # once, and never the kit's own rubric.toml
    assert opens[0][1].endswith("autograder/__main__.py"), opens  # by the command's process, not a worker
