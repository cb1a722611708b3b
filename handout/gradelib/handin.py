"""What a handin holds: the one list that `make handin`, the local autograder and the grader share."""

from __future__ import annotations

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
    "model.pt": "the trained model's checkpoint (optional)",
}
