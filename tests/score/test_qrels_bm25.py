"""qrels: and bm25 scorers on tiny data written in the tests (and SciFact when present)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.conftest import shared_dataset
from tttembed.core.errors import ConfigError, DataError
from tttembed.data.beir import corpus_fingerprint, doc_text, load_qrels
from tttembed.score.base import Item, Scorer, get_scorer
from tttembed.score.bm25 import BM25Scorer
from tttembed.score.qrels import QrelsScorer

# --------------------------------------------------------------------------- qrels


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_qrels_grade_over_top_grade(tmp_path):
    tsv = _write(tmp_path / "q.tsv", "query-id\tcorpus-id\tscore\n"
                 "q1\td1\t2\nq1\td2\t1\nq1\td3\t0\nq1\td4\t-1\nq2\td1\t4\n")
    scorer = QrelsScorer(str(tsv))
    assert scorer.mapping == "grade/4" and scorer.spec == f"qrels:{tsv}"
    docs = [Item(d, "text is ignored") for d in ("d1", "d2", "d3", "d4", "unjudged")]
    r = scorer.score(Item("q1", "ignored"), docs)
    assert r.dtype == np.float64
    np.testing.assert_array_equal(r, [0.5, 0.25, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(scorer.score(Item("q2", ""), docs[:1]), [1.0])
    np.testing.assert_array_equal(scorer.score(Item("q-unknown", ""), docs[:2]), [0.0, 0.0])


def test_qrels_headerless_and_beir_folder_with_split(tmp_path):
    _write(tmp_path / "task" / "qrels" / "test.tsv", "q1\td1\t1\n")
    _write(tmp_path / "task" / "qrels" / "dev.tsv", "q1\td2\t3\nq1\td1\t1\n")
    test = get_scorer(f"qrels:{tmp_path / 'task'}")
    assert isinstance(test, Scorer) and test.mapping == "grade/1"
    assert test.score(Item("q1", ""), [Item("d1", "")])[0] == 1.0
    dev = get_scorer(f"qrels:{tmp_path / 'task'}", split="dev")
    np.testing.assert_allclose(dev.score(Item("q1", ""), [Item("d1", ""), Item("d2", "")]),
                               [1 / 3, 1.0])
    assert dev.identity.endswith("split=dev") and test.identity == test.spec
    with pytest.raises(ConfigError, match="BEIR folder"):
        QrelsScorer(str(tmp_path / "task" / "qrels" / "dev.tsv"), split="dev")


@pytest.mark.parametrize("text, message, line", [
    ("q1\td1\n", "3 tab-separated columns", 1),
    ("q1\t0\td1\t1\n", "3 tab-separated columns", 1),
    ("q1\td1\t1\nq1\td2\tgood\n", "not an integer", 2),
    ("q1\td1\t1\nq1\td2\t0.5\n", "not an integer", 2),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", "first on line 2", 3),
    ("q1\td1\t1\nq1\td1\t1\n", "duplicate judgment", 2),
    ("q1\td1\t0\n", "no positive grade", None),
    ("\n\n", "no judgments", None),
])
def test_qrels_bad_files_name_the_line(tmp_path, text, message, line):
    tsv = _write(tmp_path / "bad.tsv", text)
    with pytest.raises(DataError, match=message) as info:
        QrelsScorer(str(tsv))
    assert info.value.line == line and info.value.path == str(tsv)


def test_qrels_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        QrelsScorer(str(tmp_path / "nope.tsv"))


@pytest.mark.data
def test_qrels_on_scifact():
    path = shared_dataset("scifact")
    qrels = load_qrels(path / "qrels" / "test.tsv")
    scorer = QrelsScorer(str(path))
    assert scorer.mapping == "grade/1"
    qid = min(qrels)
    docs = [Item(d, "") for d in qrels[qid]] + [Item("not-a-doc", "")]
    r = scorer.score(Item(qid, ""), docs)
    assert np.all(r[:-1] == 1.0) and r[-1] == 0.0


# --------------------------------------------------------------------------- bm25

CORPUS = {
    "d1": {"title": "Tides", "text": "The moon's gravity raises tides in the oceans."},
    "d2": {"title": "", "text": "Plants use light for photosynthesis."},
    "d3": {"title": "Moon", "text": "The moon orbits the earth; moon phases change."},
    "d4": {"title": "Ocean waves", "text": "Wind makes waves on the ocean surface."},
    "d5": {"title": "", "text": "Gravity gravity gravity everywhere."},
}


def _terms(text):
    import bm25s.stopwords as sw

    stop = set(sw.STOPWORDS_EN)
    return [t for t in re.findall(r"(?u)\b\w\w+\b", text.lower()) if t not in stop]


def _bm25_by_hand(query, corpus, k1=1.5, b=0.75):
    """Lucene BM25 written out: idf = ln(1 + (N - df + .5) / (df + .5))."""
    docs = {d: _terms(f"{v['title']} {v['text']}") for d, v in corpus.items()}
    n = len(docs)
    avg = sum(len(t) for t in docs.values()) / n
    out = {}
    for d, terms in docs.items():
        s = 0.0
        for q in _terms(query):
            df = sum(q in t for t in docs.values())
            tf = terms.count(q)
            if df == 0 or tf == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf / (tf + k1 * (1 - b + b * len(terms) / avg))
        out[d] = s
    return out


@pytest.fixture(scope="module")
def bm25():
    return BM25Scorer(corpus=CORPUS, stemmer="none")


def test_bm25_is_score_over_the_query_max(bm25):
    query = Item("q", "how does the moon's gravity make tides?")
    docs = [Item(d, "") for d in CORPUS]
    r = bm25.score(query, docs)
    hand = _bm25_by_hand(query.text, CORPUS)
    top = max(hand.values())
    np.testing.assert_allclose(r, [hand[d] / top for d in CORPUS], rtol=1e-5)
    assert r.dtype == np.float64 and r.max() == 1.0 and r[docs.index(Item("d2", ""))] == 0.0
    assert bm25.mapping == "bm25/query_max" and bm25.spec == "bm25"


def test_bm25_reward_does_not_depend_on_the_candidates(bm25):
    query = Item("q", "wind waves in oceans")
    alone = bm25.score(query, [Item("d1", "")])
    together = bm25.score(query, [Item("d4", ""), Item("d1", "")])
    assert alone[0] == together[1] and together[0] == 1.0
    assert 0.0 < alone[0] < 1.0  # d1 is not the query's best document


def test_bm25_no_match_gives_zero(bm25):
    docs = [Item(d, "") for d in CORPUS]
    np.testing.assert_array_equal(bm25.score(Item("q", "xylophone quartz"), docs), 0.0)
    np.testing.assert_array_equal(bm25.score(Item("q", "the and of"), docs), 0.0)
    assert bm25.score(Item("q", "moon"), []).shape == (0,)


def test_bm25_caches_full_corpus_scores_per_query():
    scorer = BM25Scorer(corpus=CORPUS, stemmer="none", cache_size=2)
    q1, q2, q3 = Item("a", "moon"), Item("b", "ocean"), Item("c", "light")
    first = scorer.score(q1, [Item("d3", "")])
    scorer.score(q1, [Item("d1", "")])
    assert scorer.computed == 1
    scorer.score(q2, [Item("d1", "")])
    scorer.score(q3, [Item("d1", "")])  # evicts q1
    assert scorer.computed == 3
    assert scorer.score(q1, [Item("d3", "")])[0] == first[0] and scorer.computed == 4


def test_bm25_identity_and_errors(tmp_path):
    scorer = get_scorer("bm25", corpus=CORPUS, stemmer="none")
    assert isinstance(scorer, Scorer)
    assert f"corpus={corpus_fingerprint(CORPUS)}" in scorer.identity.split()
    other = dict(CORPUS, d6={"title": "", "text": "new"})
    assert corpus_fingerprint(other) != corpus_fingerprint(CORPUS)
    with pytest.raises(DataError, match="not in the BM25 corpus"):
        scorer.score(Item("q", "moon"), [Item("d404", "")])
    with pytest.raises(ConfigError, match="corpus"):
        BM25Scorer()
    with pytest.raises(ConfigError, match="stemmer"):
        BM25Scorer(corpus=CORPUS, stemmer="porter")


def test_bm25_reads_a_beir_folder(tmp_path):
    lines = [json.dumps({"_id": d, **v}) for d, v in CORPUS.items()]
    _write(tmp_path / "task" / "corpus.jsonl", "\n".join(lines) + "\n")
    scorer = get_scorer(f"bm25:{tmp_path / 'task'}", stemmer="none")
    in_memory = BM25Scorer(corpus=CORPUS, stemmer="none")
    query, docs = Item("q", "moon gravity"), [Item(d, "") for d in CORPUS]
    np.testing.assert_array_equal(scorer.score(query, docs), in_memory.score(query, docs))
    assert scorer.identity.split()[1] == in_memory.identity.split()[1]
    corpus_file = tmp_path / "task" / "corpus.jsonl"
    assert get_scorer(f"bm25:{corpus_file}", stemmer="none").identity.split()[1:] == \
        in_memory.identity.split()[1:]


@pytest.mark.parametrize("text, message, line", [
    ('{"_id": "a", "text": "x"}\nnot json\n', "invalid JSON", 2),
    ('{"_id": "a"}\n', "missing required field 'text'", 1),
    ('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', "duplicate document", 2),
    ('\n', "empty file", None),
])
def test_bm25_corpus_file_is_validated(tmp_path, text, message, line):
    path = _write(tmp_path / "bad" / "corpus.jsonl", text)
    with pytest.raises(DataError, match=message) as info:
        get_scorer(f"bm25:{tmp_path / 'bad'}")
    assert info.value.line == line and info.value.path == str(path)


def test_bm25_scores_the_text_the_embedder_sees():
    """A title-only match counts: BM25 indexes doc_text (title + " " + text)."""
    corpus = {"a": {"title": "Zebra", "text": "striped animal"},
              "b": {"title": "", "text": "zebra crossing zebra"},
              "c": {"title": "Horse", "text": "no stripes"}}
    scorer = BM25Scorer(corpus=corpus, stemmer="none")
    r = scorer.score(Item("q", "zebra"), [Item(d, "") for d in corpus])
    hand = _bm25_by_hand("zebra", corpus)
    assert r[0] > 0 and r[2] == 0.0
    np.testing.assert_allclose(r, [hand[d] / max(hand.values()) for d in corpus], rtol=1e-5)
    assert _terms(doc_text(corpus["a"])) == ["zebra", "striped", "animal"]
