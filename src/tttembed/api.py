"""The Python API: what users script against, and all the CLI's library calls. Re-exports
only: every function lives in its own module (``ttt/`` the pipeline, ``evaluation/`` the
harness, ``chain/`` chain retrieval, ``integrations/`` MTEB), and nothing in the library
imports this module (the apps, ``cli/``, sit above it).

    >>> import tttembed as tt
    >>> index = tt.index_corpus("data/scifact", "idx/scifact")          # bundled MiniLM
    >>> state = tt.learn(index, "data/scifact", scorer="bm25", scope="task", budget=10)
    >>> state.save("vectors.npz")
    >>> result = tt.search(index, "data/scifact", states=[tt.load_state("vectors.npz")])
    >>> result.applied, result.to_run()

``queries`` everywhere may be a ``{qid: text}`` dict, a query file (.jsonl/.tsv/.txt), a
BEIR folder (its ``split``'s queries and judgments), or a list of them (one task each).
Importing this module is light: torch, transformers and faiss load when first needed.
"""

from __future__ import annotations

from tttembed.adapt.state import AdaptState, load_state
from tttembed.chain.api import chain_eval, chain_search, chain_train
from tttembed.core.errors import (
    BackendError,
    ConfigError,
    DataError,
    MissingDependency,
    StateMismatch,
    TTTEmbedError,
)
from tttembed.core.http import HttpLimits
from tttembed.embed.base import Embedder
from tttembed.embed.cache import load_embedder
from tttembed.evaluation.api import evaluate
from tttembed.execute.config import Ray
from tttembed.index.base import Index
from tttembed.index.search import SearchResult, read_run, write_run
from tttembed.integrations.mteb import mteb_model
from tttembed.metrics.ranking import per_query_metric, run_metrics
from tttembed.metrics.stats import compare
from tttembed.score.base import Scorer
from tttembed.ttt.index import index_corpus, open_index
from tttembed.ttt.learn import learn
from tttembed.ttt.rerank import rerank
from tttembed.ttt.scorer import load_scorer
from tttembed.ttt.search import search

__all__ = ["AdaptState", "BackendError", "ConfigError", "DataError", "Embedder", "HttpLimits",
           "Index", "MissingDependency", "Ray", "Scorer", "SearchResult", "StateMismatch", "TTTEmbedError",
           "chain_eval", "chain_search", "chain_train", "compare", "evaluate", "index_corpus",
           "learn", "load_embedder", "load_scorer", "load_state", "mteb_model", "open_index",
           "per_query_metric", "read_run", "rerank", "run_metrics", "search", "write_run"]
