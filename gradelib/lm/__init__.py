"""The language-model helpers that ship: the character vocabulary, the scoring metrics, the fixed-weight models."""
