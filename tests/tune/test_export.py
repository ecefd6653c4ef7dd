"""The export's readers: a real reward ledger filled the way ``learn`` fills it (the
learner's own scoring path through :class:`LedgerScorer`), resolved back to the texts the
scorer was given; a real feedback store on SQLite and PostgreSQL, written through its own
API (judge rewards, people's labels, click rewards); and every source that is neither,
refused in one line."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from tests.loop.conftest import pg_url  # noqa: F401 (the PostgreSQL fixture)
from tests.pg import new_database
from tttembed.core.errors import ConfigError, DataError
from tttembed.loop.open import open_store
from tttembed.loop.rows import ClickReward, Feedback, Reward, Store, query_hash
from tttembed.score.base import Item
from tttembed.score.ledger import Ledger, LedgerScorer
from tttembed.ttt.queries import QuerySet
from tttembed.ttt.rewards import score_plan_pairs
from tttembed.tune.export import (
    Exported,
    PairTexts,
    judged_kind,
    read_judged,
    store_pairs,
    write_pairs,
)
from tttembed.tune.pairs import JudgedPair, pair_from_row

CORPUS = {
    "d1": {"title": "Photosynthesis", "text": "Plants convert light into chemical energy."},
    "d2": {"title": "", "text": "Magma rises through the crust and erupts as lava."},
    "d3": {"title": "Tides", "text": "The moon's gravity pulls the oceans."},
    "d4": {"title": "Tides", "text": "The moon's gravity pulls the oceans."},  # d3's text
    "d5": {"title": "Clouds", "text": "Water vapour condenses into droplets."},
}
QUERIES = {"q1": "how do plants make energy from sunlight",
           "q2": "why does the sea level change daily",
           "q3": "what makes a volcano erupt"}
#: The fake judge's answers, by (query id, document id).
ANSWERS = {("q1", "d1"): 0.9, ("q1", "d2"): 0.1, ("q2", "d3"): 0.8, ("q2", "d5"): 0.3,
           ("q3", "d2"): 0.7}
KEY = "fake:table#v1"


def write_folder(root: Path, corpus=CORPUS, queries=QUERIES, with_queries=True) -> Path:
    """A BEIR folder (corpus.jsonl, queries.jsonl) at ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, **doc}) + "\n" for d, doc in corpus.items()))
    if with_queries:
        (root / "queries.jsonl").write_text("".join(
            json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    return root


class Table:
    """A fake judge answering from :data:`ANSWERS` by item ids; records the texts it was
    given (what the ledger digests)."""

    spec = "fake:table"
    identity = KEY
    mapping = "fake"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, str]] = []

    def score(self, query: Item, docs) -> np.ndarray:
        self.asked += [(query.id, query.text, d.id, d.text) for d in docs]
        return np.array([ANSWERS[(query.id, d.id)] for d in docs], dtype=np.float64)


def fill_ledger(path: Path, pairs=tuple(ANSWERS)) -> Table:
    """Score ``pairs`` (query id, doc id) of the folder's task through a LedgerScorer into
    the ledger at ``path``, by the learner's own path (``score_plan_pairs``)."""
    judge = Table()
    queries = QuerySet.from_tasks({"t": QUERIES})
    with Ledger(path) as ledger:
        score_plan_pairs([(f"t/{q}", d) for q, d in pairs], queries, CORPUS,
                         LedgerScorer(judge, ledger))
    return judge


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_folder(tmp_path / "data")


