"""``/v1/search``'s ``"include"``: each hit's document fields (``text``, ``title``), read
from the corpus the server was given (``--corpus``) or, without it, the source the index
records; loaded once, on the first search that asks, and checked against the index's
corpus fingerprint."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError, TTTEmbedError
from tttembed.index.base import Index
from tttembed.serve.wire import ApiError

#: The last corpus read in this process: ``(key, documents)`` (one entry, under a lock).
_LAST: list[tuple[tuple[Any, ...], dict[str, dict[str, str]]]] = []
_LAST_LOCK = threading.Lock()


def _key(index: Index, corpus: str | None) -> tuple[Any, ...]:
    source = corpus or index.manifest.get("corpus_source") or ""
    path = Path(source)
    try:
        stat = path.stat()
        seen: tuple[Any, ...] = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        seen = ()
    return (str(path.resolve()) if source else "", seen,
            index.manifest.get("corpus_fingerprint", ""))


def read_documents(index: Index, corpus: str | None) -> dict[str, dict[str, str]]:
    """The index's documents from ``corpus`` (or the index's recorded source), checked
    against its fingerprint; read once per process for the same file (the start-up check,
    ``include`` and ``--chain``'s passages share it)."""
    from tttembed.ttt.rewards import corpus_for_index

    key = _key(index, corpus)
    with _LAST_LOCK:
        if _LAST and _LAST[0][0] == key:
            return _LAST[0][1]
        docs = corpus_for_index(index, corpus)
        _LAST[:] = [(key, docs)]
        return docs


class Documents:
    """The index's document texts for ``include``, loaded lazily (thread-safe)."""

    def __init__(self, index: Index, corpus: str | None) -> None:
        self.index, self.corpus = index, corpus
        self._docs: dict[str, dict[str, str]] | None = None
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, str]]:
        """The documents, read once (TTTEmbedError/OSError when they cannot be)."""
        with self._lock:
            if self._docs is None:
                self._docs = read_documents(self.index, self.corpus)
            return self._docs

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            return self._read()
        except (TTTEmbedError, OSError) as exc:
            raise ApiError(400, "'include' needs the document texts and this server "
                           f"cannot read them ({' '.join(str(exc).split())}): start "
                           "it with --corpus FOLDER (the BEIR folder or corpus.jsonl "
                           "the index was built from)", param="include",
                           code="no_corpus") from None

    def check(self) -> None:
        """At start, with ``--corpus``: read it now and refuse (a one-line ConfigError) a
        corpus that is not the index's (another fingerprint) or cannot be read, instead
        of failing at the first search that asks for ``include``."""
        if self.corpus is None:
            return
        try:
            self._read()
        except (TTTEmbedError, OSError) as exc:
            raise ConfigError(f"--corpus {self.corpus}: {' '.join(str(exc).split())}; "
                              "`include` needs the documents the index was built from: "
                              "give its BEIR folder or corpus.jsonl, or leave --corpus out "
                              "(the index's recorded source is read)") from None

    def attach(self, data: list[dict[str, Any]], include: Sequence[str]) -> None:
        """Give each result of ``data`` its ``documents``: ``{"id", FIELD...}`` per hit."""
        for item in data:
            item["documents"] = self.fields(item["ids"], include)

    def fields(self, ids: Sequence[str], include: Sequence[str]) -> list[dict[str, str]]:
        """``{"id", FIELD...}`` for each of ``ids`` (``/v1/chain/search``'s ``include``)."""
        docs = self._load()
        return [{"id": d, **{f: docs.get(d, {}).get(f, "") for f in include}} for d in ids]


__all__ = ["Documents", "read_documents"]
