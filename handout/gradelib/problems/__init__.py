"""The problems, by rubric id: each module's grade(ctx, problem) -> list[TestResult]."""

from . import attention, generation, lm_model, notebook_functions, prediction
from .notebook_functions import SPECS

GRADERS = {"attention": attention.grade, "losses": notebook_functions.grade, "masks": notebook_functions.grade,
           "prediction": prediction.grade, "generation": generation.grade}
# The handin file each problem runs and how many runs it makes per case set at most when the file is there (notebook 3:
# the trained model, which both language-model problems share, then the functions): grade.py starts no session for one.
RUNS = {"attention": (attention.FILENAME, 1), **{pid: (spec.notebook, 1) for pid, spec in SPECS.items()},
        "prediction": (lm_model.NOTEBOOK, 2), "generation": (lm_model.NOTEBOOK, 2)}


def graded(problems: dict, only=None) -> dict:
    """The rubric's `problems` (id -> Problem, in its order) this kit grades; those in `only` if given."""
    return {pid: p for pid, p in problems.items() if pid in GRADERS and (not only or pid in only)}