def test_a_ledger_gives_back_the_texts_its_scorer_was_given(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    judge = fill_ledger(path)
    got = read_judged(str(path), folder)
    assert got.kind == "ledger" and got.origin == f"reward ledger {path}"
    assert got.unresolved == 0 and got.missing == 0
    assert [(p.query_id, p.query, p.doc_id, p.doc_text) for p in got.pairs] == sorted(
        judge.asked)
    assert [p.reward for p in got.pairs] == [ANSWERS[(p.query_id, p.doc_id)]
                                              for p in got.pairs]
    assert {(p.source, p.trusted) for p in got.pairs} == {(KEY, None)}
    d1 = next(p for p in got.pairs if p.doc_id == "d1")
    assert d1.doc_text == "Photosynthesis Plants convert light into chemical energy."
    d2 = next(p for p in got.pairs if p.doc_id == "d2")
    assert d2.doc_text == CORPUS["d2"]["text"]  # no title: no leading space


def test_a_ledger_read_leaves_the_file_as_it_was(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path)

    def tables() -> set[str]:
        with closing(sqlite3.connect(path)) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    before = tables()
    read_judged(str(path), folder)
    assert tables() == before and "searches" not in before
    with Ledger(path) as ledger:
        assert ledger.count() == len(ANSWERS)


def test_missing_rewards_unknown_texts_and_scorer_keys(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path)
    with Ledger(path) as ledger:
        ledger.put_many(KEY, QUERIES["q3"], ["Clouds Water vapour condenses into droplets."],
                        [math.nan])  # the scorer returned nothing
        ledger.put_many(KEY, "a question of another data set", ["Tides x"], [0.5])
        ledger.put_many("bm25:abc", QUERIES["q1"], ["Tides The moon's gravity pulls the "
                                                    "oceans."], [0.4])
    got = read_judged(str(path), folder)
    assert got.missing == 1 and got.unresolved == 1
    assert got.by_source() == {KEY: len(ANSWERS), "bm25:abc": 1}
    bm25 = [p for p in got.pairs if p.source == "bm25:abc"]
    assert [(p.query_id, p.doc_id, p.reward) for p in bm25] == [("q1", "d3", 0.4)]  # d3, not d4
    only = read_judged(str(path), folder, scorer="bm25:abc")
    assert only.pairs == tuple(bm25) and only.unresolved == 0
    with pytest.raises(ConfigError, match=re.escape(
            "holds no pairs of scorer key 'nope'; its keys: bm25:abc, fake:table#v1")):
        read_judged(str(path), folder, scorer="nope")


def test_a_text_under_two_ids_is_one_pair_under_the_first(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path, [("q2", "d3")])
    ANSWERS[("q2", "d4")] = 0.8
    try:
        fill_ledger(path, [("q2", "d4")])  # the same text: served from the ledger
    finally:
        del ANSWERS[("q2", "d4")]
    got = read_judged(str(path), folder)
    assert [(p.query_id, p.doc_id) for p in got.pairs] == [("q2", "d3")]


def test_an_empty_ledger_and_one_of_other_data_are_refused(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path).close()
    with pytest.raises(DataError, match=re.escape(f"reward ledger {path} holds no judged "
                                                  "pairs")):
        read_judged(str(path), folder)
    other = write_folder(tmp_path / "other", queries={"x": "unrelated question"})
    fill_ledger(path)
    with pytest.raises(DataError, match=re.escape(
            f"none of the {len(ANSWERS)} judged pairs of the reward ledger {path} is in "
            f"{other}'s queries/corpus")):
        read_judged(str(path), other)


def test_a_ledger_without_data_or_with_store_options_is_refused(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path)
    with pytest.raises(ConfigError, match=re.escape("pass --data FOLDER")):
        read_judged(str(path), None)
    with pytest.raises(ConfigError, match="is a reward ledger: --labels and --clicks"):
        read_judged(str(path), folder, labels=True)
    with pytest.raises(DataError, match="queries.jsonl"):  # a ledger needs the queries
        read_judged(str(path), write_folder(tmp_path / "docs", with_queries=False))


def test_what_is_neither_a_ledger_nor_a_store_is_refused(tmp_path) -> None:
    cases = {"missing": (str(tmp_path / "nope.sqlite"), "does not exist"),
             "folder": (str(tmp_path), "is a folder, not a SQLite file"),
             "text": (str(_write(tmp_path / "notes.txt", b"hello")),
                      "is not a SQLite file (another format"),
             "empty": (str(_write(tmp_path / "empty.sqlite", b"")),
                       "is not a SQLite file (an empty file"),
             "url": ("mysql://db/x", "is neither a SQLite file nor a postgresql:// URL")}
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE things (x)")
    cases["tables"] = (str(other), "holds neither a reward ledger (tables specs, rewards) "
                                   "nor a feedback store (tables searches, rewards, ...): "
                                   "tables things")
    for name, (source, message) in cases.items():
        with pytest.raises(ConfigError, match=re.escape(message)) as info:
            judged_kind(source)
        assert "\n" not in str(info.value) and "feedback store" in str(info.value), name
    assert not (tmp_path / "nope.sqlite").exists()  # nothing was created
    registry = tmp_path / "reg"
    registry.mkdir()
    _write(registry / "loop.sqlite", b"")
    with pytest.raises(ConfigError, match=re.escape(f"this one holds {registry}/loop.sqlite")):
        judged_kind(str(registry))
    assert judged_kind("postgresql://u@h/db") == ("store", "postgresql://u@h/db")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- the feedback store -----------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file or a new database on a real PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "reg" / "loop.sqlite")
    return new_database(request.getfixturevalue("pg_url"), "x" + uuid.uuid4().hex[:16])


@pytest.fixture
def store(spec: str) -> Iterator[Store]:
    opened = open_store(spec)
    yield opened
    opened.close()


UNKNOWN_Q = "a question the folder does not hold"


def fill_store(s: Store) -> None:
    """Judge rewards, labels and click rewards through the store's own API."""
    q1, q2 = QUERIES["q1"], QUERIES["q2"]
    s.add_rewards([Reward("t", q1, "d1", 0.9, 1.0),
                   Reward("t", q1, "d2", 0.2, 2.0, trusted=False),
                   Reward("t", UNKNOWN_Q, "d5", 0.7, 3.0, source="validation"),
                   Reward("t", q2, "d9", 0.6, 3.0),           # not in the corpus
                   Reward("t", q2, "d5", math.nan, 3.0)])     # no reward
    s.add_rewards([Reward("u", q1, "d1", 0.8, 5.0)])  # the pair under another task, later
    s.add_feedback([Feedback("t", q2, "d3", 1.0, created=4.0),
                    Feedback("t", q2, "d3", 0.0, search_id="s1", created=6.0),
                    Feedback("t", q1, "d5", 0.5, search_id="s2", created=4.0)])
    s.add_click_rewards([ClickReward("t", q2, "d5", 0.4, clicks=2, impressions=10,
                                     created=7.0, trusted=False),
                         ClickReward("t", q1, "d1", 0.6, clicks=5, impressions=9,
                                     created=7.0)])


