"""The handin contract: which files a handin holds, which a training run writes, their shapes and size caps.

Shared by every reader of a handin: `make handin` (handin.py), the note on missing files (grade.py), the
problems that read the language-model arrays, and the course grader's reader of uploads.
"""

from __future__ import annotations

from .lm.vocab import EOS, PAD, VOCAB_SIZE

# File name -> what it is. All live at the top level of handin.tar; a handin
# may lack some, and what is missing scores 0 with a message saying so.
HANDIN_FILES: dict[str, str] = {
    "attention.py": "Attention class with forward and backward (problem attention)",
    "01_mlm_and_next_token.ipynb": "notebook 1: masked-LM and next-token losses (problem losses)",
    "02_attention_and_masks.ipynb": "notebook 2: attention with causal and padding masks (problem masks)",
    "03_language_model.ipynb": "notebook 3: the language model, predict and generate",
    "predictions.npy": "(128, 20, 30) float logits for prediction_test.npz (problem prediction)",
    "generated.npy": "(128, 30) int token ids generated for generation_test.npz (problem generation)",
    "generated.txt": "the generations as readable text (optional)",
    "model.pt": "the trained model's checkpoint: the language-model lines grade this model (problems prediction, "
                "generation)",
}
OPTIONAL = ("generated.txt",)
RUN_FILES = ("predictions.npy", "generated.npy", "generated.txt", "model.pt")  # written by a training run of notebook 3

# Size caps: one file, and the whole handin once unpacked.
MAX_FILE_BYTES = 100 * 1024 * 1024
MAX_TOTAL_BYTES = 200 * 1024 * 1024
# The reference model's float32 checkpoint is 1.4 MB; ten times the parameters still fit.
MAX_CHECKPOINT_BYTES = 32 * 1024 * 1024


def checkpoint_size_problem(size: int, cap: int = MAX_CHECKPOINT_BYTES) -> str:
    """Why `make handin` and the course grader refuse a model.pt of `size` bytes ('' when they do not)."""
    if size > cap:
        return f"is larger than {cap // 2**20} MB; hand in the model's state_dict saved with torch.save"
    return ""

# The language-model arrays: ids 0 and 1 are <eos> and <pad>, 30 tokens in all.
SPECIAL_IDS = {EOS: "<eos>", PAD: "<pad>"}
PREDICTION_STEPS = 20  # characters predicted after each prompt of prediction_test.npz
GENERATION_STEPS = 30  # characters generated after each prompt of generation_test.npz
PREDICTION_SHAPE = (128, PREDICTION_STEPS, VOCAB_SIZE)  # prediction_test.npz: 128 sequences, 20 steps, logits
GENERATION_SHAPE = (128, GENERATION_STEPS)  # generation_test.npz: 128 prompts, 30 generated ids each
