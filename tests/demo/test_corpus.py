"""The stdlib demo dataset: corpus built from docstrings, shipped questions and labels."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tttembed.core.errors import DataError
from tttembed.demo.corpus import (
    DEMO_MODULES,
    MAX_SIGNATURE_CHARS,
    MAX_TEXT_CHARS,
    MIN_DOC_CHARS,
    DemoQrels,
    demo_qrels,
    demo_queries,
    demo_task,
    filter_qrels,
    parse_qrels,
    parse_queries,
    stdlib_corpus,
)

#: The Python the shipped labels were checked against, id by id.
LABELLED_ON = (3, 11)


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict[str, str]]:
    return stdlib_corpus()


# ------------------------------------------------------------------------------ corpus


def test_corpus_size_and_shape(corpus):
    assert 1_000 < len(corpus) < 10_000
    assert list(corpus) == sorted(corpus)
    for doc_id, doc in corpus.items():
        assert set(doc) == {"title", "text"}
        assert doc["title"].startswith(doc_id)
        assert len(doc["title"]) <= len(doc_id) + MAX_SIGNATURE_CHARS
        assert len(doc["text"].strip()) >= MIN_DOC_CHARS, doc_id
        assert len(doc["text"]) <= MAX_TEXT_CHARS + 4, doc_id


def test_corpus_is_deterministic(corpus):
    assert stdlib_corpus() == corpus


def test_corpus_covers_modules_functions_classes_and_methods(corpus):
    for doc_id in ("json", "json.dumps", "shutil.rmtree", "collections.Counter",
                   "collections.OrderedDict.move_to_end", "os.path.join", "heapq.heappush",
                   "asyncio.gather", "builtins.sorted", "threading.Lock"):
        assert doc_id in corpus, doc_id
    assert corpus["json.dumps"]["title"].startswith("json.dumps(obj, *, skipkeys=False")
    assert corpus["json"]["title"] == "json"


def test_no_duplicates_from_reexports_or_bound_methods(corpus):
    # time.localtime is assigned as logging.Formatter.converter; it belongs to time.
    assert "time.localtime" in corpus
    assert "logging.Formatter.converter" not in corpus
    # random.choice is a bound method of a hidden Random(); one document, module-level id.
    assert "random.choice" in corpus
    assert "random.Random.choice" not in corpus
    # urllib.request imports urlparse and HTTPError; they belong to urllib.parse/.error.
    assert "urllib.parse.urlparse" in corpus
    assert "urllib.request.urlparse" not in corpus
    assert "urllib.request.HTTPError" not in corpus
    texts = [doc["text"] for doc_id, doc in corpus.items() if len(doc["text"]) > 200]
    assert len(set(texts)) > 0.95 * len(texts)


def test_module_subset_and_missing_module_skipped():
    small = stdlib_corpus(["json", "no_such_module_for_tttembed"])
    assert small == stdlib_corpus(["json"])
    assert small and all(doc_id.split(".")[0] == "json" for doc_id in small)
    assert "json.loads" in small


def test_demo_modules_import_here():
    # Every listed module exists on this CPython; the corpus skips any that a build lacks.
    corpus_modules = {doc_id for doc_id in stdlib_corpus() if doc_id in DEMO_MODULES}
    assert len(corpus_modules) > 0.8 * len(DEMO_MODULES)


# ------------------------------------------------------------------------ shipped files


def test_shipped_queries_and_qrels_parse():
    queries = demo_queries()
    labels = demo_qrels()
    assert isinstance(labels, DemoQrels)
    assert labels.dropped_labels == 0 and labels.dropped_queries == ()
    assert len(queries) >= 50
    assert set(labels.qrels) == set(queries)
    assert all(q.strip() for q in queries.values())
    for qid, grades in labels.qrels.items():
        assert set(grades.values()) <= {1, 2}, qid
        assert 2 in grades.values(), qid


def test_every_label_exists_in_this_python_corpus(corpus):
    labels = demo_qrels()
    missing = sorted(f"{qid} {did}" for qid, grades in labels.qrels.items()
                     for did in grades if did not in corpus)
    if sys.version_info[:2] == LABELLED_ON:
        assert missing == [], "labels point at ids that are not in the corpus"
    else:  # other Pythons differ a little; the demo drops what is missing
        total = sum(len(g) for g in labels.qrels.values())
        assert len(missing) < 0.1 * total


def test_demo_task_keeps_what_this_python_has(corpus):
    task = demo_task()
    assert task.corpus == corpus
    assert set(task.queries) == set(task.qrels)
    assert all(did in corpus for grades in task.qrels.values() for did in grades)
    if sys.version_info[:2] == LABELLED_ON:
        assert task.dropped_labels == 0 and task.dropped_queries == ()
        assert task.queries == demo_queries()


def test_dropping_labels_for_a_reduced_corpus(corpus):
    full = demo_qrels().qrels
    qid = next(q for q, g in full.items() if list(g.values()).count(2) == 1)
    only_answer = next(d for d, g in full[qid].items() if g == 2)
    some_related = next((q, d) for q, g in full.items() if q != qid
                        for d, grade in g.items() if grade == 1 and d != only_answer)
    ids = set(corpus) - {only_answer, some_related[1]}
    out = demo_qrels(ids)
    assert qid not in out.qrels and qid in out.dropped_queries
    assert some_related[0] in out.qrels
    assert some_related[1] not in out.qrels[some_related[0]]
    removed = sum(len(g) for g in full.values()) - sum(len(g) for g in out.qrels.values())
    assert out.dropped_labels == removed
    assert demo_qrels().qrels == full  # loading again gives the untouched labels


def test_filter_qrels_counts_and_does_not_mutate():
    qrels = {"a": {"x": 2, "y": 1}, "b": {"z": 2, "y": 1}, "c": {"w": 1, "x": 2}}
    before = {q: dict(g) for q, g in qrels.items()}
    out = filter_qrels(qrels, ["x", "y"])
    assert out.qrels == {"a": {"x": 2, "y": 1}, "c": {"x": 2}}
    assert out.dropped_queries == ("b",)
    assert out.dropped_labels == 3  # z (missing), y of the dropped query b, w (missing)
    assert qrels == before


# ------------------------------------------------------------------------------ parsers


def test_parse_queries_errors_name_the_line():
    assert parse_queries('{"_id": "q1", "text": "hi"}\n\n{"_id": "q2", "text": "yo"}\n') \
        == {"q1": "hi", "q2": "yo"}
    with pytest.raises(DataError, match=r"q\.jsonl:2: invalid JSON"):
        parse_queries('{"_id": "q1", "text": "hi"}\n{oops\n', "q.jsonl")
    with pytest.raises(DataError, match=r":1: expected an object"):
        parse_queries('{"_id": "q1", "text": ""}\n', "q.jsonl")
    with pytest.raises(DataError, match=r":2: duplicate query id 'q1'"):
        parse_queries('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n', "q.jsonl")


def test_parse_qrels_errors_name_the_line():
    good = "query-id\tcorpus-id\tscore\nq1\tjson.dumps\t2\r\nq1\tjson.dump\t1\n"
    assert parse_qrels(good) == {"q1": {"json.dumps": 2, "json.dump": 1}}
    with pytest.raises(DataError, match=r"r\.tsv:1: bad header"):
        parse_qrels("qid\tdid\tscore\n", "r.tsv")
    with pytest.raises(DataError, match=r"r\.tsv:3: expected query-id"):
        parse_qrels("query-id\tcorpus-id\tscore\nq1\ta\t2\nq1\tb\t3\n", "r.tsv")
    with pytest.raises(DataError, match=r":2: expected query-id"):
        parse_qrels("query-id\tcorpus-id\tscore\nq1 a 2\n", "r.tsv")
    with pytest.raises(DataError, match=r":3: duplicate label q1 a"):
        parse_qrels("query-id\tcorpus-id\tscore\nq1\ta\t2\nq1\ta\t1\n", "r.tsv")


# ---------------------------------------------------------------------- retrieval sanity


@pytest.mark.slow
def test_minilm_finds_a_sensible_share_of_answers(minilm):
    """Raw MiniLM nDCG@10 is neither near 0 (wrong labels) nor near 1 (copied wording).

    Embeds the whole corpus: minutes on two CPU cores.
    """
    task = demo_task()
    ids = list(task.corpus)
    docs = minilm.encode([(d["title"] + " " + d["text"]).strip()
                          for d in task.corpus.values()], "document")
    qids = list(task.queries)
    queries = minilm.encode([task.queries[q] for q in qids], "query")
    top = np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :10]
    scores = []
    for row, qid in zip(top, qids):
        grades = task.qrels[qid]
        dcg = sum(grades.get(ids[j], 0) / np.log2(r + 2) for r, j in enumerate(row))
        ideal = sorted(grades.values(), reverse=True)[:10]
        scores.append(dcg / sum(g / np.log2(r + 2) for r, g in enumerate(ideal)))
    assert 0.3 < float(np.mean(scores)) < 0.7


def test_titles_hold_no_memory_addresses():
    # addresses differ between processes and would change the text's cache key every run
    from tttembed.demo.corpus import stdlib_corpus

    corpus = stdlib_corpus()
    assert not [d for d, doc in corpus.items() if " at 0x" in doc["title"]]
