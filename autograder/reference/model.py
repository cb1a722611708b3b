"""The reference decoder-only transformer language model, its data loader, predict and generate.

A character-level causal language model over the 30-token vocabulary (ids 0..29,
0 = <eos>, 1 = <pad>). Read top to bottom: data -> layers -> model -> predict/generate.
Notebook 3 asks students to build the same pieces; the reference checkpoint
(fixtures/lm/reference_model.pt) is a state dict of `CausalLanguageModel` below.

Shapes: B batch, T time steps, C = d_model channels, nh heads, hs = C // nh, V = 30.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from gradelib.lm.vocab import EOS, PAD, VOCAB_SIZE

# ---------------------------------------------------------------------------- data


def collate(pieces: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream pieces of n+1 ids -> <eos>-shifted (inputs, targets), each (B, T) int64.

    inputs[b] = piece[:-1], targets[b] = piece[1:]: position t is trained to
    predict the token after it. Pieces shorter than the longest are padded on the
    right with <pad>; a <pad> target is ignored by the loss (ignore_index=PAD) and
    a <pad> input sits after every real token, where the causal mask hides it.
    """
    T = max(len(p) for p in pieces) - 1
    inputs = torch.full((len(pieces), T), PAD, dtype=torch.long)
    targets = torch.full((len(pieces), T), PAD, dtype=torch.long)
    for b, p in enumerate(pieces):
        inputs[b, : len(p) - 1] = p[:-1]
        targets[b, : len(p) - 1] = p[1:]
    return inputs, targets


class LMDataLoader:
    """Batches of (inputs, targets) cut from the id stream <eos> s1 <eos> s2 <eos> ...

    Every epoch cuts the stream into pieces of seq_len + 1 ids starting at a new
    random offset and shuffles them, so a piece may begin anywhere in a sentence
    -- as the prompts of the prediction and generation fixtures do -- and the cut
    points move between epochs. Consecutive pieces share one id, so every id after
    the offset is a target once per epoch; the last piece is shorter and padded.
    """

    def __init__(self, stream, batch_size: int, seq_len: int = 96, shuffle: bool = True, seed: int = 0):
        self.stream = torch.as_tensor(stream, dtype=torch.long)  # (N,)
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)
        self.offset = self._next_offset()

    def _next_offset(self) -> int:
        return int(torch.randint(self.seq_len, (1,), generator=self.generator)) if self.shuffle else 0

    def _starts(self) -> range:
        return range(self.offset, len(self.stream) - 1, self.seq_len)

    def __len__(self) -> int:
        return math.ceil(len(self._starts()) / self.batch_size)

    def __iter__(self):
        pieces = [self.stream[s : s + self.seq_len + 1] for s in self._starts()]
        order = torch.randperm(len(pieces), generator=self.generator).tolist() if self.shuffle else range(len(pieces))
        self.offset = self._next_offset()
        order = list(order)
        for k in range(0, len(order), self.batch_size):
            yield collate([pieces[i] for i in order[k : k + self.batch_size]])


# -------------------------------------------------------------------------- layers


@dataclass
class ModelConfig:
    vocab_size: int = VOCAB_SIZE
    max_len: int = 256  # longest input the positional encoding covers
    d_model: int = 96
    n_heads: int = 4
    n_layers: int = 3
    d_ff: int = 384
    dropout: float = 0.05  # on attention weights and on each residual branch
    emb_dropout: float = 0.05  # fraction of vocabulary rows dropped from the input embedding


