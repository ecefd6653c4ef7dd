"""Fine-tuning the embedder on judged triplets: what a search engineer would do instead of
learning query-side states, run here so the two can be measured on the same pairs.

Two modes, one loss (sentence-transformers' ``MultipleNegativesRankingLoss`` with a hard
negative: each query's positive against every positive and hard negative of its batch,
cosine similarities times ``scale``, cross-entropy at its own positive):

- ``query-lora``: a LoRA adapter (``peft``, the chain retriever's
  :class:`~tttembed.chain.encoder.LoraQueryEncoder`) on the query side only; the passages
  are encoded once by the frozen model, as the index holds them, so the index is unchanged;
- ``full``: every weight of the model, both sides (the corpus must be re-embedded and
  re-indexed with the result).

Deterministic for a seed on the CPU: the batches are a seeded permutation of the triplets
in their given order, and torch's generator is seeded before the model is touched, so the
same triplets (in memory or read back from an exported file) give the same weights.
Settings are one frozen :class:`TuneSettings`; they are fixed before any test question is
seen (``benchmarks/bench_finetune.py`` records them with its results).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tttembed.chain.encoder import (
    LoraQueryEncoder,
    LoraSettings,
    load_base_model,
    sentence_vectors,
)
from tttembed.core.errors import ConfigError, DataError
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.tune.pairs import Triplet

log = logging.getLogger(__name__)
MODES = ("query-lora", "full")


@dataclass(frozen=True)
class TuneSettings:
    """A fine-tune's settings. The defaults are sentence-transformers' for a full
    fine-tune (lr 2e-5, 10% linear warm-up, MNRL scale 20) and the chain retriever's for
    the adapter (lr 2e-4, rank 8 on query/key/value), one epoch each."""

    mode: str = "full"
    epochs: int = 1
    batch_size: int = 16
    lr: float = 2e-5
    warmup: float = 0.1
    scale: float = 20.0
    max_seq_length: int = 256
    seed: int = 0
    base: str = DEFAULT_EMBEDDER
    lora: LoraSettings = field(default_factory=LoraSettings)

    def check(self) -> TuneSettings:
        if self.mode not in MODES:
            raise ConfigError(f"unknown fine-tune mode {self.mode!r}; known: {', '.join(MODES)}")
        for name in ("epochs", "batch_size", "max_seq_length"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"fine-tune {name} must be at least 1")
        if not (self.lr > 0 and self.scale > 0 and 0 <= self.warmup < 1):
            raise ConfigError("fine-tune lr and scale must be positive, warmup in [0, 1)")
        return self

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora"]["target_modules"] = list(self.lora.target_modules)
        if self.mode != "query-lora":
            d.pop("lora")
        return d


#: the adapter's defaults (the chain retriever's learning rate)
QUERY_LORA = TuneSettings(mode="query-lora", lr=2e-4)
FULL = TuneSettings(mode="full")


@dataclass
class Tuned:
    """A fine-tuned model: ``model`` (a SentenceTransformer; ``encoder`` the
    LoraQueryEncoder around it for ``query-lora``), the losses per step, seconds spent."""

    settings: TuneSettings
    model: Any
    encoder: LoraQueryEncoder | None
    losses: list[float]
    train_s: float

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit float32 query vectors from the tuned query side."""
        if self.encoder is not None:
            return self.encoder.encode(texts)
        return _encode(self.model, texts, batch_size)


def _encode(model: Any, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    from tttembed.core.devices import use_threads

    use_threads()
    vecs = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vecs, dtype=np.float32)


def batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The rows of each batch of one epoch: a permutation seeded by (seed, epoch)."""
    order = np.random.default_rng([int(seed), int(epoch)]).permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def mnrl(q: Any, docs: Any, scale: float) -> Any:
    """MultipleNegativesRankingLoss: q (b, d) and docs (2b, d) unit vectors, positives
    first then negatives; row i's label is column i."""
    import torch

    logits = scale * q @ docs.T
    return torch.nn.functional.cross_entropy(logits, torch.arange(q.shape[0]))


def fine_tune(rows: Sequence[Triplet], settings: TuneSettings, *,
              passages: Mapping[str, np.ndarray] | None = None,
              progress: Callable[[int, int, float], None] | None = None) -> Tuned:
    """Train on ``rows`` (see the module doc); ``progress(step, steps, loss)`` after each
    optimizer step. ``passages`` (``query-lora``): the frozen model's unit vector of each
    passage text, e.g. read from the index that holds them (the texts it lacks are
    encoded)."""
    import torch

    from tttembed.core.devices import use_threads

    s = settings.check()
    rows = list(rows)
    if not rows:
        raise DataError("no triplets to fine-tune on: the judged pairs hold no positive with "
                        "a judged negative (lower --threshold, or judge more pairs)")
    use_threads()
    torch.manual_seed(s.seed)
    model = load_base_model(s.base, max_seq_length=s.max_seq_length)
    encoder = None
    frozen: dict[str, Any] = {}
    if s.mode == "query-lora":
        frozen = _frozen(model, rows, passages or {})
        torch.manual_seed(s.seed)
        encoder = LoraQueryEncoder(model, lora=s.lora, trainable=True)
        params = encoder.trainable_parameters()
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=s.lr)
    plan = [b for e in range(s.epochs) for b in batches(len(rows), s.batch_size, s.seed, e)]
    warm = max(1, math.ceil(s.warmup * len(plan)))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda i: min((i + 1) / warm, max(0.0, (len(plan) - i) / max(1, len(plan) - warm))))
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    for step, idx in enumerate(plan):
        batch = [rows[int(i)] for i in idx]
        loss = _step_loss(model, encoder, frozen, batch, s.scale)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, len(plan), losses[-1])
    model.eval()
    return Tuned(s, model, encoder, losses, time.perf_counter() - t0)


def _frozen(model: Any, rows: Sequence[Triplet], given: Mapping[str, np.ndarray]
            ) -> dict[str, Any]:
    """Every passage text's frozen vector (a torch tensor): given, else encoded."""
    import torch

    texts = list(dict.fromkeys(t for r in rows for t in (r.positive, r.negative)))
    todo = [t for t in texts if t not in given]
    vecs = dict(zip(todo, _encode(model, todo))) if todo else {}
    return {t: torch.from_numpy(np.asarray(given[t] if t in given else vecs[t],
                                           dtype=np.float32)) for t in texts}


def _step_loss(model: Any, encoder: LoraQueryEncoder | None, frozen: dict[str, Any],
               batch: Sequence[Triplet], scale: float) -> Any:
    import torch

    docs = [r.positive for r in batch] + [r.negative for r in batch]
    if encoder is not None:
        q = encoder.forward([r.anchor for r in batch])
        d = torch.stack([frozen[t] for t in docs])
    else:
        q = sentence_vectors(model, [r.anchor for r in batch])
        d = sentence_vectors(model, docs)
    return mnrl(q, d, scale)


__all__ = ["FULL", "MODES", "QUERY_LORA", "TuneSettings", "Tuned", "batches", "fine_tune",
           "mnrl"]
