"""The problems, by rubric id: each module's grade(ctx, problem) -> list[TestResult]."""

from . import attention, generation, lm_model, losses, masks, prediction

_MODULES = {"attention": attention, "losses": losses, "masks": masks, "prediction": prediction,
            "generation": generation}
GRADERS = {pid: module.grade for pid, module in _MODULES.items()}
# What each problem can grade: the rubric is checked against these when it is loaded.
SCHEMAS = {pid: module.SCHEMA for pid, module in _MODULES.items()}
# The handin file whose code each problem runs in the sandbox, and how many runs it makes when the file is there
# (notebook 3: the trained model, which both language-model problems share, then the functions on fixed weights).
# A submission with a single run to make gains nothing from a template process: grade.py starts none for it.
RUNS = {
    "attention": (attention.FILENAME, 1),
    "losses": (losses.SPEC.notebook, 1),
    "masks": (masks.SPEC.notebook, 1),
    "prediction": (lm_model.NOTEBOOK, 2),
    "generation": (lm_model.NOTEBOOK, 2),
}
# Problems whose runs are made once per case set (public, hidden): handin_runs.by_visibility.
PER_CASE_SET = {"attention", "losses", "masks"}
