"""The language-model track: vocabulary, the toy-English source and its exact oracle, n-gram
baselines, scoring metrics, and the reference transformer (model.py)."""
