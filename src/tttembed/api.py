"""The Python API: what users script against, and all the CLI calls.

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

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tttembed.adapt.crossval import parse_alpha
from tttembed.adapt.scopes import SCOPES
from tttembed.adapt.state import AdaptState
from tttembed.adapt.state import load_state as _load_state
from tttembed.chain.api import chain_eval, chain_search, chain_train
from tttembed.chain.regimes import REGIMES
from tttembed.core.errors import (
    BackendError,
    ConfigError,
    DataError,
    MissingDependency,
    StateMismatch,
    TTTEmbedError,
)
from tttembed.core.http import http_options
from tttembed.core.progress import Progress, stage
from tttembed.demo.run import DemoResult, export_demo, run_demo
from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder
from tttembed.evaluation.api import compare, evaluate, per_query_metric, run_metrics
from tttembed.evaluation.results import EvalReport
from tttembed.evaluation.stats import Comparison
from tttembed.index.search import SearchResult, read_run, write_run
from tttembed.index.store import IndexHandle as Index
from tttembed.score.base import Scorer
from tttembed.serve import ServeConfig, create_app, run_server
from tttembed.ttt.queries import QuerySet, QuerySource

__all__ = ["DEFAULT_EMBEDDER", "REGIMES", "SCOPES", "AdaptState", "BackendError",
           "Comparison", "ConfigError", "DataError", "DemoResult", "EvalReport", "Index",
           "MissingDependency", "Progress", "SearchResult", "StateMismatch", "TTTEmbedError",
           "chain_eval", "chain_search", "chain_train", "compare", "embedder_for_index",
           "export_demo",
           "evaluate", "http_options", "index_corpus", "learn", "load_embedder", "load_scorer", "load_state", "mteb_model",
           "open_index", "per_query_metric", "read_run", "rerank", "run_demo", "run_metrics", "search", "write_run",
           "ServeConfig", "create_app", "run_server", "parse_alpha"]

Queries = QuerySource | Sequence[QuerySource]
PathLike = str | os.PathLike[str]


def load_embedder(spec: str = DEFAULT_EMBEDDER, *, cache: bool = True,
                  cache_dir: PathLike | None = None, **options: Any) -> Embedder:
    """An embedder from its spec (``st:...``, ``openai:MODEL@URL``), wrapped in the
    content-addressed embedding cache unless ``cache=False``. ``options`` go to the backend
    (``query_prompt``, ``document_prompt``, ``dimensions`` ...).

        >>> emb = tt.load_embedder()                     # the bundled all-MiniLM-L6-v2
        >>> emb.encode(["a question"], "query").shape
        (1, 384)
    """
    from tttembed.embed.cache import load_embedder as _load

    return _load(spec, cache=cache, cache_dir=cache_dir, **options)


def index_corpus(data: PathLike | Mapping[str, Mapping[str, str]], out: PathLike, *,
                 embedder: Embedder | str | None = None, index_type: str = "flat",
                 index_params: Mapping[str, int] | None = None, overwrite: bool = False,
                 progress: Progress | None = None, executor: str = "local",
                 ray_address: str | None = None, store_text: bool = False) -> Index:
    """Embed a corpus (a BEIR folder, a corpus.jsonl file, or a ``{id: {title, text}}``
    dict) and write an index folder with its manifest; returns the opened index.
    ``store_text=True`` keeps each document's text in a ``milvus:``/``qdrant:`` collection.
    ``executor="ray"`` embeds the documents not yet cached on Ray Data first
    (:mod:`tttembed.execute`; ``ray_address``: a cluster, default a local Ray).

        >>> index = tt.index_corpus("data/scifact", "idx/scifact")
        >>> len(index), index.dim
        (5183, 384)
    """
    from tttembed.data.beir import load_corpus
    from tttembed.index.base import is_db_spec
    from tttembed.index.store import build_index
    from tttembed.index.store import open_index as _open

    emb = embedder if embedder is not None and not isinstance(embedder, str) \
        else load_embedder(embedder or DEFAULT_EMBEDDER)
    if isinstance(data, Mapping):
        corpus, source = {k: dict(v) for k, v in data.items()}, "<dict>"
    else:
        path = Path(data)
        corpus, source = load_corpus(path / "corpus.jsonl" if path.is_dir() else path), str(path)
    if executor != "local":
        from tttembed.execute.embed import prefill_corpus

        prefill_corpus(emb, corpus, executor=executor, ray_address=ray_address)
    build_index(corpus, emb, out, index_type=index_type,
                index_params=dict(index_params or {}), overwrite=overwrite,
                progress=stage(progress, "embedding corpus", len(corpus)),
                write_progress=(stage(progress, "writing vectors", len(corpus))
                                if is_db_spec(out) else None),
                extra={"embedder_options": dict(getattr(emb, "options", {}) or {}),
                       "corpus_source": source}, store_text=store_text)
    return _open(out, expected_identity=emb.identity)


def open_index(path: PathLike, *, embedder: Embedder | None = None) -> Index:
    """Open an index folder; with ``embedder``, refuse one built by another embedder.

        >>> index = tt.open_index("idx/scifact")
    """
    from tttembed.index.store import open_index as _open

    if embedder is None:
        return _open(path)
    return _open(path, expected_identity=embedder.identity, expected_dim=int(embedder.dim))


def embedder_for_index(index: Index, *, cache: bool = True,
                       cache_dir: PathLike | None = None, **options: Any) -> Embedder:
    """The embedder recorded in an index manifest (spec + vector options), rebuilt; it
    knows the index's dimension before its first call (every vector is checked against
    it before it is cached). ``options`` add backend settings that do not change the
    vectors (``timeout``, ``max_retries`` for HTTP embedders).

        >>> emb = tt.embedder_for_index(tt.open_index("idx/scifact"))
    """
    options = {**dict(index.manifest.get("embedder_options") or {}), **options}
    emb = load_embedder(index.manifest["embedder_spec"], cache=cache, cache_dir=cache_dir,
                        expected_dim=index.dim, **options)
    if emb.identity != index.identity:
        raise StateMismatch(f"rebuilt embedder {emb.identity!r} does not match the index's "
                            f"{index.identity!r}")
    return emb


def _embedder(index: Index, embedder: Embedder | None) -> Embedder:
    if embedder is None:
        return embedder_for_index(index)
    if embedder.identity != index.identity or int(embedder.dim) != index.dim:
        raise StateMismatch(f"index {index.path} was built with {index.identity!r} "
                            f"(dim {index.dim}); got embedder {embedder.identity!r}")
    return embedder


def load_scorer(spec: str, *, index: Index | None = None,
                corpus: PathLike | Mapping[str, Mapping[str, str]] | None = None,
                ledger: PathLike | None = None, cache_dir: PathLike | None = None,
                use_ledger: bool = True, **options: Any) -> Scorer:
    """A reward scorer from the same spec strings as the CLI (``bm25``, ``qrels:PATH``,
    ``qwen3-reranker:PATH``, ``cross-encoder:PATH``, ``llm:MODEL@URL``, or a third-party
    scheme), given the corpus when it needs one (from ``corpus`` or the ``index``'s
    manifest), wrapped in the paid-pair ledger when its rewards are cacheable.

        >>> scorer = tt.load_scorer("bm25", index=index)
    """
    from tttembed.score.base import capabilities
    from tttembed.ttt.rewards import build_scorer, corpus_for_index

    docs = None
    if capabilities(spec).needs_corpus and "corpus" not in options:
        if index is not None:
            docs = corpus_for_index(index, corpus)
        elif isinstance(corpus, Mapping):
            docs = {k: dict(v) for k, v in corpus.items()}
        elif corpus is not None:
            from tttembed.data.beir import load_corpus

            path = Path(corpus)
            docs = load_corpus(path / "corpus.jsonl" if path.is_dir() else path)
    return build_scorer(spec, docs, ledger_path=ledger, cache_dir=cache_dir,
                        use_ledger=use_ledger, **options)


def _queries(queries: Queries | QuerySet, task: str | Sequence[str] | None,
             split: str | None) -> QuerySet:
    from tttembed.ttt.queries import query_sources

    if isinstance(queries, QuerySet):
        return queries
    return query_sources(queries, task=task, split=split)


def learn(index: Index, queries: Queries, *, scorer: Scorer | str, scope: str = "task",
          budget: float = 10, task: str | Sequence[str] | None = None,
          objective: str = "kd", dry_run: bool = False, split: str = "test", depth: int = 10,
          seed: int = 0, embedder: Embedder | None = None,
          corpus: PathLike | Mapping[str, Mapping[str, str]] | None = None,
          alpha: str | float = "rule", folds: int = 5,
          progress: Progress | None = None, executor: str = "local",
          ray_address: str | None = None, ray_actors: int = 1,
          ray_gpus: float = 0.0) -> AdaptState:
    """Spend ``budget`` rewards per query (on average) on the top candidates of
    ``queries``, paid once through the ledger, and learn one ``scope``'s state.

    ``executor="ray"`` runs the model work on Ray Data (``ray_actors`` replicas with
    ``ray_gpus`` GPUs each, on the cluster at ``ray_address``, default a local Ray): the
    query vectors not yet cached (a local embedder), and the pairs not yet in the ledger
    of a local-model scorer (``cross-encoder:``, ``qwen3-reranker:``), every result
    committed to the same cache and ledger (a rerun pays nothing). HTTP scorers
    (``rerank:``, ``llm:``) and ``qrels`` are scored in this process, with a logged note
    (:mod:`tttembed.execute.score`).

    ``alpha``: ``"rule"`` (``n_g / (n_g + 1)``, the default), a fixed number in [0, 1], or
    ``"auto"``: chosen from {0, 0.1, 0.2, 0.3, 0.5, 0.7, rule} by a ``folds``-fold reward
    cross-validation (0 when no alpha shows a gain on held-out rewarded candidates).
    Unless ``folds`` is 0 that cross-validation runs for every alpha and is reported in
    ``state.crossval`` (gain of each alpha over the raw vectors, with a 95% CI).

    ``state.pairs`` reports requested / cached (served from the ledger) / paid / missing
    pairs. With ``dry_run`` nothing is scored: the state holds no vector, and
    ``state.pairs`` says requested / in_ledger / to_pay.

        >>> state = tt.learn(index, "data/scifact", scorer="bm25", scope="task", budget=10)
        >>> state.pairs
        {'requested': 3000, 'cached': 0, 'paid': 3000, 'missing': 0}
    """
    from tttembed.adapt import check_objective, check_scope
    from tttembed.execute import prepare
    from tttembed.ttt import corpus_for_index
    from tttembed.ttt import learn as run_learn

    check_scope(scope)
    check_objective(objective)
    qs = _queries(queries, task, split)
    docs = corpus_for_index(index, corpus, qs.folder)
    sc = load_scorer(scorer, index=index, corpus=docs) if isinstance(scorer, str) else scorer
    emb = _embedder(index, embedder)
    prepare(sc, executor, ray_address=ray_address, num_actors=ray_actors, num_gpus=ray_gpus,
            embedder=emb, texts=() if dry_run else qs.texts)
    outcome = run_learn(index, emb, qs, docs, sc, scope=scope,
                        avg_budget=budget, depth=depth, objective=objective, seed=seed,
                        dry_run=dry_run, alpha=alpha, folds=folds, progress=progress)
    if outcome.state is not None:
        return outcome.state
    plan = outcome.plan
    pairs = ({"requested": len(plan.pairs), "in_ledger": plan.in_ledger or 0,
              "to_pay": plan.to_pay} if dry_run else outcome.counts)
    import numpy as np

    return AdaptState(scope, (), _empty(index.dim), np.zeros(0), np.zeros(0, np.int64),
                      identity=index.identity, dim=index.dim, objective=objective,
                      pairs=pairs, dry_run=dry_run, budget=len(plan.pairs))


def _empty(dim: int) -> Any:
    import numpy as np

    return np.zeros((0, dim), np.float32)


def load_state(path: PathLike) -> AdaptState:
    """Read a state file (``vectors.npz``) written by ``learn`` / ``AdaptState.save``.

        >>> state = tt.load_state("vectors.npz")
        >>> state.scope, state.keys
        ('task', ('scifact',))
    """
    return _load_state(path)


def search(index: Index, queries: Queries, *, k: int = 100,
           states: Sequence[AdaptState | PathLike] = (),
           task: str | Sequence[str] | None = None, split: str = "test",
           embedder: Embedder | None = None, allow_foreign_state: bool = False,
           batch_size: int = 256, progress: Progress | None = None) -> SearchResult:
    """Search with raw or adapted query vectors (``unit(x + alpha v)``; the most specific
    state wins per query: query > task > global). The index never changes.

    ``result.applied`` maps each state to the number of queries it was applied to; a state
    that applies to none, or was learned on another corpus (unless
    ``allow_foreign_state``), is an error.

        >>> result = tt.search(index, {"q1": "0-dimensional biomaterials"}, k=10)
        >>> adapted = tt.search(index, "data/scifact", states=["vectors.npz"])
    """
    import time

    from tttembed.index.search import encode_queries
    from tttembed.ttt import adapted_search, applied_counts, check_applied, check_states

    loaded = [s if isinstance(s, AdaptState) else _load_state(s) for s in states]
    check_states(loaded, index, allow_foreign=allow_foreign_state)
    qs = _queries(queries, task, split)
    emb = _embedder(index, embedder)
    check_applied(loaded, qs)
    counts = applied_counts(qs, loaded)
    t0 = time.perf_counter()
    x = encode_queries(emb, list(qs.texts), batch_size,
                       progress=stage(progress, "encoding queries", len(qs)))
    t1 = time.perf_counter()
    scores, rows = adapted_search(index, qs, x, loaded, min(int(k), len(index)))
    return SearchResult(qids=list(qs.qids), scores=scores, rows=rows, doc_ids=index.doc_ids,
                        timings={"encode_s": t1 - t0, "search_s": time.perf_counter() - t1},
                        tasks=list(qs.tasks), qrels=dict(qs.qrels),
                        applied=dict(zip(loaded, counts)))


def rerank(index: Index, queries: Queries, *, scorer: Scorer | str, budget: float = 10,
           k: int = 100, depth: int = 10, seed: int = 0,
           task: str | Sequence[str] | None = None, split: str = "test",
           embedder: Embedder | None = None,
           corpus: PathLike | Mapping[str, Mapping[str, str]] | None = None,
           progress: Progress | None = None, executor: str = "local",
           ray_address: str | None = None, ray_actors: int = 1,
           ray_gpus: float = 0.0) -> SearchResult:
    """Direct reranking (the baseline): the same reward plan as ``learn``, rewarded
    candidates sorted by reward inside their original slots. ``executor`` and the
    ``ray_*`` options as for :func:`learn`.

        >>> result = tt.rerank(index, "data/scifact", scorer="bm25", budget=10)
    """
    from tttembed.execute import prepare
    from tttembed.ttt import (
        base_retrieval,
        candidate_depth,
        corpus_for_index,
        make_plan,
        rerank_runs,
        score_pairs,
    )

    qs = _queries(queries, task, split)
    docs = corpus_for_index(index, corpus, qs.folder)
    sc = load_scorer(scorer, index=index, corpus=docs) if isinstance(scorer, str) else scorer
    emb = _embedder(index, embedder)
    prepare(sc, executor, ray_address=ray_address, num_actors=ray_actors, num_gpus=ray_gpus,
            embedder=emb, texts=qs.texts)
    depth_k = max(int(k), candidate_depth(budget, depth, len(index)))
    base = base_retrieval(index, emb, qs, depth_k,
                          progress=stage(progress, "encoding queries", len(qs)))
    plan = make_plan(qs, base, index, budget, depth, seed)
    rewards = score_pairs(plan.pairs, qs, docs, sc,
                          progress=stage(progress, "scoring pairs", len(plan.pairs)))
    runs = rerank_runs(qs, index, base.rows, base.scores, rewards)
    return SearchResult.from_runs(runs, qs.tasks, qs.qids, index.doc_ids, int(k),
                                  qrels=dict(qs.qrels))


def mteb_model(embedder: Embedder | str | None = None, *,
               states: AdaptState | PathLike | Sequence[AdaptState | PathLike] = (),
               index: Index | None = None, task: str | None = None, name: str | None = None,
               require_match: bool = True) -> Any:
    """An MTEB 2.x model (:class:`tttembed.integrations.mteb.MTEBModel`) for MTEB's own
    evaluator: queries encoded by ``embedder`` and moved by ``states`` (the most specific
    state per query, as ``search``), documents raw; no states = the raw retriever.
    ``embedder``: an Embedder or a spec (default: the one recorded in ``index``, else the
    bundled MiniLM); ``task``: the task name task-wise states were learned under (default:
    the MTEB task's name). Needs ``pip install 'tttembed[mteb]'``.

        >>> import mteb
        >>> model = tt.mteb_model(index=index, states=["vectors.npz"], task="scifact")
        >>> result = mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=None)
    """
    from tttembed.integrations.mteb import MTEBModel

    if index is not None and not isinstance(embedder, str):
        emb = _embedder(index, embedder)
    else:
        emb = load_embedder(embedder) if isinstance(embedder, str) else \
            embedder or load_embedder(DEFAULT_EMBEDDER)
    return MTEBModel(emb, states, task=task, name=name, require_match=require_match)
