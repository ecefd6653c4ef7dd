"""Wiring for the chain retriever: data, the frozen passage index, encoders, state texts.

This is the I/O edge; ``states``, ``search`` and ``analysis`` stay pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.chain.states import StateTexts, TokenBudget
from tttembed.data.chains import Chain
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.core.errors import ConfigError, StateMismatch

DEFAULT_MAX_SEQ_LENGTH = 256


@dataclass(frozen=True)
class ChainTask:
    """Questions of one split mapped onto index rows."""

    chains: list[Chain]
    golds: list[list[int]]          # gold rows in chain order, per question
    passages: list[str]             # doc_text of each index row

    @property
    def questions(self) -> list[str]:
        return [c.question for c in self.chains]

    @property
    def max_hops(self) -> int:
        return max((c.hops for c in self.chains), default=0)

    def subset(self, n: int | None) -> ChainTask:
        if n is None or n >= len(self.chains):
            return self
        return ChainTask(self.chains[:n], self.golds[:n], self.passages)


def open_or_build_index(corpus: dict[str, dict[str, str]], index_dir: str | os.PathLike[str],
                        embedder: Any, progress: Callable[[int], None] | None = None) -> Any:
    """Open the passage index at ``index_dir`` (checked against the corpus and embedder),
    or build it there with the frozen embedder (through the embedding cache)."""
    from tttembed.data.beir import corpus_fingerprint
    from tttembed.embed.cache import cached
    from tttembed.index.store import build_index, open_index

    path = Path(index_dir)
    if not path.exists():
        build_index(corpus, cached(embedder), path, progress=progress)
    handle = open_index(path, expected_identity=embedder.identity)
    if handle.manifest.get("corpus_fingerprint") != corpus_fingerprint(corpus):
        raise StateMismatch(f"index {path} was built from another corpus; pass another "
                            "--index folder or delete this one")
    return handle


def chain_task(chains: Sequence[Chain], corpus: dict[str, dict[str, str]], doc_ids: list[str]
               ) -> ChainTask:
    from tttembed.data.beir import doc_text

    row = {d: i for i, d in enumerate(doc_ids)}
    missing = [d for c in chains for d in c.chain if d not in row]
    if missing:
        raise StateMismatch(f"gold passage {missing[0]!r} is not in the index; rebuild the "
                            "index from this dataset's corpus")
    passages = [doc_text(corpus[d]) for d in doc_ids]
    return ChainTask(list(chains), [[row[d] for d in c.chain] for c in chains], passages)


def frozen_embedder(spec: str = DEFAULT_EMBEDDER) -> Any:
    """The frozen passage/query embedder (tttembed Embedder) used for the index; passages
    are encoded at the model's own max_seq_length (states are cut to their budget before
    they reach any encoder)."""
    from tttembed.embed import get_embedder

    if not spec.startswith("st:"):
        raise ConfigError(f"the chain retriever needs an 'st:' embedder, got {spec!r}")
    return get_embedder(spec)


def state_texts(task: ChainTask, model: Any, max_seq_length: int) -> StateTexts:
    return StateTexts(task.questions, task.passages,
                      budget=TokenBudget.for_model(model, max_seq_length))


def index_search(handle: Any) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    return lambda Q, k: handle.search(Q, k)


def frozen_encode(embedder: Any) -> Callable[[list[str]], np.ndarray]:
    return lambda texts: embedder.encode(texts, "query")


__all__ = ["ChainTask", "DEFAULT_MAX_SEQ_LENGTH", "chain_task", "frozen_embedder",
           "frozen_encode", "index_search", "open_or_build_index", "state_texts"]