def test_a_store_gives_its_judged_pairs_with_labels_and_clicks(store, spec, tmp_path,
                                                               folder) -> None:
    fill_store(store)
    texts = PairTexts.load(folder)
    judge = store_pairs(store, texts)
    assert judge.kind == "store" and judge.unresolved == 1 and judge.missing == 1
    rows = {(p.query_id, p.doc_id, p.source): (p.reward, p.trusted) for p in judge.pairs}
    assert rows == {("q1", "d1", "judge"): (0.8, True),  # the latest of the two tasks
                    ("q1", "d2", "judge"): (0.2, False),
                    (query_hash(UNKNOWN_Q), "d5", "validation"): (0.7, True)}
    assert {p.doc_text for p in judge.pairs if p.doc_id == "d1"} == {
        "Photosynthesis Plants convert light into chemical energy."}
    every = read_judged(spec, folder, labels=True, clicks=True)
    assert every.by_source() == {"judge": 2, "label": 2, "clicks": 2, "validation": 1}
    extra = {(p.query_id, p.doc_id, p.source): (p.reward, p.trusted) for p in every.pairs
             if p.source in ("label", "clicks")}
    assert extra == {("q2", "d3", "label"): (0.0, True),  # the latest label
                     ("q1", "d5", "label"): (0.5, True),
                     ("q2", "d5", "clicks"): (0.4, False), ("q1", "d1", "clicks"): (0.6, True)}
    assert read_judged(spec, folder, labels=True).by_source() == {
        "judge": 2, "label": 2, "validation": 1}
    assert list(every.pairs) == sorted(every.pairs, key=lambda p: (p.query_id, p.doc_id,
                                                                   p.source))
    with pytest.raises(ConfigError, match="is a feedback store: --scorer"):
        read_judged(spec, folder, scorer=KEY)
    with pytest.raises(ConfigError, match=re.escape("keeps document ids, not the texts: "
                                                    "pass --data FOLDER")):
        read_judged(spec, None)


def test_a_store_without_queries_in_the_folder_keys_queries_by_digest(store, tmp_path) -> None:
    fill_store(store)
    docs = write_folder(tmp_path / "docs", with_queries=False)
    got = store_pairs(store, PairTexts.load(docs, need_queries=False))
    assert {p.query_id for p in got.pairs} == {query_hash(QUERIES["q1"]),
                                               query_hash(UNKNOWN_Q)}


def test_an_empty_store_is_refused(spec, store, folder) -> None:
    with pytest.raises(DataError, match=re.escape(f"feedback store {store.url} holds no "
                                                  "judged pairs")):
        read_judged(spec, folder, labels=True, clicks=True)


# -- writing ----------------------------------------------------------------------------
def test_pairs_and_triplets_are_written_whole(tmp_path, folder) -> None:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path)
    got: Exported = read_judged(str(path), folder)
    out = tmp_path / "pairs.jsonl"
    w = write_pairs(out, got.pairs)
    lines = out.read_text().splitlines()
    assert w.rows == len(lines) == len(ANSWERS)
    assert tuple(pair_from_row(json.loads(ln)) for ln in lines) == got.pairs
    tri = write_pairs(tmp_path / "triplets.jsonl", got.pairs, layout="triplets")
    rows = [json.loads(ln) for ln in (tmp_path / "triplets.jsonl").read_text().splitlines()]
    # q1: d1 (0.9) over d2 (0.1); q2: d3 (0.8) over d5 (0.3); q3: d2 (0.7) has no negative
    assert rows == [
        {"anchor": QUERIES["q1"], "positive": "Photosynthesis " + CORPUS["d1"]["text"],
         "negative": CORPUS["d2"]["text"]},
        {"anchor": QUERIES["q2"], "positive": "Tides " + CORPUS["d3"]["text"],
         "negative": "Clouds " + CORPUS["d5"]["text"]}]
    assert tri.triplets is not None and tri.triplets.without_negative == 1
    with pytest.raises(ConfigError, match="already exists; pass --overwrite"):
        write_pairs(out, got.pairs[:1])
    assert len(out.read_text().splitlines()) == len(ANSWERS)  # untouched
    write_pairs(out, got.pairs[:1], overwrite=True)
    assert len(out.read_text().splitlines()) == 1
    lonely = [JudgedPair("q", "x", "a", "t", 1.0, "judge")]
    with pytest.raises(DataError, match=re.escape("no triplet: none of the 1 positives")):
        write_pairs(tmp_path / "none.jsonl", lonely, layout="triplets")
    assert not (tmp_path / "none.jsonl").exists()
