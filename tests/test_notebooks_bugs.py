"""Typical student bugs, made by editing a solution notebook's cell, lose exactly the intended points.

Each row: the notebook, the function whose cell is edited, the edit, and the
rubric lines (group, visibility) that must fail -- written by hand from what
the bug breaks, not read off the grader.
"""

from __future__ import annotations

import pytest

from notebook_tools import NB1, NB2, PROBLEM_OF, all_groups, edited, failing, grade, message

pytestmark = pytest.mark.slow

BOTH = ("public", "hidden")


def lines(*groups: str, vis: tuple[str, ...] = BOTH) -> set[tuple[str, str]]:
    return {(g, v) for g in groups for v in vis}


BUGS = [
    pytest.param(
        NB1,
        "predicted_ids",
        "np.argmax(logits, axis=-1)",
        "np.argmax(logits, axis=0)",
        lines("predicted_ids"),
        "wrong shape",
        id="argmax_over_the_wrong_axis",
    ),
    pytest.param(
        NB1,
        "cross_entropy_loss",
        "return nll.mean()",
        "return nll.sum() / len(target_ids)",
        lines("cross_entropy_loss"),
        "not by N",
        id="loss_averaged_over_ignored_positions",
    ),
    # ignore_index = 3 inside the real ids (public ignore_index_inside, hidden custom_ignore_index): a comparison
    # that only works for -100 fails on both sets, not on a hidden case alone.
    pytest.param(
        NB1,
        "cross_entropy_loss",
        "scored = target_ids != ignore_index",
        "scored = target_ids > ignore_index",
        lines("cross_entropy_loss"),
        "ignore_index",
        id="ignored_by_a_comparison_that_fits_minus_100",
    ),
    pytest.param(
        NB1,
        "cross_entropy_loss",
        "return nll.mean()",
        "return nll.sum()",
        lines("cross_entropy_loss"),
        "do not sum",
        id="loss_summed_not_averaged",
    ),
    pytest.param(
        NB1,
        "causal_mask",
        "np.full((T, T), -np.inf), k=1)",
        "np.full((T, T), -np.inf), k=0)",
        lines("causal_mask"),
        "got -inf, expected 0",
        id="minus_inf_on_the_diagonal",
    ),
    pytest.param(
        NB1,
        "causal_mask",
        "np.triu(np.full((T, T), -np.inf), k=1)",
        "np.tril(np.full((T, T), -np.inf), k=-1)",
        lines("causal_mask"),
        "wrong side of the diagonal",
        id="mask_on_the_wrong_side_of_the_diagonal",
    ),
    # Without max-subtraction only the cases with huge logits overflow (one public, one hidden),
    # in softmax and in both attention lines that use it: the stability line alone pays for it.
    pytest.param(
        NB1,
        "softmax",
        "shifted = z - z.max(axis=-1, keepdims=True)",
        "shifted = z",
        lines("numerical_stability"),
        "NaN",
        id="softmax_without_max_subtraction",
    ),
    pytest.param(
        NB2,
        "combined_mask",
        "padding_mask(tokens, pad_id)[:, None, :]",
        "padding_mask(tokens, pad_id)[:, :, None]",
        lines("combined_mask"),
        "key axis",
        id="padding_mask_on_the_query_side",
    ),
    # perplexity is exp(masked_mean_loss), so it inherits the bug.
    pytest.param(
        NB2,
        "masked_mean_loss",
        "return nll[valid].mean()",
        "return nll.mean()",
        lines("masked_mean_loss", "perplexity"),
        "not pad_id",
        id="mean_over_padded_positions",
    ),
    pytest.param(
        NB2,
        "masked_mean_loss",
        "return nll[valid].mean()",
        "return nll[valid].sum() / nll.numel()",
        lines("masked_mean_loss", "perplexity"),
        "the valid targets over all positions",
        id="sum_over_valid_divided_by_every_position",
    ),
    pytest.param(
        NB2,
        "perplexity",
        "torch.exp(masked_mean_loss(logits, targets, pad_id))",
        "torch.exp(masked_mean_loss(logits, targets, pad_id) * (targets != pad_id).sum())",
        lines("perplexity"),
        "not exp of the summed NLL",
        id="perplexity_from_the_summed_nll",
    ),
    # The textbook masked softmax, without the rule for a query that has no allowed key.
    pytest.param(
        NB2,
        "attention",
        ("scores = scores.masked_fill(no_key, 0.0)", "A = A.masked_fill(~mask, 0.0)"),
        ("pass", "pass"),
        lines("masked_attention"),
        "NaN",
        id="fully_masked_row_gives_nan",
    ),
    pytest.param(
        NB2,
        "uniform_attention",
        "X.cumsum(dim=1) / counts[None, :, None]",
        "X.cumsum(dim=1) / X.shape[1]",
        lines("uniform_attention"),
        "mean of X",
        id="uniform_attention_divides_by_T",
    ),
    # Scaled by V's width: every case with d_k != d_v (public short_sequence, most hidden ones) tells, and the
    # message names that factor because the grader recomputed the weights with it.
    pytest.param(
        NB1,
        "scaled_dot_product_attention",
        "d_k = K.shape[-1]",
        "d_k = V.shape[-1]",
        lines("attention", "masked_attention"),
        "divided by sqrt(d_v), V's width",
        id="attention_scaled_by_sqrt_d_v",
    ),
    # Notebook 2 without the 1/sqrt(D): named as such on both attention lines, with no word about -inf or NaN.
    pytest.param(
        NB2,
        "attention",
        "scores = Q @ K.transpose(-2, -1) / math.sqrt(D)",
        "scores = Q @ K.transpose(-2, -1)",
        lines("attention", "masked_attention"),
        "the 1/sqrt(D) scaling is missing",
        id="attention_without_the_scale",
    ),
]


