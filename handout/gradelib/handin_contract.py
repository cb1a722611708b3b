"""The handin contract, shared by every reader of a handin: which files it holds, which a training run writes, their
shapes and size caps."""

from __future__ import annotations

from .lm.vocab import VOCAB_SIZE

# File name -> what it is, at the top level of handin.tar; what is missing scores 0 with a message saying so.
HANDIN_FILES: dict[str, str] = {
    "attention.py": "Attention class with forward and backward (problem attention)",
    "01_mlm_and_next_token.ipynb": "notebook 1: masked-LM and next-token losses (problem losses)",
    "02_attention_and_masks.ipynb": "notebook 2: attention with causal and padding masks (problem masks)",
    "03_language_model.ipynb": "notebook 3: the language model, predict and generate",
    "predictions.npy": "(128, 20, 30) float logits for prediction_test.npz (problem prediction)",
    "generated.npy": "(128, 30) int token ids generated for generation_test.npz (problem generation)",
    "generated.txt": "the generations as readable text (optional)",
    "model.pt": "the trained model's checkpoint: the language-model lines grade this model (problems prediction, "
                "generation)"}
OPTIONAL = ("generated.txt",)
RUN_FILES = ("predictions.npy", "generated.npy", "generated.txt", "model.pt")  # written by a training run of notebook 3

MAX_FILE_BYTES = 100 * 1024 * 1024  # one file
MAX_TOTAL_BYTES = 200 * 1024 * 1024  # the whole handin once unpacked
# The reference model's float32 checkpoint is 1.4 MB; ten times the parameters still fit.
MAX_CHECKPOINT_BYTES = 32 * 1024 * 1024


def checkpoint_size_problem(size: int) -> str:
    """Why `make handin` and the course grader refuse a model.pt of `size` bytes ('' when they do not)."""
    if size <= MAX_CHECKPOINT_BYTES:
        return ""
    return f"is larger than {MAX_CHECKPOINT_BYTES // 2**20} MB; hand in the model's state_dict saved with torch.save"


PREDICTION_STEPS = 20  # characters predicted after each prompt of prediction_test.npz
GENERATION_STEPS = 30  # characters generated after each prompt of generation_test.npz
PREDICTION_SHAPE = (128, PREDICTION_STEPS, VOCAB_SIZE)  # prediction_test.npz: 128 sequences, 20 steps, logits
GENERATION_SHAPE = (128, GENERATION_STEPS)  # generation_test.npz: 128 prompts, 30 generated ids each
