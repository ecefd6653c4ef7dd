"""``bm25`` / ``bm25:PATH``: lexical BM25 (the ``bm25s`` library) as a reward model.

BM25 needs the corpus the candidates come from: pass it as ``corpus=`` (a BEIR dict
``{id: {"title", "text"}}``), or give PATH, a BEIR folder or its ``corpus.jsonl`` (read and
checked by :func:`tttembed.data.beir.load_corpus`). Each document is indexed as
:func:`tttembed.data.beir.doc_text` (``title + " " + text``: the text the embedder sees),
lower-cased, split on ``\\w\\w+``, with bm25s's English stopwords removed; stemmed with
PyStemmer's English stemmer only when the optional ``PyStemmer`` package is installed
(``stemmer="auto"``; ``"none"`` or ``"english"`` to force). The identity carries
:func:`tttembed.data.beir.corpus_fingerprint`, the fingerprint index manifests record.

The reward of ``(q, d)`` is ``BM25(q, d) / max over the whole corpus of BM25(q, .)``
(mapping ``"bm25/query_max"``): per query and independent of which candidates are asked,
so a pair always gets the same reward; 0 when the query matches no document. Documents
are found by ``Item.id``; an id not in the corpus is a DataError. Full-corpus scores of
recent queries are kept in an in-memory LRU cache (``cache_size`` queries).

Options: ``corpus``, ``k1`` (1.5), ``b`` (0.75), ``method`` (``"lucene"``), ``stemmer``,
``cache_size`` (128).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.errors import ConfigError, DataError, MissingDependency
from tttembed.data.beir import corpus_fingerprint, doc_text, load_corpus
from tttembed.score.base import Capabilities, Item, declare

STEMMERS = ("auto", "none", "english")


def _stemmer(kind: str) -> tuple[Any, str]:
    if kind not in STEMMERS:
        raise ConfigError(f"stemmer must be one of {', '.join(STEMMERS)}, got {kind!r}")
    if kind == "none":
        return None, "none"
    try:
        import Stemmer
    except ImportError:
        if kind == "english":
            raise ConfigError("stemmer='english' needs PyStemmer: pip install PyStemmer "
                              "(or use stemmer='none')") from None
        return None, "none"
    return Stemmer.Stemmer("english").stemWords, "english"


class BM25Scorer:
    """Scorer: BM25 of the pair divided by the query's best BM25 over the corpus."""

    mapping = "bm25/query_max"

    def __init__(self, rest: str = "", *,
                 corpus: Mapping[str, Mapping[str, str]] | None = None,
                 k1: float = 1.5, b: float = 0.75, method: str = "lucene",
                 stemmer: str = "auto", cache_size: int = 128) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise MissingDependency("bm25s", "bm25") from exc
        if corpus is None:
            if not rest:
                raise ConfigError("bm25 needs the corpus: pass corpus= or use 'bm25:PATH' "
                                  "with a BEIR folder or corpus.jsonl")
            path = Path(rest)
            corpus = load_corpus(path / "corpus.jsonl" if path.is_dir() else path)
        if not corpus:
            raise DataError("empty corpus: BM25 needs documents", fix="pass a non-empty corpus")
        self._bm25s = bm25s
        self._stem, stem_name = _stemmer(stemmer)
        self.ids = list(corpus)
        self.row = {did: i for i, did in enumerate(self.ids)}
        texts = [doc_text(corpus[d]) for d in self.ids]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self._stem, show_progress=False)
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index(tokens, show_progress=False)
        self.cache_size = max(0, int(cache_size))
        self._cache: OrderedDict[str, tuple[np.ndarray, float]] = OrderedDict()
        self.computed = 0  # full-corpus score computations (cache misses)
        self.spec = f"bm25:{rest}" if rest else "bm25"
        custom = (k1, b, method) != (1.5, 0.75, "lucene")
        self.identity = identity(self.spec, corpus=corpus_fingerprint(corpus), stem=stem_name,
                                 k1=f"{k1:g}" if custom else None,
                                 b=f"{b:g}" if custom else None,
                                 method=method if custom else None)

    def query_scores(self, text: str) -> tuple[np.ndarray, float]:
        """Raw BM25 of the query against every corpus document, and their maximum."""
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        self.computed += 1
        (terms,) = self._bm25s.tokenize([text], stopwords="en", stemmer=self._stem,
                                        return_ids=False, show_progress=False)
        ids = self.retriever.get_tokens_ids(list(terms))
        if ids:
            scores = np.asarray(self.retriever.get_scores_from_ids(ids), dtype=np.float32)
        else:
            scores = np.zeros(len(self.ids), dtype=np.float32)
        entry = (scores, float(scores.max(initial=0.0)))
        if self.cache_size:
            self._cache[text] = entry
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return entry

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        rows = []
        for d in docs:
            row = self.row.get(d.id)
            if row is None:
                raise DataError(f"document id {d.id!r} is not in the BM25 corpus",
                                fix="build the bm25 scorer on the corpus the candidates come from")
            rows.append(row)
        scores, top = self.query_scores(query.text)
        if top <= 0 or not rows:
            return np.zeros(len(rows), dtype=np.float64)
        out = scores[np.asarray(rows, dtype=np.int64)].astype(np.float64) / top
        return np.clip(out, 0.0, 1.0)


@declare(Capabilities(needs_corpus=True))
def from_spec(rest: str, **options: Any) -> BM25Scorer:
    return BM25Scorer(rest, **options)
