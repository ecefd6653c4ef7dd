"""A reward scorer as the API builds it: from its spec, given the corpus it needs (from
the argument or the index's manifest), wrapped in the paid-pair ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tttembed.index.base import Index
from tttembed.score.base import Scorer
from tttembed.ttt.corpus import CorpusArg, read_corpus
from tttembed.types import PathLike


def load_scorer(spec: str, *, index: Index | None = None, corpus: CorpusArg | None = None,
                ledger: PathLike | None = None, cache_dir: PathLike | None = None,
                use_ledger: bool = True, **options: Any) -> Scorer:
    """A reward scorer from the same spec strings as the CLI (``bm25``, ``qrels:PATH``,
    ``qwen3-reranker:PATH``, ``cross-encoder:PATH``, ``llm:MODEL@URL``, or a third-party
    scheme), given the corpus when it needs one (from ``corpus`` or the ``index``'s
    manifest), wrapped in the paid-pair ledger when its rewards are cacheable.

        >>> scorer = tt.load_scorer("bm25", index=index)
    """
    from tttembed.score.base import capabilities
    from tttembed.score.build import build_scorer
    from tttembed.ttt.rewards import corpus_for_index

    docs = None
    if capabilities(spec).needs_corpus and "corpus" not in options:
        if index is not None:
            docs = corpus_for_index(index, corpus)
        elif corpus is not None:
            docs = read_corpus(corpus)[0]
    return build_scorer(spec, docs, ledger_path=ledger, cache_dir=cache_dir,
                        use_ledger=use_ledger, **options)


def scorer_for(scorer: Scorer | str, index: Index, corpus: Mapping[str, Any]) -> Scorer:
    """``scorer`` itself, or the scorer of its spec over ``corpus``."""
    return load_scorer(scorer, index=index, corpus=corpus) if isinstance(scorer, str) \
        else scorer
