"""Deterministic generators of everything under fixtures/: attention, notebook and language-model cases."""
