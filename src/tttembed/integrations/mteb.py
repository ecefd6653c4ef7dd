"""An adapted (or raw) retriever as an MTEB 2.x model: MTEB's own evaluator on our vectors.

Queries (``prompt_type="query"``) are encoded by the base embedder and then moved by the
learned states, ``unit(x + alpha v)`` with the most specific state per query (the same
:func:`tttembed.adapt.apply_states` that ``tttembed.api.search`` uses); documents are the
base embedder's own vectors. Without states it is the raw retriever. Similarity is the
inner product, as in our indexes (all vectors are unit length, so it equals the cosine).

    >>> import mteb
    >>> import tttembed as tt
    >>> model = tt.mteb_model("st:bundled:all-MiniLM-L6-v2", states=["task.npz"],
    ...                       task="scifact")       # the task name the state was learned under
    >>> result = mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=None)
    >>> result.task_results[0].get_score()          # nDCG@10 (SciFact's main score)

Which state applies to which MTEB query: a global state to every query; a task-wise state
when its key equals ``task`` (default: the MTEB task's name, ``/`` replaced by ``_``, the
name ``tttembed eval mteb:NAME`` gives the task); a query-wise state by task and query text
(:func:`tttembed.adapt.scopes.query_key`; MTEB's query ids are not compared). An ``encode`` call of queries that no state reaches is an error
(``require_match=False`` leaves them raw instead, for runs over several tasks).
``model.applied`` counts the queries each state reached.

Task instruction prompts of MTEB's metadata are not applied: queries and documents get the
embedder's own prompts (``query_prompt`` / ``document_prompt`` options), as in our indexes.
The model's ``mteb_model_meta`` names it ``tttembed/<embedder>-raw|adapted`` with a revision
that hashes the embedder identity and the states, so that MTEB's result cache never mixes
two states' results.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.adapt.apply import apply_states, lookup_keys, state_owners
from tttembed.adapt.state import AdaptState, StateLike, load_states
from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder
from tttembed.index.base import Index

__all__ = ["MTEBModel", "mteb_model"]


def _require_mteb() -> Any:
    try:
        import mteb
    except ImportError:
        raise MissingDependency("mteb", "mteb") from None
    return mteb


def _revision(embedder: Embedder, states: Sequence[AdaptState], task: str | None) -> str:
    """A content hash of what the model computes (embedder identity, task, states)."""
    h = hashlib.sha256(f"{embedder.identity}\0{task or ''}\0".encode())
    for st in states:
        h.update(f"{st.scope}\0{'|'.join(st.keys)}\0".encode())
        h.update(np.ascontiguousarray(st.vectors, dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(st.alpha, dtype=np.float64).tobytes())
    return ("adapted-" if states else "raw-") + h.hexdigest()[:12]


def _model_meta(embedder: Embedder, states: Sequence[AdaptState], task: str | None,
                name: str | None) -> Any:
    """MTEB's ``ModelMeta`` (the fields every mteb 2.x requires; unknown ones None)."""
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder.identity).strip("_") or "embedder"
    return ModelMeta(
        loader=None, name=name or f"tttembed/{slug}-{'adapted' if states else 'raw'}",
        revision=_revision(embedder, states, task), release_date=None, languages=None,
        n_parameters=None, memory_usage_mb=None, max_tokens=None,
        embed_dim=int(embedder.dim), license=None, open_weights=None,
        public_training_code=None, public_training_data=None, framework=[],
        similarity_fn_name=ScoringFunction("dot"), use_instructions=False,
        training_datasets=None, modalities=["text"])


def _is_query(prompt_type: Any) -> bool:
    return getattr(prompt_type, "value", prompt_type) == "query"


