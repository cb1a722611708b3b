"""Helpers the tests share: repository paths and grading a handin made of files, as the course grader does.

Imported like any module (`from support import ...`); conftest.py keeps only pytest fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.batch.worker import grade_hidden
from autograder.isolation import Limits
from gradelib.results import SubmissionResult

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
SOLUTIONS = REPO / "solutions"
HANDOUT = REPO / "handout"


def fixtures_corpus() -> tuple[bool, str]:
    """(whether fixtures/lm/ holds the default toy-English corpus, what it holds in words), from oracle.json."""
    info = json.loads((FIXTURES / "lm" / "oracle.json").read_text())
    if "corpus" in info:
        return False, f"{info['corpus']['path']} ({info['corpus']['kind']} text, {info['oracle']['kind']} oracle)"
    return True, "toy English"


TOY_ENGLISH, CORPUS_NAME = fixtures_corpus()
# Tests of facts of the default corpus (its exact source, its sizes, margins measured on it). With fixtures
# built from an instructor's corpus (`make course CORPUS=...`) they are skipped, saying why; every other
# test runs on whatever fixtures exist.
toy_english_only = pytest.mark.skipif(
    not TOY_ENGLISH, reason=f"toy-English specific: the fixtures come from another corpus, {CORPUS_NAME}")


def grade_files(
    tmp_path: Path,
    files: dict[str, str | bytes],
    *,
    visibilities: tuple[str, ...] = ("public", "hidden"),
    only: list[str] | None = None,
    timeout_s: float = 30.0,
    memory_mb: int = 3072,
) -> SubmissionResult:
    """Grade a handin folder made of `files` (name -> text or bytes) on the fixtures."""
    sub = tmp_path / "handin"
    sub.mkdir(exist_ok=True)
    for name, data in files.items():
        (sub / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return grade_hidden(
        sub,
        case_root=FIXTURES,
        visibilities=visibilities,
        only=only,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb),
    )


def scores_by_test(result: SubmissionResult) -> dict[str, float]:
    return {t.name: t.score for t in result.tests}


def child_module(name: str):
    """A script of gradelib/child/ imported as a module (they import their siblings by name)."""
    import importlib.util
    import sys

    folder = REPO / "gradelib" / "child"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


# Notebook 3's function lines, by the title prefix of their tests -> a short name.
LM_LINES = {
    (
        "prediction: predict(): raw logits of each step after the greedy picks of the earlier steps; "
        "the model's mode restored"
    ): "predict",
    (
        "generation: generate(): greedy by default and at temperature 0, never <eos>/<pad>; "
        "the model's mode restored"
    ): "greedy",
    "generation: generate(): temperature, top_k (ties kept) and top_p (the crossing token kept) sampling": "sampling",
    (
        "prediction: collate(): shifted inputs and targets padded with <pad>; "
        "lm_loss(): mean NLL over non-<pad> targets"
    ): "collate_loss",
    (
        "prediction: CausalSelfAttention: masked multi-head attention on fixed weights, "
        "outputs unchanged by later inputs"
    ): "attention",
    "prediction: CausalLanguageModel on fixed weights (causal, eval mode), weight tying, embedding_dropout": "model",
}


def function_scores(result) -> dict[tuple[str, str], float]:
    """(line, visibility) -> fraction earned, for the lines that grade notebook 3's functions."""
    out = {}
    for t in result.tests:
        line = LM_LINES.get(t.name.rsplit(" [", 1)[0])
        if line:
            out[(line, t.visibility)] = t.score / t.max_score
    return out
