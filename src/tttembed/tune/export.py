"""Judged pairs out of where the project keeps them, as :class:`~tttembed.tune.pairs.JudgedPair`
records with their texts, and written as JSONL (``tttembed pairs export``).

Two sources, told apart by what they hold (:func:`judged_kind`):

- the **reward ledger** (:mod:`tttembed.score.ledger`, a SQLite file with the tables
  ``specs`` and ``rewards``): every pair a scorer was paid for, keyed by the sha256 of the
  query text and of the document text. The texts come back from a BEIR folder: a query
  digest is matched against the text of each query of ``queries.jsonl``, a document digest
  against :func:`tttembed.data.beir.doc_text` of each document of ``corpus.jsonl`` (title
  and text joined by a space: the text the learner embeds, scores and so digests). The
  ``source`` of a pair is the ledger's scorer key (the scorer's identity or spec);
  ``trusted`` is None (a ledger cannot say). A pair recorded without a reward (the scorer
  returned nan) is left out and counted (:attr:`Exported.missing`); one whose query or
  document is not in the folder is counted too (:attr:`Exported.unresolved`). A text
  held under two ids (ArguAna has documents of one text under two ids) gives one pair,
  under the first id in file order.
- the closed loop's **feedback store** (:mod:`tttembed.loop.store`, a SQLite file with a
  ``searches`` table, or a ``postgresql://`` URL): the judge's rewards (``rewards``, with
  their ``source`` and ``trusted``), and when asked people's labels (``feedback``: source
  ``label``, trusted) and the debiased click rewards (``click_rewards``: their ``source``
  and ``trusted``). A row names its document by id: the text is the folder's corpus; the
  query's id is the folder's id of that exact text, else the text's digest
  (:func:`tttembed.loop.rows.query_hash`). A (query text, document, source) stored under
  several tasks (or labelled in several searches) gives one pair, its latest row.

Nothing here writes to a source: the ledger is opened read-only, and only a file already
holding a store's tables is opened as a store.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.core.io import atomic_file, refuse_existing, text_digest
from tttembed.data.beir import LAYOUT, doc_text, load_beir_queries, load_corpus
from tttembed.loop.rows import Store, query_hash
from tttembed.score.ledger import SCHEMA_VERSION, sqlite_problem
from tttembed.tune.pairs import (
    THRESHOLD,
    JudgedPair,
    Triplet,
    Triplets,
    check_threshold,
    triplet_from_row,
    triplets,
)
from tttembed.types import PathLike

#: The layouts ``tttembed pairs export --format`` writes.
PAIR_FORMATS = ("pairs", "triplets")
#: The source of people's labels (the store's ``feedback`` table).
LABEL_SOURCE = "label"
_URL_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_HEADER = b"SQLite format 3\x00"
_WHAT = ("give a reward ledger, ledger.sqlite in the cache folder or learn's --ledger file, "
         "or a feedback store, a registry's loop.sqlite or its postgresql:// URL")


@dataclass(frozen=True)
class PairTexts:
    """A BEIR folder's texts, by id and by digest (the first id of a repeated text)."""

    folder: Path
    queries: dict[str, str]
    corpus: dict[str, dict[str, str]]

    @classmethod
    def load(cls, folder: PathLike, *, need_queries: bool = True) -> PairTexts:
        """``folder``'s corpus.jsonl and queries.jsonl (without ``need_queries`` an absent
        queries.jsonl is no queries)."""
        root = Path(folder)
        if not root.is_dir():
            raise DataError("is not a folder", path=root,
                            fix=f"--data takes the BEIR folder the pairs were judged on; "
                                f"{LAYOUT}")
        has_queries = (root / "queries.jsonl").is_file()
        queries = load_beir_queries(root / "queries.jsonl") if has_queries or need_queries \
            else {}
        return cls(root, queries, load_corpus(root / "corpus.jsonl"))

    @cached_property
    def query_by_digest(self) -> dict[bytes, tuple[str, str]]:
        out: dict[bytes, tuple[str, str]] = {}
        for qid, text in self.queries.items():
            out.setdefault(text_digest(text), (qid, text))
        return out

    @cached_property
    def doc_by_digest(self) -> dict[bytes, tuple[str, str]]:
        out: dict[bytes, tuple[str, str]] = {}
        for did, doc in self.corpus.items():
            text = doc_text(doc)
            out.setdefault(text_digest(text), (did, text))
        return out

    @cached_property
    def query_ids(self) -> dict[str, str]:
        """``{text: id}``, the first id of a repeated text."""
        out: dict[str, str] = {}
        for qid, text in self.queries.items():
            out.setdefault(text, qid)
        return out

    def query_id(self, text: str) -> str:
        """The folder's id of this exact query text, else the text's store digest."""
        return self.query_ids.get(text) or query_hash(text)