class MTEBModel:
    """An MTEB encoder (``mteb.models.EncoderProtocol``): adapted queries, raw documents.

    ``embedder``: the base embedder (a :class:`tttembed.embed.base.Embedder`);
    ``states``: states or state files (``vectors.npz``) learned with that embedder, none for
    the raw retriever; ``task``: the task key task-wise states are looked up by (default:
    each MTEB task's name); ``name``: the model name MTEB records.
    """

    def __init__(self, embedder: Embedder, states: StateLike | Sequence[StateLike] = (), *,
                 task: str | None = None, name: str | None = None,
                 require_match: bool = True) -> None:
        _require_mteb()
        self.embedder = embedder
        self.states = load_states(states, embedder.identity, int(embedder.dim))
        self.task = task
        self.require_match = require_match
        self.applied = [0] * len(self.states)
        self.mteb_model_meta = _model_meta(embedder, self.states, task, name)

    def encode(self, inputs: Iterable[Mapping[str, Any]], *, task_metadata: Any = None,
               hf_split: str = "", hf_subset: str = "", prompt_type: Any = None,
               **kwargs: Any) -> np.ndarray:
        """Encode MTEB's batches (``{"text": [...], "id": [...]}``): queries adapted."""
        texts: list[str] = []
        for batch in inputs:
            texts.extend(str(t) for t in batch["text"])
        if not texts:
            return np.zeros((0, int(self.embedder.dim)), np.float32)
        query = _is_query(prompt_type)
        x = self.embedder.encode(texts, "query" if query else "document")
        if not query or not self.states:
            return x
        task = self.task or str(getattr(task_metadata, "name", "") or "_").replace("/", "_")
        return self.adapt(x, texts, task)

    def adapt(self, x: np.ndarray, texts: Sequence[str], task: str) -> np.ndarray:
        """``unit(x + alpha v)`` per query text (query-wise states match by text)."""
        n = len(x)
        if len(texts) != n:
            raise ConfigError(f"{len(texts)} query texts for {n} query vectors")
        keys: dict[str, Sequence[str | None]] = dict(
            lookup_keys(self.states, texts, [task] * n))
        owner, _ = state_owners(keys, self.states, n)
        counts = np.bincount(owner[owner >= 0], minlength=len(self.states))
        if self.require_match and not counts.any():
            labels = ", ".join(f"{st.label} ({st.scope}-wise, tasks "
                               f"{', '.join(st.tasks[:3])})" for st in self.states)
            raise ConfigError(f"no state applies to the {n} queries of MTEB task {task!r}: "
                              f"{labels}; pass task=NAME (the task the state was learned "
                              "under), or require_match=False to leave them raw")
        self.applied = [a + int(c) for a, c in zip(self.applied, counts)]
        return apply_states(x, keys, self.states)

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
        """Inner products, ``[n1, n2]`` (a torch tensor, as MTEB expects)."""
        from mteb.similarity_functions import dot_score

        return dot_score(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Any:
        """Inner products of corresponding rows, ``[n]``."""
        from mteb.similarity_functions import pairwise_dot_score

        return pairwise_dot_score(embeddings1, embeddings2)

    def __repr__(self) -> str:
        return (f"MTEBModel({self.embedder.identity!r}, states={len(self.states)}, "
                f"task={self.task!r})")


def mteb_model(embedder: Embedder | str | None = None, *,
               states: StateLike | Sequence[StateLike] = (), index: Index | None = None,
               task: str | None = None, name: str | None = None,
               require_match: bool = True) -> MTEBModel:
    """An MTEB 2.x model (:class:`MTEBModel`) for MTEB's own evaluator: queries encoded
    by ``embedder`` and moved by ``states`` (the most specific state per query, as
    ``search``), documents raw; no states = the raw retriever. ``embedder``: an Embedder
    or a spec (default: the one recorded in ``index``, else the bundled MiniLM); ``task``:
    the task name task-wise states were learned under (default: the MTEB task's name).
    Needs ``pip install 'tttembed[mteb]'``.

        >>> import mteb
        >>> model = tt.mteb_model(index=index, states=["vectors.npz"], task="scifact")
        >>> result = mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=None)
    """
    from tttembed.embed.cache import load_embedder
    from tttembed.index.embedder import index_embedder

    if index is not None and not isinstance(embedder, str):
        emb = index_embedder(index, embedder)
    else:
        emb = load_embedder(embedder) if isinstance(embedder, str) else \
            embedder or load_embedder(DEFAULT_EMBEDDER)
    return MTEBModel(emb, states, task=task, name=name, require_match=require_match)
