"""Attacks on the grading harness that runs beside the submission in its process: comparisons patched to
say yes, the child's own type check bypassed, a tensor subclass that equals anything, and, in notebook 3,
the model harness's JSON report forged and one-pass logits planted for the hidden rows
(gradelib/child/, gradelib/problems/).

What must hold: the grader judges only the values the submission computed, compared outside its process,
by their true type; a forged report neither costs nor earns a point, and the one-pass logits file is read
only for the sets the grader gave out itself.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gradelib.problems.lm_common import QUALITY_LINES

from attack_tools import attack_source, only_at, outputs
from support import FIXTURES, SOLUTIONS, grade_files

pytestmark = pytest.mark.attacks

# ---------------------------------------------------------------- what the attention harness compares


def test_patched_comparisons_change_nothing(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="patch_comparisons")
    text = outputs(attack_batch["results"]["patch_comparisons"])
    # The child's type check was bypassed too: the grader judged the values it computed.
    assert "has wrong values" in text and "wrong type" not in text, text


def test_lying_tensor_subclass_is_refused_by_type(attack_batch):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack="lying_tensor")
    text = outputs(attack_batch["results"]["lying_tensor"])
    assert "has the wrong type: got attention.LyingTensor, expected torch.Tensor" in text, text


# ---------------------------------------------------------------- what the model's child says about itself
# Notebook 3 runs in the same process as the harness that rebuilds the model, so its code can change
# what that harness writes to the grader (forged_report_cell.py). The grader must read past it, grade
# the model by what it answered, and let nothing of it decide a point.


def test_a_notebook_that_forges_the_model_harness_report_changes_no_grade(tmp_path):
    import nbformat

    nb = nbformat.read(SOLUTIONS / "03_language_model.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(attack_source("forged_report_cell")))
    lm = FIXTURES / "lm"
    files = {"03_language_model.ipynb": nbformat.writes(nb), "model.pt": (lm / "reference_model.pt").read_bytes(),
             "predictions.npy": (lm / "reference_predictions.npy").read_bytes(),
             "generated.npy": (lm / "reference_generated.npy").read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction", "generation"], timeout_s=120)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "internal grader error" not in said, said[:3000]
    quality = {t.line: t for t in result.tests if t.line in QUALITY_LINES.values()}
    # The reference model, graded by what it answered: the forged report neither costs nor earns a point.
    assert set(quality) == set(QUALITY_LINES.values()) and all(t.passed for t in quality.values()), said[:3000]
    assert result.score == result.max_score, [(t.name, t.score, t.output[:200]) for t in result.tests if not t.passed]


# ---------------------------------------------------------------- the one-pass path is for public rows only
# The local grader hands the child the validation targets with the prompts and reads every step's logits
# from outputs/<set>/logits.npy in one go. Under hidden grading, plant_logits_cell.py plants logits.npy
# with logits that put all their mass on the true characters (which a student could only have from a
# leak; the test writes them in). The course's run answers the hidden set step by step
# (autograder/grading/model_reveal_child.py) and never reads a one-pass file, so the attack earns nothing.


def test_a_notebook_that_plants_one_pass_logits_for_the_hidden_rows_gains_nothing(tmp_path):
    import nbformat

    lm = FIXTURES / "lm"
    with np.load(lm / "hidden" / "prediction_test_out.npz") as f:
        targets = f["out"][:, :20]
    nb = nbformat.read(SOLUTIONS / "03_language_model.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(attack_source("plant_logits_cell", TARGETS=json.dumps(targets.tolist()))))
    files = {"03_language_model.ipynb": nbformat.writes(nb), "model.pt": (lm / "reference_model.pt").read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction"], timeout_s=120)
    nll = next(t for t in result.tests if t.line == "nll")
    # Planted logits would give an NLL near 0; the grader scored the model's own answers, step by step.
    figure = re.search(r"prediction NLL (\d+\.\d+) nats/char", nll.output)
    assert figure and float(figure.group(1)) > 0.1, nll.output
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "internal grader error" not in said and "Traceback" not in said, said[:3000]
