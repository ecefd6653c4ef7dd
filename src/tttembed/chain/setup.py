"""Wiring for the chain retriever: data, the frozen passage index, encoders, state texts.

This is the I/O edge; ``states``, ``search`` and ``analysis`` stay pure. Light at import
time: models and FAISS are loaded by the functions that need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tttembed.chain.forms import DEFAULT_MAX_SEQ_LENGTH, TEXT, form_passages, row_titles
from tttembed.chain.search import Encode
from tttembed.chain.states import StateTexts, TokenBudget
from tttembed.core.errors import ConfigError, StateMismatch
from tttembed.core.progress import Advance, Progress
from tttembed.data.chains import Chain
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.types import PathLike

if TYPE_CHECKING:
    from tttembed.embed.st import SentenceTransformerEmbedder
    from tttembed.index.base import Index



@dataclass(frozen=True)
class ChainTask:
    """Questions of one split mapped onto index rows."""

    chains: list[Chain]
    golds: list[list[int]]          # gold rows in chain order, per question
    passages: list[str]             # doc_text of each index row
    titles: Sequence[str] = ()      # the title of each index row (the entity state's)

    @property
    def questions(self) -> list[str]:
        return [c.question for c in self.chains]

    @property
    def max_hops(self) -> int:
        return max((c.hops for c in self.chains), default=0)

    def subset(self, n: int | None) -> ChainTask:
        if n is None or n >= len(self.chains):
            return self
        return ChainTask(self.chains[:n], self.golds[:n], self.passages, self.titles)

    def state_passages(self, form: str = TEXT) -> Sequence[str]:
        """The passages a state of ``form`` re-reads (:mod:`tttembed.chain.forms`)."""
        return form_passages(self.passages, self.titles, form)


@dataclass(frozen=True)
class Loaded:
    """A split of a multi-hop dataset, its frozen passage index and the frozen embedder."""

    task: ChainTask
    index: Index
    embedder: SentenceTransformerEmbedder


def lazy_stage(progress: Progress | None, name: str, total: int | None) -> Advance | None:
    """An Advance that opens the stage on its first call (nothing shown when the stage never
    does any work, e.g. an index that is only opened); None without ``progress``."""
    if progress is None:
        return None
    opened: list[Advance] = []

    def advance(n: int) -> None:
        if not opened:
            opened.append(progress(name, total))
        opened[0](n)

    return advance


def load(data: PathLike, split: str,
         index_dir: PathLike | None, *, embedder: str = DEFAULT_EMBEDDER,
         max_questions: int | None = None, progress: Progress | None = None) -> Loaded:
    """Dataset split + frozen passage index (opened, or built under ``index_dir``, default
    ``<cache>/chain-index/<dataset name>``, through the embedding cache when absent)."""
    from tttembed.core.paths import cache_dir
    from tttembed.data.chains import load_multihop
    from tttembed.embed.cache import cached
    from tttembed.index.store import open_or_build

    if max_questions is not None and max_questions < 1:
        raise ConfigError("max_questions (--max-questions) must be at least 1")
    corpus, chains = load_multihop(Path(data), split)
    emb = frozen_embedder(embedder)
    if index_dir is None:
        index_dir = cache_dir() / "chain-index" / Path(data).resolve().name
    handle = open_or_build(corpus, index_dir, cached(emb),
                           progress=lazy_stage(progress, "embedding passages", len(corpus)),
                           source=str(data))
    return Loaded(chain_task(chains, corpus, handle.doc_ids).subset(max_questions), handle, emb)


def chain_task(chains: Sequence[Chain], corpus: dict[str, dict[str, str]], doc_ids: list[str]
               ) -> ChainTask:
    from tttembed.data.beir import doc_text

    row = {d: i for i, d in enumerate(doc_ids)}
    missing = [d for c in chains for d in c.chain if d not in row]
    if missing:
        raise StateMismatch(f"gold passage {missing[0]!r} is not in the index; rebuild the "
                            "index from this dataset's corpus")
    passages = [doc_text(corpus[d]) for d in doc_ids]
    return ChainTask(list(chains), [[row[d] for d in c.chain] for c in chains], passages,
                     row_titles(corpus, doc_ids))


def frozen_embedder(spec: str = DEFAULT_EMBEDDER) -> SentenceTransformerEmbedder:
    """The frozen passage/query embedder (tttembed Embedder) used for the index; passages
    are encoded at the model's own max_seq_length (states are cut to their budget before
    they reach any encoder)."""
    from tttembed.embed import get_embedder
    from tttembed.embed.st import SentenceTransformerEmbedder

    if not spec.startswith("st:"):
        raise ConfigError(f"the chain retriever needs an 'st:' embedder, got {spec!r}")
    emb = get_embedder(spec)
    if not isinstance(emb, SentenceTransformerEmbedder):
        raise ConfigError(f"the chain retriever needs a sentence-transformers embedder, "
                          f"got {spec!r}")
    return emb


def state_texts(task: ChainTask, model: Any, max_seq_length: int,
                form: str = TEXT) -> StateTexts:
    """State texts of the task's questions in ``form``, cut to the token budget of
    ``model`` (a SentenceTransformer)."""
    return StateTexts(task.questions, task.state_passages(form),
                      budget=TokenBudget.for_model(model, max_seq_length))


def frozen_encode(embedder: SentenceTransformerEmbedder) -> Encode:
    """The frozen model's query side as an ``Encode`` (texts -> unit vectors)."""

    def encode(texts: list[str]) -> np.ndarray:
        return embedder.encode(texts, "query")

    return encode


__all__ = ["DEFAULT_MAX_SEQ_LENGTH", "ChainTask", "Loaded", "chain_task", "frozen_embedder",
           "frozen_encode", "lazy_stage", "load", "state_texts"]