@pytest.mark.parametrize("notebook,function,old,new,expected,hint", BUGS)
def test_bug_loses_exactly_the_intended_lines(tmp_path, notebook, function, old, new, expected, hint):
    problem = PROBLEM_OF[notebook]
    result = grade(tmp_path, {notebook: edited(notebook, function, old, new)}, only=[problem])
    assert failing(result, problem) == expected
    assert expected < all_groups(problem)
    group, vis = sorted(expected)[0]
    assert hint in message(result, problem, group, vis)


def test_attention_lines_after_a_broken_softmax_name_it_and_no_cause_of_their_own(tmp_path):
    """softmax normalised over the first axis: its line says so; the attention lines, which fail because they use
    it, say that and nothing about d_k."""
    text = edited(NB1, "softmax", ("z.max(axis=-1, keepdims=True)", "e.sum(axis=-1, keepdims=True)"),
                  ("z.max(axis=0, keepdims=True)", "e.sum(axis=0, keepdims=True)"))
    result = grade(tmp_path, {NB1: text}, only=["losses"])
    assert failing(result, "losses") == lines("softmax", "attention", "masked_attention")
    assert all("normalised over axis 0" in message(result, "losses", "softmax", vis) for vis in BOTH)
    for group in ("attention", "masked_attention"):
        for vis in BOTH:
            said = message(result, "losses", group, vis)
            reason = next(ln for ln in said.splitlines() if ln.startswith("case ")).split("): ", 1)[1]  # past the sizes
            assert "probably follows from the 'softmax' failure" in reason and "d_k" not in reason, said


def test_notebook_2_without_the_scale_gets_no_hint_about_masking(tmp_path):
    text = edited(
        NB2, "attention", "scores = Q @ K.transpose(-2, -1) / math.sqrt(D)", "scores = Q @ K.transpose(-2, -1)"
    )
    result = grade(tmp_path, {NB2: text}, only=["masks"])
    for vis in BOTH:
        said = message(result, "masks", "masked_attention", vis)
        hint = said.split("Hint: ", 1)[1]
        assert "1/sqrt(D) scaling is missing" in hint and "-inf" not in hint and "NaN" not in hint, said


# Slips that only a hidden case showed before each got a public twin: now a public case shows each one (the
# student sees it locally), and the report's first failed line names that case. (notebook, function, old, new,
# lines lost, the public case that shows it).
SEEN_IN_PUBLIC = [
    pytest.param(NB2, "padding_mask", "return tokens != pad_id",
                 "lengths = (tokens != pad_id).sum(dim=-1)\n"
                 "    return torch.arange(tokens.shape[1])[None, :] < lengths[:, None]",
                 ("padding_mask", "combined_mask"), "left_padded_words", id="padding_mask_from_the_lengths"),
    pytest.param(NB2, "attention", "A = torch.softmax(scores, dim=-1)",
                 "A = torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)",
                 ("attention", "masked_attention"), "huge_scores", id="softmax_without_max_subtraction"),
    pytest.param(NB1, "scaled_dot_product_attention", "scores = scores + mask",
                 "scores = scores + causal_mask(len(scores))",
                 ("masked_attention",), "windowed_causal", id="a_causal_mask_of_its_own_for_the_mask_given"),
]


@pytest.mark.parametrize("notebook,function,old,new,groups,case", SEEN_IN_PUBLIC)
def test_a_slip_only_hidden_cases_showed_is_seen_on_a_public_case(tmp_path, notebook, function, old, new, groups,
                                                                  case):
    from autograder.batch.feedback import text as feedback
    from gradelib import rubric

    problem = PROBLEM_OF[notebook]
    result = grade(tmp_path, {notebook: edited(notebook, function, old, new)}, only=[problem])
    assert failing(result, problem) == lines(*groups)
    rubric_problem = rubric.load()[problem]
    lost = sum(g.points for g in rubric_problem.groups if g.id in groups)
    assert result.score == pytest.approx(rubric_problem.points - lost)
    report = feedback(result).splitlines()
    at = next(i for i, line in enumerate(report) if line.startswith(f"{problem} "))
    first = next(g for g in rubric_problem.groups if g.id in groups)  # in rubric order, as the report lists them
    assert report[at + 1].startswith(f"  FAIL 0.00 / {rubric_problem.share(first, 'public'):.2f} {first.title}"), report
    assert f"case '{case}'" in " ".join(report[at + 2:at + 5]), report


def test_a_masks_case_header_names_the_shapes_of_what_each_function_grades():
    """One header serves every line a case grades: it names the masks' shapes (a 2 x 5 x 5 combined mask), not only
    the attention's Tq and Tk."""
    import json

    import numpy as np

    from support import FIXTURES

    for vis in ("public", "hidden"):
        for entry in json.loads((FIXTURES / "notebooks" / vis / "cases.json").read_text()):
            if entry["problem"] != "masks":
                continue
            with np.load(FIXTURES / "notebooks" / vis / f"{entry['name']}.npz") as data:
                B, T = data["tokens"].shape
                shapes = {"Q": data["Q"].shape[:2], "K": data["K"].shape[:2]}
            said = entry["description"]
            assert f"masks {T} x {T} and {B} x {T} x {T}" in said and f"tokens and X {B} x {T}" in said, said
            assert f"Q {' x '.join(map(str, shapes['Q']))}, K and V {' x '.join(map(str, shapes['K']))}" in said, said
