"""The rubric file is validated: typos are refused by name, points add up."""

from __future__ import annotations

import pytest

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


def load_text(tmp_path, text: str):
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return rubric.load(path)


def test_valid_rubric_loads_with_defaults(tmp_path):
    demo = load_text(tmp_path, GOOD)["demo"]
    assert [g.id for g in demo.groups] == ["a", "b"]
    assert demo.groups[0].visibilities == ("public", "hidden") and demo.groups[0].backward is False
    assert demo.points == 6


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


def test_attention_is_worth_30_points_half_hidden():
    att = rubric.load()["attention"]
    assert att.points == 30
    assert sum(att.share(g, "hidden") for g in att.groups) == pytest.approx(15)
    assert {g.id for g in att.groups if g.backward} == {"backward_values", "backward_queries_keys",
                                                         "backward_weights", "backward_input"}


def test_every_graded_problem_is_in_the_rubric():
    assert set(GRADERS) <= set(rubric.load())


def test_rubric_and_grader_use_exactly_the_five_contract_problem_ids():
    """DESIGN.md's problem ids, in order: outside checks (Autolab scores, gradebooks) rely on them."""
    contract = ["attention", "losses", "masks", "prediction", "generation"]
    assert list(rubric.load()) == contract
    assert list(GRADERS) == contract


def test_lm_problems_grade_both_the_arrays_and_notebook_3s_functions():
    problems = rubric.load()
    lines = {pid: {g.id: (g.points, g.visibilities) for g in problems[pid].groups} for pid in ("prediction", "generation")}
    assert lines["prediction"] == {
        "format": (2, ("public",)), "nll": (18, ("hidden",)), "predict_function": (4, ("public", "hidden")),
    }
    assert lines["generation"] == {
        "format": (2, ("public",)), "perplexity": (18, ("hidden",)),
        "generate_greedy": (3, ("public", "hidden")), "generate_sampling": (3, ("public", "hidden")),
    }
    assert sum(p.points for p in problems.values()) == 120