@dataclass(frozen=True)
class Exported:
    """The judged pairs of one source, in a deterministic order (query id, document id,
    source); ``unresolved`` judged pairs whose query or document is not in the folder,
    ``missing`` pairs recorded without a reward (both left out)."""

    pairs: tuple[JudgedPair, ...]
    origin: str
    kind: str
    unresolved: int = 0
    missing: int = 0

    def by_source(self) -> dict[str, int]:
        """Pairs per source, most first (ties by name)."""
        counts = Counter(p.source for p in self.pairs)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def judged_kind(source: str) -> tuple[str, str]:
    """``("ledger", path)`` or ``("store", spec)``: a ``postgresql://`` URL is a store; a
    SQLite file with a ``specs`` table a ledger, one with ``searches`` a store (``sqlite:``
    in front is allowed); anything else a ConfigError naming the path and the fix."""
    spec = str(source).strip()
    if spec.startswith(_URL_SCHEMES):
        return "store", spec
    if "://" in spec:
        raise ConfigError(f"{spec} is neither a SQLite file nor a postgresql:// URL "
                          f"({_WHAT})")
    path = Path(spec.removeprefix("sqlite:"))
    tables = _sqlite_tables(path)
    if "specs" in tables and "rewards" in tables:
        return "ledger", str(path)
    if "searches" in tables:
        return "store", str(path)
    raise ConfigError(f"{path} holds neither a reward ledger (tables specs, rewards) nor a "
                      f"feedback store (tables searches, rewards, ...): tables "
                      f"{', '.join(sorted(tables)) or 'none'} ({_WHAT})")


