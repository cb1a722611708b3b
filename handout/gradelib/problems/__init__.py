"""The problems, by rubric id: each module's grade(ctx, problem) -> list[TestResult]."""

from . import attention, generation, losses, masks, prediction

GRADERS = {
    "attention": attention.grade,
    "losses": losses.grade,
    "masks": masks.grade,
    "prediction": prediction.grade,
    "generation": generation.grade,
}
# What each problem can grade: the rubric is checked against these when it is loaded.
SCHEMAS = {
    "attention": attention.SCHEMA,
    "losses": losses.SCHEMA,
    "masks": masks.SCHEMA,
    "prediction": prediction.SCHEMA,
    "generation": generation.SCHEMA,
}
