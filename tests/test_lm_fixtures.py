"""The language-model fixtures: reproducible, covered by the manifest, and buildable from an
instructor's corpus (plain text or transcript rows) whose oracle scores through the same interface."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from autograder.fixturegen import lm_fixtures
from autograder.fixturegen.checksums import NAME as MANIFEST
from autograder.grading import model_quality
from autograder.oracle import metrics as M
from autograder.oracle.corpus import load as load_corpus
from autograder.oracle.oracles import ModelOracle, NGramOracle, load_oracle
from autograder.oracle.source import ToySource
from autograder.oracle.text import encode
from gradelib.lm.vocab import EOS, VOCAB_SIZE
from gradelib.rubric import load as load_rubric

from support import FIXTURES, toy_english_only

pytestmark = pytest.mark.slow

LM_OUTPUTS = (
    "train.txt", "valid.txt", "prediction.npz", "prediction_test.npz", "generation_test.npz",
    "hidden/prediction_test_out.npz", "oracle.json",
)


@toy_english_only
def test_fixtures_regenerate_byte_identically(tmp_path, capsys):
    lm_fixtures.write(tmp_path)
    printed = capsys.readouterr().out
    assert "entropy rate 0.646" in printed and "lm/train.txt: 50000 sentences" in printed
    for rel in LM_OUTPUTS:
        assert (tmp_path / "lm" / rel).read_bytes() == (FIXTURES / "lm" / rel).read_bytes(), rel


def test_fixture_rows_start_at_sentence_starts_and_hide_prediction_targets():
    pred = np.load(FIXTURES / "lm" / "prediction.npz")
    assert pred["inp"].shape == (128, 30) and pred["out"].shape == (128, 20) and pred["inp"].dtype == np.int64
    test = np.load(FIXTURES / "lm" / "prediction_test.npz")
    assert sorted(test.files) == ["inp"]
    gen = np.load(FIXTURES / "lm" / "generation_test.npz")["inp"]
    assert gen.shape == (128, 40)
    for inp in (pred["inp"], test["inp"], gen):
        assert np.all(inp[:, 0] == EOS) and inp.min() >= 0 and inp.max() < VOCAB_SIZE and not np.any(inp == 1)


def test_manifest_lists_every_fixture_with_its_checksum():
    lines = (FIXTURES / MANIFEST).read_text().splitlines()
    listed = {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in lines}
    present = {p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*") if p.is_file() and p.name != MANIFEST}
    assert set(listed) == present, "run `make fixtures` to refresh fixtures/MANIFEST.sha256"
    for rel, digest in listed.items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == digest, rel


@pytest.fixture(scope="module")
def sentences():
    return ToySource(0).sample_sentences(2500, np.random.default_rng(42))


def plain_text(sentences: list[str]) -> str:
    """Book-like text: mixed case, punctuation, digits, an accent, paragraphs, a curly apostrophe."""
    parts = []
    for i, s in enumerate(sentences):
        s = s.capitalize().replace("'", "\u2019" if i % 2 else "'")
        parts.append(s + (". " if i % 3 else "! ") + ("\n\n" if i % 7 == 0 else ""))
        if i % 100 == 0:
            parts.append("(Chapter 12 -- caf\u00e9.) ")
    return "".join(parts)


def transcript_rows(sentences: list[str]) -> str:
    return "".join("<eos> " + " ".join("<space>" if c == " " else c for c in s) + " <eos>\n" for s in sentences)


@pytest.mark.parametrize("kind", ["plain", "transcript"])
def test_instructor_corpus_builds_fixtures_and_an_ngram_oracle(tmp_path, sentences, kind, capsys):
    path = tmp_path / f"corpus_{kind}.txt"
    path.write_text(plain_text(sentences) if kind == "plain" else transcript_rows(sentences), encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.kind == kind
    if kind == "plain":
        assert corpus.dropped["1"] == 25 and corpus.dropped["\u00c9"] == 25 and corpus.dropped["("] == 25
        assert "CHAPTER CAF" in corpus.sentences
    else:
        assert not corpus.dropped
    assert set(sentences) <= set(corpus.sentences)

    out = tmp_path / "fixtures"
    lm_fixtures.write(out, path)
    printed = capsys.readouterr().out
    assert f"corpus ({kind})" in printed and "oracle" in printed
    lm = out / "lm"
    train = (lm / "train.txt").read_text().splitlines()
    assert train and all(encode(s) for s in train)
    assert np.load(lm / "prediction.npz")["out"].shape == (128, 20)
    info = json.loads((lm / "oracle.json").read_text())
    assert info["oracle"]["kind"] == "ngram" and info["corpus"]["kind"] == kind
    oracle = load_oracle(lm, 1e-3)
    assert isinstance(oracle, NGramOracle)
    gen_inp = np.load(lm / "generation_test.npz")["inp"]
    probs = oracle.next_id_probs(gen_inp)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-12)

    # Rerunning on the same corpus changes no byte.
    first = {p.name: p.read_bytes() for p in lm.rglob("*") if p.is_file()}
    lm_fixtures.write(out, path)
    assert first == {p.name: p.read_bytes() for p in lm.rglob("*") if p.is_file()}

    # The grader scores generations against these fixtures with the n-gram oracle it loads for them.
    greedy = M.oracle_greedy_generation(oracle, gen_inp, 30)
    settings = load_rubric()["generation"].settings
    scored, why = model_quality._score(out / "lm", settings, gen_inp, greedy)
    assert why == "" and scored[0] <= settings["full_credit_perplexity"], (scored, why)


def test_model_checkpoint_serves_as_oracle_through_the_same_interface(tmp_path):
    torch = pytest.importorskip("torch")
    model_mod = pytest.importorskip("autograder.reference.model")
    torch.manual_seed(0)
    cfg = model_mod.ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=128)
    model = model_mod.CausalLanguageModel(cfg).eval()
    path = tmp_path / "tiny.pt"
    torch.save({"config": model_mod.config_dict(cfg), "state_dict": model.state_dict()}, path)
    (tmp_path / "oracle.json").write_text(json.dumps({"oracle": {"kind": "model", "path": "tiny.pt"}}))
    oracle = load_oracle(tmp_path, 1e-3)
    assert isinstance(oracle, ModelOracle)
    ids = np.random.default_rng(0).integers(2, VOCAB_SIZE, size=(4, 12))
    ids[:, 0] = EOS
    with torch.no_grad():
        expected = torch.softmax(model(torch.as_tensor(ids)).double(), dim=-1).numpy()
    np.testing.assert_allclose(oracle.next_id_probs(ids), expected, rtol=1e-6, atol=1e-9)
    tok = M.generation_token_nll(oracle, ids[:, :8], ids[:, 8:], 1e-3)
    assert tok.shape == (4, 4) and np.all(np.isfinite(tok))