class PositionalEncoding(nn.Module):
    """Fixed sinusoids: PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(same)."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        t = torch.arange(max_len).unsqueeze(1)  # (max_len, 1)
        freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (C/2,)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(t * freq)
        pe[:, 1::2] = torch.cos(t * freq)
        # Not a parameter and not saved: it is a function of the config.
        self.register_buffer("pe", pe, persistent=False)  # (max_len, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"input has {T} time steps; the model's max_len is {self.pe.size(0)}")
        return x + self.pe[:T]  # (B, T, C)


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention: position t attends to positions <= t only."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_heads == 0
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        causal = torch.tril(torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)  # (max_len, max_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_heads
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_heads, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, hs).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, T)
        att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_drop(self.proj(y))


class FeedForward(nn.Module):
    """Position-wise two-layer MLP: Linear -> ReLU -> Linear."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff),
            nn.ReLU(),
            nn.Linear(cfg.d_ff, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # (B, T, C)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + Attn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))  # (B, T, C)
        return x + self.ffn(self.ln2(x))  # (B, T, C)


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Drop whole rows of the (V, C) embedding matrix, scale the kept ones by 1/(1-p).

    Every occurrence of a dropped token in the batch loses its embedding in the
    same forward pass (Gal & Ghahramani, 2016), unlike dropout on activations.
    """
    if not training or p == 0.0:
        return weight
    keep = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)  # (V, 1)
    return weight * keep  # (V, C)


# --------------------------------------------------------------------------- model


class CausalLanguageModel(nn.Module):
    """Decoder-only transformer: tokens (B, T) -> next-token logits (B, T, V).

    logits[b, t] scores the token that follows inp[b, :t+1]; it never depends on
    inp[b, t+1:].
    """

    def __init__(self, cfg: ModelConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or ModelConfig()
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_encoder = PositionalEncoding(cfg.d_model, cfg.max_len)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Weight tying: the output layer scores a token by its input embedding.
        self.fc.weight = self.token_embedding.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        weight = embedding_dropout(self.token_embedding.weight, self.cfg.emb_dropout, self.training)
        # The embedding is scaled by sqrt(C) so the tied, small-initialised weights are
        # not drowned by the unit-size positional encoding.
        x = F.embedding(inp, weight) * math.sqrt(self.cfg.d_model)  # (B, T, C)
        x = self.drop(self.pos_encoder(x))  # (B, T, C)
        for layer in self.layers:
            x = layer(x)  # (B, T, C)
        return self.fc(self.ln_f(x))  # (B, T, V)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def config_dict(cfg: ModelConfig) -> dict:
    """The config as the plain dict a checkpoint stores: {"config": config_dict(cfg), "state_dict": ...}."""
    return asdict(cfg)


# ------------------------------------------------------------- predict and generate


@torch.no_grad()
def predict(model: nn.Module, inp, timesteps: int) -> torch.Tensor:
    """Raw next-token logits for `timesteps` steps after each prompt.

    inp: (B, T) int token ids. Returns (B, timesteps, V) float logits where step t
    is the model's output at the last position of inp followed by its own greedy
    (argmax over all V tokens) picks for steps 0..t-1.
    """
    was_training = model.training
    model.eval()
    x = torch.as_tensor(inp, dtype=torch.long)  # (B, T)
    steps = []
    for _ in range(timesteps):
        logits = model(x)[:, -1, :]  # (B, V): the distribution of the next token
        steps.append(logits)
        x = torch.cat([x, logits.argmax(dim=-1, keepdim=True)], dim=1)  # (B, T+1)
    model.train(was_training)
    return torch.stack(steps, dim=1).float()  # (B, timesteps, V)


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Logits (B, V) -> scaled logits with excluded tokens at -inf, in this order:

    1. <eos> and <pad> are excluded (generation has a fixed length);
    2. divide by the temperature;
    3. top_k: keep the k highest remaining tokens;
    4. top_p: keep the smallest set of most probable tokens whose probabilities sum to >= top_p.
    """
    logits = logits.float().clone()
    logits[:, [EOS, PAD]] = float("-inf")
    logits = logits / temperature
    if top_k is not None:
        k = max(1, min(int(top_k), logits.size(-1) - 2))
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = F.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # (B, V): mass of the tokens ranked above
        drop_sorted = mass_before >= top_p  # the first token always survives (mass_before = 0)
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def generate(
    model: nn.Module,
    inp,
    timesteps: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend each prompt by `timesteps` tokens, never <eos> or <pad>.

    inp: (B, T) int token ids. Returns (B, timesteps) int64 ids.
    temperature == 0 (the default) is greedy: the highest-scoring allowed token.
    temperature > 0 samples from softmax(logits / temperature) after the top_k /
    top_p filters of `filter_logits`.
    """
    was_training = model.training
    model.eval()
    x = torch.as_tensor(inp, dtype=torch.long)  # (B, T)
    out = []
    for _ in range(timesteps):
        logits = model(x)[:, -1, :]  # (B, V)
        if temperature == 0:
            next_id = filter_logits(logits, 1.0, top_k, top_p).argmax(dim=-1)  # (B,)
        else:
            probs = F.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)  # (B, V)
            next_id = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
        out.append(next_id)
        x = torch.cat([x, next_id.unsqueeze(1)], dim=1)  # (B, T+1)
    model.train(was_training)
    return torch.stack(out, dim=1)  # (B, timesteps)