def _sqlite_tables(path: Path) -> set[str]:
    """The tables of the SQLite file ``path``, read without writing to it."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist ({_WHAT})")
    if path.is_dir():
        hint = f"; this one holds {path / 'loop.sqlite'}" if (path / "loop.sqlite").is_file() \
            else ""
        raise ConfigError(f"{path} is a folder, not a SQLite file ({_WHAT}{hint})")
    with open(path, "rb") as fh:
        header = fh.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        what = "an empty file" if not header else "another format"
        raise ConfigError(f"{path} is not a SQLite file ({what}; {_WHAT})")
    try:
        with closing(_read_only(path)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {str(r[0]) for r in rows}
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path} " + sqlite_problem(
            path, exc, "and export from the recovered file")) from exc


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


# -- the reward ledger ------------------------------------------------------------------
def ledger_pairs(path: PathLike, texts: PairTexts, *, scorer: str | None = None
                 ) -> Exported:
    """The ledger's judged pairs (all scorer keys, or ``scorer``'s), with their texts."""
    path = Path(path)
    rows = _ledger_rows(path, scorer)
    queries, docs = texts.query_by_digest, texts.doc_by_digest
    pairs: list[JudgedPair] = []
    unresolved = missing = 0
    for key, qd, dd, reward in rows:
        if reward is None:
            missing += 1
            continue
        query, doc = queries.get(bytes(qd)), docs.get(bytes(dd))
        if query is None or doc is None:
            unresolved += 1
            continue
        pairs.append(JudgedPair(query[0], query[1], doc[0], doc[1], float(reward), str(key)))
    return Exported(_ordered(pairs), f"reward ledger {path}", "ledger", unresolved, missing)


def _ledger_rows(path: Path, scorer: str | None) -> list[tuple[Any, ...]]:
    """(scorer key, query digest, document digest, reward or None) of every row."""
    try:
        with closing(_read_only(path)) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise StateMismatch(f"reward ledger {path} has schema version {version}, "
                                    f"this tttembed reads version {SCHEMA_VERSION}")
            keys = [str(r[0]) for r in conn.execute("SELECT spec FROM specs ORDER BY spec")]
            if scorer is not None and scorer not in keys:
                raise ConfigError(f"reward ledger {path} holds no pairs of scorer key "
                                  f"{scorer!r}; its keys: {', '.join(keys) or 'none'} "
                                  "(give one of them to --scorer, or leave it out for all)")
            where, args = ("WHERE s.spec = ?", (scorer,)) if scorer is not None else ("", ())
            return list(conn.execute(
                "SELECT s.spec, r.query_hash, r.doc_hash, r.reward FROM rewards r JOIN "
                f"specs s ON s.id = r.spec_id {where}", args))
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"reward ledger {path} " + sqlite_problem(
            path, exc, "and export from the recovered file")) from exc


# -- the feedback store -----------------------------------------------------------------
def store_pairs(store: Store, texts: PairTexts, *, labels: bool = False,
                clicks: bool = False) -> Exported:
    """The store's judge rewards, with ``labels`` people's labels and with ``clicks`` the
    click rewards, with their texts (module doc)."""
    rows: list[tuple[str, str, float, str, bool, float]] = [
        (r.query, r.doc_id, r.reward, r.source, r.trusted, r.created)
        for r in store.rewards(trusted_only=False)]
    if labels:
        rows += [(f.query, f.doc_id, f.label, LABEL_SOURCE, True, f.created)
                 for f in store.feedback()]
    if clicks:
        rows += [(c.query, c.doc_id, c.reward, c.source, c.trusted, c.created)
                 for c in store.click_rewards()]
    latest: dict[tuple[str, str, str], tuple[float, bool, float]] = {}
    for query, doc, reward, source, trusted, created in rows:
        key = (query, doc, source)
        if key not in latest or created >= latest[key][2]:
            latest[key] = (reward, trusted, created)
    pairs: list[JudgedPair] = []
    unresolved = missing = 0
    for (query, doc, source), (reward, trusted, _) in latest.items():
        if not math.isfinite(reward):
            missing += 1
        elif doc not in texts.corpus:
            unresolved += 1
        else:
            pairs.append(JudgedPair(texts.query_id(query), query, doc,
                                    doc_text(texts.corpus[doc]), float(reward), source,
                                    bool(trusted)))
    return Exported(_ordered(pairs), f"feedback store {store.url}", "store", unresolved,
                    missing)


def _ordered(pairs: Iterable[JudgedPair]) -> tuple[JudgedPair, ...]:
    return tuple(sorted(pairs, key=lambda p: (p.query_id, p.doc_id, p.source)))


# -- one entry --------------------------------------------------------------------------
def read_judged(source: str, data: PathLike | None, *, scorer: str | None = None,
                labels: bool = False, clicks: bool = False) -> Exported:
    """The judged pairs of a reward ledger or a feedback store (:func:`judged_kind`),
    their texts from the BEIR folder ``data``; no judged pair is a DataError."""
    kind, where = judged_kind(source)
    if kind == "ledger" and (labels or clicks):
        raise ConfigError(f"{where} is a reward ledger: --labels and --clicks read a "
                          "feedback store's tables (a ledger holds only scorer rewards)")
    if kind == "store" and scorer is not None:
        raise ConfigError(f"{where} is a feedback store: --scorer picks a reward ledger's "
                          "scorer key (a store's pairs are chosen by --labels and --clicks)")
    if data is None:
        held = "the texts' digests" if kind == "ledger" else "document ids"
        raise ConfigError(f"{where} keeps {held}, not the texts: pass --data FOLDER, the "
                          "BEIR folder the pairs were judged on")
    texts = PairTexts.load(data, need_queries=kind == "ledger")
    if kind == "ledger":
        got = ledger_pairs(where, texts, scorer=scorer)
    else:
        from tttembed.loop.open import open_store

        store = open_store(where)
        try:
            got = store_pairs(store, texts, labels=labels, clicks=clicks)
        finally:
            store.close()
    if not got.pairs:
        raise DataError(_nothing(got, texts.folder, scorer))
    return got


def _nothing(got: Exported, folder: Path, scorer: str | None) -> str:
    if got.unresolved:
        return (f"none of the {got.unresolved} judged pairs of the {got.origin} is in "
                f"{folder}'s queries/corpus (give --data the BEIR folder they were judged on)")
    of = f" of scorer key {scorer!r}" if scorer is not None else ""
    without = f" ({got.missing} recorded without a reward)" if got.missing else ""
    return (f"{got.origin} holds no judged pairs{of}{without}: run learn or the loop's "
            "judge first")


# -- writing ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Written:
    """What :func:`write_pairs` wrote: ``rows`` lines of ``layout``; for triplets the
    :class:`~tttembed.tune.pairs.Triplets` counts."""

    path: Path
    layout: str
    rows: int
    triplets: Triplets | None = None


def write_pairs(out: PathLike, pairs: Sequence[JudgedPair], *, layout: str = "pairs",
                threshold: float = THRESHOLD, overwrite: bool = False) -> Written:
    """``pairs`` as JSONL at ``out``, whole or not at all: one
    :meth:`~tttembed.tune.pairs.JudgedPair.row` per line, or (``triplets``) one
    :meth:`~tttembed.tune.pairs.Triplet.row` per line. No triplet is a DataError."""
    if layout not in PAIR_FORMATS:
        raise ConfigError(f"unknown format {layout!r}; choose one of "
                          f"{', '.join(PAIR_FORMATS)}")
    check_threshold(threshold)
    path = refuse_existing(out, overwrite, "output")
    made = triplets(pairs, threshold) if layout == "triplets" else None
    if made is not None and not made.rows:
        raise DataError(f"no triplet: none of the {made.positives} positives (reward >= "
                        f"{made.threshold:g}) has a judged negative of its query (lower "
                        "--threshold, or write --format pairs)")
    rows: Iterable[dict[str, Any]] = ((t.row() for t in made.rows) if made is not None
                                      else (p.row() for p in pairs))
    n = 0
    with atomic_file(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return Written(path, layout, n, made)


def read_triplets(path: PathLike) -> list[Triplet]:
    """The rows of a triplet file (``pairs export --format triplets``), in file order; a
    row without the three texts is a DataError naming its line."""
    from tttembed.data.jsonl import iter_objects

    out = []
    for line, obj in iter_objects(Path(path), what="triplets",
                                  missing_fix="write it with 'tttembed pairs export "
                                              "--format triplets'"):
        try:
            out.append(triplet_from_row(obj))
        except DataError as exc:
            raise DataError(f"{path}:{line}: {exc}") from exc
    return out


__all__ = ["LABEL_SOURCE", "PAIR_FORMATS", "Exported", "PairTexts", "Written", "judged_kind",
           "ledger_pairs", "read_judged", "read_triplets", "store_pairs", "write_pairs"]
