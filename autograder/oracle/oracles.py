"""The scoring oracle: the interface, its three kinds, and how fixtures/lm/oracle.json picks one.

Interface (any object with this method is an oracle):

    oracle.next_id_probs(ids)   ids (B, T) int64 -> (B, T, 30) float64
        row b, step t: P(next id | ids[b, :t+1]), a distribution over the 30 ids.

    next_char_logprobs(oracle, prefix)   prefix (B, T) -> (B, 30) log-probabilities of the next id.

Prefixes that start with <eos> start at a sentence start. The scorer, not the
oracle, applies the smoothing and the no-special-token rule (metrics.py).

Kinds, named by oracle.json's "oracle": {"kind": ...}:
- "toy_source": the toy-English source itself (exact forward algorithm); its
  beliefs follow the noisy channel with the rubric's eps (see automaton.py).
- "ngram": a character n-gram model file (`path`, relative to fixtures/lm/),
  written by `make fixtures CORPUS=...` for an instructor's corpus.
- "model": a checkpoint of autograder/reference/model.py's CausalLanguageModel (`path`),
  either {"config": ModelConfig fields, "state_dict": ...} or a bare state dict
  with its config in <stem>.json. Chosen on the command line, never by hand:
  `make course CORPUS=... ORACLE=model:PATH` (or `python -m autograder.fixturegen
  --oracle model:PATH`) copies the checkpoint to fixtures/lm/oracle_model.pt and
  names it here; every fixture build rewrites oracle.json, so pass it each time.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from .metrics import Oracle
from .ngram import NGramModel
from .source import ToySource


def next_char_logprobs(oracle: Oracle, prefix: np.ndarray) -> np.ndarray:
    """log P(next id | prefix) for each row. prefix (B, T) -> (B, 30); log 0 = -inf."""
    with np.errstate(divide="ignore"):
        return np.log(oracle.next_id_probs(np.asarray(prefix, dtype=np.int64))[:, -1])


@lru_cache(maxsize=4)
def toy_source(seed: int) -> ToySource:
    return ToySource(seed)


class SourceOracle:
    """The toy source: exact next-id probabilities by the forward algorithm."""

    def __init__(self, seed: int, eps: float):
        self.source = toy_source(seed)
        self.eps = eps
        self.description = f"toy-English source (seed {seed}), exact forward algorithm, channel eps {eps:g}"

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        return self.source.automaton.next_id_probs(ids, eps=self.eps)


class ModelOracle:
    """A CausalLanguageModel checkpoint: softmax of its logits, in float64."""

    def __init__(self, path: Path):
        self.model = load_model(path)
        self.description = f"reference model checkpoint {path.name}"

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            logits = self.model(torch.as_tensor(np.asarray(ids), dtype=torch.long))  # (B, T, 30)
            return torch.softmax(logits.double(), dim=-1).numpy()


def load_model(path: Path):
    """A CausalLanguageModel from a checkpoint: {"config": ..., "state_dict": ...}, or a bare
    state dict whose config is in <path stem>.json (default ModelConfig when there is none)."""
    import torch

    from ..reference.model import CausalLanguageModel, ModelConfig

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(ckpt, dict) and "state_dict" in ckpt:
        config, state = ckpt.get("config", {}), ckpt["state_dict"]
    else:
        sidecar = Path(path).with_suffix(".json")
        config, state = (json.loads(sidecar.read_text()) if sidecar.exists() else {}), ckpt
    model = CausalLanguageModel(ModelConfig(**config))
    model.load_state_dict(state)
    return model.eval()


class NGramOracle:
    def __init__(self, path: Path):
        self.model = NGramModel.load(path)
        self.description = f"order-{self.model.order} character n-gram model {path.name}"

    def next_id_probs(self, ids: np.ndarray) -> np.ndarray:
        return self.model.next_id_probs(ids)


def load_oracle(lm_dir: Path, eps: float) -> Oracle:
    """The oracle that <lm_dir>/oracle.json names."""
    spec = json.loads((Path(lm_dir) / "oracle.json").read_text())["oracle"]
    kind = spec.get("kind")
    if kind == "toy_source":
        return SourceOracle(int(spec["seed"]), eps)
    if kind == "ngram":
        return NGramOracle(Path(lm_dir) / spec["path"])
    if kind == "model":
        return ModelOracle(Path(lm_dir) / spec["path"])
    raise ValueError(f"{lm_dir}/oracle.json: unknown oracle kind {kind!r} (toy_source, ngram or model)")

