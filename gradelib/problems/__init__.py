"""The problems, by rubric id: each module's grade(ctx, problem) -> list[TestResult]."""

from . import attention, generation, losses, masks, prediction

GRADERS = {
    "attention": attention.grade,
    "losses": losses.grade,
    "masks": masks.grade,
    "prediction": prediction.grade,
    "generation": generation.grade,
}
