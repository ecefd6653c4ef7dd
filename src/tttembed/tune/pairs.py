"""Judged pairs as training rows: what the ledger paid for, in a form a fine-tune reads.

Pure: records in, records out (no file, no model). Two layouts:

- a **pair** (:class:`JudgedPair`): one judged (query, document) with its reward on [0, 1],
  the judge or feedback it came from (``source``) and whether that source is trusted
  (people's labels, an audited judge; ``None`` where the source cannot say, e.g. a bare
  ledger);
- a **triplet** (:class:`Triplet`): ``(anchor, positive, negative)``, the columns
  sentence-transformers' trainers read for ``MultipleNegativesRankingLoss`` with a hard
  negative. A positive is a pair whose reward is at least ``threshold``; its negative is
  one of the same query's judged pairs below it (never a positive's document, nor a
  positive's text under another id; each of them was retrieved in the query's top
  candidates, so each is a hard negative), taken in turn so that every judged negative
  is used before one is used twice. A positive whose query has no judged negative is left
  out (:attr:`Triplets.without_negative` counts them).

The order is deterministic (queries by id, documents by id): the same pairs give the same
rows, so a fine-tune fed the exported file equals one fed the pairs in memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tttembed.core.errors import DataError

#: the reward at or above which a judged document is a positive (rewards are on [0, 1])
THRESHOLD = 0.5
PAIR_KEYS = ("query_id", "query", "doc_id", "doc_text", "reward", "source", "trusted")
TRIPLET_KEYS = ("anchor", "positive", "negative")


@dataclass(frozen=True)
class JudgedPair:
    query_id: str
    query: str
    doc_id: str
    doc_text: str
    reward: float
    source: str
    trusted: bool | None = None

    def row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PAIR_KEYS}


@dataclass(frozen=True)
class Triplet:
    anchor: str
    positive: str
    negative: str

    def row(self) -> dict[str, str]:
        return {"anchor": self.anchor, "positive": self.positive, "negative": self.negative}


@dataclass(frozen=True)
class Triplets:
    rows: tuple[Triplet, ...]
    threshold: float
    positives: int
    without_negative: int


def check_threshold(threshold: float) -> float:
    t = float(threshold)
    if not 0.0 < t <= 1.0:
        raise DataError(f"reward threshold must be in (0, 1], got {threshold!r} (rewards are "
                        "on [0, 1]; 0.5 splits a binary judge's answers)")
    return t


def by_query(pairs: Iterable[JudgedPair]) -> dict[str, list[JudgedPair]]:
    """The pairs of each query id, documents by id; a (query, document) judged twice by
    different sources keeps both."""
    out: dict[str, list[JudgedPair]] = defaultdict(list)
    for p in pairs:
        out[p.query_id].append(p)
    return {q: sorted(ps, key=lambda p: (p.doc_id, p.source)) for q, ps in sorted(out.items())}


def triplets(pairs: Iterable[JudgedPair], threshold: float = THRESHOLD) -> Triplets:
    """(query, positive, hard negative) rows from judged pairs (see the module doc)."""
    t = check_threshold(threshold)
    rows: list[Triplet] = []
    positives = lonely = 0
    for group in by_query(pairs).values():
        pos = _unique([p for p in group if p.reward >= t])
        ids, texts = {p.doc_id for p in pos}, {p.doc_text for p in pos}
        neg = _unique([p for p in group if p.reward < t and p.doc_id not in ids
                       and p.doc_text not in texts])
        positives += len(pos)
        if not neg:
            lonely += len(pos)
            continue
        for i, p in enumerate(pos):
            rows.append(Triplet(p.query, p.doc_text, neg[i % len(neg)].doc_text))
    return Triplets(tuple(rows), t, positives, lonely)


def _unique(pairs: list[JudgedPair]) -> list[JudgedPair]:
    """One pair per document (the first by source order)."""
    seen: dict[str, JudgedPair] = {}
    for p in pairs:
        seen.setdefault(p.doc_id, p)
    return list(seen.values())


def pair_from_row(row: Mapping[str, Any]) -> JudgedPair:
    """A pair from an exported JSONL row (the keys :data:`PAIR_KEYS`)."""
    missing = [k for k in PAIR_KEYS if k not in row]
    if missing:
        raise DataError(f"a pair row lacks {', '.join(missing)} (rows of 'tttembed pairs "
                        "export' carry every key)")
    trusted = row["trusted"]
    return JudgedPair(str(row["query_id"]), str(row["query"]), str(row["doc_id"]),
                      str(row["doc_text"]), float(row["reward"]), str(row["source"]),
                      None if trusted is None else bool(trusted))


def triplet_from_row(row: Mapping[str, Any]) -> Triplet:
    """A triplet from an exported JSONL row (``anchor``, ``positive``, ``negative``)."""
    missing = [k for k in TRIPLET_KEYS if not isinstance(row.get(k), str)]
    if missing:
        raise DataError(f"a triplet row lacks the text of {', '.join(missing)} (rows of "
                        "'tttembed pairs export --format triplets' carry all three)")
    return Triplet(row["anchor"], row["positive"], row["negative"])


__all__ = ["PAIR_KEYS", "THRESHOLD", "TRIPLET_KEYS", "JudgedPair", "Triplet", "Triplets",
           "by_query", "check_threshold", "pair_from_row", "triplet_from_row", "triplets"]
