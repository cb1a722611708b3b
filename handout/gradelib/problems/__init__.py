"""The problems, by rubric id: each module's grade(ctx, problem) -> list[TestResult]."""

from . import attention, generation, lm_model, notebook_functions, prediction
from .notebook_functions import SPECS

GRADERS = {"attention": attention.grade, "losses": notebook_functions.grade, "masks": notebook_functions.grade,
           "prediction": prediction.grade, "generation": generation.grade}
# The handin file each problem runs and how many runs it makes when the file is there (notebook 3: the trained model,
# which both language-model problems share, then the functions on fixed weights): grade.py starts no session for one.
RUNS = {"attention": (attention.FILENAME, 1), **{pid: (spec.notebook, 1) for pid, spec in SPECS.items()},
        "prediction": (lm_model.NOTEBOOK, 2), "generation": (lm_model.NOTEBOOK, 2)}
# Problems whose runs are made once per case set (public, hidden): handin_runs.by_visibility.
PER_CASE_SET = {"attention", "losses", "masks"}
